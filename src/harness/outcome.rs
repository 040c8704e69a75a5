//! Outcomes: what the harness found about a case ([`CaseReport`], its [`Evidence`]) and the one
//! function that turns that evidence into a [`Verdict`] ([`judge`]). Nothing else in the crate
//! assigns a verdict: the executor, the diagnoses, isolation, snapshot checks and run mode only
//! add evidence and call [`CaseReport::judge`].

use super::failure::Failure;
use super::program::ProgramInfo;
use crate::backend::Backend;
use crate::diff::TensorDiff;
use crate::trace::{Divergence, TraceEntry};
use crate::vary::{Blame, Variation};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Outcome of a case on one backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Verdict {
    /// Every run gave bit-identical outputs.
    Deterministic,
    /// Runs differed.
    Nondeterministic,
    /// Runs agreed but differ from the committed snapshot.
    SnapshotMismatch,
    /// The case failed (error, panic, crash, hang, nothing to compare) in some run.
    Error,
    /// The case could not run here (e.g. no CUDA driver).
    Skipped,
    /// A planted bug whose difference the harness found, as it should.
    Caught,
    /// A planted bug the harness did not find.
    Missed,
    /// Runs agreed on each device, but CPU and CUDA results differ where they must agree.
    DeviceMismatch,
}

impl Verdict {
    /// Name as printed (`deterministic`, `snapshot-mismatch`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Deterministic => "deterministic",
            Verdict::Nondeterministic => "nondeterministic",
            Verdict::SnapshotMismatch => "snapshot-mismatch",
            Verdict::Error => "error",
            Verdict::Skipped => "skipped",
            Verdict::Caught => "caught",
            Verdict::Missed => "missed",
            Verdict::DeviceMismatch => "device-mismatch",
        }
    }

    /// Whether this verdict makes the report fail (exit 1).
    pub fn is_failure(self) -> bool {
        matches!(
            self,
            Verdict::Nondeterministic
                | Verdict::SnapshotMismatch
                | Verdict::Error
                | Verdict::Missed
                | Verdict::DeviceMismatch
        )
    }
}

/// A [`Verdict`] the judge gave. Its field is private, so no code outside the judge can make
/// one: a report's verdict cannot be set by hand, only derived from its evidence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Judged(Verdict);

impl std::ops::Deref for Judged {
    type Target = Verdict;
    fn deref(&self) -> &Verdict {
        &self.0
    }
}

impl PartialEq<Verdict> for Judged {
    fn eq(&self, other: &Verdict) -> bool {
        self.0 == *other
    }
}

impl PartialEq<Judged> for Verdict {
    fn eq(&self, other: &Judged) -> bool {
        *self == other.0
    }
}

/// How a case's digests compare with its committed snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum SnapshotStatus {
    /// The digests equal the committed snapshot.
    Matched,
    /// There is no committed snapshot for this case, controls and platform class.
    Missing,
    /// The digests differ from the committed snapshot.
    Mismatch,
    /// The committed snapshot could not be read or is malformed.
    Unreadable,
}

impl SnapshotStatus {
    /// Name as printed (`matched`, `missing`, ...).
    pub fn name(self) -> &'static str {
        match self {
            SnapshotStatus::Matched => "matched",
            SnapshotStatus::Missing => "missing",
            SnapshotStatus::Mismatch => "mismatch",
            SnapshotStatus::Unreadable => "unreadable",
        }
    }
}

/// Facts gathered about a case besides its digests, findings and memory: the inputs of
/// [`judge`] that have no other field in [`CaseReport`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Evidence {
    /// Why the case did not run here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// Why a run failed (error, panic, crash, hang, out of memory, nothing to compare), typed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<Failure>,
    /// The planted bug this case carries, which the harness must catch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planted: Option<String>,
    /// The case's result changed when the suite ran again in reverse order (what changed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order_dependence: Option<String>,
    /// Comparison with the committed snapshot, when snapshots are checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<SnapshotStatus>,
    /// CPU and CUDA results differ where they must agree (exact outputs, or outputs that do
    /// not line up): what differs. Set on the CUDA report by the cross-device comparison.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cross_device: Option<String>,
    /// A program's results differ between world sizes where `--world-size-invariant` asked
    /// them not to (what differs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world_size_dependence: Option<String>,
}

