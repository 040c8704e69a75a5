//! The `bitexact` command line: `report`, `run`, `list`, `snapshot update|review`,
//! `diff-trace`. Flags become validated settings ([`flags`]); the library runs them
//! ([`crate::suite`]); this file renders and writes. Two faces call [`main`]: the `bitexact`
//! binary (`src/main.rs`) and the Python package's console script (`bitexact._native.main`),
//! so `pip install` gives the same command. Exit codes: 0 everything that ran passed, 1 a difference,
//! mismatch, missed planted bug or error, 2 bad usage or unreadable input (before any work).

pub mod commands;
pub mod flags;
pub mod run_flags;

use crate::harness::Launcher;
use crate::report::{self, Format};
use crate::snapshot::{self, Update};
use crate::suite::{self, Event, Subject, SuiteConfig};
use crate::trace::{self, TraceFile};
use crate::Case;
use anyhow::{Context, Result};
use clap::Parser;
use commands::{Cli, Command};
use flags::{usage, ReportArgs, SnapshotCommand, UsageError};
use indicatif::{ProgressBar, ProgressStyle};
use run_flags::ProgramArgs;
use std::ffi::OsString;
use std::io::Write;
use std::path::Path;

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
    let result = match cli.command {
        Command::Report(args) => report(args, me),
        Command::List { filter } => list(filter.as_deref()),
        Command::Snapshot { command } => snapshot(command),
        Command::DiffTrace { a, b } => diff_trace(&a, &b),
        Command::Run(args) => run(*args),
        Command::Child => crate::isolate::child_main(&crate::cases::find).map(|_| 0),
    };
    while crate::process::stopping() {
        // A stop signal arrived: the signal watcher kills what is left and exits with
        // 128 + signal; this thread must not report a killed child as a failure first.
        std::thread::park();
    }
    let code = match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            if e.downcast_ref::<UsageError>().is_some() {
                2
            } else {
                1
            }
        }
    };
    let _ = std::io::stdout().flush();
    code
}

