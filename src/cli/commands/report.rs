//! `bitexact report`: run the selected cases, save their traces (`--trace FILE`), render the
//! report.

use super::{emit, run_with_progress, write_file};
use crate::cli::settings::ReportSettings;
use crate::suite::Subject;
use crate::Case;
use anyhow::Result;

/// Runs the cases; exit 0 when every case that ran passed, else 1.
pub(crate) fn report(s: ReportSettings) -> Result<u8> {
    let cases: Vec<&dyn Case> = s.cases.iter().map(|c| c.as_ref()).collect();
    let report = run_with_progress(&Subject::cases(&cases), &s.config)?;
    if let Some(path) = &s.trace {
        let file = report.traces()?;
        write_file(path, serde_json::to_string_pretty(&file)?.as_bytes())?;
    }
    emit(&s.output, &report)?;
    Ok(report.exit_code() as u8)
}
