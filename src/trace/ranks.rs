//! Distributed traces: a run of a torch.distributed program has one op stream per rank (the
//! tracer's `.bitexact-trace-rank<R>.jsonl`, concatenated in rank order). Two runs are compared
//! rank by rank, and each rank's first divergence has a role:
//!
//! - **origin**: an op (not a collective) whose inputs matched and whose output differs: the
//!   difference starts on this rank, here;
//! - **received**: a collective (`c10d::allreduce_`, …) whose local inputs, this rank's
//!   contribution, matched while what it received differs: another rank's difference arrived
//!   through it (Megatron-LM's "receiver");
//! - anything else (inputs that already differed, control flow): said as it is.
//!
//! The answer names the origin rank (the earliest step, then the lowest rank, when several
//! ranks originate), and says how every other rank received or showed the difference. When
//! every diverging rank's first difference is the same collective with matching inputs, the
//! collective itself is the origin (a reduction whose order changed).

use super::{first_divergence_in, Divergence, TraceEntry};
use std::collections::BTreeMap;

/// Whether `op` is a torch.distributed collective (`c10d::…`, `_c10d_functional::…`).
pub fn is_collective(op: &str) -> bool {
    op.starts_with("c10d::") || op.starts_with("_c10d_functional::")
}

/// `a` cut, stream by stream (rank and thread), to as many records as `b` holds of that
/// stream, in `a`'s order: a run stopped early has streams that end where it was killed, and
/// compared with what run 0 recorded up to the same point, the end of a cut stream is not taken
/// for diverging control flow (when the recorded parts agree, the differing files are named
/// instead). Records keep their `call`: a divergence found in the cut trace names its record
/// in the whole one.
pub fn cut_to(a: &[TraceEntry], b: &[TraceEntry]) -> Vec<TraceEntry> {
    use super::streams::stream;
    let mut left: BTreeMap<(u64, &str), usize> = BTreeMap::new();
    for e in b {
        *left.entry(stream(e)).or_default() += 1;
    }
    a.iter()
        .filter(|e| {
            let n = left.entry(stream(e)).or_default();
            *n > 0 && {
                *n -= 1;
                true
            }
        })
        .cloned()
        .collect()
}

/// The records of `trace` by rank, each in order.
fn by_rank(trace: &[TraceEntry]) -> BTreeMap<u64, Vec<TraceEntry>> {
    let mut out: BTreeMap<u64, Vec<TraceEntry>> = BTreeMap::new();
    for e in trace {
        out.entry(e.rank).or_default().push(e.clone());
    }
    out
}

/// A rank's first divergence, with the record it names.
struct RankFirst {
    rank: u64,
    step: u64,
    phase: String,
    divergence: Divergence,
}

impl RankFirst {
    fn originates(&self) -> bool {
        self.divergence.inputs_matched && !is_collective(&self.divergence.op)
    }

    fn receives(&self) -> bool {
        self.divergence.inputs_matched && is_collective(&self.divergence.op)
    }

    /// How this rank shows the difference, beside the origin.
    fn as_receiver(&self) -> String {
        if self.receives() {
            let phase = if self.phase.is_empty() {
                String::new()
            } else {
                format!(" ({})", self.phase)
            };
            format!(
                "rank {} received it through {} at step {}{phase}",
                self.rank, self.divergence.op, self.step
            )
        } else {
            format!("rank {}: {}", self.rank, self.divergence.explanation)
        }
    }
}

