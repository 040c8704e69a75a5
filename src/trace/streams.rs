//! The streams of a trace: a program's threads each make their own stream of records (the
//! tracer's `thread` field, empty for the thread that started tracing; see
//! `python/bitexact/_trace/threads.py`), one rank's records hold them interleaved as the threads
//! happened to run, and that interleaving varies from run to run. So the thread is part of the
//! identity records are aligned by ([`Key`]), occurrence numbers count within a thread, the
//! digest of a whole trace hashes the streams one after the other ([`canonical`]), and a run
//! stopped early is cut stream by stream ([`super::ranks::cut_to`]). Nothing here depends on
//! the order in which two threads' records were written.

use super::TraceEntry;
use std::collections::HashMap;

/// The identity of a record without its occurrence number: (rank, thread, step, phase,
/// module, op).
pub type Key<'a> = (u64, &'a str, u64, &'a str, &'a str, &'a str);

/// What two runs' records are aligned by, without the occurrence number: [`Key`], the op as
/// [`aligned_op`] gives it.
pub type Aligned<'a> = (u64, &'a str, u64, &'a str, &'a str, (&'a str, &'a str));

/// An op's name as two runs' records are aligned by: without the in-place variant's
/// underscore, then the overload (`aten::add_.Tensor` and `aten::add.Tensor` both give
/// `("aten::add", ".Tensor")`). torch computes some ops in place without a dispatch mode and
/// out of place under one (autograd's gradient accumulation, the mask of scaled-dot-product
/// attention's math path): the tracer's two drivers record the same tensors under the two
/// names there, and a run traced by each still has its counterpart. The values decide.
pub fn aligned_op(op: &str) -> (&str, &str) {
    let (name, overload) = op.split_at(op.find('.').unwrap_or(op.len()));
    (name.strip_suffix('_').unwrap_or(name), overload)
}

/// The stream a record belongs to: (rank, thread).
pub fn stream(e: &TraceEntry) -> (u64, &str) {
    (e.rank, &e.thread)
}

/// The occurrence number of each record of `trace` among the records with the same key: with
/// the key, the identity two traces are aligned by.
pub fn identities(trace: &[TraceEntry]) -> Vec<usize> {
    occurrences(trace, TraceEntry::key)
}

/// The occurrence number of each record of `trace` among the records with the same
/// [`Aligned`] key: with it, what two runs' records are aligned by.
pub fn alignments(trace: &[TraceEntry]) -> Vec<usize> {
    occurrences(trace, TraceEntry::aligned)
}

/// The occurrence number of each record of `trace` among the records with the same `key`.
fn occurrences<'a, K: Eq + std::hash::Hash>(
    trace: &'a [TraceEntry],
    key: impl Fn(&'a TraceEntry) -> K,
) -> Vec<usize> {
    let mut seen: HashMap<K, usize> = HashMap::new();
    trace
        .iter()
        .map(|e| {
            let n = seen.entry(key(e)).or_insert(0);
            *n += 1;
            *n - 1
        })
        .collect()
}

/// Where each record of `b` is, by what it is aligned by: its [`Aligned`] key and its
/// occurrence number among those records (`lb`: [`alignments`] of `b`).
pub fn aligned_index<'a>(
    b: &'a [TraceEntry],
    lb: &[usize],
) -> HashMap<(Aligned<'a>, usize), usize> {
    (b.iter().zip(lb).enumerate())
        .map(|(j, (e, &l))| ((e.aligned(), l), j))
        .collect()
}

/// The first record of `b`, in its order, with no counterpart in `a` (`la`, `lb`: the
/// traces' [`alignments`]): a call only the other run makes; one before the counterpart of
/// the first record that differs is where the runs parted.
pub fn first_extra(
    a: &[TraceEntry],
    la: &[usize],
    b: &[TraceEntry],
    lb: &[usize],
) -> Option<usize> {
    let in_a = aligned_index(a, la);
    b.iter()
        .zip(lb)
        .position(|(e, &l)| !in_a.contains_key(&(e.aligned(), l)))
}

