//! `bitexact diff-trace` across trace record versions: version 4 labels tensors with the trace
//! fingerprint, versions 2 and 3 with a SHA-256 prefix, so comparing the two kinds is refused
//! (exit 2, both files and versions named) rather than reported as a divergence at every op.

use crate::common::bitexact;

/// A one-record trace of record version `v` whose output label ends in `digits`.
fn record(v: u32, digits: &str) -> String {
    format!(
        r#"{{"v":{v},"step":0,"rank":0,"phase":"forward","module":"Net","op":"aten::mm","src":"t.py:1","in":["f32[2]:{digits}"],"out":["f32[2]:{digits}"]}}"#
    ) + "\n"
}

#[test]
fn a_sha_prefix_trace_and_a_fingerprint_trace_are_not_compared() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_string_lossy().into_owned();
    std::fs::write(path("v3.jsonl"), record(3, "aa")).unwrap();
    std::fs::write(path("v4.jsonl"), record(4, "bb")).unwrap();
    std::fs::write(path("v4b.jsonl"), record(4, "bb")).unwrap();
    std::fs::write(path("v2.jsonl"), record(2, "aa")).unwrap();

    let diff = |a: &str, b: &str| {
        let o = bitexact(&["diff-trace", &path(a), &path(b)]);
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (code, err) = diff("v3.jsonl", "v4.jsonl");
    assert_eq!(code, Some(2), "{err}");
    let first = "v3.jsonl is a trace of record version 2 or 3";
    assert!(err.contains(first), "{err}");
    assert!(err.contains("v4.jsonl one of version 4"), "{err}");

    // Traces of one kind compare as before: two versions 4, or versions 2 and 3.
    let (code, err) = diff("v4.jsonl", "v4b.jsonl");
    assert_eq!(code, Some(0), "{err}");
    let (code, err) = diff("v2.jsonl", "v3.jsonl");
    assert_eq!(code, Some(0), "{err}");
}
