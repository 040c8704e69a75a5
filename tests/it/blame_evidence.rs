//! Blame says why each pass it made diverged: the first output that differed, or the failure
//! that ended the pass. A pass in which a run failed before any two differed is made once
//! more (one crash unrelated to the variation must not decide blame); a control that fails
//! again is not called nondeterministic: blame says it could not judge, and shows the failure.

use crate::common;
use common::{bitexact, json};

/// `bitexact run --format json --vary workers -- sh -c SCRIPT`: (exit code, the case).
fn blame_of(script: &str) -> (Option<i32>, serde_json::Value) {
    let o = bitexact(&[
        "run", "--format", "json", "--vary", "workers", "--", "sh", "-c", script,
    ]);
    (o.status.code(), json(&o)["cases"][0].clone())
}

/// The blame of [`counting`] (exit code 1 checked): the case's `blame`, and the directory
/// holding the count (kept while the test needs it) with the script.
fn blame_counting(fails: &str) -> (serde_json::Value, (tempfile::TempDir, String)) {
    let dir = tempfile::tempdir().unwrap();
    let script = counting(&dir.path().join("count"), fails);
    let (code, c) = blame_of(&script);
    assert_eq!(code, Some(1), "{c:#}");
    (c["blame"].clone(), (dir, script))
}

/// A script that counts its runs in `count` and fails (status 3, `out of licences` on stderr)
/// on the runs for which the shell test `fails` (over `$n`, the 0-based run count) holds; it
/// writes the worker count, so the main pass differs under `--vary workers`.
fn counting(count: &std::path::Path, fails: &str) -> String {
    format!(
        "n=$(cat '{c}' 2>/dev/null || echo 0); echo $((n + 1)) > '{c}'; \
         if {fails}; then echo 'out of licences' >&2; exit 3; fi; \
         echo \"$BITEXACT_WORKERS\" > \"$BITEXACT_OUT/a.txt\"",
        c = count.display()
    )
}

#[test]
fn a_nondeterministic_control_names_the_first_output_that_differed() {
    // Worker count and a value that changes every run: the control differs too.
    let (code, c) = blame_of(
        "echo \"$BITEXACT_WORKERS\" > \"$BITEXACT_OUT/a.txt\"; \
         head -c 16 /dev/urandom > \"$BITEXACT_OUT/b.bin\"",
    );
    assert_eq!(code, Some(1), "{c:#}");
    let b = &c["blame"];
    assert_eq!(b["reproducible_when_fixed"], false, "{b:#}");
    let why = b["explanation"].as_str().unwrap();
    assert!(why.contains("the case itself is nondeterministic"), "{why}");
    assert!(
        why.contains("(control: run 1 differs from run 0 first at b.bin)"),
        "{why}"
    );
    assert_eq!(
        b["evidence"],
        serde_json::json!(["control: run 1 differs from run 0 first at b.bin"]),
        "{b:#}"
    );
}

#[test]
fn a_control_run_that_fails_is_reported_as_a_failure_not_as_nondeterminism() {
    // The two main runs differ by worker count; every later run (blame's control) fails.
    let (b, _) = blame_counting("[ \"$n\" -ge 2 ]");
    assert_eq!(b["reproducible_when_fixed"], false, "{b:#}");
    let why = b["explanation"].as_str().unwrap();
    assert!(
        why.starts_with("blame could not judge: a run of the control (everything fixed) failed"),
        "{why}"
    );
    assert!(!why.contains("nondeterministic"), "{why}");
    assert!(why.contains("control: run 0: "), "{why}");
    assert!(why.contains("out of licences"), "{why}");
    let evidence = b["evidence"].as_array().unwrap();
    assert_eq!(evidence.len(), 2, "made again once: {b:#}");
    assert!(
        text(&evidence[0]).ends_with("(the pass was made again)"),
        "{b:#}"
    );
    assert!(
        why.contains("blame made 2 more runs: 1 control, 1 control again"),
        "{why}"
    );
}

fn text(v: &serde_json::Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

#[test]
fn a_control_run_that_fails_once_is_made_again_and_blame_still_judges() {
    // Only the first run of the control fails (a crash that has nothing to do with workers).
    let (b, (dir, script)) = blame_counting("[ \"$n\" -eq 2 ]");
    assert_eq!(b["reproducible_when_fixed"], true, "{b:#}");
    assert_eq!(b["broken_by"], serde_json::json!(["workers"]), "{b:#}");
    let evidence: Vec<String> = b["evidence"].as_array().unwrap().iter().map(text).collect();
    assert_eq!(evidence.len(), 2, "{b:#}");
    assert!(
        evidence[0].starts_with("control: run 0: exited with status 3"),
        "{b:#}"
    );
    assert!(evidence[0].ends_with("(the pass was made again)"), "{b:#}");
    assert_eq!(
        evidence[1],
        "workers: run 1 differs from run 0 first at a.txt (the main pass, not made again)"
    );

    // The terminal report shows the evidence the explanation does not hold.
    std::fs::remove_file(dir.path().join("count")).unwrap();
    let o = bitexact(&["run", "--vary", "workers", "--", "sh", "-c", &script]);
    let out = common::stdout(&o);
    assert!(out.contains("blame: breaks when varying: workers"), "{out}");
    assert!(
        out.contains("blame evidence: control: run 0: exited with status 3"),
        "{out}"
    );
}

#[test]
fn a_variation_pass_says_where_it_diverged() {
    let (code, c) = blame_of("echo \"$BITEXACT_WORKERS\" > \"$BITEXACT_OUT/a.txt\"");
    assert_eq!(code, Some(1), "{c:#}");
    let b = &c["blame"];
    assert_eq!(b["broken_by"], serde_json::json!(["workers"]), "{b:#}");
    assert_eq!(
        b["evidence"],
        serde_json::json!([
            "workers: run 1 differs from run 0 first at a.txt (the main pass, not made again)"
        ]),
        "{b:#}"
    );
}

#[test]
fn a_control_that_differed_before_a_run_failed_is_judged_on_the_difference() {
    // Three runs a pass; every run writes fresh random bytes; the sixth run of the program
    // (the control's run 2) fails after the control's runs 0 and 1 already differed.
    let dir = tempfile::tempdir().unwrap();
    let script = counting(&dir.path().join("count"), "[ \"$n\" -eq 5 ]")
        + "; head -c 16 /dev/urandom > \"$BITEXACT_OUT/b.bin\"";
    let o = bitexact(&[
        "run", "--format", "json", "--runs", "3", "--vary", "workers", "--", "sh", "-c", &script,
    ]);
    let c = json(&o)["cases"][0].clone();
    let b = &c["blame"];
    assert_eq!(b["reproducible_when_fixed"], false, "{b:#}");
    let why = text(&b["explanation"]);
    assert!(why.contains("the case itself is nondeterministic"), "{why}");
    assert!(
        why.contains("(control: run 1 differs from run 0 first at b.bin)"),
        "{why}"
    );
    assert!(!why.contains("out of licences"), "{why}");
}
