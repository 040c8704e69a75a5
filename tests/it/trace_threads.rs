//! `bitexact run --trace ops` on programs with threads and activation checkpointing
//! (`examples/python/ema_thread.py`, which never imports bitexact): a planted noise op in a
//! side thread is named with its thread; threads whose ops interleave differently in each run
//! are judged deterministic; ops that non-reentrant `torch.utils.checkpoint` recomputes carry
//! the module that runs them, in phase `recompute`; and when every traced op matches while a
//! file differs, the report says so. Needs a Python with torch and the installed bitexact
//! package (ci/python.sh); says `SKIPPED` without.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn python(test: &str) -> Option<String> {
    let py = common::python_with(&["torch", "bitexact._native", "bitexact._trace.threads"]);
    if py.is_none() {
        common::tool_missing(
            test,
            "no Python with torch and the installed bitexact package (run ci/python.sh)",
        );
    }
    py
}

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/python/ema_thread.py")
}

/// `bitexact run --trace ops --format json ARGS -- PY SCRIPT…`: (exit code, the case).
fn run(args: &[&str], program: &[&str]) -> (i32, serde_json::Value) {
    let o = Command::new(env!("CARGO_BIN_EXE_bitexact"))
        .args(["run", "--trace", "ops", "--format", "json"])
        .args(args)
        .arg("--")
        .args(program)
        .output()
        .unwrap();
    (
        o.status.code().unwrap(),
        common::json(&o)["cases"][0].clone(),
    )
}

fn explanation(case: &serde_json::Value) -> String {
    case["divergence"]["explanation"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_noise_op_in_a_side_thread_is_named_with_its_thread() {
    let Some(py) = python("a_noise_op_in_a_side_thread_is_named_with_its_thread") else {
        return;
    };
    let script = example();
    let (code, case) = run(&[], &[&py, script.to_str().unwrap(), "--planted", "noise"]);
    assert_eq!(code, 1, "{case:#}");
    let d = explanation(&case);
    let line = 1 + std::fs::read_to_string(&script)
        .unwrap()
        .lines()
        .position(|l| l.contains("torch.randn(value.shape, generator=gen)"))
        .unwrap();
    for want in [
        "first divergence: step 0, rank 0, thread ema#0, aten::randn.generator",
        &format!("ema_thread.py:{line} "),
        // A generator no traced module holds: named by its type and device.
        "inputs identical, generator state differs before the call (a torch.Generator (cpu)): seeded differently in the two runs",
    ] {
        assert!(d.contains(want), "{want:?} not in {d}");
    }
    assert_eq!(case["divergence"]["inputs_matched"], true);
}

#[test]
fn threads_whose_ops_interleave_differently_are_deterministic() {
    let Some(py) = python("threads_whose_ops_interleave_differently_are_deterministic") else {
        return;
    };
    let (code, case) = run(
        &["--runs", "4"],
        &[&py, example().to_str().unwrap(), "--steps", "8"],
    );
    assert_eq!(code, 0, "{case:#}");
    assert!(case["digests"]["<ops>"].is_string(), "{case:#}");
}

/// The records of run 0's trace kept under `kept`.
fn records(kept: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(kept.join("run-0/.bitexact-trace-rank0.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn recomputed_ops_carry_their_module_and_are_marked() {
    let Some(py) = python("recomputed_ops_carry_their_module_and_are_marked") else {
        return;
    };
    let keep = tempfile::tempdir().unwrap();
    let kept = keep.path().join("runs");
    let (code, case) = run(
        &["--keep", kept.to_str().unwrap()],
        &[&py, example().to_str().unwrap(), "--checkpoint"],
    );
    assert_eq!(code, 0, "{case:#}");
    let addmm: Vec<(String, String)> = records(&kept)
        .iter()
        .filter(|r| r["op"] == "aten::addmm" && r["step"] == 0 && r.get("thread").is_none())
        .map(|r| {
            let s = |k: &str| r[k].as_str().unwrap().to_string();
            (s("phase"), s("module"))
        })
        .collect();
    let want = [
        ("forward", "Net.blocks.0.fc"),
        ("forward", "Net.blocks.1.fc"),
        ("forward", "Net.head"),
        ("recompute", "Net.blocks.1.fc"),
        ("recompute", "Net.blocks.0.fc"),
    ];
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(p, m)| (p.to_string(), m.to_string()))
        .collect();
    assert_eq!(addmm, want);
}
