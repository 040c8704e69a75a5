use super::text::{answer, growth_line, lines};
use super::*;
use crate::tensor::DType;

fn sk(v: &[f32]) -> String {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    Sketch::of(DType::F32, &bytes).unwrap().text()
}

/// A record of `op` at `step` reading `inputs` and making one f32[4] result `v` (its label's
/// digest is the values' text, so equal values give equal labels).
fn rec(step: u64, op: &str, inputs: &[&str], v: &[f32], args: &str) -> TraceEntry {
    TraceEntry {
        op: op.into(),
        inputs: inputs.iter().map(|s| s.to_string()).collect(),
        output: label(v),
        step,
        phase: "forward".into(),
        module: "Net".into(),
        source: "t.py:1".into(),
        args: args.into(),
        sketches: vec![sk(v)],
        ..TraceEntry::default()
    }
}

fn label(v: &[f32]) -> String {
    let d: Vec<String> = v.iter().map(|x| format!("{:08x}", x.to_bits())).collect();
    format!("f32[4]:{}", d.join(""))
}

fn up(x: f32, ulps: u32) -> f32 {
    f32::from_bits(x.to_bits() + ulps)
}

/// x → sum (the origin, `origin_ulps` off) → mul (downstream, `later` its result) → step 1.
fn trace(origin_ulps: u32, later: [f32; 4], args: &str) -> Vec<TraceEntry> {
    let x = [1.0, 2.0, 3.0, 4.0];
    let s = [10.0, 10.0, up(10.0, origin_ulps), 10.0];
    let mut t = vec![
        rec(0, "aten::relu", &[&label(&x)], &x, ""),
        rec(0, "aten::sum", &[&label(&x)], &s, args),
        rec(0, "aten::mul", &[&label(&s)], &later, ""),
        rec(1, "aten::relu", &[&label(&x)], &x, ""),
    ];
    for (i, e) in t.iter_mut().enumerate() {
        e.call = i;
    }
    t
}

const LATER: [f32; 4] = [20.0, 20.0, 20.0, 20.0];

#[test]
fn a_few_ulps_at_the_origin_and_after_is_within_noise_with_its_growth() {
    let later = [20.0, 20.0, up(20.0, 3), 20.0];
    let j = classify_noise(&trace(0, LATER, ""), &trace(2, later, ""));
    assert_eq!(j.classification, "within-noise", "{j:#?}");
    let origin = j.origin.as_ref().unwrap();
    assert!(origin.at.contains("aten::sum"), "{origin:?}");
    assert_eq!(origin.judgement, "within-noise");
    assert!(
        origin.why.contains("threshold 8 × ε(f32)"),
        "{}",
        origin.why
    );
    assert_eq!(j.differing, 2);
    assert!(
        j.largest_at.as_deref().unwrap().contains("aten::mul"),
        "{j:?}"
    );
    assert_eq!(j.growth.len(), 2);
    let g = &j.growth[0];
    assert_eq!(
        (g.step, g.records, g.differing, g.max_ulp),
        (0, 3, 2, Some(3))
    );
    assert!(g.max_rel.unwrap() > 0.0 && g.max_rel == j.largest_rel);
    assert_eq!((j.growth[1].differing, j.growth[1].max_rel), (0, None));
    let line = growth_line(&j.growth);
    assert!(
        line.ends_with("(differing/records): 0 2.9e-7 (2/3), 1 - (0/1)"),
        "{line}"
    );
    let line = answer(&j, 4);
    assert!(
        line.contains("; it grew to 2.9e-7 through step 0, rank 0, aten::mul")
            && line.ends_with("(amplified, not a change); 2 op calls differ"),
        "{line}"
    );
    // Where the largest difference is at an origin, nothing grew.
    let j = classify_noise(&trace(0, LATER, ""), &trace(2, LATER, ""));
    let line = answer(&j, 4);
    assert!(
        line.ends_with("; it grew no further: largest relative difference 1.9e-7 at step 0, rank 0, aten::sum (call 1 of aten::sum) in module Net (forward), t.py:1; 1 op call differs"),
        "{line}"
    );
}

#[test]
fn a_changed_argument_at_identical_inputs_is_beyond_noise_and_named() {
    let j = classify_noise(
        &trace(0, LATER, "eps=1e-05,dim=[0, 1]"),
        &trace(1, LATER, "eps=0.001,dim=[0, 1]"),
    );
    assert_eq!(j.classification, "beyond-noise");
    let v = j.first_beyond_noise.unwrap();
    assert!(v.at.contains("aten::sum"), "{v:?}");
    assert_eq!(
        v.why,
        "same inputs, different arguments: eps 1e-05 vs 0.001"
    );
}

#[test]
fn an_origin_past_its_threshold_is_still_beyond_noise() {
    // 1 % at an op of identical inputs.
    let j = classify_noise(&trace(0, LATER, ""), &trace(1 << 17, LATER, ""));
    assert_eq!(j.classification, "beyond-noise");
    let v = j.first_beyond_noise.as_ref().expect("beyond");
    assert!(
        v.at.contains("aten::sum") && v.why.contains("relative difference"),
        "{v:?}"
    );
    assert!(answer(&j, 4).starts_with("beyond noise: first at step 0, rank 0, aten::sum"));
}

