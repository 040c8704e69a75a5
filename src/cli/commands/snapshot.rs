//! `bitexact snapshot update|review`: write the selected cases' snapshots, or list and accept
//! the pending ones.

use crate::cli::settings::{SnapshotSettings, UpdateSettings};
use crate::cli::usage::usage;
use crate::snapshot::{self, Update};
use crate::suite::{self, Subject};
use crate::Case;
use anyhow::Result;

/// Exit 0 when every snapshot was written or unchanged (review: nothing left pending), 1 when
/// one could not be written (or a case failed), 2 when the snapshot directory is unreadable.
pub(crate) fn snapshot(s: SnapshotSettings) -> Result<u8> {
    match s {
        SnapshotSettings::Review { snapshots, accept } => {
            let review =
                snapshot::review(&snapshots, accept).map_err(|e| usage(format!("{e:#}")))?;
            print!("{review}");
            Ok(u8::from(!review.is_ok()))
        }
        SnapshotSettings::Update(s) => update(*s),
    }
}

/// Runs the cases and writes a snapshot of each deterministic one, one line per case.
fn update(s: UpdateSettings) -> Result<u8> {
    let cases: Vec<&dyn Case> = s.cases.iter().map(|c| c.as_ref()).collect();
    let report = suite::run(&Subject::cases(&cases), &s.config, &mut |_| {})?;
    let mut failed = false;
    let updates = snapshot::update_each(&s.snapshots, &report.cases, &s.config.controls, s.force)?;
    for (r, u) in report.cases.iter().zip(updates) {
        match u {
            Ok(Update::Written(p)) => println!("written    {}", p.display()),
            Ok(Update::Updated(p, why)) => println!("updated    {}\n    {why}", p.display()),
            Ok(Update::Unchanged(p)) => println!("unchanged  {}", p.display()),
            Ok(Update::NotWritten(why)) => {
                failed |= r.verdict().is_failure();
                println!("not written: {why}");
            }
            Err(f) => {
                failed = true;
                println!("FAILED     {}: {}", f.path.display(), f.why);
            }
        }
    }
    Ok(u8::from(failed))
}
