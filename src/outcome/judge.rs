//! The one judge: [`judge`] turns a report's evidence into a [`Verdict`], and
//! [`CaseReport::judge`] gives it, once the evidence is complete. Nothing else in the crate
//! assigns a verdict.

use super::case::CaseReport;
use super::verdict::{Judged, SnapshotStatus, Verdict};

impl CaseReport {
    /// Sets verdict and message from the complete evidence (see [`judge`]); returns the
    /// report. Called once per report, before the suite says it finished: a verdict, once
    /// given, never changes.
    pub fn judge(mut self) -> CaseReport {
        let (verdict, message) = judge(&self);
        self.verdict = Judged(verdict);
        self.message = message;
        self
    }

    /// The verdict the evidence gathered so far supports, without giving it (what later checks
    /// consult: only deterministic reports are compared with snapshots, across devices and
    /// in the order pass).
    pub fn verdict_so_far(&self) -> Verdict {
        judge(self).0
    }
}

/// The verdict, with its message, that a case's evidence supports. In order:
/// 1. not run here → `skipped` (with the reason);
/// 2. a run failed → `error` (with the cause);
/// 3. a planted bug → `caught` when runs differed, the case depended on suite order, it
///    reported a finding or its memory grew; `missed` otherwise;
/// 4. runs differed, and blame found the batch size alone breaks it (runs at one batch size
///    agree) → `batch-variant`; runs differed otherwise, the result depended on suite order, or
///    on the world size where it was required not to → `nondeterministic`;
/// 5. a run killed after a checkpoint and resumed differs from the uninterrupted ones →
///    `resume-mismatch`; a defect found inside the runs → `error`;
/// 6. the committed snapshot is unreadable → `error`; it differs → `snapshot-mismatch`;
/// 7. CPU and CUDA differ where they must agree → `device-mismatch`;
/// 8. otherwise `deterministic` (a missing snapshot is noted, not failed).
pub fn judge(r: &CaseReport) -> (Verdict, Option<String>) {
    let e = &r.evidence;
    if let Some(why) = &e.skipped {
        return (Verdict::Skipped, Some(why.clone()));
    }
    if let Some(f) = &e.failure {
        return (Verdict::Error, Some(f.line()));
    }
    let differs =
        r.distinct_digests > 1 || e.order_dependence.is_some() || e.world_size_dependence.is_some();
    if let Some(bug) = &e.planted {
        let caught = differs || !r.findings.is_empty() || r.memory_growth.is_some();
        let order = e.order_dependence.as_deref();
        return if caught {
            let msg = match order {
                Some(o) => format!("{o} (planted bug caught: {bug})"),
                None => format!("planted bug caught: {bug}"),
            };
            (Verdict::Caught, Some(msg))
        } else {
            let msg = format!("planted bug NOT caught over {} runs: {bug}", r.runs);
            (Verdict::Missed, Some(msg))
        };
    }
    let batch_alone = r.blame.as_ref().is_some_and(|b| {
        b.reproducible_when_fixed && b.broken_by == [crate::vary::Variation::Batch]
    });
    if differs && batch_alone && e.order_dependence.is_none() {
        let msg = "a request's result depends on the batch it is computed in: identical runs at \
                   one batch size, different results at the other (--vary batch)";
        return (Verdict::BatchVariant, Some(msg.to_string()));
    }
    if differs {
        let why = e.order_dependence.clone();
        return (
            Verdict::Nondeterministic,
            why.or(e.world_size_dependence.clone()),
        );
    }
    if let Some(why) = &e.resume_mismatch {
        return (Verdict::ResumeMismatch, Some(why.clone()));
    }
    if !r.findings.is_empty() {
        let msg = format!("defect found inside the runs: {}", r.findings.join("; "));
        return (Verdict::Error, Some(msg));
    }
    match e.snapshot {
        Some(SnapshotStatus::Unreadable) => (Verdict::Error, r.snapshot.clone()),
        Some(SnapshotStatus::Mismatch) => (Verdict::SnapshotMismatch, None),
        _ => match &e.cross_device {
            Some(why) => (Verdict::DeviceMismatch, Some(why.clone())),
            None => (Verdict::Deterministic, None),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Backend;
    use crate::outcome::Summary;
    use crate::outcome::{Failure, FailureKind};

    fn report(distinct: usize) -> CaseReport {
        let mut r = CaseReport::new("t", Backend::Cpu);
        r.runs = 2;
        r.distinct_digests = distinct;
        r
    }

    #[test]
    fn judge_orders_evidence() {
        assert_eq!(report(1).judge().verdict, Verdict::Deterministic);
        assert_eq!(report(2).judge().verdict, Verdict::Nondeterministic);
        let mut r = report(2);
        r.evidence.failure = Some(Failure::new(FailureKind::Error, "boom").in_run(1));
        assert_eq!(judge(&r), (Verdict::Error, Some("run 1: boom".to_string())));
        r.evidence.skipped = Some("no GPU".into());
        assert_eq!(judge(&r).0, Verdict::Skipped);
    }

    #[test]
    fn planted_bugs_are_caught_by_any_evidence() {
        let mut r = report(1);
        r.evidence.planted = Some("bug".into());
        assert_eq!(judge(&r).0, Verdict::Missed);
        r.findings.push("workers share a stream".into());
        assert_eq!(judge(&r).0, Verdict::Caught);
        let mut r = report(1);
        r.evidence.planted = Some("bug".into());
        r.evidence.order_dependence = Some("x differs".into());
        let (v, m) = judge(&r);
        assert_eq!(v, Verdict::Caught);
        assert!(m.unwrap().contains("x differs"));
    }

    #[test]
    fn a_difference_only_the_batch_size_makes_is_batch_variant() {
        use crate::vary::{Blame, Variation};
        let mut r = report(2);
        r.blame = Some(Blame::new(true, vec![Variation::Batch]));
        assert_eq!(judge(&r).0, Verdict::BatchVariant);
        r.blame = Some(Blame::new(true, vec![Variation::Batch, Variation::Threads]));
        assert_eq!(judge(&r).0, Verdict::Nondeterministic);
        r.blame = Some(Blame::new(false, Vec::new()));
        assert_eq!(judge(&r).0, Verdict::Nondeterministic);
        assert!(Verdict::BatchVariant.is_failure());
    }

    #[test]
    fn a_resumed_run_that_differs_is_a_resume_mismatch_unless_the_control_differs() {
        let mut r = report(1);
        r.evidence.resume_mismatch = Some("resume: 1 of 3 outputs differ".into());
        assert_eq!(judge(&r).0, Verdict::ResumeMismatch);
        assert!(Verdict::ResumeMismatch.is_failure());
        r.distinct_digests = 2;
        assert_eq!(judge(&r).0, Verdict::Nondeterministic);
    }

    #[test]
    fn snapshots_and_findings() {
        let mut r = report(1);
        r.evidence.snapshot = Some(SnapshotStatus::Missing);
        assert_eq!(judge(&r).0, Verdict::Deterministic);
        r.evidence.snapshot = Some(SnapshotStatus::Mismatch);
        assert_eq!(judge(&r).0, Verdict::SnapshotMismatch);
        r.findings.push("defect".into());
        assert_eq!(judge(&r).0, Verdict::Error);
        let s = Summary::of(&[report(1).judge(), {
            let mut m = report(1);
            m.evidence.snapshot = Some(SnapshotStatus::Missing);
            m.judge()
        }]);
        assert_eq!((s.deterministic, s.snapshots_missing, s.ran()), (2, 1, 2));
    }
}