/// One ULP at the origin, then a jump of 10 % at the receiver `aten::mul`: far past the
/// allowance for the growth so far.
fn jump(args: &str) -> (Vec<TraceEntry>, Vec<TraceEntry>) {
    let mut b = trace(1, [20.0, 22.0, 20.0, 20.0], "");
    b[2].args = args.into();
    (trace(0, LATER, ""), b)
}

#[test]
fn a_receiver_past_its_allowance_with_matching_arguments_is_amplified_not_beyond_noise() {
    let (a, b) = jump("");
    let j = classify_noise(&a, &b);
    assert_eq!(j.classification, "within-noise", "{j:#?}");
    assert_eq!(j.first_beyond_noise, None, "{j:#?}");
    assert_eq!(j.origin.as_ref().unwrap().judgement, "within-noise");
    assert_eq!(j.amplified, 1, "{j:#?}");
    let v = j.largest_amplified.as_ref().expect("an amplified receiver");
    assert_eq!(v.judgement, "amplified");
    assert!(v.at.contains("aten::mul"), "{v:?}");
    assert!(
        v.why.contains("its inputs already differ")
            && v.why.ends_with(
                "amplified: past the allowance only because the values it reads already differ, \
                 its arguments match (no fp64 replay of its own step)"
            ),
        "{}",
        v.why
    );
    assert!(v.allowed.unwrap() < v.rel.unwrap(), "{v:?}");
    assert_eq!(j.largest_origin_rel.map(|r| r < 1e-6), Some(true), "{j:?}");
    // The overall answer: within noise, grown through the amplified receiver.
    let text = lines(&j, &j.growth);
    assert!(
        text[0].starts_with("origin within noise: relative difference"),
        "{text:?}"
    );
    let line = &text[1];
    assert!(
        line.starts_with(
            "within noise: every difference starts at ops within rounding noise (first: step 0, \
             rank 0, aten::sum (call 1 of aten::sum) in module Net (forward), t.py:1); it grew to 9.1e-2 \
             through step 0, rank 0, aten::mul (call 1 of aten::mul) in module Net (forward), t.py:1 \
             (amplified, not a change); 2 op calls differ, 1 amplified past its allowance"
        ),
        "{line}"
    );
    assert!(!text.join("\n").contains("beyond"), "{text:?}");
}

#[test]
fn a_receiver_past_its_allowance_with_different_arguments_is_still_beyond_noise() {
    let (a, b) = jump("other=1.1");
    let j = classify_noise(&a, &b);
    assert_eq!(j.classification, "beyond-noise", "{j:#?}");
    let v = j.first_beyond_noise.as_ref().expect("beyond");
    assert!(v.at.contains("aten::mul"), "{v:?}");
    assert!(
        v.why.contains("inputs already differ")
            && v.why.ends_with("its arguments differ: other (none) vs 1.1"),
        "{}",
        v.why
    );
    assert_eq!((j.amplified, j.largest_amplified.as_ref()), (0, None));
    let line = answer(&j, 4);
    assert!(
        line.starts_with("beyond noise: first at step 0, rank 0, aten::mul"),
        "{line}"
    );
}

#[test]
fn a_replayed_receiver_is_beyond_noise_only_when_its_own_step_is() {
    let (a, b) = jump("");
    let own = |beyond: bool, verdict: &str| OwnStep {
        index: 2,
        beyond,
        verdict: verdict.into(),
    };
    let j = classify_noise_with(
        &a,
        &b,
        Some(&own(true, "B is beyond noise, A within: A is closer")),
    );
    let v = j.first_beyond_noise.as_ref().expect("beyond");
    assert!(v.at.contains("aten::mul"), "{v:?}");
    assert!(
        v.why.ends_with(
            "its own step is beyond noise; fp64 replay on each side's own inputs: B is beyond \
             noise, A within: A is closer"
        ),
        "{}",
        v.why
    );
    let j = classify_noise_with(&a, &b, Some(&own(false, "both within noise; A is closer")));
    let v = j.largest_amplified.as_ref().expect("amplified");
    assert!(
        v.why.ends_with(
            "its arguments match; fp64 replay on each side's own inputs: both within noise; A \
             is closer"
        ),
        "{}",
        v.why
    );
    // A replay of another record, or of an origin, changes nothing.
    let j = classify_noise_with(
        &a,
        &b,
        Some(&OwnStep {
            index: 1,
            ..own(true, "")
        }),
    );
    assert_eq!(
        (j.classification.as_str(), j.amplified),
        ("within-noise", 1)
    );
}

#[test]
fn an_in_place_receiver_past_its_allowance_is_amplified() {
    let (mut a, mut b) = jump("");
    for t in [&mut a, &mut b] {
        t[2].op = "aten::mul_.Tensor".into();
        t[2].inputs = vec![label(&[1.0, 1.0, 1.0, 1.0])];
        t[2].hides_read = true; // a version 4 record: the value it overwrote is not shown
    }
    let j = classify_noise(&a, &b);
    let v = j.largest_amplified.as_ref().expect("amplified");
    assert!(
        v.why
            .contains("it writes in place (the value it overwrote is not in its record)"),
        "{}",
        v.why
    );
    assert_eq!(j.classification, "within-noise");
}

