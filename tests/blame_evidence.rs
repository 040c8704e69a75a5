//! Blame says why each pass it made diverged: the first output that differed, or the failure
//! that ended the pass. A control pass that failed without any two runs differing is not
//! called nondeterministic: blame says it could not judge, and shows the failure.

mod common;
use common::{bitexact, json};

/// `bitexact run --format json --vary workers -- sh -c SCRIPT`: (exit code, the case).
fn blame_of(script: &str) -> (Option<i32>, serde_json::Value) {
    let o = bitexact(&[
        "run", "--format", "json", "--vary", "workers", "--", "sh", "-c", script,
    ]);
    (o.status.code(), json(&o)["cases"][0].clone())
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
    let dir = tempfile::tempdir().unwrap();
    let count = dir.path().join("count");
    let script = format!(
        "n=$(cat '{c}' 2>/dev/null || echo 0); echo $((n + 1)) > '{c}'; \
         [ \"$n\" -lt 2 ] || {{ echo 'out of licences' >&2; exit 3; }}; \
         echo \"$BITEXACT_WORKERS\" > \"$BITEXACT_OUT/a.txt\"",
        c = count.display()
    );
    let (code, c) = blame_of(&script);
    assert_eq!(code, Some(1), "{c:#}");
    let b = &c["blame"];
    assert_eq!(b["reproducible_when_fixed"], false, "{b:#}");
    let why = b["explanation"].as_str().unwrap();
    assert!(
        why.starts_with("blame could not judge: a run of the control (everything fixed) failed"),
        "{why}"
    );
    assert!(!why.contains("nondeterministic"), "{why}");
    assert!(why.contains("control: run 0: "), "{why}");
    assert!(why.contains("out of licences"), "{why}");
}

#[test]
fn a_variation_pass_says_where_it_diverged() {
    let (code, c) = blame_of("echo \"$BITEXACT_WORKERS\" > \"$BITEXACT_OUT/a.txt\"");
    assert_eq!(code, Some(1), "{c:#}");
    let b = &c["blame"];
    assert_eq!(b["broken_by"], serde_json::json!(["workers"]), "{b:#}");
    assert_eq!(
        b["evidence"],
        serde_json::json!(["workers: run 1 differs from run 0 first at a.txt"]),
        "{b:#}"
    );
}