/// The result of running one case on one backend K times.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CaseReport {
    /// Case name.
    pub name: String,
    /// Backend it ran on.
    pub backend: Backend,
    /// Verdict, as the judge gave it: it reads like a [`Verdict`] (`r.verdict ==
    /// Verdict::Deterministic`, `r.verdict.name()`), but only [`judge`] makes one.
    pub verdict: Judged,
    /// Runs completed.
    pub runs: usize,
    /// Distinct run digests among the completed runs.
    pub distinct_digests: usize,
    /// Run digest of each completed run (hex).
    pub run_digests: Vec<String>,
    /// Tensor digests of the first run (hex), by output name.
    pub digests: BTreeMap<String, String>,
    /// How the first differing run differs from run 0, per differing tensor.
    pub diff: Vec<TensorDiff>,
    /// Implementation chosen per op (first run).
    pub algorithms: BTreeMap<String, String>,
    /// Wall time of all runs, digests included.
    pub seconds: f64,
    /// Wall time of each run's `Case::run`.
    pub run_seconds: Vec<f64>,
    /// Error, skip reason, planted-bug description or order dependence (set by [`judge`]).
    pub message: Option<String>,
    /// Variations applied between the runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub variations: Vec<Variation>,
    /// Which variation breaks the case (when it diverged under variations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blame: Option<Blame>,
    /// The first op (or, for a program, the first output) that differs between two runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub divergence: Option<Divergence>,
    /// Op trace of each run (only with `Options::trace`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub traces: Vec<Vec<TraceEntry>>,
    /// Peak heap bytes of each run above the live bytes at its start (empty when unknown: the
    /// counting allocator of [`crate::memory`] is not installed). For programs: peak RSS.
    #[serde(default)]
    pub peak_bytes: Vec<u64>,
    /// Heap bytes left live after each run, relative to before the first run (empty when
    /// unknown).
    #[serde(default)]
    pub retained_bytes: Vec<u64>,
    /// Set when memory grows from run to run or step to step (see [`crate::memory::growth`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_growth: Option<String>,
    /// Defects the case found inside its runs (e.g. loader workers sharing one random stream),
    /// deduplicated across runs, each with the number of runs that reported it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<String>,
    /// Figures the case recorded for the report ([`crate::case::Ctx::notes`]; the first run's,
    /// none from child processes): they never affect the verdict.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Comparison with the committed snapshot, in words (only when snapshots are checked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
    /// Facts besides the above that decide the verdict.
    #[serde(default)]
    pub evidence: Evidence,
    /// Run mode: the program, its environment and each run's exit status (see `crate::run`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<ProgramInfo>,
}

impl CaseReport {
    /// A report with nothing run yet and no evidence (verdict `skipped` until judged).
    pub fn new(name: &str, backend: Backend) -> CaseReport {
        CaseReport {
            name: name.to_string(),
            backend,
            verdict: Judged(Verdict::Skipped),
            runs: 0,
            distinct_digests: 0,
            run_digests: Vec::new(),
            digests: BTreeMap::new(),
            diff: Vec::new(),
            algorithms: BTreeMap::new(),
            seconds: 0.0,
            run_seconds: Vec::new(),
            message: None,
            variations: Vec::new(),
            blame: None,
            divergence: None,
            traces: Vec::new(),
            peak_bytes: Vec::new(),
            retained_bytes: Vec::new(),
            memory_growth: None,
            findings: Vec::new(),
            notes: Vec::new(),
            snapshot: None,
            evidence: Evidence::default(),
            program: None,
        }
    }

    /// Sets verdict and message from the evidence (see [`judge`]); returns the report.
    pub fn judge(mut self) -> CaseReport {
        self.rejudge();
        self
    }

    /// Sets verdict and message from the evidence in place (see [`judge`]).
    pub fn rejudge(&mut self) {
        let (verdict, message) = judge(self);
        self.verdict = Judged(verdict);
        self.message = message;
    }

    /// Whether the case passed: deterministic (and matching its snapshot when checked), a
    /// caught planted bug, or skipped.
    pub fn passed(&self) -> bool {
        !self.verdict.is_failure()
    }

    /// The verdict the judge gave.
    pub fn verdict(&self) -> Verdict {
        self.verdict.0
    }
}

/// The verdict, with its message, that a case's evidence supports. In order:
/// 1. not run here → `skipped` (with the reason);
/// 2. a run failed → `error` (with the cause);
/// 3. a planted bug → `caught` when runs differed, the case depended on suite order, it
///    reported a finding or its memory grew; `missed` otherwise;
/// 4. runs differed, the result depended on suite order, or on the world size where it was
///    required not to → `nondeterministic`;
/// 5. a defect found inside the runs → `error`;
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
    if differs {
        let why = e.order_dependence.clone();
        return (
            Verdict::Nondeterministic,
            why.or(e.world_size_dependence.clone()),
        );
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

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Totals per verdict.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Summary {
    /// Cases judged deterministic.
    pub deterministic: usize,
    /// Planted bugs the harness caught, as it should.
    pub caught: usize,
    /// Cases judged nondeterministic, or planted bugs missed.
    pub nondeterministic: usize,
    /// Cases whose runs agreed but differ from their committed snapshot.
    pub snapshot_mismatches: usize,
    /// Deterministic cases with no committed snapshot (only when snapshots are checked).
    pub snapshots_missing: usize,
    /// Cases that errored.
    pub errors: usize,
    /// Cases whose CPU and CUDA results differ where they must agree.
    #[serde(skip_serializing_if = "is_zero")]
    pub device_mismatches: usize,
    /// Cases skipped.
    pub skipped: usize,
}

impl Summary {
    /// Counts the verdicts of `reports`.
    pub fn of(reports: &[CaseReport]) -> Summary {
        let mut s = Summary::default();
        for r in reports {
            match r.verdict() {
                Verdict::Deterministic => s.deterministic += 1,
                Verdict::Caught => s.caught += 1,
                Verdict::Nondeterministic | Verdict::Missed => s.nondeterministic += 1,
                Verdict::SnapshotMismatch => s.snapshot_mismatches += 1,
                Verdict::Error => s.errors += 1,
                Verdict::DeviceMismatch => s.device_mismatches += 1,
                Verdict::Skipped => s.skipped += 1,
            }
            if r.evidence.snapshot == Some(SnapshotStatus::Missing) {
                s.snapshots_missing += 1;
            }
        }
        s
    }

    /// Cases that ran (everything but skipped).
    pub fn ran(&self) -> usize {
        self.deterministic
            + self.caught
            + self.nondeterministic
            + self.snapshot_mismatches
            + self.errors
            + self.device_mismatches
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        r.evidence.failure = Some(Failure::new(super::super::FailureKind::Error, "boom").in_run(1));
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
