//! Hostile programs (issue 28): what a program does under `$BITEXACT_OUT`, or beside it, must
//! never make bitexact fail or hide why a run failed.

mod common;

/// The failure of a `bitexact run --format json -- sh -c SCRIPT`: its message.
fn failure_of(script: &str) -> String {
    let o = common::bitexact(&["run", "--format", "json", "--", "sh", "-c", script]);
    let j = common::json(&o);
    assert_eq!(o.status.code(), Some(1), "{j}");
    let f = &j["cases"][0]["evidence"]["failure"];
    f["message"]
        .as_str()
        .expect("a failure message")
        .to_string()
}

/// A directory nested past PATH_MAX (4 000 characters): reading it fails with
/// `File name too long`. The message was cut at 2 KiB in the middle of the path, so the cause
/// was lost; long paths are now shortened in the middle, and the cause is kept.
#[test]
fn a_path_too_long_to_read_keeps_its_cause() {
    let script = r#"cd "$BITEXACT_OUT"; echo x > top.bin
d=$(printf 'd%.0s' $(seq 200))
for i in $(seq 25); do mkdir $d && cd $d || exit 0; done"#;
    let m = failure_of(script);
    assert!(m.len() < 1000, "{} bytes: {m}", m.len());
    assert!(m.ends_with("File name too long (os error 36)"), "{m}");
    assert!(m.contains("/run-0/dddd") && m.contains(" bytes]…"), "{m}");
}

/// The program's own error quotes the long path (`mkdir: cannot create directory '…': File
/// name too long`): each quoted line is shortened in the middle, and its end kept.
#[test]
fn a_programs_error_about_a_long_path_keeps_its_cause() {
    let script = r#"d=$(printf 'd%.0s' $(seq 200)); p="$BITEXACT_OUT"
for i in $(seq 25); do p="$p/$d"; done
mkdir -p "$p""#;
    let m = failure_of(script);
    assert!(m.len() < 1000, "{} bytes: {m}", m.len());
    assert!(m.contains("File name too long"), "{m}");
}
