//! Tests of first-divergence localization, trace files and `diff_files`.

use super::*;

fn e(call: usize, op: &str, inputs: &[&str], output: &str) -> TraceEntry {
    TraceEntry {
        call,
        op: op.into(),
        algorithm: "x".into(),
        inputs: inputs.iter().map(|s| s.to_string()).collect(),
        output: output.into(),
        ..Default::default()
    }
}

#[test]
fn names_the_first_op_whose_output_differs_with_equal_inputs() {
    let a = vec![
        e(0, "matmul", &["a", "b"], "c"),
        e(1, "softmax", &["c"], "d"),
    ];
    let b = vec![
        e(0, "matmul", &["a", "b"], "c2"),
        e(1, "softmax", &["c2"], "d2"),
    ];
    let d = first_divergence(&a, &b).unwrap();
    assert_eq!(
        (d.call, d.op.as_str(), d.inputs_matched),
        (0, "matmul", true)
    );
    assert!(first_divergence(&a, &a).is_none());
}

#[test]
fn a_changed_algorithm_is_named_as_such() {
    let a = vec![e(0, "matmul", &["a", "b"], "c")];
    let mut b = a.clone();
    b[0].algorithm = "tiled32".into();
    b[0].output = "c2".into();
    let d = first_divergence(&a, &b).unwrap();
    assert!(
        d.explanation.contains("algorithm changed (x vs tiled32)"),
        "{}",
        d.explanation
    );
    assert!(!d.explanation.contains("nondeterministic"));
    let mut c = a.clone();
    c[0].inputs.push("extra".into());
    let d = first_divergence(&a, &c).unwrap();
    assert!(d.explanation.contains("2 vs 3 inputs"), "{}", d.explanation);
}

#[test]
fn differing_inputs_point_outside_the_ops() {
    let a = vec![
        e(0, "matmul", &["a", "b"], "c"),
        e(1, "softmax", &["x"], "d"),
    ];
    let b = vec![
        e(0, "matmul", &["a", "b"], "c"),
        e(1, "softmax", &["y"], "d2"),
    ];
    let d = first_divergence(&a, &b).unwrap();
    assert!(!d.inputs_matched && d.explanation.contains("input 0"));
}

#[test]
fn digests_are_value_sensitive() {
    assert_ne!(
        trace_digest((&[0.0f32][..]).into()),
        trace_digest((&[-0.0f32][..]).into())
    );
    assert_eq!(
        trace_digest((&[1i64, 2][..]).into()),
        trace_digest(TraceArg::I64(&[1, 2]))
    );
    assert_ne!(
        trace_digest(TraceArg::Bool(&[true])),
        trace_digest(TraceArg::Bool(&[false]))
    );
}

use proptest::prelude::*;

fn case(name: &str, output: &str) -> CaseTraces {
    let e = |call, output: &str| TraceEntry {
        call,
        op: "matmul".into(),
        algorithm: "tiled".into(),
        inputs: vec!["a".into(), "b".into()],
        output: output.into(),
        ..Default::default()
    };
    CaseTraces {
        name: name.into(),
        backend: "cpu".into(),
        runs: vec![vec![e(0, "c"), e(1, output)]],
    }
}

fn file(cases: Vec<CaseTraces>) -> TraceFile {
    TraceFile {
        version: 1,
        platform: serde_json::json!({"cpu": "x"}),
        cases,
    }
}

fn bytes(f: &TraceFile) -> Vec<u8> {
    serde_json::to_vec_pretty(f).unwrap()
}

#[test]
fn cases_on_one_side_only_are_reported() {
    let (empty, one) = (file(vec![]), file(vec![case("k/a", "d")]));
    let d = diff_files(&empty, &one);
    assert_eq!(d.len(), 1, "{d:?}");
    let why = &d[0].2.as_ref().unwrap().explanation;
    assert!(
        why.contains("no trace of this case in the first file"),
        "{why}"
    );
    let d = diff_files(&one, &empty);
    assert!(d[0].2.as_ref().unwrap().explanation.contains("second file"));
    assert!(diff_files(&one, &one)[0].2.is_none());
    let other = file(vec![case("k/a", "e")]);
    assert!(diff_files(&one, &other)[0].2.is_some());
}

#[test]
fn bad_files_are_rejected_with_the_reason() {
    let err = |f: &TraceFile| format!("{:#}", TraceFile::parse(&bytes(f)).unwrap_err());
    let mut f = file(vec![case("k/a", "d")]);
    TraceFile::parse(&bytes(&f)).unwrap();
    f.version = 99;
    assert!(
        err(&f).contains("unsupported trace version 99"),
        "{}",
        err(&f)
    );
    let f = file(vec![case("k/a", "d"), case("k/a", "e")]);
    assert!(
        err(&f).contains("case k/a [cpu] appears twice"),
        "{}",
        err(&f)
    );
    let mut c = case("k/a", "d");
    c.runs.clear();
    assert!(err(&file(vec![c])).contains("has no runs"));
}

fn valid() -> Vec<u8> {
    bytes(&file(vec![case("k/a", "d"), case("k/b", "e")]))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn random_bytes_are_an_error(b in proptest::collection::vec(any::<u8>(), 0..300)) {
        prop_assert!(TraceFile::parse(&b).is_err());
    }

    #[test]
    fn truncations_are_an_error(n in 0..10_000usize) {
        let v = valid();
        prop_assert!(TraceFile::parse(&v[..n % v.len()]).is_err());
    }

    #[test]
    fn bit_flips_never_panic(at in 0..10_000usize, bit in 0..8u8) {
        let mut v = valid();
        let i = at % v.len();
        v[i] ^= 1 << bit;
        if let Ok(f) = TraceFile::parse(&v) {
            let _ = diff_files(&f, &f);
        }
    }
}

