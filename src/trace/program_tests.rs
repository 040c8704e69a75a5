use super::*;
use crate::trace::Own;

const LINE: &str = r#"{"v":2,"step":1,"rank":0,"phase":"backward","module":"Net.fc1","op":"aten::mm","occ":0,"src":"t.py:9","in":["f32[2,2]:aa"],"out":["f32[2,2]:bb"]}"#;

#[test]
fn reads_lines_and_drops_a_cut_last_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join(".bitexact-trace-rank0.jsonl");
    std::fs::write(&p, format!("{LINE}\n{LINE}\n{{\"v\":2,\"st")).unwrap();
    let t = read_dir(dir.path()).unwrap().unwrap();
    assert_eq!(t.len(), 2);
    assert_eq!(t[1].call, 1);
    assert_eq!(
        (t[0].module.as_str(), t[0].source.as_str()),
        ("Net.fc1", "t.py:9")
    );
    std::fs::write(&p, format!("{{\"v\":2}}\n{LINE}\n")).unwrap();
    let e = read_dir(dir.path()).unwrap_err().to_string();
    assert!(e.contains("line 1"), "{e}");
    let v3 = LINE.replace("\"v\":2", "\"v\":3").replace("\"occ\":0,", "");
    std::fs::write(&p, format!("{LINE}\n{v3}\n")).unwrap();
    assert_eq!(read_dir(dir.path()).unwrap().unwrap().len(), 2);
    let next = crate::protocol::TRACE_RECORD_VERSION + 1;
    let line = LINE.replace("\"v\":2", &format!("\"v\":{next}"));
    std::fs::write(&p, format!("{line}\n")).unwrap();
    assert!(read_dir(dir.path())
        .unwrap_err()
        .to_string()
        .contains(&format!("trace version {next}")));
}

#[test]
fn a_file_whose_only_line_is_no_record_is_no_trace() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join(".bitexact-trace-rank0.jsonl");
    std::fs::write(&p, "garbage\n").unwrap();
    let e = read_jsonl_labelled(&p).unwrap_err().to_string();
    assert!(e.contains("line 1: not a bitexact op trace record"), "{e}");
    let v4 = LINE.replace("\"v\":2", "\"v\":4").replace("\"occ\":0,", "");
    std::fs::write(&p, format!("{v4}\n{}", &v4[..20])).unwrap(); // cut short after a record
    assert_eq!(read_jsonl_labelled(&p).unwrap().entries.len(), 1);
}

#[test]
fn sha_prefix_and_fingerprint_labels_never_mix() {
    let dir = tempfile::tempdir().unwrap();
    let v3 = LINE.replace("\"v\":2", "\"v\":3").replace("\"occ\":0,", "");
    let v4 = v3.replace("\"v\":3", "\"v\":4");
    let p = dir.path().join(".bitexact-trace-rank0.jsonl");
    std::fs::write(&p, format!("{v4}\n{v4}\n")).unwrap();
    let read = read_jsonl_labelled(&p).unwrap();
    assert_eq!(
        (read.entries.len(), read.labels),
        (2, Some(Labels::Fingerprint))
    );
    std::fs::write(&p, format!("{LINE}\n{v3}\n")).unwrap();
    assert_eq!(
        read_jsonl_labelled(&p).unwrap().labels,
        Some(Labels::Sha256Prefix)
    );
    std::fs::write(&p, format!("{v3}\n{v4}\n")).unwrap();
    let e = read_jsonl_labelled(&p).unwrap_err().to_string();
    assert!(
        e.contains("line 2: a record of version 4 after records of version 2 or 3"),
        "{e}"
    );
    // Two ranks of one run, one of each kind.
    std::fs::write(&p, format!("{v3}\n")).unwrap();
    std::fs::write(
        dir.path().join(".bitexact-trace-rank1.jsonl"),
        format!("{v4}\n"),
    )
    .unwrap();
    let e = read_dir(dir.path()).unwrap_err().to_string();
    assert!(
        e.contains("rank0.jsonl is a trace of record version 2 or 3"),
        "{e}"
    );
    assert!(
        e.contains("rank1.jsonl one of version 4 (fingerprint labels,"),
        "{e}"
    );
    let (a, b) = (Path::new("a"), Path::new("b"));
    assert!(same_labels((a, Some(Labels::Fingerprint)), (b, None)).is_ok());
    assert!(same_labels(
        (a, Some(Labels::Fingerprint)),
        (b, Some(Labels::Fingerprint))
    )
    .is_ok());
    assert!(same_labels(
        (a, Some(Labels::Sha256Prefix)),
        (b, Some(Labels::Fingerprint))
    )
    .is_err());
}

