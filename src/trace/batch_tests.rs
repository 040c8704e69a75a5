//! Tests of [`super::first_variant`] on synthetic traces of a tiny serving loop (a layer norm
//! and a matmul per batch, module `Model.lm_head`) and of the label parser.

use super::*;

/// A forward record of `module` at `serve.py:88`.
fn rec(module: &str, op: &str, ins: &[String], outs: &[String]) -> TraceEntry {
    TraceEntry {
        op: op.into(),
        inputs: ins.to_vec(),
        output: outs.join(";"),
        phase: "forward".into(),
        module: module.into(),
        source: "serve.py:88".into(),
        ..TraceEntry::default()
    }
}

fn numbered(mut t: Vec<TraceEntry>) -> Vec<TraceEntry> {
    t.iter_mut().enumerate().for_each(|(i, e)| e.call = i);
    t
}

/// `f32[rows*b,4]` holding requests `first..first+b` of value `v`: whole at rows 1 per request,
/// else sliced into `n` labels of `b/n` requests each (digests `v<request>` joined).
fn label(v: &str, first: usize, b: usize, n: usize) -> String {
    let per = b / n;
    let d: Vec<String> = (0..n)
        .map(|s| {
            (first + s * per..first + (s + 1) * per)
                .map(|r| format!("{v}{r}"))
                .collect::<Vec<_>>()
                .join("+")
        })
        .collect();
    if n == 1 {
        format!("f32[{b},4]:{}", d[0])
    } else {
        format!("f32[{b},4]/{n}:{}", d.join(","))
    }
}

const W: &str = "f32[4,4]:w";

/// The trace of serving `requests` at batch size `b` (sliced into `n` when n > 1): per batch, a
/// layer norm and an addmm in `Model.lm_head`, and a sum over the batch.
fn serve(requests: usize, b: usize, n: usize) -> Vec<TraceEntry> {
    let mut t = Vec::new();
    for first in (0..requests).step_by(b) {
        // A last partial batch is not sliced unless n divides it.
        let b = b.min(requests - first);
        let n = if b.is_multiple_of(n) { n } else { 1 };
        let x = label("x", first, b, n);
        let y = label("y", first, b, n);
        t.push(rec(
            "Model",
            "aten::native_layer_norm",
            &[x],
            std::slice::from_ref(&y),
        ));
        let z = label("z", first, b, n);
        t.push(rec(
            "Model.lm_head",
            "aten::addmm",
            &[W.into(), y],
            std::slice::from_ref(&z),
        ));
        // A reduction over the batch: its result does not scale (differs by design).
        t.push(rec("", "aten::sum", &[z], &[format!("f32[]:s{first}-{b}")]));
        t.push(rec(
            "",
            "aten::mul.Tensor",
            &[format!("f32[]:s{first}-{b}")],
            &[format!("f32[]:m{first}-{b}")],
        ));
    }
    numbered(t)
}

fn replace(t: &mut [TraceEntry], op: &str, from: &str, to: &str) {
    for e in t.iter_mut().filter(|e| e.op == op) {
        e.output = e.output.replace(from, to);
        e.inputs.iter_mut().for_each(|l| *l = l.replace(from, to));
    }
}

#[test]
fn identical_streams_have_no_batch_variant_op() {
    assert_eq!(
        first_variant(&serve(8, 1, 1), &serve(8, 8, 8), 8, [1, 8]),
        None
    );
    // More requests in the smaller run than the larger covers: not compared.
    assert_eq!(
        first_variant(&serve(11, 1, 1), &serve(8, 8, 8), 8, [1, 8]),
        None
    );
    // Two batches of 8 against sixteen of 1, and batch 2 against batch 8 (n = 4).
    assert_eq!(
        first_variant(&serve(16, 1, 1), &serve(16, 8, 8), 8, [1, 8]),
        None
    );
    assert_eq!(
        first_variant(&serve(16, 2, 1), &serve(16, 8, 4), 4, [2, 8]),
        None
    );
}

