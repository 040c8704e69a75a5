//! The Rust↔Python protocol has one owner (`src/protocol.rs`): this test fails on drift.
//! - `python/bitexact/_protocol.py` must be exactly what `protocol::python_module()` makes
//!   (`BITEXACT_WRITE_PROTOCOL=1 cargo test --test it protocol::` rewrites it, never in CI);
//! - a `"BITEXACT_…"` or `".bitexact-…"` string literal in the Python package must be a
//!   protocol name (a name changed on one side only is caught either way);
//! - a Rust source file other than `src/protocol.rs` must not spell a protocol name as a
//!   literal: it uses the constant.
//!
//! `planted_drift_is_caught` shows each check failing on a planted change.

use bitexact::protocol::{python_module, NAMES};
use regex::Regex;
use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every `*.ext` file below `dir`.
fn files(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files(&p, ext, out);
        } else if p.extension().is_some_and(|x| x == ext) {
            out.push(p);
        }
    }
}

/// The `"BITEXACT_X"` / `'.bitexact-x'` literals in `text`.
fn literals(text: &str) -> Vec<String> {
    let re = Regex::new(r#"["'](BITEXACT_[A-Z0-9_]+|\.bitexact-[a-z0-9.-]*)["']"#).unwrap();
    re.captures_iter(text).map(|c| c[1].to_string()).collect()
}

fn is_protocol(value: &str) -> bool {
    NAMES.iter().any(|n| n.value == value)
}

/// What is wrong with the Python package's texts (`(file name, text)`) against the protocol.
fn python_problems(generated: &str, files: &[(String, String)]) -> Vec<String> {
    let mut out = Vec::new();
    if generated != python_module() {
        out.push("python/bitexact/_protocol.py differs from src/protocol.rs".to_string());
    }
    for (name, text) in files {
        for l in literals(text) {
            if !is_protocol(&l) {
                out.push(format!("{name}: {l:?} is not a protocol name"));
            }
        }
    }
    out
}

/// Rust files (`(path, code)`) that spell a protocol name as a literal.
fn rust_problems(files: &[(String, String)]) -> Vec<String> {
    let mut out = Vec::new();
    for (name, text) in files {
        // Test code may spell names out (it checks the contract from outside).
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        // Any protocol value spelled as a whole string literal (`"records.jsonl"` too).
        for n in NAMES
            .iter()
            .filter(|n| code.contains(&format!("{:?}", n.value)))
        {
            let l = n.value;
            out.push(format!(
                "{name}: {l:?} written as a literal; use bitexact::protocol"
            ));
        }
    }
    out
}

fn python_files() -> Vec<(String, String)> {
    let mut paths = Vec::new();
    files(&root().join("python/bitexact"), "py", &mut paths);
    paths
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n != "_protocol.py"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&p).unwrap())
        })
        .collect()
}

fn rust_files() -> Vec<(String, String)> {
    let mut paths = Vec::new();
    files(&root().join("src"), "rs", &mut paths);
    files(&root().join("crates"), "rs", &mut paths);
    paths
        .into_iter()
        .filter(|p| !p.ends_with("src/protocol.rs"))
        .map(|p| {
            let name = p.strip_prefix(root()).unwrap().display().to_string();
            (name, std::fs::read_to_string(&p).unwrap())
        })
        .collect()
}

#[test]
fn both_languages_use_the_one_protocol() {
    let path = root().join("python/bitexact/_protocol.py");
    let ci = std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false");
    if std::env::var_os("BITEXACT_WRITE_PROTOCOL").is_some() && !ci {
        std::fs::write(&path, python_module()).unwrap();
    }
    let generated = std::fs::read_to_string(&path).unwrap_or_default();
    let mut problems = python_problems(&generated, &python_files());
    problems.extend(rust_problems(&rust_files()));
    assert!(
        problems.is_empty(),
        "protocol drift (see src/protocol.rs):\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn planted_drift_is_caught() {
    let good = python_module();
    let py = |t: &str| vec![("_x.py".to_string(), t.to_string())];
    assert!(python_problems(&good, &py("os.environ['BITEXACT_OUT']")).is_empty());
    // A name changed in Rust only: the generated file no longer matches.
    let stale = good.replace("\"BITEXACT_OUT\"", "\"BITEXACT_OUTDIR\"");
    assert_eq!(python_problems(&stale, &[]).len(), 1);
    // A name changed in Python only: its literal is not a protocol name.
    let p = python_problems(&good, &py("os.environ.get(\"BITEXACT_OUTDIR\")"));
    assert!(
        p[0].contains("\"BITEXACT_OUTDIR\" is not a protocol name"),
        "{p:?}"
    );
    // Rust spelling a name out instead of using the constant.
    let rs = vec![(
        "src/x.rs".to_string(),
        "env.insert(\"BITEXACT_SEED\", s);".to_string(),
    )];
    assert_eq!(rust_problems(&rs).len(), 1);
    let records = vec![(
        "src/y.rs".to_string(),
        "dir.join(\"records.jsonl\")".to_string(),
    )];
    assert_eq!(rust_problems(&records).len(), 1);
    let test_only = "#[cfg(test)]\nmod t { const X: &str = \"BITEXACT_SEED\"; }";
    assert!(rust_problems(&[("src/x.rs".into(), test_only.into())]).is_empty());
}

/// `_protocol.sketch_positions` (Python, generated from `SKETCH_POSITIONS_PY`) gives the
/// positions `protocol::sketch_positions` gives, for every tensor size up to 200 elements and
/// a few large ones.
#[test]
fn the_python_sketch_positions_are_the_rust_ones() {
    use bitexact::protocol::{sketch_positions, SKETCH_POSITIONS_PY, SKETCH_SAMPLES};
    let sizes: Vec<usize> = (0..=200).chain([1 << 20, 1_000_003, 7 << 30]).collect();
    let program = format!(
        "SKETCH_SAMPLES = {SKETCH_SAMPLES}\n{SKETCH_POSITIONS_PY}\n\
         print([sketch_positions(n) for n in {sizes:?}])\n"
    );
    let python = std::env::var("BITEXACT_PYTHON").unwrap_or_else(|_| "python3".into());
    let Ok(out) = std::process::Command::new(&python)
        .args(["-c", &program])
        .output()
    else {
        bitexact::check::skip_notice(
            "the_python_sketch_positions_are_the_rust_ones",
            &format!("no Python ({python})"),
        );
        return;
    };
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want: Vec<Vec<usize>> = sizes
        .iter()
        .map(|&n| sketch_positions(n).collect())
        .collect();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("{want:?}")
    );
}