fn list(filter: Option<&str>) -> Result<u8> {
    let selected = flags::select(filter)?;
    let w = selected.iter().map(|c| c.name().len()).max().unwrap_or(4);
    let mut out = String::new();
    for c in &selected {
        let backends: Vec<&str> = c.backends().iter().map(|b| b.name()).collect();
        let mut line = format!(
            "{:w$}  {:9}  {}",
            c.name(),
            backends.join(","),
            c.ops().join(",")
        );
        if let Some(bug) = c.planted_bug() {
            line.push_str(&format!("  [planted bug: {bug}]"));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    print!("{out}");
    Ok(0)
}

fn report(a: ReportArgs, me: Launcher) -> Result<u8> {
    let config = a.config(me)?;
    let selected = flags::select(a.filter.as_deref())?;
    validate_outputs(
        a.output.out.as_deref(),
        a.trace.as_deref(),
        a.snapshots.as_deref(),
    )?;
    let cases: Vec<&dyn Case> = selected.iter().map(|c| c.as_ref()).collect();
    let report = run_with_progress(&Subject::cases(&cases), &config)?;
    if let Some(path) = &a.trace {
        let file = report.traces()?;
        write_file(path, serde_json::to_string_pretty(&file)?.as_bytes())?;
    }
    emit(a.output.format, a.output.out.as_deref(), &report)?;
    Ok(report.exit_code() as u8)
}

fn run(a: ProgramArgs) -> Result<u8> {
    let (program, config) = a.config()?;
    validate_outputs(a.output.out.as_deref(), None, config.snapshots.as_deref())?;
    let report = run_with_progress(&[Subject::Program(&program)], &config)?;
    emit(a.output.format, a.output.out.as_deref(), &report)?;
    Ok(report.exit_code() as u8)
}

/// Checks `--out`, `--trace` and `--snapshots` before any work: exit 2 naming the path.
fn validate_outputs(
    out: Option<&Path>,
    trace: Option<&Path>,
    snapshots: Option<&Path>,
) -> Result<()> {
    for path in out.iter().chain(trace.iter()) {
        crate::atomic::ensure_writable(path).map_err(|e| usage(format!("{e:#}")))?;
    }
    if out.is_some() && out == trace {
        return Err(usage("--out and --trace name the same file"));
    }
    if let Some(dir) = snapshots {
        if !dir.is_dir() {
            return Err(usage(format!(
                "--snapshots {}: not a directory",
                dir.display()
            )));
        }
    }
    Ok(())
}

/// Runs the suite with a progress bar on standard error, drawn only on a terminal and never in
/// CI (`CI` set), so logs and piped output stay clean.
fn run_with_progress(subjects: &[Subject], config: &SuiteConfig) -> Result<crate::outcome::Report> {
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

/// Renders `report` and writes it to `out` (atomically) or standard output.
fn emit(format: Format, out: Option<&Path>, report: &crate::outcome::Report) -> Result<()> {
    while crate::process::stopping() {
        std::thread::park(); // no report of runs a stop signal cut short (see `main`)
    }
    let rendered = report::render(format, report);
    match out {
        Some(path) => write_file(path, rendered.as_bytes()),
        None => std::io::stdout()
            .write_all(rendered.as_bytes())
            .context("writing the report"),
    }
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    crate::atomic::write_atomically(path, bytes)
}

fn snapshot(command: SnapshotCommand) -> Result<u8> {
    let a = match command {
        SnapshotCommand::Review { snapshots, accept } => {
            let review =
                snapshot::review(&snapshots, accept).map_err(|e| usage(format!("{e:#}")))?;
            print!("{review}");
            return Ok(u8::from(!review.is_ok()));
        }
        SnapshotCommand::Update(a) => a,
    };
    if snapshot::in_ci() && !a.force {
        return Err(usage(
            "refusing to write snapshots in CI (CI is set); pass --force to write them anyway",
        ));
    }
    if a.snapshots.exists() && !a.snapshots.is_dir() {
        return Err(usage(format!(
            "--snapshots {}: not a directory",
            a.snapshots.display()
        )));
    }
    let controls = a.controls.controls()?;
    let config = SuiteConfig::new(
        flags::backends(a.backend),
        controls.clone(),
        flags::runs(a.runs)?,
    );
    // Planted bugs are nondeterministic on purpose: they have no snapshot.
    let selected: Vec<_> = flags::select(a.filter.as_deref())?
        .into_iter()
        .filter(|c| c.planted_bug().is_none())
        .collect();
    let cases: Vec<&dyn Case> = selected.iter().map(|c| c.as_ref()).collect();
    let report = suite::run(&Subject::cases(&cases), &config, &mut |_| {})?;
    let mut failed = false;
    let updates = snapshot::update_each(&a.snapshots, &report.cases, &controls, a.force)?;
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

/// Exit 0 when every case in either file has identical traces, 1 when any differs or is in one
/// file only, 2 when a file is unreadable or not a valid trace file (version, duplicates).
/// Program op traces (`bitexact run --trace ops --keep DIR`: a run directory or its
/// `.bitexact-trace-rank<R>.jsonl`) are compared the same way, with the same answer.
fn diff_trace(a: &Path, b: &Path) -> Result<u8> {
    let program = |p: &Path| p.is_dir() || p.extension().is_some_and(|x| x == "jsonl");
    if program(a) || program(b) {
        let load = |p: &Path| -> Result<Vec<trace::TraceEntry>> {
            let t = if p.is_dir() {
                trace::program::read_dir(p)?.ok_or_else(|| {
                    anyhow::anyhow!(
                        "{}: no {}<R>.jsonl in it (keep runs with `bitexact run --trace ops --keep DIR`)",
                        p.display(),
                        crate::protocol::TRACE_FILE_PREFIX
                    )
                })?
            } else {
                trace::program::read_jsonl(p)?
            };
            Ok(t)
        };
        let bad = |e: anyhow::Error| usage(format!("{e:#}"));
        let (ta, tb) = (load(a).map_err(bad)?, load(b).map_err(bad)?);
        return Ok(match trace::first_divergence(&ta, &tb) {
            None => {
                println!("identical op traces ({} op calls)", ta.len());
                0
            }
            Some(d) => {
                println!("{}", d.explanation);
                1
            }
        });
    }
    let load = |p: &Path| TraceFile::load(p).map_err(|e| usage(format!("{e:#}")));
    let (ta, tb) = (load(a)?, load(b)?);
    let diffs = trace::diff_files(&ta, &tb);
    if diffs.is_empty() {
        println!("no traced cases in either file");
    }
    let mut differing = 0;
    for (name, backend, d) in diffs {
        match d {
            None => println!("{name} [{backend}]: identical traces"),
            Some(d) => {
                differing += 1;
                println!("{name} [{backend}]: {}", d.explanation);
            }
        }
    }
    Ok(u8::from(differing > 0))
}
