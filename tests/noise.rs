//! Noise or not, from two records alone (issue 32): `bitexact diff-trace` of two kept runs of
//! `tests/fixtures/programs/noise_mlp.py` (a small MLP, three AdamW steps) judges whether
//! they differ by rounding noise or by more:
//! - 1 vs 4 torch threads (the weight gradients' matrix products block by thread count):
//!   within noise, the thread counts named, the growth per step given, exit 0;
//! - a LayerNorm eps of 1e-5 vs 1e-3: beyond noise at `aten::native_layer_norm`, the differing
//!   argument named;
//! - a planted bug giving one weight a 1 % larger update: beyond noise at the optimizer's op.
//!
//! Needs a Python with torch and the installed bitexact package (ci/python.sh); says
//! `SKIPPED` without.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

fn fixture() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/programs/noise_mlp.py")
        .display()
        .to_string()
}

/// Where the fixture calls `opt.step()`: the optimizer's records name it as their source.
const OPTIMIZER_LINE: &str = "noise_mlp.py:30";

/// Keeps two traced runs of the fixture under `--threads THREADS` and `env` in a fresh
/// directory below `root`; returns its run 0.
fn keep(py: &str, root: &Path, name: &str, threads: &str, env: &[(&str, &str)]) -> PathBuf {
    let kept = root.join(name);
    let mut c = Command::new(env!("CARGO_BIN_EXE_bitexact"));
    c.args(["run", "--trace", "ops", "--runs", "2", "--threads", threads])
        .arg("--keep")
        .arg(&kept)
        .args(["--", py, &fixture()])
        .env_remove("NOISE_LN_EPS")
        .env_remove("NOISE_BUG");
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{text}");
    kept.join("run-0")
}

/// The baseline (1 thread, eps 1e-5, no bug), made once for every test of this file.
fn baseline(py: &str) -> &'static Path {
    static DIR: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    let (_, run) = DIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let run = keep(py, dir.path(), "base", "1", &[]);
        (dir, run)
    });
    run
}

/// `bitexact diff-trace A B [--format json]`: (exit code, standard output and error).
fn diff(a: &Path, b: &Path, json: bool) -> (i32, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_bitexact"));
    c.arg("diff-trace").args([a, b]);
    if json {
        c.args(["--format", "json"]);
    }
    let o = c.output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
    (o.status.code().unwrap(), out)
}

#[test]
fn one_and_four_threads_differ_within_noise_and_say_how_it_grows() {
    let Some(py) = common::tracer_python("one_and_four_threads_differ_within_noise") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let four = keep(&py, tmp.path(), "four", "4", &[]);
    let (code, out) = diff(baseline(&py), &four, false);
    assert!(out.contains("platforms differ: threads 1 vs 4"), "{out}");
    assert!(out.contains("torch threads 1 vs "), "{out}"); // torch keeps to the cores it has
    assert!(
        out.contains("inputs identical, output differs: this op gives different results on the two platforms"),
        "{out}"
    );
    assert!(out.contains("origin within noise: relative difference"), "{out}");
    assert!(
        out.contains("within noise: the records agree within noise everywhere"),
        "{out}"
    );
    assert!(out.contains("largest relative difference"), "{out}");
    assert!(
        out.contains("growth: largest relative difference per step (differing/records): 0 "),
        "{out}"
    );
    assert_eq!(code, 0, "{out}");
    let (code, out) = diff(baseline(&py), &four, true);
    assert_eq!(code, 0, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).expect(&out);
    let d = &v["divergence"];
    assert_eq!(d["noise"]["verdict"], "within-noise", "{d:#}");
    let largest = d["noise"]["largest_rel"].as_f64().unwrap();
    assert!(largest > 0.0 && largest < 1e-3, "{d:#}");
    let growth = d["growth"].as_array().unwrap();
    assert_eq!(growth.len(), 3, "{d:#}");
    for (i, g) in growth.iter().enumerate() {
        assert_eq!(g["step"], i as u64, "{g}");
        assert!(g["records"].as_u64().unwrap() >= g["differing"].as_u64().unwrap());
    }
    // The difference reaches later steps through the weights.
    assert!(growth[2]["differing"].as_u64().unwrap() > 0, "{d:#}");
    assert!(growth[2]["max_rel"].as_f64().unwrap() > 0.0, "{d:#}");
    assert!(growth[2]["max_ulp"].as_u64().unwrap() > 0, "{d:#}");
}

#[test]
fn a_layer_norm_eps_of_1e_5_vs_1e_3_is_beyond_noise_at_the_layer_norm() {
    let Some(py) = common::tracer_python("a_layer_norm_eps_is_beyond_noise") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let other = keep(&py, tmp.path(), "eps", "1", &[("NOISE_LN_EPS", "1e-3")]);
    let (code, out) = diff(baseline(&py), &other, false);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("beyond noise: first at step 0, rank 0, aten::native_layer_norm (call 1 of aten::native_layer_norm) in module Sequential.1 (forward)"),
        "{out}"
    );
    assert!(
        out.contains("same inputs, different arguments: eps 1e-05 vs 0.001"),
        "{out}"
    );
}

#[test]
fn a_planted_one_percent_update_bug_is_beyond_noise_at_the_optimizer() {
    let Some(py) = common::tracer_python("a_planted_update_bug_is_beyond_noise") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let bug = keep(&py, tmp.path(), "bug", "1", &[("NOISE_BUG", "1")]);
    let (code, out) = diff(baseline(&py), &bug, true);
    assert_eq!(code, 1, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).expect(&out);
    let j = &v["divergence"]["noise"];
    assert_eq!(j["verdict"], "beyond-noise", "{j:#}");
    let at = j["first_beyond_noise"]["at"].as_str().unwrap();
    assert!(at.starts_with("step 0, rank 0, aten::"), "{at}");
    assert!(at.ends_with(OPTIMIZER_LINE), "{at}");
    let why = j["first_beyond_noise"]["why"].as_str().unwrap();
    assert!(why.starts_with("same inputs, different arguments"), "{why}");
}
