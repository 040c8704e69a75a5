//! The streams of a trace: a program's threads each make their own stream of records (the
//! tracer's `thread` field, empty for the thread that started tracing; see
//! `python/bitexact/_trace_threads.py`), one rank's records hold them interleaved as the threads
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

/// The stream a record belongs to: (rank, thread).
pub fn stream(e: &TraceEntry) -> (u64, &str) {
    (e.rank, &e.thread)
}

/// The occurrence number of each record of `trace` among the records with the same key: with
/// the key, the identity two traces are aligned by.
pub fn identities(trace: &[TraceEntry]) -> Vec<usize> {
    let mut seen: HashMap<Key, usize> = HashMap::new();
    trace
        .iter()
        .map(|e| {
            let n = seen.entry(e.key()).or_insert(0);
            *n += 1;
            *n - 1
        })
        .collect()
}

/// The identity of record `index` of `trace`, as the tracer's capture request reads it
/// (`BITEXACT_TRACE_CAPTURE`): `[rank, thread, step, phase, module, op, occurrence]` in JSON.
pub fn identity_json(trace: &[TraceEntry], index: usize) -> String {
    let e = &trace[index];
    let occ = identities(trace)[index];
    serde_json::json!([e.rank, e.thread, e.step, e.phase, e.module, e.op, occ]).to_string()
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