/// The first divergence between two runs' traces, rank by rank (see the module docs). A
/// trace of one rank is compared as one stream, exactly as `super::first_divergence_in` does.
pub fn localize(a: &[TraceEntry], b: &[TraceEntry]) -> Option<Divergence> {
    let (ra, rb) = (by_rank(a), by_rank(b));
    let mut ranks: Vec<u64> = ra.keys().chain(rb.keys()).copied().collect();
    ranks.sort_unstable();
    ranks.dedup();
    if ranks.len() <= 1 {
        return first_divergence_in(a, b);
    }
    let empty = Vec::new();
    let mut firsts: Vec<RankFirst> = ranks
        .iter()
        .filter_map(|&rank| {
            let (x, y) = (
                ra.get(&rank).unwrap_or(&empty),
                rb.get(&rank).unwrap_or(&empty),
            );
            let d = first_divergence_in(x, y)?;
            let at = x.iter().chain(y).find(|e| e.call == d.call && e.op == d.op);
            Some(RankFirst {
                rank,
                step: at.map_or(0, |e| e.step),
                phase: at.map(|e| e.phase.clone()).unwrap_or_default(),
                divergence: d,
            })
        })
        .collect();
    firsts.sort_by_key(|f| (f.step, f.rank));
    let chosen = firsts
        .iter()
        .position(RankFirst::originates)
        .or_else(|| firsts.iter().position(|f| !f.receives()))
        .unwrap_or(0);
    let all_receive = firsts.iter().all(RankFirst::receives);
    let first = firsts.get(chosen)?;
    let mut d = first.divergence.clone();
    d.rank = Some(first.rank);
    if first.originates() {
        d.explanation
            .push_str(&format!("; origin: rank {}", first.rank));
    } else if all_receive {
        d.explanation = format!(
            "first divergence: {} — inputs identical on every rank, output differs: the collective itself is nondeterministic (origin: rank {})",
            first.divergence.place(),
            first.rank
        );
    }
    d.receivers = firsts
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != chosen)
        .map(|(_, f)| f.as_receiver())
        .collect();
    if !d.receivers.is_empty() {
        d.explanation
            .push_str(&format!("; {}", d.receivers.join("; ")));
    }
    Some(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(call: usize, rank: u64, op: &str, inputs: &str, output: &str) -> TraceEntry {
        TraceEntry {
            call,
            op: op.into(),
            inputs: vec![inputs.into()],
            output: output.into(),
            rank,
            phase: "forward".into(),
            module: "Net".into(),
            source: "t.py:1".into(),
            ..TraceEntry::default()
        }
    }

    #[test]
    fn a_stream_cut_short_is_compared_on_what_it_recorded() {
        let run0 = runs("m1");
        // Stopped early: rank 0 recorded its first record, rank 1 its first two, all equal.
        let stopped = vec![run0[0].clone(), run0[2].clone(), run0[3].clone()];
        let whole = crate::trace::first_divergence(&run0, &stopped).expect("ends differ");
        assert!(whole.explanation.contains("control flow"), "{whole:?}");
        let cut = cut_to(&run0, &stopped);
        assert_eq!(cut.iter().map(|e| e.call).collect::<Vec<_>>(), [0, 2, 3]);
        assert_eq!(crate::trace::first_divergence(&cut, &stopped), None);
        // A difference inside what both recorded is still found.
        let mut noisy = stopped.clone();
        noisy[1].output = "other".into();
        let d = crate::trace::first_divergence(&cut_to(&run0, &noisy), &noisy).unwrap();
        assert_eq!((d.op.as_str(), d.rank), ("aten::bernoulli_", Some(1)));
    }

    /// Rank 1's dropout differs (origin); rank 0 receives it through the all-reduce.
    fn runs(noisy: &str) -> Vec<TraceEntry> {
        vec![
            rec(0, 0, "aten::bernoulli_", "x", "m0"),
            rec(1, 0, "c10d::allreduce_", "g0", &format!("sum-{noisy}")),
            rec(2, 1, "aten::bernoulli_", "x", noisy),
            rec(3, 1, "aten::mm", noisy, &format!("g-{noisy}")),
            rec(
                4,
                1,
                "c10d::allreduce_",
                &format!("g-{noisy}"),
                &format!("sum-{noisy}"),
            ),
        ]
    }

    #[test]
    fn the_origin_rank_is_told_apart_from_the_receivers() {
        let d = localize(&runs("a"), &runs("b")).unwrap();
        assert_eq!(
            (d.rank, d.op.as_str(), d.call),
            (Some(1), "aten::bernoulli_", 2)
        );
        assert!(d.inputs_matched);
        assert_eq!(
            d.receivers,
            vec!["rank 0 received it through c10d::allreduce_ at step 0 (forward)"]
        );
        assert!(
            d.explanation.contains("origin: rank 1"),
            "{}",
            d.explanation
        );
        assert!(
            d.place().contains("rank 1, aten::bernoulli_"),
            "{}",
            d.place()
        );
    }

    #[test]
    fn a_collective_that_differs_on_every_rank_with_equal_inputs_is_the_origin() {
        let t = |s: &str| {
            vec![
                rec(0, 0, "c10d::allreduce_", "g0", s),
                rec(1, 1, "c10d::allreduce_", "g1", s),
            ]
        };
        let d = localize(&t("p"), &t("q")).unwrap();
        assert_eq!(d.rank, Some(0));
        assert!(
            d.explanation
                .contains("the collective itself is nondeterministic"),
            "{}",
            d.explanation
        );
    }

    #[test]
    fn one_rank_is_one_stream_and_equal_ranks_agree() {
        let one: Vec<TraceEntry> = runs("a").into_iter().filter(|e| e.rank == 1).collect();
        let other: Vec<TraceEntry> = runs("b").into_iter().filter(|e| e.rank == 1).collect();
        assert_eq!(localize(&one, &other), first_divergence_in(&one, &other));
        assert!(localize(&runs("a"), &runs("a")).is_none());
    }
}
