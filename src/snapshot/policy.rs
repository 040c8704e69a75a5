//! The snapshot policy of a check: which reports are compared with their committed snapshot,
//! what the comparison adds as evidence, and when a pending `.snap.new` is written. Only
//! reports whose evidence so far says deterministic are compared; a program's missing or
//! changed snapshot is written as pending (never in CI, see [`super::write_pending`]); cases'
//! snapshots are written by `bitexact snapshot update`. The verdict is left to the judge.

use super::{compare, write_pending, Comparison, Snapshot, MATCHES};
use crate::controls::Controls;
use crate::outcome::{CaseReport, SnapshotStatus, Verdict};
use crate::platform::Platform;
use std::path::Path;

/// Compares `r` with its committed snapshot under `dir` when its evidence so far says
/// deterministic, and records the status and its explanation as evidence.
pub fn check(dir: &Path, r: &mut CaseReport, controls: &Controls, platform: &Platform) {
    if r.verdict_so_far() != Verdict::Deterministic {
        return;
    }
    let (status, text) = match compare(dir, r, controls, platform) {
        Ok(Comparison::Match) => (SnapshotStatus::Matched, MATCHES.to_string()),
        Ok(Comparison::Missing(p)) => (
            SnapshotStatus::Missing,
            match r.program {
                Some(_) => format!("no committed snapshot at {}", p.display()),
                None => format!(
                    "no committed snapshot at {} (`bitexact snapshot update` writes it)",
                    p.display()
                ),
            },
        ),
        Ok(Comparison::Mismatch(e)) => (SnapshotStatus::Mismatch, e),
        Err(e) => (SnapshotStatus::Unreadable, format!("{e:#}")),
    };
    let text = match (status, &r.program) {
        (SnapshotStatus::Missing | SnapshotStatus::Mismatch, Some(_)) => {
            match Snapshot::of(r, controls, platform) {
                Ok(new) => format!("{text}; {}", write_pending(dir, r, &new, controls)),
                Err(_) => text,
            }
        }
        _ => text,
    };
    r.evidence.snapshot = Some(status);
    r.snapshot = Some(text);
}
