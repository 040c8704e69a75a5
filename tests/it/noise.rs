//! Noise or not, from two records alone: `bitexact diff-trace` of two kept runs of
//! `tests/fixtures/programs/noise_mlp.py` (a small MLP, three AdamW steps) judges whether
//! they differ by rounding noise or by more:
//! - 1 vs 4 torch threads (the weight gradients' matrix products block by thread count):
//!   within noise, the thread counts named, the growth per step given, exit 0;
//! - 1 vs 4 threads of `tests/fixtures/programs/noise_shift.py`, whose one parameter's gradient
//!   is a sum that cancels: the receiver that amplifies the difference is `amplified`, never
//!   beyond noise, and the answer is within noise;
//! - a LayerNorm eps of 1e-5 vs 1e-3: beyond noise at `aten::native_layer_norm`, the differing
//!   argument named;
//! - a planted bug giving one weight a 1 % larger update: beyond noise at the optimizer's op.
//!
//! The same runs check snapshots across machines: the baseline's snapshot, moved to another
//! platform class's directory, is what the 4-thread run is a `platform-difference (within
//! noise)` from, and the planted bug a `mismatch (over the noise threshold at the outputs: first
//! at 3.weight.npy …)` (never called beyond noise: outputs alone cannot tell a change from
//! amplified noise).
//!
//! Which op differs first at 1 vs 4 threads depends on the CPU's kernels (the loss's
//! `aten::mean` on one machine, `aten::native_layer_norm_backward` on another), so
//! the test reads it from diff-trace's JSON (`capture`: the origin's identity) and checks what
//! must hold of it: the capture hint names that identity, the origin is within noise, and
//! both sides kept again with `--capture` of it are replayed in float64,
//! each within noise. Where 1 and 4 threads give identical bits, the test skips and says so.
//!
//! Needs a Python with torch and the installed bitexact package (ci/python.sh); says
//! `SKIPPED` without.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

fn fixture() -> String {
    common::fixture_program("noise_mlp.py")
}

/// Where the fixture calls `opt.step()`: the optimizer's records name it as their source.
const OPTIMIZER_LINE: &str = "noise_mlp.py:30";

/// One `bitexact run` of the fixture: its run 0's kept directory, its report's case, its exit
/// code.
struct Kept {
    run: PathBuf,
    case: serde_json::Value,
    code: i32,
}

/// Keeps two traced runs of the fixture under `--threads THREADS` and `env` in a fresh
/// directory below `root`, its outputs compared with the snapshots under `root/snapshots`
/// (written there as pending: `CI` is removed so that they are, in this test's own directory),
/// capturing the op `capture` (`--capture`) when given.
fn keep(
    py: &str,
    root: &Path,
    name: &str,
    threads: &str,
    env: &[(&str, &str)],
    capture: Option<&str>,
) -> Kept {
    keep_program(py, &fixture(), root, name, threads, env, capture)
}

/// [`keep`] of the program `script`.
fn keep_program(
    py: &str,
    script: &str,
    root: &Path,
    name: &str,
    threads: &str,
    env: &[(&str, &str)],
    capture: Option<&str>,
) -> Kept {
    let kept = root.join(name);
    std::fs::create_dir_all(root.join("snapshots")).unwrap();
    let mut c = Command::new(env!("CARGO_BIN_EXE_bitexact"));
    c.args(["run", "--trace", "ops", "--runs", "2", "--threads", threads])
        .args(["--format", "json", "--keep"])
        .arg(&kept)
        .arg("--snapshots")
        .arg(root.join("snapshots"))
        .args(capture.map(|c| ["--capture", c]).into_iter().flatten())
        .args(["--", py, script])
        .env_remove("NOISE_LN_EPS")
        .env_remove("NOISE_BUG")
        .env_remove("CI")
        .env_remove("TF_BUILD");
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    let report = common::json(&o);
    Kept {
        run: kept.join("run-0"),
        case: report["cases"][0].clone(),
        code: o.status.code().unwrap(),
    }
}

