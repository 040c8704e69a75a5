//! What the harness found about one subject on one backend: the [`CaseReport`] and its
//! [`Evidence`]. Only [`super::judge()`] turns evidence into a verdict; everything else adds
//! evidence, and [`CaseReport::judge`] is called once, when the evidence is complete.

use super::failure::Failure;
use super::program::ProgramInfo;
use super::verdict::{Judged, SnapshotStatus, Verdict};
use crate::backend::Backend;
use crate::diff::TensorDiff;
use crate::trace::{Divergence, TraceEntry};
use crate::vary::{Blame, Variation};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Runs made for one purpose (`main`, `blame: threads`, `localize: traced re-run`,
/// `capture: runs 0 and 1`, `world size: 1 process`, `order: reverse`), in a report's
/// `passes`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PassCount {
    /// Why the runs were made.
    pub purpose: String,
    /// Runs made (failed ones included).
    pub runs: usize,
}

/// Facts gathered about a case besides its digests, findings and memory: the inputs of
/// [`judge`](super::judge::judge) that have no other field in [`CaseReport`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
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
    /// `--vary resume`: the run killed after a checkpoint and resumed differs from the
    /// uninterrupted run 0 while runs 0 and 1 agree (what differs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_mismatch: Option<String>,
}

/// The result of running one case on one backend K times.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct CaseReport {
    /// Case name.
    pub name: String,
    /// Backend it ran on.
    pub backend: Backend,
    /// Verdict, as the judge gave it: it reads like a [`Verdict`] (`r.verdict ==
    /// Verdict::Deterministic`, `r.verdict.name()`), but only [`judge`](super::judge::judge) makes one.
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
    /// Error, skip reason, planted-bug description or order dependence (set by [`judge`](super::judge::judge)).
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
    /// The first diverging op's outputs, captured in two more runs and compared element by
    /// element (programs under `--trace ops` whose first diverging op had identical inputs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub captured: Vec<TensorDiff>,
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
    /// Program mode: the program, its environment and each run's exit status (see `crate::program`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<ProgramInfo>,
    /// Every run the harness made for this report, by purpose, in order: the main pass, then
    /// any blame passes, localization and capture re-runs, world-size and order runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub passes: Vec<PassCount>,
}

impl CaseReport {
    /// A report with nothing run yet and no evidence (verdict `skipped` until judged).
    pub fn new(name: &str, backend: Backend) -> CaseReport {
        CaseReport {
            name: name.to_string(),
            backend,
            verdict: Judged::not_yet(),
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
            captured: Vec::new(),
            traces: Vec::new(),
            peak_bytes: Vec::new(),
            retained_bytes: Vec::new(),
            memory_growth: None,
            findings: Vec::new(),
            notes: Vec::new(),
            snapshot: None,
            evidence: Evidence::default(),
            program: None,
            passes: Vec::new(),
        }
    }

    /// Whether the case passed: deterministic (and matching its snapshot when checked), a
    /// caught planted bug, or skipped.
    pub fn passed(&self) -> bool {
        !self.verdict.is_failure()
    }

    /// The verdict the judge gave.
    pub fn verdict(&self) -> Verdict {
        *self.verdict
    }
}
