//! `bitexact diff-trace` of `--trace modules` traces speaks of what they hold: module outputs
//! and parameter gradients, not op calls. Identical traces are `identical module traces (N
//! records)`; a module whose output differs with identical inputs is not offered an fp64
//! capture (`--capture` names one op call, and a module's forward is many).

use crate::common::bitexact;

/// A `--trace modules` record of module `Net.fc` whose output label ends in `out`.
fn record(out: &str) -> String {
    format!(
        r#"{{"v":5,"step":0,"rank":0,"phase":"forward","module":"Net.fc","op":"module output","src":"t.py:1","in":["f32[2]:aa"],"out":["f32[2]:{out}"]}}"#
    ) + "\n"
}

#[test]
fn module_traces_are_said_to_hold_records_and_a_module_is_not_offered_a_capture() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_string_lossy().into_owned();
    std::fs::write(path("a.jsonl"), record("bb")).unwrap();
    std::fs::write(path("b.jsonl"), record("bb")).unwrap();
    std::fs::write(path("c.jsonl"), record("cc")).unwrap();
    let diff = |json: bool| {
        let mut args = vec!["diff-trace", "a.jsonl", "c.jsonl"];
        if json {
            args.extend(["--format", "json"]);
        }
        let args: Vec<String> = args
            .iter()
            .map(|a| match a.ends_with(".jsonl") {
                true => path(a),
                false => a.to_string(),
            })
            .collect();
        let o = bitexact(&args.iter().map(String::as_str).collect::<Vec<_>>());
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        )
    };

    let same = bitexact(&["diff-trace", &path("a.jsonl"), &path("b.jsonl")]);
    let out = String::from_utf8_lossy(&same.stdout);
    assert_eq!(same.status.code(), Some(0), "{out}");
    assert!(out.contains("identical module traces (1 record)"), "{out}");

    let (code, out) = diff(false);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains(
            "inputs identical, output differs: an op in this module's forward is \
             nondeterministic, or a number or other non-tensor argument it was given differs"
        ),
        "{out}"
    );
    assert!(!out.contains("capture"), "{out}");
    let (_, out) = diff(true);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["capture"].is_null(), "{v:#}");
}
