//! The command line's flags: parsed by clap, then validated into the library's
//! settings ([`SuiteConfig`]) before any case runs, so every usage error exits 2 up front.

use crate::backend::Backend;
use crate::controls::{parse_switch, Controls};
use crate::harness::{ChildConfig, Launcher};
use crate::report::Format;
use crate::suite::{self, SuiteConfig};
use crate::vary::{Kind, Spec, Variation};
use crate::Case;
use anyhow::Result;
use clap::{Subcommand, ValueEnum};
use std::path::PathBuf;
use std::time::Duration;

/// Most runs per case: more is a typo, not a plan.
pub const MAX_RUNS: usize = 10_000;
/// Most CPU threads: more would only exhaust the machine.
pub const MAX_THREADS: usize = 1024;
/// Most data-loader workers.
pub const MAX_WORKERS: usize = 256;
/// Longest `--timeout`: one week.
pub const MAX_TIMEOUT_S: f64 = 7.0 * 24.0 * 3600.0;

#[derive(Subcommand)]
pub enum SnapshotCommand {
    /// Run the cases and write their snapshots (`DIR/<class>/<case>@<controls>.snap`).
    /// Refuses in CI (`CI` set) unless --force.
    Update(UpdateArgs),
    /// List pending snapshots (`.snap.new`) with what changed; --accept moves them into place.
    Review {
        /// Snapshot directory.
        #[arg(long, default_value = "snapshots")]
        snapshots: PathBuf,
        /// Accept every pending snapshot (refused in CI).
        #[arg(long)]
        accept: bool,
    },
}

/// The controls a run is made under; flags win over the environment.
#[derive(clap::Args)]
pub struct ControlArgs {
    /// Base seed of every random stream [env: BITEXACT_SEED].
    #[arg(long)]
    seed: Option<u64>,
    /// Deterministic-algorithms switch, on or off [env: BITEXACT_DETERMINISTIC].
    #[arg(long, value_parser = parse_switch)]
    deterministic: Option<bool>,
    /// Autotune switch, on or off [env: BITEXACT_BENCHMARK].
    #[arg(long, value_parser = parse_switch)]
    benchmark: Option<bool>,
    /// Data-loader worker threads, at most 256 [env: BITEXACT_WORKERS].
    #[arg(long)]
    workers: Option<usize>,
    /// CPU thread-pool size, 1 to 1024 [env: BITEXACT_THREADS].
    #[arg(long)]
    pub threads: Option<usize>,
}

impl ControlArgs {
    /// The environment's controls with these flags applied (a flag hides its variable, so a
    /// bad value there does not matter), validated, and exported to the libraries that read
    /// their own variables (e.g. `CUBLAS_WORKSPACE_CONFIG`).
    pub fn controls(&self) -> Result<Controls> {
        let given = |k: &str| match k {
            crate::protocol::SEED_ENV => self.seed.is_some(),
            crate::protocol::DETERMINISTIC_ENV => self.deterministic.is_some(),
            crate::protocol::BENCHMARK_ENV => self.benchmark.is_some(),
            crate::protocol::WORKERS_ENV => self.workers.is_some(),
            crate::protocol::THREADS_ENV => self.threads.is_some(),
            _ => false,
        };
        let mut c = Controls::from_env_where(|k| !given(k)).map_err(|e| usage(format!("{e:#}")))?;
        c.seed = self.seed.unwrap_or(c.seed);
        c.deterministic = self.deterministic.unwrap_or(c.deterministic);
        c.benchmark = self.benchmark.unwrap_or(c.benchmark);
        c.workers = self.workers.unwrap_or(c.workers);
        c.threads = self.threads.unwrap_or(c.threads);
        if c.threads == 0 || c.threads > MAX_THREADS {
            return Err(usage(format!(
                "threads must be between 1 and {MAX_THREADS} (got {}; --threads or BITEXACT_THREADS)",
                c.threads
            )));
        }
        if c.workers > MAX_WORKERS {
            return Err(usage(format!(
                "workers must be at most {MAX_WORKERS} (got {}; --workers or BITEXACT_WORKERS)",
                c.workers
            )));
        }
        c.export_library_env();
        Ok(c)
    }
}

#[derive(clap::Args)]
pub struct UpdateArgs {
    /// Snapshot directory.
    #[arg(long, default_value = "snapshots")]
    pub snapshots: PathBuf,
    /// Only cases whose name contains this (comma-separated; `*` globs).
    #[arg(long)]
    pub filter: Option<String>,
    /// Backends to run on (default: cpu, plus cuda when a driver is present).
    #[arg(long, value_enum)]
    pub backend: Option<BackendArg>,
    /// Runs per case (2 to 10000): only deterministic results are written.
    #[arg(long, default_value_t = 2)]
    pub runs: usize,
    #[command(flatten)]
    pub controls: ControlArgs,
    /// Write even in CI.
    #[arg(long)]
    pub force: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    Cpu,
    Cuda,
    /// CPU and CUDA.
    All,
}

/// The backends a `--backend` value names (default: the CPU, plus CUDA when present).
pub fn backends(arg: Option<BackendArg>) -> Vec<Backend> {
    match arg {
        Some(BackendArg::Cpu) => vec![Backend::Cpu],
        Some(BackendArg::Cuda) => vec![Backend::Cuda],
        Some(BackendArg::All) => vec![Backend::Cpu, Backend::Cuda],
        None => suite::default_backends(),
    }
}

