//! Every built-in CPU case against its committed snapshot under `snapshots/cpu-<arch>/`.
//!
//! Planted bugs (`planted/...`) are nondeterministic on purpose and self-tests (`selftest/...`)
//! crash on purpose, so neither has a snapshot. A new or changed snapshot is written as pending
//! `.snap.new` (not in CI) for `cargo insta review` / `bitexact snapshot review`; the failure
//! names the case, the tensors whose digests changed, what differs in the platform
//! fingerprint, the file written and how to accept it.

use bitexact::platform::Platform;
use bitexact::snapshot::{self, Snapshot};
use bitexact::{cases, Backend, Case};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

fn committed() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("snapshots")
}

/// Built-in cases that must have a CPU snapshot.
fn snapshot_cases() -> Vec<Box<dyn Case>> {
    cases::select(None)
        .into_iter()
        .filter(|c| c.planted_bug().is_none() && c.caught_by().is_none() && !c.needs_isolation())
        .filter(|c| c.backends().contains(&Backend::Cpu))
        .collect()
}

/// The failure message of `assert_snapshot` for `case` against `dir`, or `None` when it passes.
fn snapshot_failure(case: &dyn Case, dir: &Path) -> Option<String> {
    catch_unwind(AssertUnwindSafe(|| {
        bitexact::check(case).snapshot_dir(dir).assert_snapshot();
    }))
    .err()
    .map(panic_text)
}

