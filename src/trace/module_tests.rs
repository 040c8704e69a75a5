//! `--trace modules` records in a divergence's explanation: what they are, which module
//! received a difference, and which of its inputs (its own state or its arguments).

use super::*;

#[test]
fn a_difference_made_between_module_calls_names_the_outermost_module_that_received_it() {
    // Net's forward adds noise between Net.a and Net.b; Net.b passes it to Net.b.fc. Records
    // are written as forwards return: Net.a, Net.b.fc, Net.b, Net.
    let rec = |module: &str, inputs: &[&str], out: &str| TraceEntry {
        op: "module output".into(),
        inputs: inputs.iter().map(|s| s.to_string()).collect(),
        output: out.into(),
        phase: "forward".into(),
        module: module.into(),
        source: "t.py:3".into(),
        ..TraceEntry::default()
    };
    let run = |h: &str, y: &str| {
        vec![
            rec("Net.a", &["f32[2]:w", "f32[2]:x"], "f32[2]:h"),
            rec(
                "Net.b.fc",
                &["f32[2]:v", &format!("f32[2]:{h}")],
                &format!("f32[2]:{y}"),
            ),
            rec("Net.b", &[&format!("f32[2]:{h}")], &format!("f32[2]:{y}")),
            rec("Net", &["f32[2]:x"], &format!("f32[2]:{y}")),
        ]
    };
    let d = first_divergence(&run("h1", "y1"), &run("h2", "y2")).expect("a divergence");
    assert!(
        d.explanation
            .starts_with("step 0, rank 0, module Net.b (call 1 of Net.b) (forward), t.py:3")
            && d.explanation
                .contains("already received different inputs (input 0)"),
        "{}",
        d.explanation
    );
    // A child that made the difference itself is still the one named.
    let mut b = run("h1", "y1");
    b[1].output = "f32[2]:z".into();
    let d = first_divergence(&run("h1", "y1"), &b).expect("a divergence");
    assert!(
        d.explanation
            .contains("module Net.b.fc (call 1 of Net.b.fc) (forward)"),
        "{}",
        d.explanation
    );
}

#[test]
fn a_module_record_that_differs_is_its_forward_or_backward_not_an_op() {
    let x = |op: &str, out: &str| TraceEntry {
        op: op.into(),
        inputs: vec!["f32[2]:aa".into()],
        output: out.into(),
        phase: "forward".into(),
        module: "Net.fc".into(),
        source: "t.py:3".into(),
        ..TraceEntry::default()
    };
    let words = |op: &str| {
        first_divergence(&[x(op, "f32[2]:bb")], &[x(op, "f32[2]:cc")])
            .expect("a divergence")
            .explanation
    };
    let forward = words("module output");
    assert!(
        forward.ends_with(
            "output differs: an op in this module's forward is nondeterministic, or a number \
             or other non-tensor argument it was given differs, or a random op in it drew \
             from a generator in another state (seeded differently), or state its record does \
             not hold (a non-persistent buffer, a plain attribute, a lazy module's parameters \
             made in this call) (--trace ops names which)"
        ),
        "{forward}"
    );
    let grad = words("parameter grad");
    assert!(
        grad.ends_with(
            "output differs: the loss (made outside the traced modules), the backward, or an \
             edit of the gradients before the optimizer step (such as clipping) differs \
             (--trace ops names which)"
        ),
        "{grad}"
    );
    assert!(words("aten::mm").ends_with(NONDETERMINISTIC));
    // Inputs that already differ: code the records do not cover, said in the level's terms.
    let received = |op: &str| {
        let mut y = x(op, "f32[2]:bb");
        y.inputs = vec!["f32[2]:ab".into()];
        first_divergence(&[x(op, "f32[2]:bb")], &[y])
            .expect("a divergence")
            .explanation
    };
    let forward = received("module output");
    assert!(
        forward.ends_with(
            "the divergence comes from code outside every traced module: what the program \
             passed to Net.fc (its data, such as a DataLoader's order or augmentation, or a \
             value it computed)"
        ),
        "{forward}"
    );
    // Called by an enclosing module: code between the module calls.
    let mut parent = x("module output", "f32[2]:bb");
    parent.module = "Net".into();
    let mut y = x("module output", "f32[2]:bb");
    y.inputs = vec!["f32[2]:ab".into()];
    let d = first_divergence(
        &[x("module output", "f32[2]:bb"), parent.clone()],
        &[y, parent],
    )
    .expect("a divergence");
    assert!(
        d.explanation.ends_with(
            "the divergence comes from code between traced module calls (an enclosing \
             module's own forward, a module that wrote in place into a tensor it was given, a \
             forward hook, or code outside every module)"
        ),
        "{}",
        d.explanation
    );
    let grad = received("parameter grad");
    assert!(
        grad.contains("the parameter changed after the last optimizer step"),
        "{grad}"
    );
    assert!(received("aten::mm").ends_with("the divergence comes from code between traced ops"));
}

