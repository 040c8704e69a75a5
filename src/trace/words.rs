//! The words a divergence's verdict is made of ([`super::first_divergence`]): what it says of
//! an op whose inputs matched and whose output differed, and why.

use super::own::{Kind, Own};
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
     nondeterministic, or a number or other non-tensor argument it was given differs, or a \
     random op in it drew from a generator in another state (seeded differently), or state its \
     record does not hold (a non-persistent buffer, a plain attribute, a lazy module's \
     parameters made in this call) (--trace ops names which)";
pub(super) const NONDETERMINISTIC_BACKWARD: &str = "the loss (made outside the traced \
     modules), the backward, or an edit of the gradients before the optimizer step (such as \
     clipping) differs (--trace ops names which)";
/// [`NONDETERMINISTIC_BACKWARD`] of a step whose backward recomputed forwards (activation
/// checkpointing): a recomputation that stops early raises, and leaves no record of the module
/// it stopped in.
pub(super) const NONDETERMINISTIC_RECOMPUTED: &str = "the loss (made outside the traced \
     modules), the backward, a checkpoint's recomputation of a forward (module records show it \
     only up to where it stops early), or an edit of the gradients before the optimizer step \
     (such as clipping) differs (--trace ops names which)";

/// The words for a record `x` whose inputs matched and whose output differed, nothing else
/// known: [`NONDETERMINISTIC`], or what a `--trace modules` record stands for (a gradient's,
/// with a recomputation among its causes where the trace `x` is in (`within`) recomputed a
/// module in its step and rank).
pub(super) fn nondeterministic(x: &TraceEntry, within: Option<&[TraceEntry]>) -> &'static str {
    let recomputed = || {
        (within.unwrap_or_default().iter())
            .any(|e| e.phase == "recompute" && e.step == x.step && e.rank == x.rank)
    };
    match x.op.as_str() {
        "module output" => NONDETERMINISTIC_MODULE,
        "parameter grad" if recomputed() => NONDETERMINISTIC_RECOMPUTED,
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
            "code between traced module calls (an enclosing module's own forward, a module \
             that wrote in place into a tensor it was given, a forward hook, or code outside \
             every module)"
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

/// The explanation of record `x` (at `at`) whose inputs already differ from its counterpart
/// `y`'s: which differ, and where such a difference comes from (code between traced ops,
/// [`between`]). A `--trace modules` module record, record `pos` of trace `a` (`within`),
/// names them as the module's own state (by the record's `"own"`: a parameter or a buffer by
/// name, `Net.bn.running_var`; before record version 8, a parameter by its gradient records'
/// name) or its arguments (`input i` in records before version 6), and gives a cause for each
/// kind that differs ([`module_causes`]).
pub(super) fn received(
    at: &str,
    x: &TraceEntry,
    y: &TraceEntry,
    within: Option<(&[TraceEntry], usize)>,
) -> String {
    let module = within.filter(|_| x.op == "module output");
    // (a version 7 record against a version 8 one of as many: the names)
    let own = match (&x.own, &y.own) {
        (Some(Own::Count(n)), Some(named @ Own::Named { .. })) if named.count() == *n => {
            Some(named)
        }
        (o, p) => o.as_ref().or(p.as_ref()),
    };
    let (mut state, mut args, mut kinds) = (Vec::new(), Vec::new(), Kinds::default());
    let (mut late, late_from) = (Vec::new(), x.inputs.len().saturating_sub(x.late));
    for (i, _) in (x.inputs.iter().zip(&y.inputs).enumerate()).filter(|(_, (p, q))| p != q) {
        match (module, own) {
            (Some((a, _)), Some(o)) => match o.kind(i) {
                Some(kind) => state.push(kinds.name(a, x, i, kind)),
                None if i >= late_from => late.push(format!("tensor argument {}", i - o.count())),
                None => args.push(format!("tensor argument {}", i - o.count())),
            },
            _ => args.push(format!("input {i}")),
        }
    }
    if x.inputs.len() != y.inputs.len() {
        args.push(format!("{} vs {} inputs", x.inputs.len(), y.inputs.len()));
    }
    let from = match module {
        Some((a, pos)) => {
            let own = (!state.is_empty()).then_some(kinds);
            module_causes(a, pos, own, !args.is_empty(), !late.is_empty())
        }
        None => between(x).to_string(),
    };
    let only_late = state.is_empty() && args.is_empty();
    state.append(&mut args);
    if only_late {
        return format!(
            "{at} has different inputs as labelled after its forward ({}), though every \
             earlier traced output matched: the divergence comes from {from}",
            late.join(", ")
        );
    }
    state.extend(late.into_iter().map(|l| l + ", labelled after its forward"));
    format!(
        "{at} already received different inputs ({}) although every earlier traced output \
         matched: the divergence comes from {from}",
        state.join(", ")
    )
}

/// Which kinds of a module record's own state differ: parameters, buffers, or either (an
/// input a record before version 8 does not name).
#[derive(Clone, Copy, Default)]
struct Kinds {
    param: bool,
    buffer: bool,
    either: bool,
}

impl Kinds {
    /// The words for the module's own input `i` of record `x` of trace `a`, of `kind`, which
    /// this notes.
    fn name(&mut self, a: &[TraceEntry], x: &TraceEntry, i: usize, kind: Kind<'_>) -> String {
        match kind {
            Kind::Param(n) => {
                self.param = true;
                format!("its parameter {}.{n}", x.module)
            }
            Kind::Buffer(n) => {
                self.buffer = true;
                format!("its buffer {}.{n}", x.module)
            }
            Kind::Either => match own_name(a, x, i) {
                Some(name) => {
                    self.param = true;
                    format!("its parameter {name}")
                }
                None => {
                    self.either = true;
                    format!("its parameter or buffer {i}")
                }
            },
        }
    }
}

/// Where the differing inputs of module record `pos` of trace `a` come from: its own state
/// (`own`: which kinds of it differ) from where module records do not look (a buffer also
/// from the module's own forward in an earlier call, when it had one in the trace or the
/// record is past step 0; a parameter also from an optimizer step, past step 0); its tensor
/// arguments as received (`args`) from its caller ([`caller`]); those labelled after its
/// forward (`late`: keyword arguments) from its caller, or an in-place write by its own
/// forward or a module it called. One cause for each kind that differs.
fn module_causes(
    a: &[TraceEntry],
    pos: usize,
    own: Option<Kinds>,
    args: bool,
    late: bool,
) -> String {
    let mut parts: Vec<String> = own.map(|k| state_cause(a, pos, k)).into_iter().collect();
    let mut add = |cause: String, what: &str| {
        parts.push(match parts.is_empty() {
            true => cause,
            false => format!("the difference in its tensor arguments{what} from {cause}"),
        })
    };
    let given = args || (own.is_none() && !late);
    let by = match given || late {
        true => caller(a, pos),
        false => String::new(),
    };
    if given {
        add(by.clone(), "");
    }
    if late {
        let cause = format!(
            "{by}, or this module's own forward, or a module it called, writing into them in \
             place"
        );
        add(cause, " labelled after its forward");
    }
    parts.join("; and ")
}

/// Where module record `pos` of trace `a` was given its tensor arguments: by code outside
/// every traced module when no module call encloses it ([`super::streams::enclosing`]; in a
/// recomputation, the checkpointed code, whose enclosing module's record a recomputation that
/// stopped early leaves out); through the enclosing call's keyword argument when one holds the
/// same bytes ([`passed_late`]); else by code between module calls.
fn caller(a: &[TraceEntry], pos: usize) -> String {
    let x = &a[pos];
    match super::streams::enclosing(a, pos) {
        None if x.phase == "recompute" => "a checkpoint's recomputation in the backward (the \
             checkpointed code between its module calls, run again, whose enclosing module's \
             record a recomputation that stopped early leaves out), or what was given to the \
             checkpoint"
            .to_string(),
        None => format!(
            "code outside every traced module: what the program passed to {} (its data, \
                 such as a DataLoader's order or augmentation, or a value it computed)",
            x.module
        ),
        Some(e) => match passed_late(&a[e], x) {
            Some(j) => format!(
                "what {m} was given as its tensor argument {j}, which holds the same bytes \
                 (labelled after its forward: a keyword argument): what was passed to {m}, or \
                 its own forward or a module it called writing into it in place",
                m = a[e].module
            ),
            None => between(x).to_string(),
        },
    }
}

/// The number of the tensor argument of enclosing module record `outer` that was labelled
/// after its forward (`late`: a keyword argument) and holds the same bytes as one of `x`'s
/// inputs: the tensor `x` was given came in through `outer`'s keyword argument, which
/// `outer`'s record shows only as it was after its forward.
fn passed_late(outer: &TraceEntry, x: &TraceEntry) -> Option<usize> {
    let own = outer.own.as_ref().map_or(0, Own::count);
    let from = outer.inputs.len().saturating_sub(outer.late).max(own);
    (from..outer.inputs.len())
        .find(|&i| x.inputs.contains(&outer.inputs[i]))
        .map(|i| i - own)
}

/// The cause of a difference in module record `pos`'s own state, of kinds `k` (see
/// [`module_causes`]).
fn state_cause(a: &[TraceEntry], pos: usize, k: Kinds) -> String {
    let x = &a[pos];
    // (after step 0, it ran in steps the trace may leave out: --trace-steps)
    let earlier = x.step > 0
        || (a[..pos].iter()).any(|e| e.op == x.op && e.module == x.module && e.rank == x.rank);
    let buffer = match (earlier, k.buffer || k.either, k.param || k.either) {
        (true, true, true) => {
            ", or, for a buffer, the module's own forward in an earlier call (such as \
             BatchNorm's running statistics)"
        }
        (true, true, false) => {
            ", or the module's own forward in an earlier call (such as BatchNorm's \
             running statistics)"
        }
        _ => "",
    };
    let step = match x.step > 0 && (k.param || k.either) {
        false => "",
        true => " an optimizer step, whose update they do not record,",
    };
    format!(
        "a change to the module's own state where module records do not look (its \
         initialization,{step} or a load or edit outside every module{buffer}; --trace ops \
         names which)"
    )
}

/// The name of input `i` of module record `x`, one of the module's own parameters and buffers
/// (`Net.fc.weight`), when the gradient records of `a` (of the module's direct parameters, on
/// its rank) that had that input's label are that one parameter's; else none (a buffer, or two
/// parameters with the same values, such as zeroed biases, which have the same label).
fn own_name<'a>(a: &'a [TraceEntry], x: &TraceEntry, i: usize) -> Option<&'a str> {
    let label = &x.inputs[i];
    let direct =
        |m: &str| super::streams::is_below(m, &x.module) && !m[x.module.len() + 1..].contains('.');
    let names: std::collections::BTreeSet<&str> = (a.iter())
        .filter(|e| {
            e.op == "parameter grad"
                && e.rank == x.rank
                && e.inputs.first() == Some(label)
                && direct(&e.module)
        })
        .map(|e| e.module.as_str())
        .collect();
    match names.len() {
        1 => names.first().copied(),
        _ => None,
    }
}
