//! The one place where parsed flags ([`super::args`]), the project file (`run` only:
//! `bitexact.toml` or `[tool.bitexact]`, see [`crate::program::project`]) and the environment
//! (`BITEXACT_*` controls, `CI`) become settings: each command's `XSettings::resolve`. Flags win
//! over the project file, which wins over the defaults; a control flag hides its variable.
//! Everything is validated here, before any work, so every usage error exits 2 up front; the
//! commands ([`super::commands`]) only act on what this returns. `run`'s settings, the only
//! ones with a project file, are in [`run`]; the checks every command shares are here.

mod run;
#[cfg(test)]
mod tests;

pub(crate) use run::ProgramSettings;

use super::args::{
    BackendArg, BackendArgs, ControlArgs, FilterArgs, MemoryArgs, OutputArgs, ReportArgs,
    SnapshotCommand,
};
use super::usage::usage;
use crate::backend::Backend;
use crate::controls::Controls;
use crate::harness::{ChildConfig, Launcher};
use crate::protocol;
use crate::report::Format;
use crate::suite::{self, SuiteConfig};
use crate::vary::{Kind, Spec};
use crate::Case;
use anyhow::Result;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Most runs per case: more is a typo, not a plan.
const MAX_RUNS: usize = 10_000;
/// Most CPU threads: more would only exhaust the machine.
const MAX_THREADS: usize = 1024;
/// Most data-loader workers.
const MAX_WORKERS: usize = 256;
/// Longest `--timeout`: one week.
const MAX_TIMEOUT_S: f64 = 7.0 * 24.0 * 3600.0;
/// The smallest `--memory-limit`: below it not even a runtime starts.
const MIN_MEMORY_LIMIT_MB: u64 = 64;

/// Where a report goes and in which format (`report`, `run`).
pub(crate) struct Output {
    /// The report's format.
    pub(crate) format: Format,
    /// The file to write it to (atomically), or standard output.
    pub(crate) out: Option<PathBuf>,
}

/// `list`: the cases to list.
pub(crate) struct ListSettings {
    /// The matching built-in cases (at least one).
    pub(crate) cases: Vec<Box<dyn Case>>,
}

impl ListSettings {
    /// The cases `--filter` selects.
    pub(crate) fn resolve(args: FilterArgs) -> Result<Self> {
        Ok(ListSettings {
            cases: select(&args)?,
        })
    }
}

/// `report`: the suite to run over the selected cases, and where its results go.
pub(crate) struct ReportSettings {
    /// Backends, controls, runs, variations, children, snapshots.
    pub(crate) config: SuiteConfig,
    /// The matching built-in cases (at least one).
    pub(crate) cases: Vec<Box<dyn Case>>,
    /// `--trace FILE`: where the op traces go.
    pub(crate) trace: Option<PathBuf>,
    /// The report's format and destination.
    pub(crate) output: Output,
}

impl ReportSettings {
    /// `report`'s flags and the environment's controls, validated; `me` starts children
    /// (`--isolate`, `--vary process`).
    pub(crate) fn resolve(args: ReportArgs, me: Launcher) -> Result<Self> {
        let mut controls = controls(&args.controls)?;
        let spec = vary(args.vary.as_deref(), Kind::Case)?;
        spec.apply(&mut controls);
        let mut config = SuiteConfig::new(backends(&args.backend), controls, runs(args.runs)?);
        let o = &mut config.options;
        o.vary = spec.variations;
        if args.memory.memory_limit.is_some() && !args.isolate {
            return Err(usage(
                "--memory-limit applies to isolated cases only: add --isolate",
            ));
        }
        let mut children = ChildConfig::new(me);
        children.timeout = timeout(args.timeout)?;
        children.memory_limit_mb = memory_limit(&args.memory)?;
        o.trace = args.trace.is_some();
        o.isolate = args.isolate.then(|| children.clone());
        o.children = Some(children);
        config.snapshots = args.snapshots;
        config.cross_device = args.backend.backend == Some(BackendArg::All);
        config.cost_of_determinism = true;
        let cases = select(&args.filter)?;
        let output = outputs(
            args.output,
            args.trace.as_deref(),
            config.snapshots.as_deref(),
        )?;
        Ok(ReportSettings {
            config,
            cases,
            trace: args.trace,
            output,
        })
    }
}

/// `snapshot review` or `snapshot update`.
pub(crate) enum SnapshotSettings {
    /// List (and with `accept`, accept) the pending snapshots under `snapshots`.
    Review {
        /// The snapshot directory.
        snapshots: PathBuf,
        /// `--accept`.
        accept: bool,
    },
    /// Run cases and write their snapshots.
    Update(Box<UpdateSettings>),
}

/// `snapshot update`: the cases to snapshot, how to run them, and where to write.
pub(crate) struct UpdateSettings {
    /// The snapshot directory (absent or a directory).
    pub(crate) snapshots: PathBuf,
    /// `--force`: write in CI, and over existing snapshots that differ.
    pub(crate) force: bool,
    /// Backends, controls and runs.
    pub(crate) config: SuiteConfig,
    /// The matching built-in cases without a planted bug (which has no snapshot).
    pub(crate) cases: Vec<Box<dyn Case>>,
}