/// The class directory a pending snapshot of the baseline is moved to, posing as another
/// machine's.
const OTHER_CLASS: &str = "cpu-other";

/// The baseline (1 thread, eps 1e-5, no bug), made once for every test of this file; its
/// pending snapshot becomes the committed snapshot of [`OTHER_CLASS`].
fn baseline(py: &str) -> &'static Path {
    static DIR: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    let (_, run) = DIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let k = keep(py, dir.path(), "base", "1", &[], None);
        assert_eq!(k.code, 0, "{:#}", k.case);
        assert_eq!(
            k.case["snapshot"]
                .as_str()
                .map(|s| s.starts_with("no committed snapshot")),
            Some(true),
            "{:#}",
            k.case
        );
        let snaps = dir.path().join("snapshots");
        let class = std::fs::read_dir(&snaps)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        let pending = std::fs::read_dir(&class)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        let name = pending
            .file_name()
            .unwrap()
            .to_string_lossy()
            .replace(".snap.new", ".snap");
        std::fs::create_dir(snaps.join(OTHER_CLASS)).unwrap();
        std::fs::rename(&pending, snaps.join(OTHER_CLASS).join(name)).unwrap();
        std::fs::remove_dir_all(&class).unwrap();
        (dir, k.run)
    });
    run
}

/// A fresh directory whose `snapshots/` holds the baseline's snapshot as [`OTHER_CLASS`]'s.
fn with_other_class(py: &str) -> tempfile::TempDir {
    let base = baseline(py)
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("snapshots");
    let tmp = tempfile::tempdir().unwrap();
    let to = tmp.path().join("snapshots").join(OTHER_CLASS);
    std::fs::create_dir_all(&to).unwrap();
    for e in std::fs::read_dir(base.join(OTHER_CLASS)).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
    tmp
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
    let test = "one_and_four_threads_differ_within_noise";
    let Some(py) = common::tracer_python(test) else {
        return;
    };
    let tmp = with_other_class(&py);
    let four = keep(&py, tmp.path(), "four", "4", &[], None);
    let (code, out) = diff(baseline(&py), &four.run, true);
    let v: serde_json::Value = serde_json::from_str(&out).expect(&out);
    if v["identical"] == true {
        return common::premise_skip(
            test,
            "1 vs 4 torch threads give identical op traces on this CPU: no rounding noise to judge",
        );
    }
    // The snapshot of another platform class differs within noise: not a failure.
    assert_eq!(four.code, 0, "{:#}", four.case);
    let snapshot = four.case["snapshot"].as_str().unwrap_or_default();
    assert!(
        snapshot.starts_with(&format!(
            "platform-difference (within noise) from the snapshot of platform class {OTHER_CLASS}"
        )),
        "{snapshot}"
    );
    assert!(
        snapshot.contains("largest relative difference"),
        "{snapshot}"
    );
    assert_eq!(code, 0, "{out}");
    let d = &v["divergence"];
    assert_eq!(d["noise"]["classification"], "within-noise", "{d:#}");
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
    // Which op differs first depends on this CPU's kernels (AVX2 or AVX-512, oneDNN's ISA, the
    // BLAS's blocking): it is read from the run, and what must hold of it is checked.
    assert_eq!(d["inputs_matched"], true, "{d:#}");
    let origin = v["capture"]
        .as_str()
        .expect("an origin identity to capture")
        .to_string();
    let op = d["op"].as_str().unwrap();
    assert!(origin.contains(&format!("\"{op}\"")), "{origin} names {op}");
    let (code, out) = diff(baseline(&py), &four.run, false);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("platforms differ: threads 1 vs 4"), "{out}");
    assert!(out.contains("torch threads 1 vs "), "{out}"); // torch keeps to the cores it has
    assert!(
        out.contains(&format!("first divergence: step 0, rank 0, {op} (call "))
            && out.contains("inputs identical, output differs at 1 vs 4 threads"),
        "{out}"
    );
    assert!(
        out.contains("origin within noise: relative difference"),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "within noise: every difference starts at ops within rounding noise (first: step 0, rank 0, {op} (call "
        )),
        "{out}"
    );
    assert!(!out.contains("beyond noise"), "{out}");
    assert!(out.contains("largest relative difference"), "{out}");
    assert!(
        out.contains("growth: largest relative difference per step (differing/records): 0 "),
        "{out}"
    );
    // Without captures, the hint names that op's identity, ready to copy.
    assert!(
        out.contains(&format!(
            "fp64 replay: no capture of this op in A or B; capture it with `bitexact run --trace ops --capture '{origin}' --keep DIR` on both sides"
        )),
        "{out}"
    );
    replayed_in_float64(&py, tmp.path(), &origin);
}

