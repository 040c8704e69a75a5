//! The words a divergence's verdict is made of ([`super::first_divergence`]): what it says of
//! an op whose inputs matched and whose output differed, and why.

use super::TraceEntry;

/// How an explanation says that a random op's generator was in another state before the call.
pub const GENERATOR_DIFFERS: &str = "generator state differs before the call";

/// Why, when nothing else is known: the op is deterministic given its generator's state.
pub const SEEDED_DIFFERENTLY: &str = "seeded differently in the two runs";

/// The generator of a random op whose state before the call differs between `x` and `y`
/// (`torch's default CPU generator`), from the records' `who|digest`.
pub(super) fn generator_differs(x: &TraceEntry, y: &TraceEntry) -> Option<String> {
    let (who, a) = x.generator.rsplit_once('|')?;
    let (_, b) = y.generator.rsplit_once('|')?;
    (a != b).then(|| who.to_string())
}

/// How an explanation says that an op's tensor inputs were identical and its other arguments
/// (numbers, shapes, flags) were not.
pub const ARGUMENTS_DIFFER: &str = "arguments differ";

/// How an explanation calls an op whose inputs were identical and whose output differed when
/// nothing else is known: the words [`super::Divergence::under`] replaces.
pub const NONDETERMINISTIC: &str = "this op is nondeterministic";

/// [`NONDETERMINISTIC`] of a `--trace modules` record: a module's output (its forward ran
/// many ops the record does not show, and was given arguments other than tensors, which are
/// not recorded) or a parameter's gradient (made by a loss computed outside the modules, the
/// backward, and whatever changed the gradients before the optimizer step).
pub(super) const NONDETERMINISTIC_MODULE: &str = "an op in this module's forward is \
     nondeterministic, or a number or other non-tensor argument it was given differs \
     (--trace ops names which)";
pub(super) const NONDETERMINISTIC_BACKWARD: &str = "the loss (made outside the traced \
     modules), the backward, or an edit of the gradients before the optimizer step (such as \
     clipping) differs (--trace ops names which)";

/// The words for a record `x` whose inputs matched and whose output differed, nothing else
/// known: [`NONDETERMINISTIC`], or what a `--trace modules` record stands for.
pub(super) fn nondeterministic(x: &TraceEntry) -> &'static str {
    match x.op.as_str() {
        "module output" => NONDETERMINISTIC_MODULE,
        "parameter grad" => NONDETERMINISTIC_BACKWARD,
        _ => NONDETERMINISTIC,
    }
}

/// Where the difference of a record whose inputs already differed came from: code between
/// traced ops; for a `--trace modules` record, code the module records do not cover (a
/// module's own forward between the calls of its children, code outside every module, or,
/// for a gradient's parameter, a change after the last optimizer step).
pub(super) fn between(x: &TraceEntry) -> &'static str {
    match x.op.as_str() {
        "module output" => {
            "code between traced module calls (an enclosing module's own forward, or code \
             outside every module)"
        }
        "parameter grad" => {
            "code between traced module calls (the parameter changed after the last optimizer \
             step, or the gradient's inputs outside every module)"
        }
        _ => "code between traced ops",
    }
}

/// Why a record whose recorded inputs match may still have read a value that differed: an
/// input recorded by dtype and shape only (`f32[4]:-`: over `--trace-max-bytes`, scratch
/// memory), or a partial in-place write whose earlier value the record does not show
/// ([`TraceEntry::hides_read`]). None when every value it read is in its record.
pub(super) fn unseen_input(x: &TraceEntry) -> Option<String> {
    let unhashed: Vec<String> = (x.inputs.iter().enumerate())
        .filter(|(_, label)| label.ends_with(":-"))
        .map(|(i, _)| format!("input {i}"))
        .collect();
    if !unhashed.is_empty() {
        return Some(format!(
            "{} not hashed (dtype and shape only: over --trace-max-bytes, or scratch memory), \
             so the difference may have come in with it",
            unhashed.join(", ")
        ));
    }
    x.hides_read.then(|| {
        "it writes in place into a tensor whose earlier value its record does not show, so \
         the difference may have come in with that tensor (changed where no traced op ran)"
            .to_string()
    })
}
