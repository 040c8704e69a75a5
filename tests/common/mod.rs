//! Helpers shared by the integration tests that run the `bitexact` binary.
#![allow(dead_code)] // each test crate uses a different subset

use std::process::{Command, Output};

/// Runs the `bitexact` binary with `args`, with the control variables of the environment
/// (`BITEXACT_SEED`, ...) removed so only the flags count.
pub fn bitexact(args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bitexact"));
    cmd.args(args);
    for var in ["SEED", "DETERMINISTIC", "BENCHMARK", "WORKERS", "THREADS"] {
        cmd.env_remove(format!("BITEXACT_{var}"));
    }
    cmd.output().expect("run bitexact")
}

/// Standard output as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Standard output parsed as JSON (the panic shows the output).
pub fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(o)))
}

use std::path::PathBuf;

/// A Python interpreter that can import every module in `modules`.
pub fn python_with(modules: &[&str]) -> Option<String> {
    let mut candidates: Vec<String> = Vec::new();
    candidates.extend(std::env::var("BITEXACT_PYTHON").ok());
    if let Some(home) = std::env::var_os("HOME") {
        let f = PathBuf::from(home).join(".cache/bitexact/python-path");
        if let Ok(p) = std::fs::read_to_string(f) {
            candidates.push(p.trim().to_string());
        }
    }
    candidates.push("python3".into());
    let probe = modules
        .iter()
        .map(|m| format!("import {m}"))
        .collect::<Vec<_>>()
        .join("; ");
    candidates.into_iter().find(|py| {
        std::process::Command::new(py)
            .args(["-c", &probe])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// A Python with torch and the installed bitexact package (its tracer), else `None` after
/// saying `SKIPPED` for `test` (run ci/python.sh to install them).
pub fn tracer_python(test: &str) -> Option<String> {
    let py = python_with(&["torch", "bitexact._native", "bitexact._trace"]);
    if py.is_none() {
        bitexact::check::skip_notice(
            test,
            "no Python with torch and the installed bitexact package (run ci/python.sh)",
        );
    }
    py
}

/// Skips `test` because its premise does not hold on this machine (`why`: what was seen, e.g.
/// "1 vs 2 threads give identical bits on this CPU: nothing to localize"). A premise that
/// depends on the CPU's kernels is checked, never assumed; one that must hold everywhere (a
/// planted bug is caught) stays an assertion. The skip is said like any other
/// ([`bitexact::check::skip_notice`]), and `ci/test.sh` lists it in its summary.
pub fn premise_skip(test: &str, why: &str) {
    bitexact::check::skip_notice(
        test,
        &format!("premise does not hold on this machine: {why}"),
    );
}