#[derive(clap::Args)]
pub struct ReportArgs {
    /// Backends to run on (default: cpu, plus cuda when a driver is present); `all` runs both
    /// (CUDA cases are skipped with the reason when there is no GPU) and compares them.
    #[arg(long, value_enum)]
    pub backend: Option<BackendArg>,
    /// Only cases whose name contains this (comma-separated; `*` globs).
    #[arg(long)]
    pub filter: Option<String>,
    /// Runs per case (2 to 10000).
    #[arg(long, default_value_t = 2)]
    pub runs: usize,
    #[command(flatten)]
    pub controls: ControlArgs,
    #[command(flatten)]
    pub output: OutputArgs,
    #[arg(long, help = Variation::help(Kind::Case))]
    pub vary: Option<String>,
    /// Run each case in its own child process, so crashes, hangs and OOM become errors
    /// (default time limit 600 s per case; see --timeout).
    #[arg(long)]
    pub isolate: bool,
    /// Seconds before an isolated case (or a child run) is killed with its process group.
    #[arg(long)]
    pub timeout: Option<f64>,
    #[command(flatten)]
    pub memory: MemoryArgs,
    /// Record the digest of every op's inputs and output and save the traces to this file.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Compare every deterministic case with its committed snapshot under this directory
    /// (matched / missing / mismatch per case; a difference is `snapshot-mismatch`).
    #[arg(long)]
    pub snapshots: Option<PathBuf>,
}

/// Where the report goes and in which format (`report` and `run`).
#[derive(clap::Args)]
pub struct OutputArgs {
    /// Output format: text, json, junit or markdown.
    #[arg(long, default_value = "text", value_parser = Format::parse)]
    pub format: Format,
    /// Write the report to this file instead of standard output.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// The smallest `--memory-limit`: below it not even a runtime starts.
pub const MIN_MEMORY_LIMIT_MB: u64 = 64;

/// `--memory-limit` (`report --isolate` and `run`).
#[derive(clap::Args)]
pub struct MemoryArgs {
    /// Address-space limit in MiB of each child: an isolated case (`report` needs --isolate)
    /// or a run of the program. At least 64.
    #[arg(long, value_name = "MB")]
    pub memory_limit: Option<u64>,
}

impl MemoryArgs {
    /// The limit, checked against [`MIN_MEMORY_LIMIT_MB`].
    pub fn checked(&self) -> Result<Option<u64>> {
        match self.memory_limit {
            Some(mb) if mb < MIN_MEMORY_LIMIT_MB => Err(usage(format!(
                "--memory-limit must be at least {MIN_MEMORY_LIMIT_MB} MiB (got {mb}): a smaller \
                 limit cannot even start a runtime"
            ))),
            limit => Ok(limit),
        }
    }
}

/// A usage error (bad flag value, a filter that matches nothing): exit code 2.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for UsageError {}

/// A usage error as an `anyhow::Error`.
pub fn usage(msg: impl Into<String>) -> anyhow::Error {
    UsageError(msg.into()).into()
}

/// Checks `--runs`.
pub fn runs(runs: usize) -> Result<usize> {
    if !(2..=MAX_RUNS).contains(&runs) {
        return Err(usage(format!(
            "--runs must be between 2 and {MAX_RUNS} (got {runs})"
        )));
    }
    Ok(runs)
}

/// Checks `--timeout` (positive, finite, at most a week).
pub fn timeout(t: Option<f64>) -> Result<Option<Duration>> {
    match t {
        None => Ok(None),
        Some(t) if t.is_finite() && t > 0.0 && t <= MAX_TIMEOUT_S => {
            Ok(Some(Duration::from_secs_f64(t)))
        }
        Some(t) => Err(usage(format!(
            "--timeout must be a positive number of seconds up to {MAX_TIMEOUT_S} (got {t})"
        ))),
    }
}

/// The built-in cases matching `filter`; none is a usage error.
pub fn select(filter: Option<&str>) -> Result<Vec<Box<dyn Case>>> {
    let selected = crate::cases::select(filter);
    if selected.is_empty() {
        return Err(usage(format!(
            "no case matches --filter {:?}; `bitexact list` shows them all",
            filter.unwrap_or("")
        )));
    }
    Ok(selected)
}

impl ReportArgs {
    /// The validated suite settings these flags describe.
    pub fn config(&self, me: Launcher) -> Result<SuiteConfig> {
        let mut controls = self.controls.controls()?;
        let spec = match &self.vary {
            Some(v) => Spec::parse(v, Kind::Case).map_err(|e| usage(format!("--vary: {e}")))?,
            None => Spec::default(),
        };
        spec.apply(&mut controls);
        let mut config = SuiteConfig::new(backends(self.backend), controls, runs(self.runs)?);
        let o = &mut config.options;
        o.vary = spec.variations;
        if self.memory.memory_limit.is_some() && !self.isolate {
            return Err(usage(
                "--memory-limit applies to isolated cases only: add --isolate",
            ));
        }
        let mut children = ChildConfig::new(me);
        children.timeout = timeout(self.timeout)?;
        children.memory_limit_mb = self.memory.checked()?;
        o.trace = self.trace.is_some();
        o.isolate = self.isolate.then(|| children.clone());
        o.children = Some(children);
        config.snapshots = self.snapshots.clone();
        config.cross_device = self.backend == Some(BackendArg::All);
        config.cost_of_determinism = true;
        Ok(config)
    }
}
