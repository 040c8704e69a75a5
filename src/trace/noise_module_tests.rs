//! The noise judgement of `--trace modules` records, which list less than what made their
//! results, and of records whose inputs it cannot measure.

use super::*;

/// A record of `op` in `module` at step 0 (a gradient's in the backward), reading `inputs` and
/// making one f32[4] result `v`.
fn m(op: &str, module: &str, inputs: &[&str], v: &[f32]) -> TraceEntry {
    let phase = match op {
        "parameter grad" => "backward",
        _ => "forward",
    };
    TraceEntry {
        module: module.into(),
        phase: phase.into(),
        ..rec(0, op, inputs, v, "")
    }
}

/// `--trace modules` records list less than what made their results: a module's, not its
/// callees' state; a gradient's, nothing of the forward and backward. A module whose callee
/// differs, and a gradient after any differing record of its rank, are receivers, not origins;
/// a difference with no origin entered between the records, by an amount none measured: not
/// judged, never "within noise".
#[test]
fn module_records_that_list_less_than_what_made_them_are_not_origins() {
    let run = |w: &str, far: f32| {
        vec![
            m(
                "module output",
                "Net.fc",
                &[w, "f32[4]:x"],
                &[1.0, 2.0, 3.0, far],
            ),
            m("module output", "Net", &["f32[4]:x"], &[1.0, 2.0, 3.0, far]),
            m(
                "parameter grad",
                "Net.fc.bias",
                &["f32[4]:b"],
                &[far, 1.0, 1.0, 1.0],
            ),
        ]
    };
    let j = classify_noise(&run("f32[4]:w1", 4.0), &run("f32[4]:w2", 5.0));
    assert_eq!(j.classification, "not-judged", "{j:#?}");
    assert!(
        j.origin.is_none() && j.first_beyond_noise.is_none(),
        "{j:#?}"
    );
    let why = |k: &str| lines(&j, &j.growth).join("\n").contains(k);
    assert!(why("no differing record had identical inputs"), "{j:#?}");
    // Said in module records' terms: a buffer a forward updates is one way in, not only code
    // the records do not cover.
    assert!(
        why(
            "entered between traced records (code between traced module calls, or a \
             module's forward updating its own buffer"
        ) && !why("code they do not cover"),
        "{j:#?}"
    );
    // Net.fc's own difference made where it is the first: an origin beyond noise.
    let same = |far: f32| run("f32[4]:w1", far);
    let j = classify_noise(&same(4.0), &same(5.0));
    assert_eq!(j.classification, "beyond-noise", "{j:#?}");
    assert!(
        j.origin.as_ref().unwrap().at.contains("module Net.fc "),
        "{j:#?}"
    );
    assert_eq!(j.origin, j.first_beyond_noise);
    // A few ULPs at Net.fc: within noise, counted in records.
    let j = classify_noise(&same(4.0), &same(up(4.0, 1)));
    let answer = answer(&j, 3);
    assert!(
        answer.starts_with("within noise: every difference starts at records within")
            && answer.ends_with("; 3 records differ"),
        "{answer}"
    );
}

