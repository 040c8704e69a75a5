//! The causes a `--trace modules` verdict gives, by what differs: a buffer or a parameter
//! by name (record version 8), a gradient in a step that recomputed a module, arguments
//! labelled after the forward, and a recomputed module no recorded call encloses.

use super::super::*;
use super::run;

/// The explanation of the first divergence between traces `a` and `b`.
fn explain(a: &[TraceEntry], b: &[TraceEntry]) -> String {
    first_divergence(a, b).expect("a divergence").explanation
}

/// A version 8 module record names its own state: a buffer that differs is named as one, with
/// the causes a buffer has (its own forward in an earlier call; no optimizer step, even past
/// step 0); a parameter as one, with an optimizer step's and not a buffer's.
#[test]
fn a_version_8_record_names_a_buffer_and_gives_only_its_causes() {
    let named = |w: &str, buf: &str, y: &str| {
        let mut t = run(w, buf, "f32[2]:h", y);
        t.iter_mut().for_each(|e| e.step = 2);
        t[0].own = Some(Own::Named {
            params: vec!["weight".into(), "bias".into()],
            buffers: vec!["running_var".into()],
        });
        t
    };
    let a = named("f32[2]:w1", "f32[2]:r1", "f32[2]:y");
    let d = explain(&a, &named("f32[2]:w1", "f32[2]:r2", "f32[2]:y2"));
    assert!(
        d.contains("(its buffer Net.fc.running_var)")
            && d.contains(
                "(its initialization, or a load or edit outside every module, or the module's \
                 own forward in an earlier call (such as BatchNorm's running statistics);"
            ),
        "{d}"
    );
    // Against a version 7 record (a count, as many): the names.
    let mut old = named("f32[2]:w1", "f32[2]:r2", "f32[2]:y2");
    old[0].own = Some(Own::Count(3));
    let d = explain(&old, &a);
    assert!(d.contains("(its buffer Net.fc.running_var)"), "{d}");
    let d = explain(&a, &named("f32[2]:w2", "f32[2]:r1", "f32[2]:y2"));
    assert!(
        d.contains("(its parameter Net.fc.weight)")
            && d.contains("an optimizer step")
            && !d.contains("earlier call"),
        "{d}"
    );
}

/// A gradient that differs from identical inputs names a checkpoint's recomputation among its
/// causes where its step recomputed a module (a recomputation that stops early leaves no record
/// of the module it stopped in), and not where none was.
#[test]
fn a_gradient_names_a_recomputation_where_its_step_had_one() {
    let grads = |g: &str, recomputed: bool| {
        let mut t = run("f32[2]:w", "f32[2]:r", "f32[2]:h", "f32[2]:y");
        t[3].output = g.into();
        if recomputed {
            t[1].phase = "recompute".into();
        }
        t
    };
    for recomputed in [true, false] {
        let d = explain(
            &grads("f32[2]:g1", recomputed),
            &grads("f32[2]:g2", recomputed),
        );
        assert!(
            d.contains("gradient of Net.fc.weight") && d.contains("inputs identical"),
            "{d}"
        );
        assert_eq!(
            d.contains("a checkpoint's recomputation"),
            recomputed,
            "{d}"
        );
    }
}

/// A module record whose only differing inputs were labelled after its forward (keyword
/// arguments, `late`) is not said to have received them: its own forward, or a module it
/// called, may have written into them, as may its caller; a recomputed module no recorded
/// call encloses was given its arguments by a checkpoint's recomputation, not by the program.
#[test]
fn late_arguments_and_recomputed_callers_get_their_own_causes() {
    let late = |h: &str| {
        let mut t = run("f32[2]:w", "f32[2]:r", h, &format!("f32[2]:y{h}"));
        t[0].late = 1;
        t
    };
    let d = explain(&late("f32[2]:h1"), &late("f32[2]:h2"));
    assert!(
        d.contains("has different inputs as labelled after its forward (tensor argument 0)")
            && d.contains("or this module's own forward, or a module it called, writing into them")
            && !d.contains("already received"),
        "{d}"
    );
    let recomputed = |h: &str| {
        let mut t = run("f32[2]:w", "f32[2]:r", h, &format!("f32[2]:y{h}"));
        t[0].phase = "recompute".into();
        t.truncate(1);
        t
    };
    let d = explain(&recomputed("f32[2]:h1"), &recomputed("f32[2]:h2"));
    assert!(
        d.contains("a checkpoint's recomputation in the backward") && !d.contains("DataLoader"),
        "{d}"
    );
}

/// A module given a tensor its enclosing call received as a keyword argument (labelled after
/// that call's forward, so not taken as received at its entry) is said to have it from there,
/// not from code between module calls.
#[test]
fn an_argument_passed_in_as_a_keyword_argument_is_said_to_come_through_it() {
    let keyword = |h: &str| {
        let mut t = run("f32[2]:w", "f32[2]:r", h, &format!("f32[2]:y{h}"));
        (t[1].inputs, t[1].late) = (vec![h.to_string()], 1);
        t[1].output = format!("f32[2]:y{h}");
        t
    };
    let d = explain(&keyword("f32[2]:h1"), &keyword("f32[2]:h2"));
    assert!(
        d.contains("module Net.fc ")
            && d.contains(
                "the divergence comes from what Net was given as its tensor argument 0, which \
                 holds the same bytes (labelled after its forward: a keyword argument)"
            )
            && !d.contains("code between traced module calls"),
        "{d}"
    );
}

/// Under a varied condition, each of the module records' "nothing else known" texts (a
/// module's output, a gradient, a gradient in a step that recomputed a module) gives way to the
/// condition that was varied.
#[test]
fn a_varied_condition_replaces_each_module_records_words() {
    use crate::vary::{Variation, Varied};
    let threads = Varied {
        variation: Variation::Threads,
        values: ["1".into(), "2".into()],
    };
    for (at, recomputed) in [(0, false), (3, false), (3, true)] {
        let t = |out: &str| {
            let mut t = run("f32[2]:w", "f32[2]:r", "f32[2]:h", "f32[2]:y");
            t[at].output = out.into();
            if recomputed {
                t[1].phase = "recompute".into();
            }
            t
        };
        let d = first_divergence(&t("f32[2]:o1"), &t("f32[2]:o2")).expect("a divergence");
        let text = d.under(vec![threads.clone()]).explanation;
        assert!(
            text.contains("output differs at 1 vs 2 threads") && !text.contains("names which"),
            "{text}"
        );
    }
}