#[test]
fn records_without_sketches_are_not_judged() {
    let strip = |mut t: Vec<TraceEntry>| {
        t.iter_mut().for_each(|e| e.sketches.clear());
        t
    };
    let j = classify_noise(&strip(trace(0, LATER, "")), &strip(trace(2, LATER, "")));
    assert_eq!(
        (j.classification.as_str(), j.not_judged, j.largest_rel),
        ("not-judged", 1, None)
    );
    // An integer result that differs at identical inputs is beyond noise.
    let mut a = trace(0, LATER, "");
    let mut b = trace(0, LATER, "");
    a[1].output = "i64[4]:aa".into();
    b[1].output = "i64[4]:bb".into();
    let j = classify_noise(&a, &b);
    assert!(j.first_beyond_noise.unwrap().why.contains("integer result"));
}

#[test]
fn reduction_lengths_and_thresholds_follow_shapes_and_dtypes() {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert_eq!(
        reduction_length(&s(&["f32[64,2048]:a", "f32[2048,16]:b"]), &["f32[64,16]:c"]),
        2048
    );
    assert_eq!(reduction_length(&s(&["f32[4096]:a"]), &["f32[]:c"]), 4096);
    assert_eq!(
        reduction_length(&s(&["f32[1048576]:a"]), &["f32[1]:c"]),
        1 << 20
    );
    assert_eq!(reduction_length(&[], &[]), 1);
    let t = threshold(DType::F32, 4).unwrap();
    assert_eq!(t, 8.0 * f32::EPSILON as f64 * 2.0);
    assert_eq!(threshold(DType::BF16, 1 << 20), Some(MAX_THRESHOLD));
    assert_eq!(threshold(DType::I64, 4), None);
}

#[test]
fn arguments_split_outside_brackets() {
    assert_eq!(
        arguments("normalized_shape=[16, 4],eps=1e-05,True"),
        [
            ("normalized_shape".to_string(), "[16, 4]".to_string()),
            ("eps".into(), "1e-05".into()),
            ("#2".into(), "True".into())
        ]
    );
    assert!(arguments("").is_empty());
    assert_eq!(
        argument_difference("a=1,b=2", "a=1,c=3"),
        "b 2 vs (none); c (none) vs 3"
    );
}

proptest::proptest! {
    #[test]
    fn argument_parsing_never_panics(a in "[a-z=\\[\\](),0-9.]{0,40}", b in "[a-z=\\[\\](),0-9.]{0,40}") {
        let _ = arguments(&a);
        let d = argument_difference(&a, &b);
        proptest::prop_assert!(a != b || d.is_empty());
    }
}

#[test]
fn an_in_place_op_that_shows_what_it_overwrote_is_an_origin() {
    // A version 5 record lists the tensor mul_ wrote, as it was, among its inputs: identical
    // inputs and an output past τ is beyond noise, not amplified.
    let (mut a, mut b) = jump("");
    for t in [&mut a, &mut b] {
        t[2].op = "aten::mul_.Tensor".into();
        t[2].inputs = vec![label(&[1.0, 1.0, 1.0, 1.0])];
    }
    let j = classify_noise(&a, &b);
    assert_eq!(j.amplified, 0, "{j:#?}");
    let v = j.first_beyond_noise.as_ref().expect("beyond noise");
    assert!(v.at.contains("aten::mul_"), "{v:?}");
}

#[path = "noise_module_tests.rs"]
mod modules;

/// A call only one run makes (an extra `aten::sin` before the op it feeds) is named as where
/// the runs part whichever trace is given first, and the noise line says the traces stop
/// lining up there, not that the difference came from code between traced records.
#[test]
fn a_call_only_the_second_trace_makes_is_found_either_way() {
    let (x, y) = ([1.0, 2.0, 3.0, 4.0], [1.5, 2.0, 3.0, 4.0]);
    let a = vec![
        rec(1, "aten::relu", &[&label(&x)], &x, ""),
        rec(1, "aten::addmm", &[&label(&x)], &x, ""),
    ];
    let mut b = a.clone();
    b.insert(1, rec(1, "aten::sin", &[&label(&x)], &y, ""));
    b[2] = rec(1, "aten::addmm", &[&label(&y)], &y, "");
    for (p, q, says) in [
        (&a, &b, "the other run also calls step 1, rank 0, aten::sin"),
        (&b, &a, "run 0 calls step 1, rank 0, aten::sin"),
    ] {
        let d = super::super::first_divergence(p, q).expect("the traces differ");
        assert!(
            d.explanation.starts_with("control flow diverged: ") && d.explanation.contains(says),
            "{}",
            d.explanation
        );
    }
    let j = classify_noise(&a, &b);
    assert!(j.unaligned, "{j:#?}");
    assert!(
        answer(&j, 3).contains("where the traces stop lining up"),
        "{}",
        answer(&j, 3)
    );
}