/// A gradient does not depend on its sibling gradients: one that differs past its threshold
/// after another within noise is still an origin, beyond noise. A record with an input
/// recorded by dtype and shape only is never an origin; a compiled region's record in a
/// module's call makes that module a receiver.
#[test]
fn sibling_gradients_are_origins_and_unhashed_inputs_and_compiled_callees_are_not() {
    let grads = |b: f32| {
        vec![
            m("module output", "Net", &["f32[4]:x"], &[1.0; 4]),
            m(
                "parameter grad",
                "Net.a",
                &["f32[4]:a"],
                &[1.0, 1.0, 1.0, up(1.0, 1)],
            ),
            m(
                "parameter grad",
                "Net.b",
                &["f32[4]:b"],
                &[1.0, 1.0, 1.0, b],
            ),
        ]
    };
    let mut base = grads(1.0);
    base[1].output = label(&[1.0; 4]);
    base[1].sketches = vec![sk(&[1.0; 4])];
    let j = classify_noise(&base, &grads(1.5));
    assert_eq!(j.classification, "beyond-noise", "{j:#?}");
    assert!(j
        .first_beyond_noise
        .unwrap()
        .at
        .contains("gradient of Net.b"));
    // An unhashed input: a receiver, said so; no origin, so not judged.
    let unhashed = |v: f32| {
        vec![TraceEntry {
            hides_read: true, // as the reader marks it
            ..rec(0, "aten::mm", &["f32[64]:-"], &[1.0, 1.0, 1.0, v], "")
        }]
    };
    let j = classify_noise(&unhashed(1.0), &unhashed(1.5));
    assert!(
        j.origin.is_none() && j.classification == "not-judged",
        "{j:#?}"
    );
    let why = &j.largest_amplified.as_ref().unwrap().why;
    assert!(why.contains("recorded by dtype and shape only"), "{why}");
    // A compiled region's record made in Net's call (given what Net's forward made) differs:
    // Net, whose record lists neither, is a receiver too.
    let compiled = |v: f32, h: &str| {
        vec![
            m("compiled Block", "Net", &[h], &[1.0, 1.0, 1.0, v]),
            m("module output", "Net", &["f32[4]:x"], &[1.0, 1.0, 1.0, v]),
        ]
    };
    let j = classify_noise(&compiled(1.0, "f32[4]:h"), &compiled(1.5, "f32[4]:g"));
    assert!(j.origin.is_none(), "{j:#?}");
    // Records with no counterpart before the first difference: said where it may have begun.
    let mut a = trace(0, LATER, "");
    let mut b = trace(0, [20.0, 20.0, up(20.0, 3), 20.0], "");
    a.insert(0, rec(0, "aten::flash", &["f32[4]:q"], &[1.0; 4], ""));
    b.insert(0, rec(0, "aten::efficient", &["f32[4]:q"], &[1.0; 4], ""));
    (a[3].inputs, b[3].inputs) = (vec!["f32[4]:p".into()], vec!["f32[4]:q".into()]);
    let j = classify_noise(&a, &b);
    assert!(j.unaligned && j.classification == "not-judged", "{j:#?}");
    assert!(
        answer(&j, 4).contains("where the traces stop lining up"),
        "{j:#?}"
    );
}

/// A module that two parents hold is named by the first path that reaches it: called by the
/// other parent, its records are not below that parent's path. With the records' call numbers
/// (`entered`, record version 7) it is still that call's callee, so a parent whose output
/// differs after it is a receiver; without them (older records), the parent is taken as an
/// origin. A call that raised leaves no record, and what it made is no callee of the call
/// recorded next.
#[test]
fn a_modules_callees_are_found_by_call_numbers() {
    let record = |module: &str, input: &str, last: f32, entered: Option<usize>| TraceEntry {
        entered,
        ..m("module output", module, &[input], &[1.0, 1.0, 1.0, last])
    };
    let run = |shared: f32, parent: f32, numbered: bool| {
        let at = |n: usize| numbered.then_some(n);
        vec![
            record("Net.a", "f32[4]:x", 1.0, at(2)),
            record("Net.a", "f32[4]:y", shared, at(4)),
            record("Net.b", "f32[4]:x", parent, at(3)),
            record("Net", "f32[4]:x", parent, at(1)),
        ]
    };
    let j = classify_noise(&run(1.0, 1.0, true), &run(up(1.0, 1), 1.5, true));
    assert_eq!(j.classification, "within-noise", "{j:#?}");
    assert!(
        j.origin
            .as_ref()
            .unwrap()
            .at
            .contains("module Net.a (call 2"),
        "{j:#?}"
    );
    let amplified = j.largest_amplified.as_ref().unwrap();
    assert!(
        amplified.at.contains("module Net")
            && amplified
                .why
                .contains("its non-tensor arguments not recorded"),
        "{j:#?}"
    );
    let j = classify_noise(&run(1.0, 1.0, false), &run(up(1.0, 1), 1.5, false));
    assert_eq!(j.classification, "beyond-noise", "{j:#?}");
    // blocks.0 (1) and its mlp (3) raised (a checkpoint's recomputation stopped early): what
    // they made is not a callee of blocks.1.ln (7), which differs by itself.
    let raised = |act: f32, ln: f32| {
        vec![
            record("Net.blocks.0.attn", "f32[4]:x", 1.0, Some(2)),
            record("Net.blocks.0.mlp.fc", "f32[4]:x", 1.0, Some(4)),
            record("Net.blocks.0.mlp.act", "f32[4]:x", act, Some(5)),
            record("Net.blocks.1.ln", "f32[4]:x", ln, Some(7)),
        ]
    };
    let j = classify_noise(&raised(1.0, 1.0), &raised(up(1.0, 1), 1.5));
    assert_eq!(j.classification, "beyond-noise", "{j:#?}");
    assert!(
        j.first_beyond_noise.unwrap().at.contains("Net.blocks.1.ln"),
        "a call that raised"
    );
}