/// Both sides of the 1-vs-4-threads pair kept again capturing the origin `origin`: diff-trace
/// replays it in float64 and judges each side's distance from the float64 result; with one
/// side's capture alone, it says which side lacks one.
fn replayed_in_float64(py: &str, root: &Path, origin: &str) {
    let a = keep(py, root, "one-captured", "1", &[], Some(origin)).run;
    let b = keep(py, root, "four-captured", "4", &[], Some(origin)).run;
    let (code, out) = diff(&a, &b, false);
    assert_eq!(code, 0, "{out}");
    let replay = out
        .lines()
        .find(|l| l.starts_with("fp64 replay of aten."))
        .unwrap_or_else(|| panic!("no replay line: {out}"));
    assert!(
        replay.contains(" ULP from the fp64 result")
            && replay.contains(", B: ")
            && replay.contains(": both within noise; "),
        "{replay}"
    );
    let (code, out) = diff(&a, &b, true);
    assert_eq!(code, 0, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).expect(&out);
    let r = &v["replay"];
    let op = v["divergence"]["op"].as_str().unwrap();
    // `aten::mean` is replayed as `aten.mean.default`, `aten::mm.out`'s overload kept.
    let packet = op.replacen("::", ".", 1);
    let replayed = r["op"].as_str().unwrap_or_default();
    assert!(
        replayed == format!("{packet}.default") || replayed == packet,
        "{op} replayed as {r:#}"
    );
    assert_eq!(r["identity"], origin, "{r:#}");
    assert_eq!(r["inputs_identical"], true, "{r:#}");
    let outputs = r["outputs"].as_array().unwrap();
    assert!(!outputs.is_empty(), "{r:#}");
    for o in outputs {
        let sides = o["sides"].as_array().unwrap();
        assert_eq!(sides.len(), 2, "{o:#}");
        assert!(sides.iter().all(|s| s["within_noise"] == true), "{o:#}");
    }
    let verdict = r["verdict"].as_str().unwrap();
    assert!(
        [
            "both within noise; A is closer",
            "both within noise; B is closer",
            "both within noise; equally close"
        ]
        .contains(&verdict),
        "{r:#}"
    );
    replay_needs_both_captures(&a, &b, origin);
}

#[test]
fn a_layer_norm_eps_of_1e_5_vs_1e_3_is_beyond_noise_at_the_layer_norm() {
    let Some(py) = common::tracer_python("a_layer_norm_eps_is_beyond_noise") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let other = keep(
        &py,
        tmp.path(),
        "eps",
        "1",
        &[("NOISE_LN_EPS", "1e-3")],
        None,
    )
    .run;
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
    let tmp = with_other_class(&py);
    let bug = keep(&py, tmp.path(), "bug", "1", &[("NOISE_BUG", "1")], None);
    // Against the snapshot of another platform class: a mismatch beyond noise, at the weight.
    assert_eq!(bug.code, 1, "{:#}", bug.case);
    // Outputs alone cannot tell a change from amplified noise: never called beyond noise.
    let snapshot = bug.case["snapshot"].as_str().unwrap_or_default();
    assert!(
        snapshot.starts_with("mismatch (over the noise threshold at the outputs: first at ")
            && snapshot.contains(".npy: relative difference")
            && snapshot.contains(
                "`bitexact diff-trace` of traced runs on both platforms tells them apart"
            )
            && !snapshot.contains("beyond noise"),
        "{snapshot}"
    );
    let (code, out) = diff(baseline(&py), &bug.run, true);
    assert_eq!(code, 1, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).expect(&out);
    let j = &v["divergence"]["noise"];
    assert_eq!(j["classification"], "beyond-noise", "{j:#}");
    let at = j["first_beyond_noise"]["at"].as_str().unwrap();
    assert!(at.starts_with("step 0, rank 0, aten::"), "{at}");
    assert!(at.ends_with(OPTIMIZER_LINE), "{at}");
    let why = j["first_beyond_noise"]["why"].as_str().unwrap();
    assert!(why.starts_with("same inputs, different arguments"), "{why}");
}