#[test]
fn a_differing_output_slice_is_the_origin_with_its_request() {
    let mut large = serve(16, 8, 8);
    replace(&mut large[4..], "aten::addmm", "z11", "Z11"); // the second batch's slice 3
    let d = first_variant(&serve(16, 1, 1), &large, 8, [1, 8]).unwrap();
    assert_eq!(
        (d.call, d.op.as_str(), d.inputs_matched),
        (5, "aten::addmm", true)
    );
    assert_eq!(
        d.explanation,
        "first batch-variant op: step 0, rank 0, aten::addmm (call 2 of aten::addmm) in module \
         Model.lm_head (forward), serve.py:88 — inputs identical for request 11, output differs \
         (batch 1 vs 8)"
    );
    assert_eq!(
        d.place(),
        "step 0, rank 0, aten::addmm (call 2 of aten::addmm) in module Model.lm_head (forward), \
         serve.py:88"
    );
    // Batch 2 against 8: slice 1 of the first call holds requests 2 and 3.
    let mut large = serve(8, 8, 4);
    replace(&mut large, "aten::addmm", "z2+z3", "z2+Z3");
    let d = first_variant(&serve(8, 2, 1), &large, 4, [2, 8]).unwrap();
    assert!(
        d.explanation
            .contains("for request 2, output differs (batch 2 vs 8)"),
        "{}",
        d.explanation
    );
}

#[test]
fn a_differing_input_is_a_receiver() {
    let mut small = serve(8, 1, 1);
    small[4 * 6].inputs[0] = "f32[1,4]:changed".into(); // request 6's layer norm input
    let d = first_variant(&small, &serve(8, 8, 8), 8, [1, 8]).unwrap();
    assert_eq!(
        (d.call, d.op.as_str(), d.inputs_matched),
        (0, "aten::native_layer_norm", false)
    );
    assert!(
        d.explanation.starts_with(
            "step 0, rank 0, aten::native_layer_norm (call 1 of aten::native_layer_norm) in \
             module Model (forward), serve.py:88 received a difference: inputs already differ for \
             request 6 (batch 1 vs 8: input 0)"
        ),
        "{}",
        d.explanation
    );
    // A parameter (not sliced) that differs is a differing input too.
    let mut large = serve(8, 8, 8);
    large[1].inputs[0] = "f32[4,4]:w2".into();
    let d = first_variant(&serve(8, 1, 1), &large, 8, [1, 8]).unwrap();
    assert_eq!((d.op.as_str(), d.inputs_matched), ("aten::addmm", false));
    assert!(
        d.explanation.contains("request 0 (batch 1 vs 8: input 0)"),
        "{}",
        d.explanation
    );
}

#[test]
fn tensors_that_do_not_scale_are_not_compared() {
    let (small, mut large) = (serve(8, 1, 1), serve(8, 8, 8));
    // A parameter whose first dimension is a multiple of n is sliced but has the small run's
    // whole shape, and a result that does not scale is a reduction: neither is compared.
    large[1].inputs[0] = "f32[16,4]/8:a,b,c,d,e,f,g,h".into();
    let mut small2 = small.clone();
    small2
        .iter_mut()
        .filter(|e| e.op == "aten::addmm")
        .for_each(|e| e.inputs[0] = "f32[16,4]:w".into());
    assert_eq!(first_variant(&small2, &large, 8, [1, 8]), None);
    // The sum and the mul after it differ (f32[] over 8 rows against over 1) and are skipped;
    // a label that is not hashed or does not parse is skipped too.
    large[0].output = "f32[8,4]:-".into();
    large[0].inputs.push("not a label".into());
    assert_eq!(first_variant(&small2, &large, 8, [1, 8]), None);
    // A record with no comparable tensor at all (a last partial batch: 4 rows, not sliced).
    let mut partial = serve(12, 8, 8);
    partial[4..].iter_mut().for_each(|e| {
        e.inputs
            .iter_mut()
            .for_each(|l| *l = l.replace("f32[4,4]:w", "f32[4,4]:other"));
        e.output = "f32[4,4]:junk".into()
    });
    assert_eq!(first_variant(&serve(12, 1, 1), &partial, 8, [1, 8]), None);
}

#[test]
fn an_op_one_batch_size_does_not_make_is_not_compared() {
    // At one batch size an op can be a view where the other makes a copy: a call of the
    // smaller run without the large run's record is not comparable there, not a divergence.
    let mut small = serve(8, 1, 1);
    small.remove(4 * 7 + 1); // request 7's addmm
    assert_eq!(
        first_variant(&numbered(small), &serve(8, 8, 8), 8, [1, 8]),
        None
    );
    // What is still there is still compared: request 6's addmm, planted.
    let mut small = serve(8, 1, 1);
    small.remove(4 * 7 + 1);
    small[4 * 6 + 1].output = "f32[1,4]:planted".into();
    let d = first_variant(&numbered(small), &serve(8, 8, 8), 8, [1, 8]).unwrap();
    assert!(d.inputs_matched, "{d:?}");
    assert!(d.explanation.contains("request 6"), "{}", d.explanation);
}