#[test]
fn version_4_and_5_in_place_records_never_mix_and_say_what_they_hide() {
    let dir = tempfile::tempdir().unwrap();
    let v4 = LINE.replace("\"v\":2", "\"v\":4").replace("\"occ\":0,", "");
    let v5 = v4.replace("\"v\":4", "\"v\":5");
    let p = dir.path().join(".bitexact-trace-rank0.jsonl");
    let ops = ["aten::mul_.Tensor", "aten::index_put_", "aten::mm"];
    let hidden = |line: &str| {
        let text: Vec<String> = ops.iter().map(|op| line.replace("aten::mm", op)).collect();
        std::fs::write(&p, text.join("\n")).unwrap();
        let read = read_jsonl_labelled(&p).unwrap();
        let hides: Vec<bool> = read.entries.iter().map(|e| e.hides_read).collect();
        (read.labels.unwrap(), hides)
    };
    assert_eq!(hidden(&v4), (Labels::Fingerprint, vec![true, true, false]));
    assert_eq!(
        hidden(&v5),
        (Labels::FingerprintReadsWritten, vec![false, true, false])
    );
    let unhashed = v5.replace("f32[2,2]:aa", "f32[2,2]:-");
    std::fs::write(&p, &unhashed).unwrap();
    assert!(read_jsonl_labelled(&p).unwrap().entries[0].hides_read);
    std::fs::write(&p, format!("{v4}\n{v5}\n")).unwrap();
    let e = read_jsonl_labelled(&p).unwrap_err().to_string();
    assert!(
        e.contains("line 2: a record of version 5 after records of version 4"),
        "{e}"
    );
    let (a, b) = (Path::new("a"), Path::new("b"));
    let both = (
        Some(Labels::Fingerprint),
        Some(Labels::FingerprintReadsWritten),
    );
    assert!(same_labels((a, both.0), (b, both.1)).is_err());
}

#[test]
fn an_older_traces_unsafe_view_records_are_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join(".bitexact-trace-rank0.jsonl");
    let view = LINE.replace("aten::mm", "aten::_unsafe_view");
    let copy = LINE.replace("aten::mm", "aten::_unsafe_view.out"); // a copy: kept
    std::fs::write(&p, format!("{LINE}\n{view}\n{copy}\n{LINE}\n")).unwrap();
    let t = read_dir(dir.path()).unwrap().unwrap();
    let ops: Vec<(&str, usize)> = t.iter().map(|e| (e.op.as_str(), e.call)).collect();
    assert_eq!(
        ops,
        [
            ("aten::mm", 0),
            ("aten::_unsafe_view.out", 1),
            ("aten::mm", 2)
        ]
    );
}

proptest::proptest! {
    #[test]
    fn never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(".bitexact-trace-rank0.jsonl"), &bytes).unwrap();
        let _ = read_dir(dir.path());
    }
}

#[test]
fn a_module_trace_is_counted_in_records_and_an_op_trace_in_op_calls() {
    let e = |op: &str| TraceEntry {
        op: op.into(),
        ..TraceEntry::default()
    };
    assert_eq!(count(&[e("aten::mm"), e("aten::add")]), "2 op calls");
    assert_eq!(count(&[e("module output")]), "1 module record");
    assert_eq!(count(&[]), "0 op calls");
}

/// A module record's `"own"` (a count in version 6, names in 8), `"entered"` (version 7) and
/// `"late"` (8) are read; a record without them (older, or not a module's) has none.
#[test]
fn a_module_records_own_state_call_number_and_late_inputs_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join(".bitexact-trace-rank0.jsonl");
    let op = LINE.replace("\"v\":2", "\"v\":7").replace("\"occ\":0,", "");
    let module = op
        .replace("\"aten::mm\"", "\"module output\"")
        .replace("}", ",\"own\":1,\"entered\":2}");
    let named = module.replace(
        "\"own\":1",
        "\"own\":{\"params\":[\"w\"],\"buffers\":[\"b\"]},\"late\":1",
    );
    std::fs::write(&p, format!("{module}\n{op}\n{named}\n")).unwrap();
    let t = read_dir(dir.path()).unwrap().unwrap();
    assert_eq!((&t[0].own, t[0].entered), (&Some(Own::Count(1)), Some(2)));
    assert_eq!((&t[1].own, t[1].entered), (&None, None));
    let names = (vec!["w".to_string()], vec!["b".to_string()]);
    assert_eq!(
        t[2].own,
        Some(Own::Named {
            params: names.0,
            buffers: names.1
        })
    );
    assert_eq!((t[0].late, t[2].late), (0, 1));
}