#[test]
fn an_op_whose_arguments_differ_is_not_called_nondeterministic() {
    let x = |alpha: &str, out: &str| TraceEntry {
        op: "aten::add_.Tensor".into(),
        phase: "forward".into(),
        source: "lr.py:10".into(),
        inputs: vec!["a".into(), "b".into()],
        args: format!("alpha={alpha}"),
        output: out.into(),
        ..Default::default()
    };
    let d = first_divergence(&[x("-0.1007", "c")], &[x("-0.1004", "d")]).unwrap();
    assert!(
        d.explanation
            .ends_with("lr.py:10 — inputs identical, arguments differ: alpha -0.1007 vs -0.1004"),
        "{}",
        d.explanation
    );
}

#[test]
fn place_is_the_explanation_without_its_verdict() {
    let x = |out: &str| TraceEntry {
        op: "aten::mm".into(),
        phase: "forward".into(),
        module: "Net.fc1".into(),
        source: "t.py:3".into(),
        inputs: vec!["a".into()],
        output: out.into(),
        ..Default::default()
    };
    let d = first_divergence(&[x("b")], &[x("c")]).unwrap();
    assert_eq!(
        d.place(),
        "step 0, rank 0, aten::mm (call 1 of aten::mm) in module Net.fc1 (forward), t.py:3"
    );
    assert!(d
        .explanation
        .ends_with("inputs identical, output differs: this op is nondeterministic"));
}

#[test]
fn an_op_of_identical_inputs_under_a_varied_condition_is_not_called_nondeterministic() {
    use crate::vary::{Variation, Varied};
    let x = |out: &str| TraceEntry {
        op: "aten::mm".into(),
        phase: "forward".into(),
        inputs: vec!["a".into()],
        output: out.into(),
        ..Default::default()
    };
    let d = first_divergence(&[x("b")], &[x("c")]).unwrap();
    let threads = Varied {
        variation: Variation::Threads,
        values: ["1".into(), "2".into()],
    };
    let under = d.clone().under(vec![threads.clone()]);
    assert!(!under.explanation.contains("nondeterministic"), "{under:?}");
    assert!(under
        .explanation
        .contains("output differs at 1 vs 2 threads"));
    assert_eq!(under.varied, std::slice::from_ref(&threads));
    // Nothing varied: unchanged. Inputs that already differed: unchanged.
    assert_eq!(d.clone().under(Vec::new()), d);
    let mut upstream = d.clone();
    upstream.inputs_matched = false;
    assert_eq!(upstream.clone().under(vec![threads]), upstream);
}

#[test]
fn a_random_op_is_judged_by_its_generator_state_before_the_call() {
    let x = |out: &str, gen: &str| TraceEntry {
        op: "aten::bernoulli_.float".into(),
        phase: "forward".into(),
        module: "Net.drop".into(),
        inputs: vec!["a".into()],
        output: out.into(),
        generator: gen.into(),
        ..Default::default()
    };
    let cpu = "torch's default CPU generator";
    let (a, b) = (x("o1", &format!("{cpu}|aa")), x("o2", &format!("{cpu}|bb")));
    let d = first_divergence(std::slice::from_ref(&a), &[b]).unwrap();
    assert!(
        d.explanation.ends_with(&format!(
            "inputs identical, generator state differs before the call ({cpu}): seeded differently in the two runs"
        )),
        "{d:?}"
    );
    assert_eq!(d.generator.as_deref(), Some(cpu));
    // The same state before the call and another output: the op itself.
    let d = first_divergence(&[a], &[x("o2", &format!("{cpu}|aa"))]).unwrap();
    assert!(d.explanation.ends_with(
        "inputs and generator state identical, output differs: this op is nondeterministic"
    ));
    assert_eq!(d.generator, None);
}

#[test]
fn an_op_that_read_a_value_its_record_does_not_show_is_not_called_nondeterministic() {
    let x = |out: &str, input: &str, hides: bool| TraceEntry {
        op: "aten::index_put_".into(),
        inputs: vec![input.into()],
        output: out.into(),
        phase: "forward".into(),
        source: "t.py:3".into(),
        hides_read: hides,
        ..TraceEntry::default()
    };
    let d = first_divergence(
        &[x("f32[8]:aa", "i64[2]:cc", true)],
        &[x("f32[8]:bb", "i64[2]:cc", true)],
    )
    .expect("a divergence");
    assert!(
        d.explanation
            .contains("inputs identical as recorded, output differs: it writes in place"),
        "{}",
        d.explanation
    );
    assert!(
        !d.explanation.contains(NONDETERMINISTIC),
        "{}",
        d.explanation
    );
    let d = first_divergence(
        &[x("f32[8]:aa", "f32[64]:-", false)],
        &[x("f32[8]:bb", "f32[64]:-", false)],
    )
    .expect("a divergence");
    assert!(
        d.explanation.contains("output differs: input 0 not hashed"),
        "{}",
        d.explanation
    );
    let d = first_divergence(
        &[x("f32[8]:aa", "i64[2]:cc", false)],
        &[x("f32[8]:bb", "i64[2]:cc", false)],
    )
    .expect("a divergence");
    assert!(
        d.explanation.ends_with(NONDETERMINISTIC),
        "{}",
        d.explanation
    );
}