#[test]
fn an_op_called_twice_per_batch_aligns_call_by_call() {
    // A block adds twice per call (`x + attn`, `x + mlp`): k = 2.
    let block = |requests: usize, b: usize, n: usize| {
        let mut t = Vec::new();
        for first in (0..requests).step_by(b) {
            let x = label("x", first, b, n);
            t.push(rec(
                "Model",
                "aten::native_layer_norm",
                std::slice::from_ref(&x),
                &[label("y", first, b, n)],
            ));
            for v in ["a", "m"] {
                t.push(rec(
                    "Model.block",
                    "aten::add.Tensor",
                    std::slice::from_ref(&x),
                    &[label(v, first, b, n)],
                ));
            }
        }
        numbered(t)
    };
    let small = block(16, 1, 1);
    assert_eq!(first_variant(&small, &block(16, 8, 8), 8, [1, 8]), None);
    let mut large = block(16, 8, 8);
    replace(&mut large, "aten::add.Tensor", "m10", "M10");
    let d = first_variant(&small, &large, 8, [1, 8]).unwrap();
    assert_eq!((d.call, d.inputs_matched), (5, true));
    assert!(
        d.explanation.contains("(call 4 of aten::add.Tensor)"),
        "{}",
        d.explanation
    );
    assert!(
        d.explanation.contains("for request 10,"),
        "{}",
        d.explanation
    );
}

#[test]
fn calls_made_alike_at_every_batch_size_compare_one_to_one() {
    // Set-up (three weight initialisations, sliced in the larger run) before serving.
    let setup = |n: usize| {
        (0..3)
            .map(|i| {
                let out = if n == 1 {
                    format!("f32[16,4]:u{i}")
                } else {
                    "f32[16,4]/8:a,b,c,d,e,f,g,h".into()
                };
                rec("", "aten::uniform_", &[], &[out])
            })
            .chain([rec("", "aten::arange", &[], &["i64[7]:r".into()])])
            .collect::<Vec<_>>()
    };
    let small = numbered([setup(1), serve(8, 1, 1)].concat());
    let large = numbered([setup(8), serve(8, 8, 8)].concat());
    assert_eq!(first_variant(&small, &large, 8, [1, 8]), None);
    let mut large2 = large.clone();
    large2[3].output = "i64[7]:R".into();
    let d = first_variant(&small, &large2, 8, [1, 8]).unwrap();
    assert_eq!(
        (d.call, d.op.as_str(), d.inputs_matched),
        (3, "aten::arange", true)
    );
    assert!(d.explanation.ends_with("inputs identical, output differs (batch 1 vs 8), in a call made alike at every batch size"), "{}", d.explanation);
}

#[test]
fn labels_parse() {
    let l = parse_label("f32[8,4]/2:ab,cd").unwrap();
    assert_eq!(
        (l.dtype, l.shape.as_slice(), l.slice_rows()),
        ("f32", &[8, 4][..], Some(4))
    );
    assert_eq!(l.digests, Digests::Rows(vec!["ab", "cd"]));
    assert_eq!(parse_label("f32[]:-").unwrap().digests, Digests::Unhashed);
    assert_eq!(
        parse_label("bf16[3]:00ff").unwrap().digests,
        Digests::Whole("00ff")
    );
    for bad in [
        "f32[8,4]/3:a,b,c",
        "f32[8,4]/2:a",
        "f32[]/1:a",
        "f32[8]/0:",
        "[2]:a",
        "f32[2]:",
        "f32[2]:a,b",
        "f32[x]:a",
        "f32[2]/2:a,-",
        "f32(2):a",
    ] {
        assert_eq!(parse_label(bad), None, "{bad}");
    }
}

proptest::proptest! {
    #[test]
    fn the_label_parser_never_panics(s in "\\PC{0,40}") {
        let _ = parse_label(&s);
    }

    #[test]
    fn labels_round_trip(
        dtype in "[a-z][a-z0-9_]{0,5}",
        rest in proptest::collection::vec(0usize..100, 0..4),
        n in 1usize..5,
        per in 1usize..4,
        digests in proptest::collection::vec("[0-9a-f]{1,32}", 4),
        kind in 0u8..3,
    ) {
        let (shape, d) = match kind {
            0 => ([vec![n * per], rest.clone()].concat(), Digests::Rows(digests[..n].iter().map(|s| s.as_str()).collect())),
            1 => (rest.clone(), Digests::Whole(&digests[0])),
            _ => (rest.clone(), Digests::Unhashed),
        };
        let label = Label { dtype: &dtype, shape, digests: d };
        let text = label.to_string();
        proptest::prop_assert_eq!(parse_label(&text), Some(label));
    }
}
