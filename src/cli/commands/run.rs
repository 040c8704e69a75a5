//! `bitexact run`: run a program K times, compare what it writes, render the report.

use super::{emit, run_with_progress};
use crate::cli::settings::ProgramSettings;
use crate::suite::Subject;
use anyhow::Result;

/// Runs the program; exit 0 when its runs agree (and match the snapshot), else 1.
pub(crate) fn run(s: ProgramSettings) -> Result<u8> {
    let report = run_with_progress(&[Subject::Program(&s.program)], &s.config)?;
    emit(&s.output, &report)?;
    Ok(report.exit_code() as u8)
}
