//! The snapshot policy of a check: which reports are compared with their committed snapshot,
//! what the comparison adds as evidence, and when a pending `.snap.new` is written. Only
//! reports whose evidence so far says deterministic are compared; a program's missing or
//! changed snapshot is written as pending (never in CI, see [`super::write_pending`]); cases'
//! snapshots are written by `bitexact snapshot update`. A program without a snapshot for this
//! platform class is compared with another class's, within noise, over the noise threshold at
//! the outputs (amplified noise or a change: the outputs cannot tell), or beyond noise
//! ([`super::noise`]). The verdict is left to the judge.

use super::noise::{classify_cross_class, other_classes, CrossClass};
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
    let (status, text) = match (status, &r.program) {
        (SnapshotStatus::Missing, Some(_)) => across_classes(dir, r, controls, platform)
            .unwrap_or_else(|e| Some((SnapshotStatus::Unreadable, format!("{e:#}"))))
            .unwrap_or((status, text)),
        _ => (status, text),
    };
    let text = match (status, &r.program) {
        (
            SnapshotStatus::Missing | SnapshotStatus::Mismatch | SnapshotStatus::PlatformDifference,
            Some(_),
        ) => match Snapshot::of(r, controls, platform) {
            Ok(new) => format!("{text}; {}", write_pending(dir, r, &new, controls)),
            Err(_) => text,
        },
        _ => text,
    };
    r.evidence.snapshot = Some(status);
    r.snapshot = Some(text);
}

/// A program without a snapshot for this platform class, against the first other class that
/// has one (`None`: no other class has one, or its differences cannot be judged): a
/// `platform-difference (within noise)`, or a `mismatch (over the noise threshold at the
/// outputs: first at …)` (never called beyond noise: an output's difference may be rounding
/// noise amplified on its way, which is not a change, and only `bitexact diff-trace` of traced
/// runs tells), or a `mismatch (beyond noise: first at …: in one snapshot only)`, with what
/// differs between the two platforms.
fn across_classes(
    dir: &Path,
    r: &CaseReport,
    controls: &Controls,
    platform: &Platform,
) -> anyhow::Result<Option<(SnapshotStatus, String)>> {
    let class = platform.class_for(r.backend);
    let Some((other, old)) = other_classes(dir, &class, &r.name, controls)?
        .into_iter()
        .next()
    else {
        return Ok(None);
    };
    let new = Snapshot::of(r, controls, platform)?;
    let file = super::path(dir, &other, &r.name, controls);
    let platforms = super::explain(&r.name, &file, &old, &new)
        .and_then(|e| {
            e.split_once("; platform differs: ")
                .map(|p| p.1.to_string())
        })
        .map_or(String::new(), |p| format!("; platform differs: {p}"));
    let against = format!(
        "the snapshot of platform class {other} ({})",
        file.display()
    );
    Ok(match classify_cross_class(&old, &new) {
        CrossClass::Within(why) => Some((
            SnapshotStatus::PlatformDifference,
            format!("platform-difference (within noise) from {against}: {why}{platforms}"),
        )),
        CrossClass::Over(why) => Some((
            SnapshotStatus::Mismatch,
            format!(
                "mismatch (over the noise threshold at the outputs: {why}; rounding noise \
                 amplified on its way and a change look alike in outputs: `bitexact diff-trace` \
                 of traced runs on both platforms tells them apart) against {against}{platforms}"
            ),
        )),
        CrossClass::Beyond(why) => Some((
            SnapshotStatus::Mismatch,
            format!("mismatch (beyond noise: {why}) against {against}{platforms}"),
        )),
        CrossClass::NotJudged(_) => None,
    })
}
