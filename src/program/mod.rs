//! Program mode: any program as a subject (`bitexact run -- CMD ARGS...`). `ProgramSource` is
//! its run source: each run gets a fresh empty `$BITEXACT_OUT` and the environment contract
//! below; the files it writes there are digested with the library's canonical digests. The
//! suite and the harness do the rest exactly as for a built-in case: K runs, explanation,
//! blame, the one judge ([`crate::outcome::judge()`]), snapshots and reports.
//!
//! **Environment of each run** (`env_for`): `BITEXACT_OUT` (absolute, fresh, empty),
//! `BITEXACT_RUN` (0..K-1), `BITEXACT_SEED`, `BITEXACT_DETERMINISTIC` / `BITEXACT_BENCHMARK`
//! (`1`/`0`), `BITEXACT_WORKERS`; `BITEXACT_THREADS` with `OMP_NUM_THREADS`, `MKL_NUM_THREADS`
//! and `OPENBLAS_NUM_THREADS` when a thread count is given or varied; `PYTHONHASHSEED=0` unless
//! the `hashseed` variation gives each run its own; `CUBLAS_WORKSPACE_CONFIG=:4096:8` when
//! deterministic; under `poison`, `MALLOC_PERTURB_` and `BITEXACT_POISON` (otherwise
//! `MALLOC_PERTURB_` is left as the user's environment has it). The report lists them.
//!
//! **Outputs** (`collect`): every file under `$BITEXACT_OUT` (see [`crate::tensor_files`]);
//! `.bitexact-*` files are the helper's metadata, not outputs. A run with nothing to compare
//! is an error. Standard output is compared too with `--stdout` (as `<stdout>`).
//!
//! **Costs.** Blame re-runs the program K times with everything fixed (the control), then K
//! times per variation alone; only on a difference under variations. Outputs are hashed from
//! memory-mapped files; a differing output is loaded to explain it only up to
//! `collect::EXPLAIN_MAX_BYTES`.
//!
//! **Distributed programs** (`torchrun …`): see `distributed` (`{nproc}`, `--vary
//! world-size`, ranks' outputs under `$BITEXACT_OUT/rank<R>/`, a failed rank named).
//!
//! **Failures** are typed ([`FailureKind`]): `timeout` (killed after `--timeout`),
//! `out-of-memory` (killed under `--memory-limit`, or a `MemoryError` / "out of memory" in its
//! standard error), `signal`, `exit-status`, `unreadable-output`, `nothing-to-compare`,
//! `trace-unavailable` (`--trace` asked for and no process could start it: `tracer`).

pub mod baseline;
pub mod batch;
pub mod checkpoint;
pub mod collect;
pub mod distributed;
mod ended;
mod files;
pub mod ignore;
mod info;
mod inotify;
mod killed;
mod large;
mod name;
pub mod project;
mod python_error;
pub mod resume;
mod resume_check;
mod resume_explain;
mod source;
pub mod spawn;
mod steps;
pub mod trace;
pub mod tracer;
pub mod watch;

pub use name::default_name;

pub use source::ProgramSource;

