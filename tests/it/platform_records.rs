//! Records say where they come from: every run `bitexact run --trace ops --keep DIR` keeps
//! holds bitexact's platform record (`.bitexact-record.json`) and the program's platform
//! (`.bitexact-platform.json`, written by the tracer for a script that never imports
//! bitexact), and `bitexact diff-trace` of two runs made with different thread counts says
//! what differs (`platforms differ: threads 1 vs 2; torch threads 1 vs 2`) and, for an op
//! whose output depends on the thread count, that it gives different results on the two
//! platforms, never that it is nondeterministic. Needs a Python with torch and the bitexact
//! package (ci/python.sh); says `SKIPPED` without.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `script` (never importing bitexact) twice under `--trace ops --threads THREADS
/// --keep DIR/t<THREADS>`; returns the kept directory of its run 0.
fn keep_run(py: &str, dir: &Path, script: &str, threads: &str) -> PathBuf {
    let file = dir.join("script.py");
    std::fs::write(&file, script).unwrap();
    let kept = dir.join(format!("t{threads}"));
    let o = Command::new(env!("CARGO_BIN_EXE_bitexact"))
        .args(["run", "--trace", "ops", "--runs", "2", "--threads", threads])
        .arg("--keep")
        .arg(&kept)
        .arg("--")
        .arg(py)
        .arg(&file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{text}");
    kept.join("run-0")
}

/// `bitexact diff-trace A B`: (exit code, standard output).
fn diff_trace(a: &Path, b: &Path) -> (i32, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_bitexact"))
        .arg("diff-trace")
        .args([a, b])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    (o.status.code().unwrap(), format!("{out}{err}"))
}

const SAME: &str = "import torch\nx = torch.ones(4)\ny = x + 1\n";
const BY_THREADS: &str = "import torch\nx = torch.ones(4)\ny = x * torch.get_num_threads()\n";

#[test]
fn kept_runs_carry_their_platform_and_diff_trace_says_what_differs() {
    let Some(py) =
        common::tracer_python("kept_runs_carry_their_platform_and_diff_trace_says_what_differs")
    else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let (one, two) = (tmp.path().join("same"), tmp.path().join("by-threads"));
    std::fs::create_dir_all(&one).unwrap();
    std::fs::create_dir_all(&two).unwrap();
    let (a, b) = (
        keep_run(&py, &one, SAME, "1"),
        keep_run(&py, &one, SAME, "2"),
    );
    for run in [&a, &b, &a.with_file_name("run-1")] {
        let record = std::fs::read_to_string(run.join(".bitexact-record.json")).unwrap();
        let record: serde_json::Value = serde_json::from_str(&record).unwrap();
        assert_eq!(record["platform"]["bitexact"], env!("CARGO_PKG_VERSION"));
        let program = std::fs::read_to_string(run.join(".bitexact-platform.json"))
            .unwrap_or_else(|e| panic!("{}: no program platform: {e}", run.display()));
        let program: serde_json::Value = serde_json::from_str(&program).unwrap();
        assert!(program["torch"].is_string(), "{program:#}");
    }
    // The same ops on 1 and 2 threads: identical traces, and the platforms' differences said.
    let (code, out) = diff_trace(&a, &b);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("platforms differ: threads 1 vs 2"), "{out}");
    assert!(out.contains("torch threads 1 vs 2"), "{out}");
    assert!(out.contains("identical op traces"), "{out}");
    // Two runs of one platform: nothing differs.
    let (code, out) = diff_trace(&a, &a.with_file_name("run-1"));
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains("platforms differ"), "{out}");
    // An output that depends on the thread count through a Python int: the op's argument
    // differs at the two thread counts, which the records say were varied; it is not called
    // nondeterministic.
    let (a, b) = (
        keep_run(&py, &two, BY_THREADS, "1"),
        keep_run(&py, &two, BY_THREADS, "2"),
    );
    let (code, out) = diff_trace(&a, &b);
    assert_eq!(code, 1, "{out}");
    let platforms = out.find("platforms differ").expect(&out);
    let divergence = out.find("first divergence").expect(&out);
    assert!(platforms < divergence, "{out}");
    assert!(out.contains("aten::mul"), "{out}");
    assert!(
        out.contains("inputs identical, arguments differ at 1 vs 2 threads: other 1 vs 2"),
        "{out}"
    );
    assert!(!out.contains("nondeterministic"), "{out}");
    // Without bitexact's record (a run kept by an older bitexact) the platform is unknown.
    std::fs::remove_file(b.join(".bitexact-record.json")).unwrap();
    let (code, out) = diff_trace(&a, &b);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("platform unknown for B: no .bitexact-record.json"),
        "{out}"
    );
    assert!(
        out.contains("platforms differ: torch threads 1 vs 2"),
        "{out}"
    );
    // A malformed record is unreadable input: exit 2, naming it.
    std::fs::write(b.join(".bitexact-record.json"), "{").unwrap();
    let (code, out) = diff_trace(&a, &b);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains(".bitexact-record.json"), "{out}");
}
