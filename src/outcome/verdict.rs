//! The verdicts a report can have: [`Verdict`], and [`Judged`], a verdict only the judge
//! ([`super::judge()`]) gives; and how a report compares with its snapshot ([`SnapshotStatus`]).

use serde::{Deserialize, Serialize};

/// Outcome of a case on one backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
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
    /// Runs agreed at one batch size, but a request's result depends on the batch it is
    /// computed in (`--vary batch`: blame found the batch size alone breaks it).
    BatchVariant,
    /// Uninterrupted runs agreed, but a run killed right after a checkpoint and resumed from
    /// it differs (`--vary resume`): the checkpoint forgot some state.
    ResumeMismatch,
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
            Verdict::BatchVariant => "batch-variant",
            Verdict::ResumeMismatch => "resume-mismatch",
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
                | Verdict::BatchVariant
                | Verdict::ResumeMismatch
        )
    }
}

/// A [`Verdict`] the judge gave. Its field is private to the outcome module and only the judge sets it, so no code
/// outside the judge can make one: a report's verdict cannot be set by hand, only derived from its evidence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(transparent)]
pub struct Judged(pub(super) Verdict);

impl std::ops::Deref for Judged {
    type Target = Verdict;
    fn deref(&self) -> &Verdict {
        &self.0
    }
}

impl Judged {
    /// The verdict of a report not judged yet: `skipped`, as nothing ran.
    pub(super) fn not_yet() -> Judged {
        Judged(Verdict::Skipped)
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
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
    /// No snapshot for this platform class, and the one of another class differs within
    /// rounding noise (`crate::snapshot::noise`): not a failure.
    PlatformDifference,
}

impl SnapshotStatus {
    /// Name as printed (`matched`, `missing`, ...).
    pub fn name(self) -> &'static str {
        match self {
            SnapshotStatus::Matched => "matched",
            SnapshotStatus::Missing => "missing",
            SnapshotStatus::Mismatch => "mismatch",
            SnapshotStatus::Unreadable => "unreadable",
            SnapshotStatus::PlatformDifference => "platform-difference",
        }
    }
}
