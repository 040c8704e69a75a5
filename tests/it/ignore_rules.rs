//! Ignore rules of `bitexact run` (outputs by glob, standard-output parts by regular
//! expression) from flags and from the project file (`bitexact.toml`, `[tool.bitexact]` in
//! `pyproject.toml`), and what the report says about them.

use crate::common;
use std::path::Path;
use std::process::{Command, Output};

/// A program with a timing line and a log file that differ every run, and one real output.
const NOISY: &str = r#"echo "loss 1.0 | $(date +%N) ms/batch"
echo "done"
echo same > "$BITEXACT_OUT/w.txt"
mkdir -p "$BITEXACT_OUT/logs"; date +%N > "$BITEXACT_OUT/logs/t.txt""#;

/// `bitexact run ARGS -- sh -c NOISY` in `dir`.
fn run_in(dir: &Path, args: &[&str]) -> Output {
    let mut all = vec!["run"];
    all.extend(args);
    all.extend(["--", "sh", "-c", NOISY]);
    Command::new(env!("CARGO_BIN_EXE_bitexact"))
        .args(&all)
        .current_dir(dir)
        .output()
        .unwrap()
}

#[test]
fn flags_ignore_a_log_and_a_timing_column() {
    let dir = tempfile::tempdir().unwrap();
    let o = run_in(dir.path(), &["--stdout"]);
    assert_eq!(o.status.code(), Some(1), "{}", common::stdout(&o));
    let o = run_in(dir.path(), &["--stdout", "--ignore", "logs/*"]);
    let out = common::stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("lines differ; first differing line 1"),
        "{out}"
    );
    let o = run_in(
        dir.path(),
        &[
            "--ignore",
            "logs/*",
            "--stdout-ignore",
            "[0-9]+ ms/batch",
            "--format",
            "json",
        ],
    );
    let j = common::json(&o);
    assert_eq!(o.status.code(), Some(0), "{j}");
    let case = &j["cases"][0];
    assert!(
        case["digests"].get("<stdout>").is_some(),
        "--stdout-ignore implies --stdout: {j}"
    );
    assert!(case["digests"].get("logs/t.txt").is_none(), "{j}");
    let ignored = &case["program"]["ignored"];
    assert_eq!(ignored[0]["rule"], "output logs/*", "{j}");
    assert_eq!(ignored[0]["outputs"], 1, "{j}");
    assert_eq!(ignored[1]["lines"], 1, "{j}");
}

#[test]
fn the_project_file_is_found_and_flags_add_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("train");
    std::fs::create_dir(&sub).unwrap();
    std::fs::write(
        dir.path().join("pyproject.toml"),
        "[project]\nname = 'x'\n\n[tool.bitexact.run]\nruns = 3\nstdout-ignore = ['[0-9]+ ms/batch']\n",
    )
    .unwrap();
    // The file masks the timing; the log still differs until a flag ignores it too.
    let o = run_in(&sub, &[]);
    let out = common::stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("first divergence: logs/t.txt"), "{out}");
    assert!(out.contains("pyproject.toml"), "{out}");
    let o = run_in(&sub, &["--ignore", "logs/*", "--format", "json"]);
    let j = common::json(&o);
    assert_eq!(o.status.code(), Some(0), "{j}");
    assert_eq!(j["cases"][0]["runs"], 3, "runs from the file: {j}");
    // --no-config ignores the file: the timing line is no longer masked (nor compared).
    let o = run_in(
        &sub,
        &["--no-config", "--ignore", "logs/*", "--format", "json"],
    );
    assert_eq!(common::json(&o)["cases"][0]["runs"], 2);
}

#[test]
fn bad_rules_and_bad_files_exit_2_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let o = run_in(dir.path(), &["--stdout-ignore", "(unclosed"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("(unclosed"), "{err}");
    std::fs::write(dir.path().join("bitexact.toml"), "[run]\nrunz = 3\n").unwrap();
    let o = run_in(dir.path(), &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("bitexact.toml") && err.contains("runz"),
        "{err}"
    );
    let o = run_in(dir.path(), &["--config", "/nonexistent/bitexact.toml"]);
    assert_eq!(o.status.code(), Some(2));
}