use crate::vary::{RunSettings, Variation};
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A program to check, and how to run it (controls, runs and variations come from the suite's
/// settings, as for every subject).
#[derive(Clone, Debug)]
pub struct Program {
    /// Program and arguments.
    pub command: Vec<OsString>,
    /// Case name (default `run/<program file name>`).
    pub name: String,
    /// Whether the thread count was given (then the thread variables are set).
    pub threads_given: bool,
    /// Kill a run's process group after this long.
    pub timeout: Option<Duration>,
    /// Address-space limit of each run in MiB.
    pub memory_limit_mb: Option<u64>,
    /// Compare standard output too.
    pub stdout: bool,
    /// Keep each run's outputs under `DIR/run-<i>` (main pass only; a fresh name beside it,
    /// noted in the report, when the program took that one: see `files`).
    pub keep: Option<PathBuf>,
    /// Outputs and standard-output parts left out of the comparison.
    pub ignore: ignore::Ignore,
    /// The project file the settings came from, if one was used.
    pub config: Option<PathBuf>,
    /// `--trace ops`: trace every PyTorch op of the program's Python process ([`trace`]).
    pub trace: Option<trace::TraceOptions>,
    /// `--seed-everything`: the injected `sitecustomize` calls `bitexact.seed_everything()` at
    /// start-up (random, numpy, torch from `BITEXACT_SEED`; `--vary seed` then reaches a
    /// script that never imports bitexact). A script's own seeding still wins where it runs.
    pub seed_everything: bool,
    /// Processes of a distributed command: what `{nproc}` in its arguments becomes
    /// (`--world-size`; see [`distributed`]).
    pub world_size: usize,
    /// `--world-size-invariant`: under `--vary world-size`, results that depend on the world
    /// size fail the check (otherwise they are information).
    pub world_size_invariant: bool,
    /// `--keep-going`: every run to its end, even when its outputs already differ from run
    /// 0's (otherwise a later run is stopped at its first divergence, see [`watch`]).
    pub keep_going: bool,
    /// Sketch run 0's floating-point outputs (`ProgramInfo::sketches`): set when the outputs
    /// are compared with snapshots, so that a snapshot of another platform class can be judged
    /// within or beyond noise ([`crate::snapshot::noise`]).
    pub sketch_outputs: bool,
    /// `--vary resume`: how the resume run is made ([`resume`]).
    pub resume: Option<resume::Spec>,
}

impl Program {
    /// `command` with its default name, no limits, no standard output, no ignore rules.
    pub fn new(command: Vec<OsString>) -> Program {
        Program {
            name: default_name(&command),
            command,
            threads_given: false,
            timeout: None,
            memory_limit_mb: None,
            stdout: false,
            keep: None,
            ignore: ignore::Ignore::default(),
            config: None,
            trace: None,
            seed_everything: false,
            world_size: distributed::DEFAULT_WORLD_SIZE,
            world_size_invariant: false,
            keep_going: false,
            sketch_outputs: false,
            resume: None,
        }
    }

    /// The command of a run with `world_size` processes (`{nproc}` replaced) and a batch size
    /// of `batch` (`{batch}` replaced; `None` keeps it, as the report shows the command);
    /// `{resume}` is removed (the resumed launch's command: [`Program::resumed_command`]).
    pub fn command_for(&self, world_size: Option<usize>, batch: Option<usize>) -> Vec<OsString> {
        let command = resume::command(&self.command, None);
        let command = distributed::with_world_size(&command, world_size.unwrap_or(self.world_size));
        match batch {
            Some(b) => batch::replace(&command, batch::BATCH, b),
            None => command,
        }
    }

    /// The resumed launch's command under `--vary resume`: `--resume-with`'s words where
    /// `{resume}` stands, or appended; otherwise as [`Program::command_for`].
    pub fn resumed_command(
        &self,
        world_size: Option<usize>,
        batch: Option<usize>,
    ) -> Vec<OsString> {
        let args = self.resume.as_ref().map(|r| r.args.as_slice());
        let mut p = self.clone();
        p.command = resume::command(&self.command, args);
        p.command_for(world_size, batch)
    }

    /// Whether the program records its resume state ([`resume`]): always under `--vary resume`.
    /// The record rides on the injected `sitecustomize`, which imports bitexact's own package
    /// or, for a cargo-built binary without one, the program's; where neither imports, nothing
    /// is recorded and the report says so.
    pub fn records_state(&self) -> bool {
        self.resume.is_some()
    }

    /// Whether the program's Python gets bitexact's `sitecustomize` (`--trace`,
    /// `--seed-everything`, the resume state record).
    pub fn injects(&self) -> bool {
        self.trace.is_some() || self.seed_everything || self.records_state()
    }

    /// Checks what can be checked before any run: the program can be started and `--keep` is
    /// usable. Errors name the culprit.
    pub fn validate(&self) -> Result<()> {
        let program = self.command.first().context("no command given after --")?;
        if self.world_size == 0 {
            bail!("--world-size must be at least 1");
        }
        spawn::resolve(program)?;
        if self.injects() {
            tracer::own_package()?;
        }
        if let Some(k) = &self.keep {
            if k.exists() && (!k.is_dir() || std::fs::read_dir(k)?.next().is_some()) {
                bail!("--keep {}: must be an empty or new directory", k.display());
            }
            std::fs::create_dir_all(k)
                .map_err(|e| anyhow::anyhow!("--keep {}: {e}", k.display()))?;
        }
        // Run directories are made in TMPDIR: it must exist and be writable, found before
        // any run (a missing TMPDIR is never created).
        let tmp = std::env::temp_dir();
        if !tmp.is_dir() {
            bail!(
                "the temporary directory {} (TMPDIR) is not a directory",
                tmp.display()
            );
        }
        let probe = tmp.join(format!("bitexact-probe-{}", std::process::id()));
        std::fs::create_dir(&probe).map_err(|e| {
            anyhow::anyhow!(
                "the temporary directory {} (TMPDIR) is not writable: {e}",
                tmp.display()
            )
        })?;
        let _ = std::fs::remove_dir(&probe);
        Ok(())
    }
}

/// The environment of run `index` under `settings` (see the module docs).
pub fn env_for(
    program: &Program,
    settings: &RunSettings,
    index: usize,
    out: &Path,
) -> BTreeMap<String, String> {
    let c = &settings.controls;
    let vary = &settings.varied;
    let bit = |b: bool| if b { "1" } else { "0" }.to_string();
    let mut env = BTreeMap::from([
        (
            crate::protocol::OUT_ENV.to_string(),
            out.display().to_string(),
        ),
        (crate::protocol::RUN_ENV.into(), index.to_string()),
        (crate::protocol::SEED_ENV.into(), c.seed.to_string()),
        (
            crate::protocol::DETERMINISTIC_ENV.into(),
            bit(c.deterministic),
        ),
        (crate::protocol::BENCHMARK_ENV.into(), bit(c.benchmark)),
        (crate::protocol::WORKERS_ENV.into(), c.workers.to_string()),
    ]);
    let hashseed = if vary.contains(&Variation::Hashseed) {
        index + 1
    } else {
        0
    };
    env.insert("PYTHONHASHSEED".into(), hashseed.to_string());
    if program.threads_given || vary.contains(&Variation::Threads) {
        for k in [
            crate::protocol::THREADS_ENV,
            "OMP_NUM_THREADS",
            "MKL_NUM_THREADS",
            "OPENBLAS_NUM_THREADS",
        ] {
            env.insert(k.into(), c.threads.to_string());
        }
    }
    if c.deterministic {
        env.insert("CUBLAS_WORKSPACE_CONFIG".into(), ":4096:8".into());
    }
    if let Some(t) = &program.trace {
        env.extend(t.env());
        // `--vary batch`: the larger-batch run records row slices (see [`batch`]).
        if let Some(rows) = (settings.knobs.batch).and_then(|b| batch::rows(c.batch_pair, b)) {
            env.insert(crate::protocol::TRACE_ROWS_ENV.into(), rows.to_string());
        }
    }
    if program.seed_everything {
        env.insert(crate::protocol::SEED_EVERYTHING_ENV.into(), "1".into());
    }
    if program.records_state() {
        env.insert(crate::protocol::STATE_ENV.into(), "1".into());
        let glob = program.resume.as_ref().and_then(|r| r.matcher.glob.clone());
        if let Some(g) = glob {
            env.insert(crate::protocol::STATE_CHECKPOINT_ENV.into(), g);
        }
    }
    if program.injects() {
        let inject = trace::inject_dir(out);
        let mut path = inject.display().to_string();
        if let Some(old) = std::env::var_os("PYTHONPATH").filter(|p| !p.is_empty()) {
            path.push(':');
            path.push_str(&old.to_string_lossy());
        }
        env.insert("PYTHONPATH".into(), path);
    }
    if let Some(p) = settings.knobs.poison {
        env.insert("MALLOC_PERTURB_".into(), p.to_string());
        env.insert(crate::protocol::POISON_ENV.into(), p.to_string());
    }
    env
}
