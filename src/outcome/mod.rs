//! The report model: what a check found, filled by the suite ([`crate::suite`]) and read by the
//! renderers ([`crate::report`]). A [`Report`] holds one [`CaseReport`] per subject and
//! backend, each with its [`Evidence`] and the [`Verdict`] the one judge ([`judge()`]) gave it
//! once its evidence was complete.
//!
//! - [`case`]: [`CaseReport`], [`Evidence`], [`PassCount`];
//! - [`verdict`]: [`Verdict`], [`Judged`], [`SnapshotStatus`];
//! - [`judge`](mod@judge): the judge;
//! - [`failure`]: [`Failure`], [`FailureKind`];
//! - [`program`]: [`ProgramInfo`] and what it holds;
//! - [`cost`]: [`CostRow`]; [`cross`]: [`CrossDevice`].
//!
//! It is data only: what fills it ([`crate::harness`], [`crate::cost`], [`crate::cross`],
//! [`crate::program`]) imports it, never the other way round.

pub mod case;
pub mod cost;
pub mod cross;
pub mod failure;
pub mod judge;
pub mod program;
pub mod verdict;

pub use case::{CaseReport, Evidence, PassCount};
pub use cost::CostRow;
pub use cross::{CrossDevice, CrossTensor, CrossVerdict};
pub use failure::{Failure, FailureKind};
pub use judge::judge;
pub use program::{Ignored, ProgramInfo, ProgramRun, StepMemory, WorldSize};
pub use verdict::{Judged, SnapshotStatus, Verdict};

use crate::backend::Backend;
use crate::controls::Controls;
use crate::platform::Platform;
use crate::trace::{CaseTraces, TraceFile};
use crate::vary::Variation;
use serde::Serialize;

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Totals per verdict.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
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
    /// Programs whose requests' results depend on the batch size (`--vary batch`).
    #[serde(skip_serializing_if = "is_zero")]
    pub batch_variant: usize,
    /// Programs whose run resumed from a checkpoint differs from the uninterrupted ones
    /// (`--vary resume`).
    #[serde(skip_serializing_if = "is_zero")]
    pub resume_mismatch: usize,
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
                Verdict::BatchVariant => s.batch_variant += 1,
                Verdict::ResumeMismatch => s.resume_mismatch += 1,
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
            + self.batch_variant
            + self.resume_mismatch
    }
}

/// Version of the JSON report format. Fields are only ever added within a version.
pub const REPORT_VERSION: u32 = 1;

/// Everything a report run found.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct Report {
    /// Report format version.
    pub version: u32,
    /// Controls the cases ran under.
    pub controls: Controls,
    /// Runs per case.
    pub runs: usize,
    /// Variations applied between runs.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub variations: Vec<Variation>,
    /// Backends the suite ran on.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub backends: Vec<Backend>,
    /// Where it ran.
    pub platform: Platform,
    /// One entry per case and backend.
    pub cases: Vec<CaseReport>,
    /// Cost of determinism per op (measured with `--deterministic off`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cost: Vec<CostRow>,
    /// Totals per verdict.
    pub summary: Summary,
    /// CPU-vs-CUDA comparison per case (`--backend all`; see [`crate::cross`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cross_device: Vec<CrossDevice>,
}

impl Report {
    /// Builds a report and its summary.
    pub fn new(
        controls: Controls,
        runs: usize,
        cases: Vec<CaseReport>,
        cost: Vec<CostRow>,
    ) -> Report {
        let summary = Summary::of(&cases);
        Report {
            version: REPORT_VERSION,
            controls,
            runs,
            variations: Vec::new(),
            backends: Vec::new(),
            platform: Platform::detect(),
            cases,
            cost,
            summary,
            cross_device: Vec::new(),
        }
    }

    /// Process exit code: 0 when every case that ran passed (deterministic, a caught planted
    /// bug, skipped), 1 otherwise. Verdicts come from the one judge, which also weighs the
    /// cross-device comparison.
    pub fn exit_code(&self) -> i32 {
        if self.cases.iter().any(|c| c.verdict().is_failure()) {
            1
        } else {
            0
        }
    }

    /// The op traces the report holds (cases traced with `Options::trace`), as a trace file
    /// (`--trace FILE`).
    pub fn traces(&self) -> anyhow::Result<TraceFile> {
        Ok(TraceFile {
            version: 1,
            platform: serde_json::to_value(&self.platform)?,
            cases: self
                .cases
                .iter()
                .filter(|r| !r.traces.is_empty())
                .map(|r| CaseTraces {
                    name: r.name.clone(),
                    backend: r.backend.name().into(),
                    runs: r.traces.clone(),
                })
                .collect(),
        })
    }

    /// Whether nothing ran because every case was skipped (e.g. `--backend cuda` without a
    /// GPU). The exit code is still 0; reports say so in their summary.
    pub fn nothing_ran(&self) -> bool {
        !self.cases.is_empty() && self.summary.ran() == 0
    }
}