/// A `--trace modules` record of `op` in `module` (a module record with `own` of its inputs
/// its own state).
pub(super) fn rec(
    (op, own): (&str, usize),
    module: &str,
    inputs: &[&str],
    out: &str,
) -> TraceEntry {
    TraceEntry {
        op: op.into(),
        inputs: inputs.iter().map(|s| s.to_string()).collect(),
        output: out.into(),
        phase: if op == "parameter grad" {
            "backward"
        } else {
            "forward"
        }
        .into(),
        module: module.into(),
        source: "t.py:3".into(),
        own: (op == "module output").then_some(Own::Count(own)),
        ..TraceEntry::default()
    }
}

/// Net.fc (weight `w`, a bias, buffer `buf`, then its argument `x`; output `y`) called by Net,
/// and the gradient records of Net.fc.weight and of another module's parameter with the same
/// label.
pub(super) fn run(w: &str, buf: &str, x: &str, y: &str) -> Vec<TraceEntry> {
    let (module, grad) = (("module output", 3), ("parameter grad", 0));
    vec![
        rec(module, "Net.fc", &[w, "f32[2]:b", buf, x], y),
        rec(("module output", 0), "Net", &["f32[2]:x"], y),
        rec(grad, "Net.fcx.weight", &[w], "f32[2]:g"),
        rec(grad, "Net.fc.weight", &[w], "f32[2]:g"),
    ]
}

/// A module record's inputs are its own parameters and buffers (`own` of them, version 6),
/// then its arguments: one of its own that differs is named by its gradient record's name, and
/// said to have changed where module records do not look; an argument that no enclosing call
/// received, to come from code outside every module.
#[test]
fn a_module_whose_own_state_differs_names_the_parameter() {
    let a = run("f32[2]:w1", "f32[2]:r1", "f32[2]:h", "f32[2]:y");
    let d = first_divergence(&a, &run("f32[2]:w2", "f32[2]:r2", "f32[2]:h", "f32[2]:y2"));
    let d = d.expect("a divergence");
    assert!(
        d.explanation.contains(
            "already received different inputs (its parameter Net.fc.weight, its parameter or \
             buffer 2) although every earlier traced output matched: the divergence comes from \
             a change to the module's own state where module records do not look"
        ),
        "{}",
        d.explanation
    );
    // At its first call, a buffer cannot have been changed by an earlier one, nor, at step 0,
    // a parameter by an optimizer step.
    assert!(!d.explanation.contains("earlier call"), "{}", d.explanation);
    assert!(
        !d.explanation.contains("optimizer step"),
        "{}",
        d.explanation
    );
    // Two parameters with the same values (one label): not named; a version 5 record (no
    // "own") against a version 6 one: the other's count.
    let mut twins = run("f32[2]:w1", "f32[2]:r1", "f32[2]:h", "f32[2]:y");
    twins[2].module = "Net.fc.bias".into();
    twins[0].own = None;
    let d = first_divergence(
        &twins,
        &run("f32[2]:w2", "f32[2]:r1", "f32[2]:h", "f32[2]:y2"),
    );
    assert!(
        d.expect("a divergence")
            .explanation
            .contains("(its parameter or buffer 0)"),
        "two parameters of one label"
    );
    // Net made Net.fc's argument: code between module calls. Called alone: outside them.
    let b = run("f32[2]:w1", "f32[2]:r1", "f32[2]:h2", "f32[2]:y2");
    let d = first_divergence(&a, &b).expect("a divergence");
    assert!(
        d.explanation.contains("(tensor argument 0)")
            && d.explanation.contains("code between traced module calls"),
        "{}",
        d.explanation
    );
    let d = first_divergence(&a[..1], &b[..1]).expect("a divergence");
    assert!(
        d.explanation.contains("(tensor argument 0)")
            && d.explanation.contains("what the program passed to Net.fc"),
        "{}",
        d.explanation
    );
}

