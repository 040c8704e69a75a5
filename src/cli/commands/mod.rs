//! One file per command, each a function from its resolved settings
//! ([`super::settings`]) to its exit code: 0 everything passed, 1 a difference, mismatch,
//! missed planted bug or error. What `report` and `run` share lives here: the suite run with a
//! progress bar, and writing the rendered report.

pub(crate) mod diff_trace;
pub(crate) mod list;
pub(crate) mod report;
pub(crate) mod run;
pub(crate) mod snapshot;

use super::settings::Output;
use crate::outcome::Report;
use crate::report::render;
use crate::suite::{self, Event, Subject, SuiteConfig};
use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::Write;
use std::path::Path;

/// Runs the suite with a progress bar on standard error, drawn only on a terminal and never in
/// CI (`CI` set), so logs and piped output stay clean.
fn run_with_progress(subjects: &[Subject], config: &SuiteConfig) -> Result<Report> {
    use std::io::IsTerminal;
    let bar = if !std::io::stderr().is_terminal() || std::env::var_os("CI").is_some() {
        ProgressBar::hidden()
    } else {
        let total = config
            .backends
            .iter()
            .map(|b| subjects.iter().filter(|s| s.runs_on(*b)).count())
            .sum::<usize>();
        let bar = ProgressBar::new(total as u64);
        if let Ok(style) = ProgressStyle::with_template("{bar:30} {pos}/{len} {elapsed} {wide_msg}")
        {
            bar.set_style(style);
        }
        bar
    };
    let report = suite::run(subjects, config, &mut |e| match e {
        Event::Started { name, backend } => bar.set_message(format!("{name} ({backend})")),
        Event::Run { name, run } => bar.set_message(format!(
            "{name}: {} run {}/{}",
            run.purpose,
            run.index + 1,
            run.of
        )),
        Event::Finished(_) => bar.inc(1),
    });
    bar.finish_and_clear();
    report
}

/// Renders `report` in `output`'s format and writes it to its file (atomically) or standard
/// output.
fn emit(output: &Output, report: &Report) -> Result<()> {
    while crate::process::stopping() {
        std::thread::park(); // no report of runs a stop signal cut short (see `cli::main`)
    }
    let rendered = render(output.format, report);
    match &output.out {
        Some(path) => write_file(path, rendered.as_bytes()),
        None => std::io::stdout()
            .write_all(rendered.as_bytes())
            .context("writing the report"),
    }
}

/// Writes `bytes` to `path` atomically.
fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    crate::atomic::write_atomically(path, bytes)
}
