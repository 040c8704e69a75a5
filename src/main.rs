//! The `bitexact` command line: `report`, `list`, `snapshot update|review`, `diff-trace`.

use anyhow::{bail, Context, Result};
use bitexact::backend::Backend;
use bitexact::controls::{parse_switch, Controls};
use bitexact::harness::{check_suite, Options};
use bitexact::isolate::{self, ChildConfig};
use bitexact::report::{json, junit, markdown, text, Report};
use bitexact::trace::{self, CaseTraces, TraceFile};
use bitexact::vary::Variation;
use bitexact::{cases, cost};
use clap::{Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Counts heap bytes so the report can show peak memory per run.
#[global_allocator]
static ALLOC: bitexact::memory::CountingAlloc = bitexact::memory::CountingAlloc;

#[derive(Parser)]
#[command(
    name = "bitexact",
    version,
    about = "Determinism test harness for GPU kernels and training steps"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run every matching case K times per backend, compare the runs bit for bit, and report.
    Report(ReportArgs),
    /// List every case with its backends and the ops it uses.
    List {
        /// Only cases whose name contains this (comma-separated; `*` globs).
        #[arg(long)]
        filter: Option<String>,
    },
    /// Write or review committed snapshots (see `bitexact snapshot --help`).
    Snapshot {
        #[command(subcommand)]
        command: SnapshotCommand,
    },
    /// Compare two trace files (from `report --trace FILE`) and name the first diverging op.
    DiffTrace {
        /// First trace file.
        a: PathBuf,
        /// Second trace file.
        b: PathBuf,
    },
    /// Internal: run a case in a child process (used by --isolate and --vary process).
    #[command(name = "__child", hide = true)]
    Child {
        mode: String,
        #[arg(long)]
        case: String,
        #[arg(long, value_enum)]
        backend: BackendArg,
        #[arg(long)]
        json: String,
        #[arg(long)]
        out: PathBuf,
        #[arg(long)]
        memory_limit: Option<u64>,
    },
}

#[derive(Subcommand)]
enum SnapshotCommand {
    /// Run the cases and write their snapshots (`DIR/<class>/<case>@<controls>.snap`).
    /// Refuses in CI (`CI` set) unless --force.
    Update(UpdateArgs),
    /// List pending snapshots (`.snap.new`) with what changed; --accept moves them into place.
    Review {
        /// Snapshot directory.
        #[arg(long, default_value = "snapshots")]
        snapshots: PathBuf,
        /// Accept every pending snapshot.
        #[arg(long)]
        accept: bool,
    },
}

/// The controls a run is made under; flags win over the environment.
#[derive(clap::Args)]
struct ControlArgs {
    /// Base seed of every random stream [env: BITEXACT_SEED].
    #[arg(long)]
    seed: Option<u64>,
    /// Deterministic-algorithms switch, on or off [env: BITEXACT_DETERMINISTIC].
    #[arg(long, value_parser = parse_switch)]
    deterministic: Option<bool>,
    /// Autotune switch, on or off [env: BITEXACT_BENCHMARK].
    #[arg(long, value_parser = parse_switch)]
    benchmark: Option<bool>,
    /// Data-loader worker threads [env: BITEXACT_WORKERS].
    #[arg(long)]
    workers: Option<usize>,
    /// CPU thread-pool size [env: BITEXACT_THREADS].
    #[arg(long)]
    threads: Option<usize>,
}

impl ControlArgs {
    /// The environment's controls with these flags applied, exported to the libraries that
    /// read their own variables (e.g. `CUBLAS_WORKSPACE_CONFIG`).
    fn controls(&self) -> Result<Controls> {
        let mut c = Controls::from_env().map_err(|e| usage(format!("{e:#}")))?;
        c.seed = self.seed.unwrap_or(c.seed);
        c.deterministic = self.deterministic.unwrap_or(c.deterministic);
        c.benchmark = self.benchmark.unwrap_or(c.benchmark);
        c.workers = self.workers.unwrap_or(c.workers);
        if self.threads == Some(0) {
            return Err(usage("--threads must be at least 1"));
        }
        c.threads = self.threads.unwrap_or(c.threads);
        c.export_library_env();
        Ok(c)
    }
}