fn panic_text(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

#[test]
fn builtin_cpu_cases_match_their_snapshots() {
    let cases = snapshot_cases();
    assert!(
        cases.len() >= 12,
        "expected the kernel cases, got {}",
        cases.len()
    );
    // Check every case before failing, so one run writes every pending snapshot.
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|c| snapshot_failure(c.as_ref(), &committed()))
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// A scratch path (`.0`, named `tag`) inside a temporary directory removed on drop.
struct Scratch(PathBuf, #[allow(dead_code)] tempfile::TempDir);
impl Scratch {
    fn new(tag: &str) -> Scratch {
        let t = tempfile::tempdir().unwrap();
        Scratch(t.path().join(tag), t)
    }
}

/// Writes the snapshot of `case` as this machine would record it, with `edit` applied, into a
/// scratch directory (so the test does not depend on which machine wrote the committed ones).
fn perturbed(case: &dyn Case, tag: &str, edit: impl Fn(&mut Snapshot)) -> (Scratch, PathBuf) {
    let controls = bitexact::Controls::from_env().unwrap();
    let platform = Platform::detect();
    let report = bitexact::check(case).report();
    let mut snap = Snapshot::of(&report, &controls, &platform).unwrap();
    edit(&mut snap);
    let scratch = Scratch::new(tag);
    let file = snapshot::path(
        &scratch.0,
        &platform.class_for(Backend::Cpu),
        &case.name(),
        &controls,
    );
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, snap.file_text()).unwrap();
    (scratch, file)
}

#[test]
fn a_changed_digest_fails_naming_case_and_tensor() {
    let case = cases::find("kernel/reduce_sum/small").unwrap();
    let (scratch, file) = perturbed(case.as_ref(), "regression", |s| {
        s.tensors.insert("sum".into(), "0".repeat(64));
    });
    let msg = snapshot_failure(case.as_ref(), &scratch.0).expect("a mismatch");
    assert!(
        msg.contains("snapshot mismatch for kernel/reduce_sum/small"),
        "{msg}"
    );
    assert!(msg.contains("tensor `sum` 000000000000 → "), "{msg}");
    assert!(
        msg.contains("same platform fingerprint: regression"),
        "{msg}"
    );
    // Outside CI the new digests are left as a pending snapshot; in CI nothing is written.
    let pending = snapshot::pending_path(&file);
    assert_eq!(
        pending.exists(),
        !snapshot::in_ci(),
        "{}",
        pending.display()
    );
    if pending.exists() {
        assert!(
            msg.contains(&format!("wrote the new digests to {}", pending.display()))
                && msg.contains("cargo insta review")
                && msg.contains("bitexact snapshot review --accept --snapshots"),
            "{msg}"
        );
        // The pending file is byte for byte what `bitexact snapshot update` writes (and what
        // insta writes: see `insta_accepts_our_files_byte_for_byte`).
        let ours = Snapshot::of(
            &bitexact::check(case.as_ref()).report(),
            &bitexact::Controls::from_env().unwrap(),
            &Platform::detect(),
        )
        .unwrap()
        .file_text();
        assert_eq!(std::fs::read_to_string(&pending).unwrap(), ours);
        let review = snapshot::review(&scratch.0, true).unwrap();
        assert!(review.is_ok(), "{review}");
        let review = review.to_string();
        assert!(
            review.contains("tensor `sum`") && review.contains("accepted"),
            "{review}"
        );
        bitexact::check(case.as_ref())
            .snapshot_dir(&scratch.0)
            .assert_snapshot();
    }
}

#[test]
fn a_changed_toolchain_is_named_as_the_likely_cause() {
    let case = cases::find("kernel/softmax/small").unwrap();
    let (scratch, _) = perturbed(case.as_ref(), "toolchain", |s| {
        s.tensors.insert("y".into(), "f".repeat(64));
        for (k, v) in s.info.iter_mut() {
            if k == "rustc" {
                *v = "rustc 0.9.0 (an older one)".into();
            }
        }
    });
    let msg = snapshot_failure(case.as_ref(), &scratch.0).expect("a mismatch");
    assert!(
        msg.contains("kernel/softmax/small") && msg.contains("tensor `y`"),
        "{msg}"
    );
    assert!(
        msg.contains("rustc changed (rustc 0.9.0 (an older one) → rustc ")
            && msg.contains("likely a toolchain change"),
        "{msg}"
    );
}

fn bitexact(args: &[&str], ci: bool) -> (Option<i32>, String, String) {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_bitexact"));
    cmd.args(args)
        .env_remove("BITEXACT_SEED")
        .env_remove("BITEXACT_DETERMINISTIC")
        .env_remove("BITEXACT_BENCHMARK")
        .env_remove("TF_BUILD");
    if ci {
        cmd.env("CI", "true");
    } else {
        cmd.env_remove("CI");
    }
    let o = cmd.output().expect("run bitexact");
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn cli_update_report_and_ci_refusal() {
    let dir = Scratch::new("cli");
    let d = dir.0.to_str().unwrap();
    let filter = ["--filter", "kernel/reduce_sum/small", "--backend", "cpu"];
    let update = |ci: bool, extra: &[&str]| {
        let mut args = vec!["snapshot", "update", "--snapshots", d];
        args.extend(filter);
        args.extend(extra);
        bitexact(&args, ci)
    };
    let mut report = vec!["report", "--snapshots", d];
    report.extend(filter);
    // A snapshot directory that does not exist is bad usage, found before any case runs.
    let (code, _, err) = bitexact(&report, true);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains(d), "{err}");
    std::fs::create_dir_all(&dir.0).unwrap();
    // No snapshot yet: noted per case and counted, not a failure.
    let (code, out, err) = bitexact(&report, true);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("snapshot missing: no committed snapshot at"),
        "{out}"
    );
    assert!(out.contains("1 snapshots missing"), "{out}");

    let (code, out, err) = update(false, &[]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.starts_with("written"), "{out}");
    let (code, out, err) = bitexact(&report, true);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("snapshot: matched"), "a match is shown: {out}");
    let (_, out, _) = update(false, &[]);
    assert!(out.starts_with("unchanged"), "{out}");

    let file = snapshot::path(
        &dir.0,
        &Platform::detect().class_for(Backend::Cpu),
        "kernel/reduce_sum/small",
        &bitexact::Controls::default(),
    );
    let text = std::fs::read_to_string(&file).unwrap();
    let sum = Snapshot::load(&file).unwrap().tensors["sum"].clone();
    std::fs::write(&file, text.replace(&sum, &"1".repeat(64))).unwrap();

    let mut args = report.clone();
    let (code, out, err) = bitexact(&args, true);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(out.contains("snapshot-mismatch"), "{out}");
    assert!(
        out.contains("snapshot mismatch for kernel/reduce_sum/small")
            && out.contains("tensor `sum` 111111111111 → "),
        "{out}"
    );
    args.extend(["--format", "json"]);
    let (_, json, _) = bitexact(&args, true);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["cases"][0]["verdict"], "snapshot-mismatch", "{json}");
    assert!(
        v["cases"][0]["snapshot"]
            .as_str()
            .unwrap()
            .contains("tensor `sum`"),
        "{json}"
    );

    // In CI nothing is written unless forced.
    let (code, _, err) = update(true, &[]);
    assert_eq!(code, Some(2));
    assert!(err.contains("refusing to write snapshots in CI"), "{err}");
    assert!(std::fs::read_to_string(&file)
        .unwrap()
        .contains(&"1".repeat(64)));
    let (code, out, err) = update(true, &["--force"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.starts_with("updated") && out.contains("tensor `sum`"),
        "{out}"
    );
    assert_eq!(Snapshot::load(&file).unwrap().tensors["sum"], sum);
}