/// A buffer that differs at a module's later call (in the trace, or past step 0, which
/// `--trace-steps` may leave out) may have been changed by its own forward in an earlier one; a
/// module whose state and arguments both differ gets a cause for each.
#[test]
fn a_module_record_gives_a_cause_for_each_kind_of_input_that_differs() {
    let earlier = "or, for a buffer, the module's own forward in an earlier call";
    // Called twice in step 0.
    let again = |w: &str, buf: &str, y: &str| {
        let mut t = run("f32[2]:w0", "f32[2]:r0", "f32[2]:h", "f32[2]:y0");
        t.extend(run(w, buf, "f32[2]:h", y));
        t
    };
    let d = first_divergence(
        &again("f32[2]:w1", "f32[2]:r1", "f32[2]:y"),
        &again("f32[2]:w2", "f32[2]:r2", "f32[2]:y2"),
    );
    let d = d.expect("a divergence");
    assert!(d.explanation.contains(earlier), "{}", d.explanation);
    // Its first traced call, at step 3.
    let late = |w: &str, buf: &str, y: &str| {
        let mut t = run(w, buf, "f32[2]:h", y);
        t.iter_mut().for_each(|e| e.step = 3);
        t
    };
    let d = first_divergence(
        &late("f32[2]:w1", "f32[2]:r1", "f32[2]:y"),
        &late("f32[2]:w2", "f32[2]:r2", "f32[2]:y2"),
    );
    let d = d.expect("a divergence");
    assert!(
        d.explanation.contains(earlier) && d.explanation.contains("an optimizer step"),
        "{}",
        d.explanation
    );
    let a = run("f32[2]:w1", "f32[2]:r1", "f32[2]:h", "f32[2]:y");
    let c = run("f32[2]:w2", "f32[2]:r1", "f32[2]:h2", "f32[2]:y2");
    let d = first_divergence(&a, &c).expect("a divergence");
    assert!(
        d.explanation
            .contains("(its parameter Net.fc.weight, tensor argument 0)")
            && d.explanation.contains(
                "--trace ops names which); and the difference in its tensor arguments from code between \
                 traced module calls"
            ),
        "{}",
        d.explanation
    );
}

/// A module the program calls itself (a feature pass of `Net.fc`), then through its parent in
/// the same step: with the records' call numbers (`entered`, record version 7) the first
/// call's differing argument comes from code outside every module; without them (older
/// records), the parent's later call is taken as the enclosing one.
#[test]
fn a_module_called_by_the_program_is_enclosed_by_no_later_call_of_its_parent() {
    let trace = |x: &str, entered: bool| {
        let fc = ("module output", 2);
        let mut t = vec![
            rec(
                fc,
                "Net.fc",
                &["f32[2]:w", "f32[2]:b", x],
                &format!("f32[2]:{x}y"),
            ),
            rec(
                fc,
                "Net.fc",
                &["f32[2]:w", "f32[2]:b", "f32[2]:h"],
                "f32[2]:y",
            ),
            rec(("module output", 0), "Net", &["f32[2]:x"], "f32[2]:y"),
        ];
        for (e, n) in t.iter_mut().zip([1, 3, 2]) {
            e.entered = entered.then_some(n);
        }
        t
    };
    let d = first_divergence(&trace("f32[2]:a", true), &trace("f32[2]:b", true));
    let d = d.expect("a divergence");
    assert!(
        d.place().contains("call 1 of Net.fc")
            && d.explanation.contains("what the program passed to Net.fc"),
        "{}",
        d.explanation
    );
    let d = first_divergence(&trace("f32[2]:a", false), &trace("f32[2]:b", false));
    assert!(d
        .expect("a divergence")
        .explanation
        .contains("code between traced module calls"));
}

/// A module given a tensor argument that differs, which its forward transforms before its
/// child: with the records' call numbers, its own record (written after the child's) is named,
/// as its inputs were hashed when it was entered, first; without them, the child, whose
/// differing input no enclosing record holds.
#[test]
fn a_parent_whose_argument_already_differed_is_named_before_its_child() {
    let trace = |x: &str, numbered: bool| {
        let mut t = vec![
            rec(
                ("module output", 0),
                "Net.bn",
                &[&format!("f32[2]:h{x}")],
                &format!("f32[2]:y{x}"),
            ),
            rec(
                ("module output", 0),
                "Net",
                &[&format!("f32[2]:{x}")],
                &format!("f32[2]:y{x}"),
            ),
        ];
        for (e, n) in t.iter_mut().zip([2, 1]) {
            e.entered = numbered.then_some(n);
        }
        t
    };
    let d = first_divergence(&trace("a", true), &trace("b", true)).expect("a divergence");
    assert!(
        d.place().contains("module Net (call 1 of Net)")
            && d.explanation.contains("what the program passed to Net "),
        "{}",
        d.explanation
    );
    let d = first_divergence(&trace("a", false), &trace("b", false)).expect("a divergence");
    assert!(d.place().contains("module Net.bn"), "{}", d.explanation);
    // Given as a keyword argument (labelled after Net's forward, which a callee may have
    // written in place): not taken as received at entry.
    let late = |x: &str| {
        let mut t = trace(x, true);
        t[1].late = 1;
        t
    };
    let d = first_divergence(&late("a"), &late("b")).expect("a divergence");
    assert!(d.place().contains("module Net.bn"), "{}", d.explanation);
}

mod causes;