#[derive(clap::Args)]
struct UpdateArgs {
    /// Snapshot directory.
    #[arg(long, default_value = "snapshots")]
    snapshots: PathBuf,
    /// Only cases whose name contains this (comma-separated; `*` globs).
    #[arg(long)]
    filter: Option<String>,
    /// Backends to run on (default: cpu, plus cuda when a driver is present).
    #[arg(long, value_enum)]
    backend: Option<BackendArg>,
    /// Runs per case (at least 2): only deterministic results are written.
    #[arg(long, default_value_t = 2)]
    runs: usize,
    #[command(flatten)]
    controls: ControlArgs,
    /// Write even in CI.
    #[arg(long)]
    force: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum BackendArg {
    Cpu,
    Cuda,
    /// CPU and CUDA.
    All,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Text,
    Json,
    /// JUnit XML, one testcase per case and backend.
    Junit,
    /// A Markdown table for a pull-request comment.
    Markdown,
}

#[derive(clap::Args)]
struct ReportArgs {
    /// Backends to run on (default: cpu, plus cuda when a driver is present); `all` runs both
    /// (CUDA cases are skipped with the reason when there is no GPU) and compares them.
    #[arg(long, value_enum)]
    backend: Option<BackendArg>,
    /// Only cases whose name contains this (comma-separated; `*` globs).
    #[arg(long)]
    filter: Option<String>,
    /// Runs per case (at least 2).
    #[arg(long, default_value_t = 2)]
    runs: usize,
    #[command(flatten)]
    controls: ControlArgs,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    /// Write the report to this file instead of standard output.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Vary conditions between runs and blame the ones that break a case: `all` or a list of
    /// threads, workers, poison, process, order, batch.
    #[arg(long)]
    vary: Option<String>,
    /// Run each case in its own child process, so crashes, hangs and OOM become errors.
    #[arg(long)]
    isolate: bool,
    /// Seconds before an isolated case (or a child run) is killed and reported as hung.
    #[arg(long)]
    timeout: Option<f64>,
    /// Address-space limit of each isolated case in MiB.
    #[arg(long)]
    memory_limit: Option<u64>,
    /// Record the digest of every op's inputs and output and save the traces to this file.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Compare every deterministic case with its committed snapshot under this directory
    /// (a difference is `snapshot-mismatch`, with what changed and why).
    #[arg(long)]
    snapshots: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Report(args) => report(args),
        Command::List { filter } => list(filter.as_deref()),
        Command::Snapshot { command } => snapshot(command),
        Command::DiffTrace { a, b } => diff_trace(&a, &b),
        Command::Child {
            mode,
            case,
            backend,
            json,
            out,
            memory_limit,
        } => {
            let backend = if backend == BackendArg::Cuda {
                Backend::Cuda
            } else {
                Backend::Cpu
            };
            isolate::child_main(&mode, &case, backend, &json, &out, memory_limit).map(|_| 0)
        }
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => match e.downcast_ref::<UsageError>() {
            Some(u) => {
                eprintln!("error: {}", u.0);
                ExitCode::from(2)
            }
            None => {
                eprintln!("error: {e:#}");
                ExitCode::from(1)
            }
        },
    }
}