/// The divergence of a call only `b` makes, `b[k]` (occurrence `occ` of its op): control
/// flow diverged, with the traces' lengths in records (op calls, for an op trace).
pub fn only_in_b(a: &[TraceEntry], b: &[TraceEntry], k: usize, occ: usize) -> super::Divergence {
    let unit = match TraceEntry::is_module_trace(a) {
        true => "records",
        false => "op calls",
    };
    super::Divergence {
        call: b[k].call,
        op: b[k].op.clone(),
        inputs_matched: false,
        explanation: format!(
            "control flow diverged: the other run also calls {}, which run 0 never makes \
             ({} and {} {unit})",
            b[k].describe(occ),
            a.len(),
            b.len()
        ),
        ..super::Divergence::default()
    }
}

/// Which of record `a[pos]`'s outputs differ from those of its counterpart in `b` (same
/// rank, thread, step, phase, module, op and occurrence), one flag per output; None when it
/// has no counterpart.
pub fn outputs_differing(a: &[TraceEntry], b: &[TraceEntry], pos: usize) -> Option<Vec<bool>> {
    let la = alignments(a);
    let x = a.get(pos)?;
    let &j = aligned_index(b, &alignments(b)).get(&(x.aligned(), la[pos]))?;
    let q: Vec<&str> = b[j].output.split(';').collect();
    let differs = |(i, p): (usize, &str)| q.get(i) != Some(&p);
    Some(x.output.split(';').enumerate().map(differs).collect())
}