#[test]
fn a_gradient_that_cancels_is_amplified_at_1_vs_4_threads_not_beyond_noise() {
    let test = "a_gradient_that_cancels_is_amplified";
    let Some(py) = common::tracer_python(test) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let script = common::fixture_program("noise_shift.py");
    let one = keep_program(&py, &script, tmp.path(), "one", "1", &[], None);
    let four = keep_program(&py, &script, tmp.path(), "four", "4", &[], None);
    assert_eq!(
        (one.code, four.code),
        (0, 0),
        "{:#}\n{:#}",
        one.case,
        four.case
    );
    let (code, out) = diff(&one.run, &four.run, true);
    let v: serde_json::Value = serde_json::from_str(&out).expect(&out);
    if v["identical"] == true {
        return common::premise_skip(
            test,
            "1 vs 4 torch threads give identical op traces on this CPU: no rounding noise to judge",
        );
    }
    assert_eq!(code, 0, "{out}");
    let j = &v["divergence"]["noise"];
    assert_eq!(j["classification"], "within-noise", "{j:#}");
    assert!(j.get("first_beyond_noise").is_none(), "{j:#}");
    assert_eq!(j["origin"]["judgement"], "within-noise", "{j:#}");
    // The shift's gradient, a sum that cancels, grows the difference past its allowance.
    assert!(j["amplified"].as_u64().unwrap() >= 1, "{j:#}");
    let a = &j["largest_amplified"];
    assert_eq!(a["judgement"], "amplified", "{a:#}");
    let why = a["why"].as_str().unwrap();
    assert!(
        why.contains("amplified: past the allowance only because the values it reads already differ, its arguments match"),
        "{why}"
    );
    assert!(
        a["rel"].as_f64().unwrap() > a["allowed"].as_f64().unwrap(),
        "{a:#}"
    );
    let (code, out) = diff(&one.run, &four.run, false);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("within noise: every difference starts at ops within rounding noise (first: ")
            && out.contains(&format!(
                "; it grew to {:.1e} through {} (amplified, not a change); ",
                j["largest_rel"].as_f64().unwrap(),
                a["at"].as_str().unwrap()
            )),
        "{out}"
    );
    assert!(out.contains("amplified past"), "{out}");
    assert!(!out.contains("beyond noise"), "{out}");
}

/// Copies of the kept runs `a` and `b` without their captures: `diff-trace` then names the
/// identity to capture (the one the runs were captured with), and with one side's capture
/// alone says which side lacks one. No replay, no crash, the same exit code.
fn replay_needs_both_captures(a: &Path, b: &Path, origin: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let copy = |from: &Path, name: &str, capture: bool| {
        let to = tmp.path().join(name);
        std::fs::create_dir(&to).unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            let file = e.file_name();
            if capture || file != ".bitexact-capture.safetensors" {
                std::fs::copy(e.path(), to.join(&file)).unwrap();
            }
        }
        to
    };
    let (a0, b0, b1) = (
        copy(a, "a", false),
        copy(b, "b", false),
        copy(b, "bc", true),
    );
    let (code, out) = diff(&a0, &b0, false);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(&format!(
            "fp64 replay: no capture of this op in A or B; capture it with `bitexact run --trace ops --capture '{origin}' --keep DIR` on both sides"
        )),
        "{out}"
    );
    let (code, out) = diff(&a0, &b1, false);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(&format!(
            "fp64 replay: B holds a capture of {origin}, A none"
        )),
        "{out}"
    );
}
