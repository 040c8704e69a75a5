//! Helpers shared by the integration tests that run the `bitexact` binary.
#![allow(dead_code)] // each test crate uses a different subset

use std::process::{Command, Output};

/// The path of `tests/fixtures/programs/<name>`: a program the tests run under `bitexact run`.
pub fn fixture_program(name: &str) -> String {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/programs")
        .join(name)
        .display()
        .to_string()
}

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

/// A Python interpreter that can import every module in `modules`: `$BITEXACT_PYTHON`, else the
/// one `ci/python.sh` made (`~/.cache/bitexact/python-path`), else `python3`. Each set of
/// modules is probed once per test binary (starting Python and importing torch takes seconds),
/// and the answer is shared by every test that asks again.
pub fn python_with(modules: &[&str]) -> Option<String> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static PROBED: OnceLock<Mutex<HashMap<String, Option<String>>>> = OnceLock::new();
    let probe = modules
        .iter()
        .map(|m| format!("import {m}"))
        .collect::<Vec<_>>()
        .join("; ");
    let probed = PROBED.get_or_init(Default::default);
    // Held while probing, so concurrent tests asking for the same modules start one Python.
    let mut probed = probed.lock().unwrap_or_else(|e| e.into_inner());
    probed
        .entry(probe.clone())
        .or_insert_with(|| first_python_that_runs(&probe))
        .clone()
}

/// The first candidate interpreter that runs `probe` successfully.
fn first_python_that_runs(probe: &str) -> Option<String> {
    let mut candidates: Vec<String> = Vec::new();
    candidates.extend(std::env::var("BITEXACT_PYTHON").ok());
    if let Some(home) = std::env::var_os("HOME") {
        let f = PathBuf::from(home).join(".cache/bitexact/python-path");
        if let Ok(p) = std::fs::read_to_string(f) {
            candidates.push(p.trim().to_string());
        }
    }
    candidates.push("python3".into());
    candidates.into_iter().find(|py| {
        std::process::Command::new(py)
            .args(["-c", probe])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// Says that `test` cannot run because a tool it needs is missing (`why`: which, and how to
/// get it). Locally the test is skipped with the reason ([`bitexact::check::skip_notice`]).
/// Where `$BITEXACT_REQUIRE_TOOLS` is `1` (CI: `ci/test.sh` sets it, having installed every
/// tool) it fails instead, so a tool that went missing cannot turn tests into silent passes.
/// A premise about this machine's kernels is not a missing tool: see [`premise_skip`].
pub fn tool_missing(test: &str, why: &str) {
    if std::env::var("BITEXACT_REQUIRE_TOOLS").as_deref() == Ok("1") {
        panic!("{test}: BITEXACT_REQUIRE_TOOLS=1 but a tool is missing: {why}");
    }
    bitexact::check::skip_notice(test, why);
}

/// A Python with torch and the installed bitexact package (its tracer), else `None` after
/// saying `SKIPPED` for `test` (run ci/python.sh to install them).
pub fn tracer_python(test: &str) -> Option<String> {
    let py = python_with(&["torch", "bitexact._native", "bitexact._trace"]);
    if py.is_none() {
        tool_missing(
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

/// A Python with torch and the installed bitexact package ([`tracer_python`]) that can also
/// compile with `torch.compile`'s CPU backend (Inductor builds C++ with g++ or `$CXX`); says
/// which is missing otherwise ([`tool_missing`]). The compiler is probed once per test binary
/// (importing Inductor costs a few seconds), as [`python_with`] probes its modules.
pub fn python_with_compiler(test: &str) -> Option<String> {
    use std::sync::Mutex;
    static PROBED: Mutex<Option<Result<(), String>>> = Mutex::new(None);
    let py = tracer_python(test)?;
    let mut probed = PROBED.lock().unwrap_or_else(|e| e.into_inner());
    let found = probed.get_or_insert_with(|| {
        let probe = "from torch._inductor.cpp_builder import get_cpp_compiler; get_cpp_compiler()";
        let o = std::process::Command::new(&py)
            .args(["-c", probe])
            .output()
            .unwrap();
        match o.status.success() {
            true => Ok(()),
            false => {
                let err = String::from_utf8_lossy(&o.stderr);
                let last = err.lines().rev().find(|l| !l.trim().is_empty());
                Err(last.unwrap_or("").to_string())
            }
        }
    });
    if let Err(why) = found {
        tool_missing(
            test,
            &format!("no C++ compiler for torch.compile's CPU backend (g++ or $CXX): {why}"),
        );
        return None;
    }
    Some(py)
}