/// A usage error (bad flag value, a filter that matches nothing): exit code 2.
#[derive(Debug)]
struct UsageError(String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for UsageError {}

fn usage(msg: impl Into<String>) -> anyhow::Error {
    UsageError(msg.into()).into()
}

fn select(filter: Option<&str>) -> Result<Vec<Box<dyn bitexact::Case>>> {
    let selected = cases::select(filter);
    if selected.is_empty() {
        return Err(usage(format!(
            "no case matches --filter {:?}; `bitexact list` shows them all",
            filter.unwrap_or("")
        )));
    }
    Ok(selected)
}

fn list(filter: Option<&str>) -> Result<u8> {
    let selected = select(filter)?;
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

fn report(a: ReportArgs) -> Result<u8> {
    if a.runs < 2 {
        return Err(usage(format!("--runs must be at least 2 (got {})", a.runs)));
    }
    let controls = a.controls.controls()?;
    let selected = select(a.filter.as_deref())?;
    let backends = match a.backend {
        Some(BackendArg::Cpu) => vec![Backend::Cpu],
        Some(BackendArg::Cuda) => vec![Backend::Cuda],
        Some(BackendArg::All) => vec![Backend::Cpu, Backend::Cuda],
        None if Backend::Cuda.unavailable_reason().is_none() => vec![Backend::Cpu, Backend::Cuda],
        None => vec![Backend::Cpu],
    };
    let vary = match &a.vary {
        Some(v) => Variation::parse_list(v).map_err(|e| usage(format!("--vary: {e}")))?,
        None => Vec::new(),
    };
    if a.timeout.is_some_and(|t| t.is_nan() || t <= 0.0) {
        return Err(usage("--timeout must be a positive number of seconds"));
    }
    let mut children = ChildConfig::current()?;
    children.timeout = a.timeout.map(Duration::from_secs_f64);
    children.memory_limit_mb = a.memory_limit;
    let opts = Options {
        runs: a.runs,
        vary,
        trace: a.trace.is_some(),
        localize: true,
        blame: true,
        isolate: a.isolate.then(|| children.clone()),
        children: Some(children),
        isolated: false,
    };
    let bar = progress_bar(&selected, &backends);
    let mut reports = check_suite(&selected, &backends, &controls, &opts, |r| {
        bar.set_message(format!("{} ({})", r.name, r.verdict.name()));
        bar.inc(1);
    });
    bar.finish_and_clear();
    if let Some(dir) = &a.snapshots {
        bitexact::snapshot::check_reports(dir, &mut reports, &controls);
    }
    if let Some(path) = &a.trace {
        let file = TraceFile {
            version: 1,
            platform: serde_json::to_value(bitexact::platform::Platform::detect())?,
            cases: reports
                .iter()
                .filter(|r| !r.traces.is_empty())
                .map(|r| CaseTraces {
                    name: r.name.clone(),
                    backend: r.backend.name().into(),
                    runs: r.traces.clone(),
                })
                .collect(),
        };
        write_atomically(path, serde_json::to_string_pretty(&file)?.as_bytes())?;
    }
    let mut cost = Vec::new();
    if !controls.deterministic {
        for &backend in &backends {
            if backend.unavailable_reason().is_none() {
                cost.extend(cost::cost_of_determinism(backend, &controls, 3)?);
            }
        }
    }
    let mut report = Report::new(controls.clone(), a.runs, reports, cost);
    if a.backend == Some(BackendArg::All) {
        report.cross_device = bitexact::cross::compare(&selected, &report.cases, &controls);
    }
    let rendered = match a.format {
        Format::Text => text::render(&report),
        Format::Json => json::render(&report),
        Format::Junit => junit::render(&report),
        Format::Markdown => markdown::render(&report),
    };
    match &a.out {
        Some(path) => write_atomically(path, rendered.as_bytes())?,
        None => std::io::stdout()
            .write_all(rendered.as_bytes())
            .context("writing the report")?,
    }
    Ok(report.exit_code() as u8)
}

fn backends_of(arg: Option<BackendArg>) -> Vec<Backend> {
    match arg {
        Some(BackendArg::Cpu) => vec![Backend::Cpu],
        Some(BackendArg::Cuda) => vec![Backend::Cuda],
        Some(BackendArg::All) => vec![Backend::Cpu, Backend::Cuda],
        None if Backend::Cuda.unavailable_reason().is_none() => vec![Backend::Cpu, Backend::Cuda],
        None => vec![Backend::Cpu],
    }
}

fn snapshot(command: SnapshotCommand) -> Result<u8> {
    use bitexact::snapshot::{self, Update};
    let a = match command {
        SnapshotCommand::Review { snapshots, accept } => {
            print!("{}", snapshot::review(&snapshots, accept)?);
            return Ok(0);
        }
        SnapshotCommand::Update(a) => a,
    };
    if a.runs < 2 {
        return Err(usage(format!("--runs must be at least 2 (got {})", a.runs)));
    }
    if snapshot::in_ci() && !a.force {
        bail!("refusing to write snapshots in CI (CI is set); pass --force to write them anyway");
    }
    let controls = a.controls.controls()?;
    // Planted bugs are nondeterministic on purpose: they have no snapshot.
    let selected: Vec<_> = select(a.filter.as_deref())?
        .into_iter()
        .filter(|c| c.planted_bug().is_none())
        .collect();
    let reports = check_suite(
        &selected,
        &backends_of(a.backend),
        &controls,
        &Options::runs(a.runs),
        |_| {},
    );
    let mut failed = false;
    for (r, u) in reports.iter().zip(snapshot::update(
        &a.snapshots,
        &reports,
        &controls,
        a.force,
    )?) {
        match u {
            Update::Written(p) => println!("written    {}", p.display()),
            Update::Updated(p, why) => println!("updated    {}\n    {why}", p.display()),
            Update::Unchanged(p) => println!("unchanged  {}", p.display()),
            Update::NotWritten(why) => {
                failed |= r.verdict.is_failure();
                println!("not written: {why}");
            }
        }
    }
    Ok(u8::from(failed))
}

fn diff_trace(a: &std::path::Path, b: &std::path::Path) -> Result<u8> {
    let (ta, tb) = (TraceFile::load(a)?, TraceFile::load(b)?);
    let mut differing = 0;
    for (name, backend, d) in trace::diff_files(&ta, &tb) {
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

/// Writes `bytes` to a temporary file beside `path`, then renames it into place.
fn write_atomically(path: &std::path::Path, bytes: &[u8]) -> Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    if !dir.is_dir() {
        bail!(
            "cannot write {}: directory {} does not exist",
            path.display(),
            dir.display()
        );
    }
    let tmp = dir.join(format!(
        ".{}.tmp{}",
        path.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("report"),
        std::process::id()
    ));
    std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path)
        .with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))
}

/// A progress bar on standard error over every (case, backend) pair, drawn only on a terminal
/// and never in CI (`CI` set), so logs and piped output stay clean.
fn progress_bar(cases: &[Box<dyn bitexact::Case>], backends: &[Backend]) -> ProgressBar {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() || std::env::var_os("CI").is_some() {
        return ProgressBar::hidden();
    }
    let total = backends
        .iter()
        .map(|b| cases.iter().filter(|c| c.backends().contains(b)).count())
        .sum::<usize>();
    let bar = ProgressBar::new(total as u64);
    if let Ok(style) = ProgressStyle::with_template("{bar:30} {pos}/{len} {elapsed} {wide_msg}") {
        bar.set_style(style);
    }
    bar
}