/// The record to name for a `--trace modules` module record `a[pos]` (counterpart `b[j]`)
/// that already received different inputs: the outermost module call enclosing it whose own
/// counterpart's inputs differ too and that received them first. A module's record is written
/// when its forward returns, after its children's, so the first record to differ is the
/// innermost module the difference reached, but the enclosing call's state and positional
/// arguments were hashed when it was entered, before: with the records' call numbers
/// (`entered`), any of its inputs that differs was there first (`Net` given another batch,
/// which its forward transformed before `Net.bn`: the answer is `Net`), but for those labelled
/// after its forward (`late`: its keyword arguments, which a callee may have written in
/// place), which do not count. Without them (older records, where the
/// enclosing call is a guess), only a call that received the same differing tensor (one of
/// its input labels is one of `a[pos]`'s that differ): `Net.b.fc`, called by `Net.b` with
/// what `Net` made between its calls, gives `Net.b`. Any other record: itself.
pub fn receiver(
    a: &[TraceEntry],
    b: &[TraceEntry],
    (la, index): (&[usize], &HashMap<(Aligned<'_>, usize), usize>),
    (mut pos, mut j): (usize, usize),
) -> (usize, usize) {
    // An enclosing call's inputs as it received them (not those labelled after its forward,
    // in either run) differ; or its runs received different numbers of them.
    let at_entry = |p: usize, q: usize| -> bool {
        let (x, y) = (&a[p], &b[q]);
        let (n, m) = (
            x.inputs.len().saturating_sub(x.late),
            y.inputs.len().saturating_sub(y.late),
        );
        n != m || (x.inputs.iter().zip(&y.inputs).take(n)).any(|(x, y)| x != y)
    };
    if a[pos].op != "module output" {
        return (pos, j);
    }
    loop {
        let Some(k) = enclosing(a, pos) else {
            return (pos, j);
        };
        let Some(&m) = index.get(&(a[k].aligned(), la[k])) else {
            return (pos, j);
        };
        let numbered = a[pos].entered.is_some() && a[k].entered.is_some();
        // (without numbers: one of `a[pos]`'s differing input labels is among `a[k]`'s)
        let received = numbered
            || (a[pos].inputs.iter().zip(&b[j].inputs))
                .any(|(x, y)| x != y && a[k].inputs.contains(x));
        if !received || !at_entry(k, m) {
            return (pos, j);
        }
        (pos, j) = (k, m);
    }
}

/// Whether module `m` is below module `parent` (`Net.b.fc` below `Net.b` and `Net`, not
/// `Net.bc`).
pub fn is_below(m: &str, parent: &str) -> bool {
    (m.strip_prefix(parent)).is_some_and(|rest| rest.starts_with('.'))
}

/// The record of the module call that encloses module record `a[pos]` (`Net.b` of
/// `Net.b.fc`: written after it, in its stream, step and phase), if one was recorded; none for
/// a module called from code outside every module (`model(batch)`). With the records' call
/// numbers (`entered`, record version 7): the first later module record of the stream whose
/// call began before this one's (a call that began before and ended after it enclosed it; one
/// that raised left no record, and the next one out is taken); without them, the first later
/// one of a module whose path holds this one's (which may be a later call, when the program
/// called this module itself first).
pub fn enclosing(a: &[TraceEntry], pos: usize) -> Option<usize> {
    let x = &a[pos];
    (pos + 1..a.len()).find(|&k| {
        let e = &a[k];
        e.op == x.op
            && (e.rank, &e.thread, e.step, &e.phase) == (x.rank, &x.thread, x.step, &x.phase)
            && encloses(e, x)
    })
}

/// Whether module record `outer`'s call enclosed `inner`'s, given that `outer` was written
/// after `inner` in their stream (or, turned around, that `inner` was written between
/// `outer`'s call's start and its record): with call numbers (`entered`, record version 7),
/// when `outer`'s call began first; without them, when `inner`'s module is below `outer`'s.
pub fn encloses(outer: &TraceEntry, inner: &TraceEntry) -> bool {
    match (outer.entered, inner.entered) {
        (Some(o), Some(i)) => o < i,
        _ => is_below(&inner.module, &outer.module),
    }
}

/// How many records of `a` have their counterpart in `b` under the op's other name (in place
/// in one run, out of place in the other: [`aligned_op`]).
pub fn in_place_in_one(a: &[TraceEntry], b: &[TraceEntry]) -> usize {
    let index = aligned_index(b, &alignments(b));
    (a.iter().zip(alignments(a)))
        .filter(|(e, l)| {
            index
                .get(&(e.aligned(), *l))
                .is_some_and(|&j| b[j].op != e.op)
        })
        .count()
}

/// The identity of record `index` of `trace`, as the tracer's capture request reads it
/// (`BITEXACT_TRACE_CAPTURE`): `[rank, thread, step, phase, module, op, occurrence]` in JSON.
pub fn identity_json(trace: &[TraceEntry], index: usize) -> String {
    let e = &trace[index];
    let occ = identities(trace)[index];
    serde_json::json!([e.rank, e.thread, e.step, e.phase, e.module, e.op, occ]).to_string()
}

/// Parses an op identity as [`identity_json`] writes it (and `diff-trace` prints it, for
/// `bitexact run --capture`): a JSON list `[rank, thread, step, phase, module, op,
/// occurrence]` of integers and strings. Returns the identity re-written canonically (what the
/// tracer compares), or what is wrong with it.
pub fn parse_identity(text: &str) -> Result<String, String> {
    const SHAPE: &str = "a JSON list [rank, thread, step, phase, module, op, occurrence], \
                         e.g. [0,\"\",0,\"forward\",\"\",\"aten::mm\",0], as diff-trace prints it";
    let v: serde_json::Value = serde_json::from_str(text.trim())
        .map_err(|e| format!("{text:?} is not JSON ({e}): {SHAPE}"))?;
    let items = v
        .as_array()
        .filter(|a| a.len() == 7)
        .ok_or_else(|| format!("{text:?} is not {SHAPE}"))?;
    let int = |i: usize, what: &str| {
        items[i].as_u64().ok_or_else(|| {
            format!(
                "{text:?}: the {what} (item {}) must be a whole number ≥ 0",
                i + 1
            )
        })
    };
    let string = |i: usize, what: &str| {
        items[i]
            .as_str()
            .ok_or_else(|| format!("{text:?}: the {what} (item {}) must be a string", i + 1))
    };
    let (rank, thread, step) = (int(0, "rank")?, string(1, "thread")?, int(2, "step")?);
    let (phase, module, op) = (string(3, "phase")?, string(4, "module")?, string(5, "op")?);
    let occ = int(6, "occurrence")?;
    if op.is_empty() {
        return Err(format!("{text:?}: the op (item 6) must not be empty"));
    }
    Ok(serde_json::json!([rank, thread, step, phase, module, op, occ]).to_string())
}

/// The record of `b` at the position in its stream that record `pos` of `a` has in its own
/// (the `n`-th record of rank 0's thread `ema#0` in both), if `b`'s stream is that long.
pub fn counterpart(a: &[TraceEntry], b: &[TraceEntry], pos: usize) -> Option<usize> {
    let which = stream(&a[pos]);
    let n = a[..pos].iter().filter(|e| stream(e) == which).count();
    b.iter()
        .enumerate()
        .filter(|(_, e)| stream(e) == which)
        .nth(n)
        .map(|(k, _)| k)
}

/// The records of `trace` stream by stream, in (rank, thread) order (the main thread first),
/// each stream in its own order: the same for two runs whose threads interleaved differently.
pub fn canonical(trace: &[TraceEntry]) -> Vec<&TraceEntry> {
    let mut out: Vec<&TraceEntry> = trace.iter().collect();
    out.sort_by(|x, y| stream(x).cmp(&stream(y))); // stable: each stream keeps its order
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(thread: &str, op: &str, out: &str) -> TraceEntry {
        TraceEntry {
            op: op.into(),
            output: out.into(),
            thread: thread.into(),
            phase: "forward".into(),
            source: "t.py:1".into(),
            ..TraceEntry::default()
        }
    }

    /// Main thread: mm, add; thread `ema#0`: mul, mul; interleaved in two ways.
    fn interleaved(order: &[usize], noise: &str) -> Vec<TraceEntry> {
        let all = [
            rec("", "aten::mm", "a"),
            rec("", "aten::add", "b"),
            rec("ema#0", "aten::mul", "c"),
            rec("ema#0", "aten::mul", noise),
        ];
        let mut t: Vec<TraceEntry> = order.iter().map(|&i| all[i].clone()).collect();
        for (i, e) in t.iter_mut().enumerate() {
            e.call = i;
        }
        t
    }

    /// A record's outputs are compared one by one with its counterpart's (what a capture's
    /// text says of an output identical in the re-runs); a record the other trace lacks has
    /// none.
    #[test]
    fn outputs_differing_flags_each_output_of_the_counterpart() {
        let a = vec![rec("", "aten::split", "f32[2]:a;f32[2]:b")];
        let b = vec![rec("", "aten::split", "f32[2]:a;f32[2]:c")];
        assert_eq!(outputs_differing(&a, &b, 0), Some(vec![false, true]));
        assert_eq!(outputs_differing(&a, &[], 0), None);
    }

    #[test]
    fn threads_interleaved_differently_agree_and_digest_alike() {
        let (a, b) = (
            interleaved(&[0, 2, 1, 3], "d"),
            interleaved(&[2, 3, 0, 1], "d"),
        );
        assert_eq!(crate::trace::first_divergence(&a, &b), None);
        assert_eq!(
            crate::trace::program::digest(&a),
            crate::trace::program::digest(&b)
        );
        assert_ne!(
            crate::trace::program::digest(&a),
            crate::trace::program::digest(&interleaved(&[0, 2, 1, 3], "e"))
        );
        // Whose thread is the record: the second mul of ema#0 in both.
        assert_eq!(counterpart(&a, &b, 3), Some(1));
        assert_eq!(
            identity_json(&a, 3),
            r#"[0,"ema#0",0,"forward","","aten::mul",1]"#
        );
    }

    #[test]
    fn an_op_and_its_in_place_variant_are_counterparts() {
        assert_eq!(aligned_op("aten::add_.Tensor"), ("aten::add", ".Tensor"));
        assert_eq!(aligned_op("aten::add.Tensor"), ("aten::add", ".Tensor"));
        assert_eq!(aligned_op("aten::relu_"), ("aten::relu", ""));
        assert_ne!(aligned_op("aten::add.out"), aligned_op("aten::add_.Tensor"));
        // The mode's out-of-place accumulation against the observer's in place: equal values
        // agree; a differing output is named at that op, with its own name and occurrence.
        let a = interleaved(&[0, 1, 2, 3], "d");
        let mut b = a.clone();
        b[1].op = "aten::add_".into();
        assert_eq!(crate::trace::first_divergence(&a, &b), None);
        assert_eq!((in_place_in_one(&a, &b), in_place_in_one(&a, &a)), (1, 0));
        b[1].output = "x".into();
        let d = crate::trace::first_divergence(&a, &b).expect("differs");
        assert_eq!(
            (d.call, d.op.as_str(), d.inputs_matched),
            (1, "aten::add", true)
        );
        // The identity a capture asks for keeps the op's own name and count.
        b.insert(2, rec("", "aten::add", "y"));
        assert_eq!(identities(&b)[..3], [0, 0, 0]);
        assert_eq!(alignments(&b)[..3], [0, 0, 1]);
    }

    #[test]
    fn identities_parse_back_and_bad_ones_are_named() {
        let t = interleaved(&[0, 2, 1, 3], "d");
        for i in 0..t.len() {
            let id = identity_json(&t, i);
            assert_eq!(parse_identity(&id).unwrap(), id);
        }
        assert_eq!(
            parse_identity(r#" [0, "", 2, "forward", "M.fc", "aten::mm", 3] "#).unwrap(),
            r#"[0,"",2,"forward","M.fc","aten::mm",3]"#
        );
        for (bad, says) in [
            ("aten::mm", "not JSON"),
            ("[0,\"\",0]", "is not a JSON list"),
            (r#"[-1,"",0,"forward","","aten::mm",0]"#, "rank (item 1)"),
            (r#"[0,1,0,"forward","","aten::mm",0]"#, "thread (item 2)"),
            (r#"[0,"",0,"forward","","",0]"#, "op (item 6)"),
            (
                r#"[0,"",0,"forward","","aten::mm",0.5]"#,
                "occurrence (item 7)",
            ),
        ] {
            let e = parse_identity(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    proptest::proptest! {
        #[test]
        fn any_identity_round_trips(rank in 0u64..64, thread in "[a-z_#0-9]{0,8}", step in 0u64..1000,
                                    module in "[A-Za-z.0-9 \"]{0,12}", op in "aten::[a-z_.]{1,12}",
                                    occ in 0u64..1000) {
            let id = serde_json::json!([rank, thread, step, "backward", module, op, occ]).to_string();
            proptest::prop_assert_eq!(parse_identity(&id), Ok(id));
        }

        #[test]
        fn parse_never_panics(s in ".{0,40}") {
            let _ = parse_identity(&s);
        }
    }

    #[test]
    fn a_side_thread_difference_is_named_with_its_thread() {
        let (a, b) = (
            interleaved(&[0, 2, 1, 3], "d"),
            interleaved(&[2, 0, 3, 1], "x"),
        );
        let d = crate::trace::first_divergence(&a, &b).unwrap();
        assert_eq!(
            (d.call, d.op.as_str(), d.inputs_matched),
            (3, "aten::mul", true)
        );
        assert!(
            d.explanation
                .contains("rank 0, thread ema#0, aten::mul (call 2 of aten::mul)"),
            "{}",
            d.explanation
        );
    }

    #[test]
    fn a_recomputation_is_said_as_such() {
        let mut e = rec("", "aten::addmm", "a");
        e.phase = "recompute".into();
        e.module = "Net.blocks.3.fc".into();
        assert_eq!(
            e.describe(1),
            "step 0, rank 0, aten::addmm (call 1 of aten::addmm) in module Net.blocks.3.fc \
             (recomputed in the backward), t.py:1"
        );
    }
}