impl SnapshotSettings {
    /// `snapshot`'s flags, the environment's controls and `CI`, validated.
    pub(crate) fn resolve(command: SnapshotCommand) -> Result<Self> {
        let a = match command {
            SnapshotCommand::Review { dir, accept } => {
                return Ok(SnapshotSettings::Review {
                    snapshots: dir.snapshots,
                    accept,
                })
            }
            SnapshotCommand::Update(a) => a,
        };
        let snapshots = a.dir.snapshots;
        if crate::snapshot::in_ci() && !a.force {
            return Err(usage(
                "refusing to write snapshots in CI (CI is set); pass --force to write them anyway",
            ));
        }
        if snapshots.exists() && !snapshots.is_dir() {
            return Err(usage(format!(
                "--snapshots {}: not a directory",
                snapshots.display()
            )));
        }
        let controls = controls(&a.controls)?;
        let config = SuiteConfig::new(backends(&a.backend), controls, runs(a.runs)?);
        // Planted bugs are nondeterministic on purpose: they have no snapshot.
        let cases = select(&a.filter)?
            .into_iter()
            .filter(|c| c.planted_bug().is_none())
            .collect();
        Ok(SnapshotSettings::Update(Box::new(UpdateSettings {
            snapshots,
            force: a.force,
            config,
            cases,
        })))
    }
}

/// The environment's controls with the flags applied (a flag hides its variable, so a bad
/// value there does not matter), validated, and exported to the libraries that read their own
/// variables (e.g. `CUBLAS_WORKSPACE_CONFIG`).
fn controls(a: &ControlArgs) -> Result<Controls> {
    let given = |k: &str| match k {
        protocol::SEED_ENV => a.seed.is_some(),
        protocol::DETERMINISTIC_ENV => a.deterministic.is_some(),
        protocol::BENCHMARK_ENV => a.benchmark.is_some(),
        protocol::WORKERS_ENV => a.workers.is_some(),
        protocol::THREADS_ENV => a.threads.is_some(),
        _ => false,
    };
    let mut c = Controls::from_env_where(|k| !given(k)).map_err(|e| usage(format!("{e:#}")))?;
    c.seed = a.seed.unwrap_or(c.seed);
    c.deterministic = a.deterministic.unwrap_or(c.deterministic);
    c.benchmark = a.benchmark.unwrap_or(c.benchmark);
    c.workers = a.workers.unwrap_or(c.workers);
    c.threads = a.threads.unwrap_or(c.threads);
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

/// The backends `--backend` names (default: the CPU, plus CUDA when present).
fn backends(a: &BackendArgs) -> Vec<Backend> {
    match a.backend {
        Some(BackendArg::Cpu) => vec![Backend::Cpu],
        Some(BackendArg::Cuda) => vec![Backend::Cuda],
        Some(BackendArg::All) => vec![Backend::Cpu, Backend::Cuda],
        None => suite::default_backends(),
    }
}

/// The built-in cases `--filter` matches; none is a usage error.
fn select(a: &FilterArgs) -> Result<Vec<Box<dyn Case>>> {
    let filter = a.filter.as_deref();
    let selected = crate::cases::select(filter);
    if selected.is_empty() {
        return Err(usage(format!(
            "no case matches --filter {:?}; `bitexact list` shows them all",
            filter.unwrap_or("")
        )));
    }
    Ok(selected)
}

/// Checks `--runs`.
fn runs(runs: usize) -> Result<usize> {
    if !(2..=MAX_RUNS).contains(&runs) {
        return Err(usage(format!(
            "--runs must be between 2 and {MAX_RUNS} (got {runs})"
        )));
    }
    Ok(runs)
}

/// Checks `--timeout` (positive, finite, at most a week).
fn timeout(t: Option<f64>) -> Result<Option<Duration>> {
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

/// `--memory-limit`, checked against [`MIN_MEMORY_LIMIT_MB`].
fn memory_limit(a: &MemoryArgs) -> Result<Option<u64>> {
    match a.memory_limit {
        Some(mb) if mb < MIN_MEMORY_LIMIT_MB => Err(usage(format!(
            "--memory-limit must be at least {MIN_MEMORY_LIMIT_MB} MiB (got {mb}): a smaller \
             limit cannot even start a runtime"
        ))),
        limit => Ok(limit),
    }
}

/// `--vary` parsed for `kind` (none: no variation).
fn vary(v: Option<&str>, kind: Kind) -> Result<Spec> {
    match v {
        Some(v) => Spec::parse(v, kind).map_err(|e| usage(format!("--vary: {e}"))),
        None => Ok(Spec::default()),
    }
}

/// The report's destination, with `--trace FILE` and `--snapshots DIR` checked before any work
/// (exit 2 naming the path): writable files, not the same one, an existing directory.
fn outputs(a: OutputArgs, trace: Option<&Path>, snapshots: Option<&Path>) -> Result<Output> {
    let out = a.out.as_deref();
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
    Ok(Output {
        format: a.format,
        out: a.out,
    })
}
