//! The `bitexact` command line: `report`, `run`, `list`, `snapshot update|review`,
//! `diff-trace`. Two faces call `main`: the `bitexact` binary (`src/main.rs`) and the Python
//! package's console script (`bitexact._native.main`), so `pip install` gives the same command.
//!
//! A command line goes through three steps, one module each:
//! - `args`: its shape as clap parses it (`Cli`, `Command`, and each flag group shared by
//!   several commands, declared once);
//! - `settings`: the one place where those flags, the project file (`run`) and the
//!   environment become validated settings, each command's `XSettings::resolve`; every usage
//!   error is found there, before any work;
//! - `commands`: one file per command, from its settings to its exit code, running the
//!   library ([`crate::suite`]) and rendering ([`crate::report`]).
//!
//! This file only parses and dispatches. Exit codes: 0 everything that ran passed, 1 a
//! difference, mismatch, missed planted bug or error, 2 bad usage or unreadable input (before
//! any work).

mod args;
mod commands;
mod settings;
mod usage;

use crate::harness::Launcher;
use anyhow::Result;
use args::{Cli, Command};
use clap::Parser;
use settings::{ListSettings, ProgramSettings, ReportSettings, SnapshotSettings};
use std::ffi::OsString;
use std::io::Write;

/// Runs the command line `args` (the program name first) and returns its exit code. `me`
/// starts this same command line again as a child (`__child`, for `--isolate` and
/// `--vary process`): the binary itself, or `python -m bitexact` under the Python package.
/// Usage errors print clap's message and return 2; `--help` and `--version` return 0.
pub fn main<I, T>(args: I, me: Launcher) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    if matches!(cli.command, Command::Run(_)) {
        // Before any thread allocates (the signal watcher below is the first).
        crate::memory::one_heap_arena();
    }
    if !matches!(cli.command, Command::Child) {
        // Stopping bitexact (Ctrl-C, CI's SIGTERM) kills every child process group first.
        if let Err(e) = crate::process::install_signal_handlers() {
            eprintln!("warning: no signal handlers (children may outlive a stopped bitexact): {e}");
        }
    }
    let result = dispatch(cli.command, me);
    while crate::process::stopping() {
        // A stop signal arrived: the signal watcher kills what is left and exits with
        // 128 + signal; this thread must not report a killed child as a failure first.
        std::thread::park();
    }
    let code = match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            if usage::is_usage(&e) {
                2
            } else {
                1
            }
        }
    };
    let _ = std::io::stdout().flush();
    code
}

/// The command line's definition as clap sees it (every command, flag and help text), for
/// tools that describe it: `tests/it/docs_reference.rs` generates `docs/reference/cli.md` from it.
/// Nothing on the command line's own path calls it.
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

/// `bitexact run` for a face that needs the report itself, not one rendering of it: the
/// pytest plugin's driver process (a bare interpreter that loads the native module, through
/// `bitexact._native.run_report`), which renders it as text for the failing test and as JSON
/// for the result object. `args` are a whole command line (`bitexact run [FLAGS] -- CMD …`),
/// resolved exactly as [`main`] resolves it. As in [`main`], stop signals kill every child
/// process group first. Nothing is printed but usage errors and errors, on standard error as
/// [`main`] prints them. Returns the exit code, and the report when the program was checked.
pub fn run_report<I, T>(args: I) -> (u8, Option<crate::outcome::Report>)
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let a = match Cli::try_parse_from(args) {
        Ok(Cli {
            command: Command::Run(a),
            ..
        }) => a,
        Ok(_) => {
            eprintln!("error: run_report takes a `bitexact run` command line");
            return (2, None);
        }
        Err(e) => {
            let _ = e.print();
            return (if e.use_stderr() { 2 } else { 0 }, None);
        }
    };
    crate::memory::one_heap_arena();
    if let Err(e) = crate::process::install_signal_handlers() {
        eprintln!("warning: no signal handlers (children may outlive a stopped bitexact): {e}");
    }
    let result = ProgramSettings::resolve(*a).and_then(|s| {
        crate::suite::run(
            &[crate::suite::Subject::Program(&s.program)],
            &s.config,
            &mut |_| {},
        )
    });
    while crate::process::stopping() {
        std::thread::park(); // the signal watcher exits the process (see `main`)
    }
    match result {
        Ok(report) => (report.exit_code() as u8, Some(report)),
        Err(e) => {
            eprintln!("error: {e:#}");
            (if usage::is_usage(&e) { 2 } else { 1 }, None)
        }
    }
}

/// Resolves `command`'s settings and runs it.
fn dispatch(command: Command, me: Launcher) -> Result<u8> {
    match command {
        Command::Report(a) => commands::report::report(ReportSettings::resolve(a, me)?),
        Command::List(a) => commands::list::list(ListSettings::resolve(a)?),
        Command::Snapshot { command } => {
            commands::snapshot::snapshot(SnapshotSettings::resolve(command)?)
        }
        Command::DiffTrace { a, b, format } => {
            commands::diff_trace::diff_trace(&a, &b, format == "json")
        }
        Command::Run(a) => commands::run::run(ProgramSettings::resolve(*a)?),
        Command::Child => crate::isolate::child_main(&crate::cases::find).map(|_| 0),
    }
}
