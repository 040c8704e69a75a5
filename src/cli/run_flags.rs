//! The flags of `bitexact run` (a program and how to check it), validated into a
//! [`Program`] and the suite settings before any run.

use super::flags::{runs, timeout, usage, ControlArgs, MemoryArgs, OutputArgs};
use crate::backend::Backend;
use crate::protocol::TraceLevel;
use crate::run::ignore::Ignore;
use crate::run::{project, Program};
use crate::suite::SuiteConfig;
use crate::vary::{Kind, Spec, Variation};
use anyhow::Result;
use std::ffi::OsString;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct ProgramArgs {
    /// Runs of the program (2 to 10000; default 2, or `runs` in the project file).
    #[arg(long)]
    pub runs: Option<usize>,
    #[command(flatten)]
    pub controls: ControlArgs,
    #[arg(long, help = Variation::help(Kind::Program))]
    pub vary: Option<String>,
    /// Seconds before a run is killed with its whole process group (default: no limit).
    #[arg(long)]
    pub timeout: Option<f64>,
    #[command(flatten)]
    pub memory: MemoryArgs,
    /// Compare the outputs with the committed snapshot under this directory; a missing or
    /// changed one is written as pending `.snap.new` (never in CI).
    #[arg(long)]
    pub snapshots: Option<PathBuf>,
    #[command(flatten)]
    pub output: OutputArgs,
    /// Case name in the report and snapshots (default `run/<program or script file name>`).
    #[arg(long)]
    pub name: Option<String>,
    /// Keep each run's outputs under DIR/run-<i> (an empty or new directory).
    #[arg(long, value_name = "DIR")]
    pub keep: Option<PathBuf>,
    /// Compare standard output too (first differing line shown).
    #[arg(long)]
    pub stdout: bool,
    /// Leave outputs whose name matches this glob out of the comparison (`logs/*`,
    /// `ckpt.pt:optimizer.*`; `*` matches any run of characters). Repeatable.
    #[arg(long, value_name = "GLOB")]
    pub ignore: Vec<String>,
    /// Mask what this regular expression matches in every line of standard output before
    /// comparing it (`'[0-9.]+ ms/batch'`); implies --stdout. Repeatable.
    #[arg(long, value_name = "REGEX")]
    pub stdout_ignore: Vec<String>,
    /// Read settings from this project file instead of the nearest `bitexact.toml` or
    /// `pyproject.toml` `[tool.bitexact]` table of the current directory and its parents.
    #[arg(long, value_name = "FILE", conflicts_with = "no_config")]
    pub config: Option<PathBuf>,
    /// Ignore any project file.
    #[arg(long)]
    pub no_config: bool,
    /// `ops`: trace every PyTorch op of the program's Python process (no code change: a
    /// `sitecustomize` starts bitexact's tracer) and name the first op that diverged, with its
    /// module, step and source line. `modules`: the cheaper rung for long runs, module outputs
    /// and parameter gradients only.
    #[arg(long, value_name = "LEVEL", value_parser = trace_level())]
    pub trace: Option<TraceLevel>,
    /// Seed the program's Python at start-up with `bitexact.seed_everything()` (random, numpy,
    /// torch from the run's seed), through the same injected `sitecustomize` as --trace: a
    /// script that never imports bitexact then follows --seed and --vary seed. Its own seeding
    /// still wins where it seeds.
    #[arg(long)]
    pub seed_everything: bool,
    /// With --trace: record only these steps (`A..B` inclusive, `A..`, or `N`), e.g. the first
    /// diverging step found by a run without tracing.
    #[arg(long, value_name = "A..B", requires = "trace")]
    pub trace_steps: Option<String>,
    /// With --trace: tensors larger than this many bytes are recorded by dtype and shape only
    /// (not compared; the report counts them). Default 64 MiB.
    #[arg(long, value_name = "BYTES", requires = "trace")]
    pub trace_max_bytes: Option<u64>,
    /// With --trace: do not record ops whose name matches this glob (`aten::copy_*`).
    /// Repeatable.
    #[arg(long, value_name = "GLOB", requires = "trace")]
    pub trace_skip: Vec<String>,
    /// Processes of a distributed command: the value of `{nproc}` in its arguments
    /// (`torchrun --nproc-per-node {nproc} train.py`). Default 2.
    #[arg(long, value_name = "N")]
    pub world_size: Option<usize>,
    /// With --vary world-size: results that depend on the world size fail the check (exit 1)
    /// instead of being reported as information.
    #[arg(long)]
    pub world_size_invariant: bool,
    /// Run every run to its end and list every difference. By default a run after the first
    /// is stopped (its whole process group) as soon as an output file it completes differs from
    /// run 0's (one run 0 completed once and left so), and reported as stopped early.
    #[arg(long)]
    pub keep_going: bool,
    /// The program and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD", value_parser = clap::value_parser!(OsString))]
    pub command: Vec<OsString>,
}

/// `--trace`'s parser: the names of [`TraceLevel::ALL`] (listed in `--help` and in errors).
fn trace_level() -> impl clap::builder::TypedValueParser<Value = TraceLevel> {
    let names = TraceLevel::ALL.map(TraceLevel::name);
    clap::builder::TypedValueParser::map(clap::builder::PossibleValuesParser::new(names), |s| {
        TraceLevel::parse(&s).expect("a possible value")
    })
}

impl ProgramArgs {
    /// The validated `--trace` settings, if tracing.
    fn trace_options(&self) -> Result<Option<crate::run::trace::TraceOptions>> {
        use crate::run::trace::TraceOptions;
        if self.trace.is_none() {
            return Ok(None);
        }
        let steps = match &self.trace_steps {
            Some(s) => Some(
                TraceOptions::parse_steps(s).map_err(|e| usage(format!("--trace-steps: {e:#}")))?,
            ),
            None => None,
        };
        let t = TraceOptions {
            level: self.trace.unwrap_or(TraceLevel::Ops),
            steps,
            max_bytes: self
                .trace_max_bytes
                .unwrap_or(crate::run::trace::DEFAULT_MAX_BYTES),
            skip: self.trace_skip.clone(),
        };
        t.validate().map_err(|e| usage(format!("{e:#}")))?;
        Ok(Some(t))
    }

    /// Checks the world-size flags against the command: `{nproc}` must be in it for
    /// `--world-size` and `--vary world-size`, which compares N ≥ 2 processes with 1.
    fn check_world_size(&self, vary: &[Variation]) -> Result<()> {
        use crate::run::distributed::{uses_nproc, NPROC};
        let varied = vary.contains(&Variation::WorldSize);
        let has = uses_nproc(&self.command);
        if varied && !has {
            return Err(usage(format!(
                "--vary world-size: the command must take its process count from {NPROC} (e.g. torchrun --nproc-per-node {NPROC} train.py), so bitexact can run it with 1 process"
            )));
        }
        if self.world_size.is_some() && !has {
            return Err(usage(format!(
                "--world-size: the command has no {NPROC} to replace (e.g. torchrun --nproc-per-node {NPROC} train.py)"
            )));
        }
        if varied && self.world_size == Some(1) {
            return Err(usage(
                "--vary world-size compares --world-size N with 1 process: N must be at least 2",
            ));
        }
        if self.world_size_invariant && !varied {
            return Err(usage("--world-size-invariant needs --vary world-size"));
        }
        Ok(())
    }

    /// The validated program and suite settings these flags describe; the program must be
    /// startable.
    pub fn config(&self) -> Result<(Program, SuiteConfig)> {
        let mut controls = self.controls.controls()?;
        let project = match (&self.config, self.no_config) {
            (_, true) => None,
            (Some(f), _) => Some(
                project::read(f)
                    .and_then(|p| p.ok_or_else(|| anyhow::anyhow!("no [tool.bitexact] table")))
                    .map_err(|e| usage(format!("--config {}: {e:#}", f.display())))?,
            ),
            (None, _) => {
                let cwd = std::env::current_dir()
                    .map_err(|e| usage(format!("current directory: {e}")))?;
                project::discover(&cwd).map_err(|e| usage(format!("{e:#}")))?
            }
        };
        let file = project.as_ref().map(|p| p.run.clone()).unwrap_or_default();
        let spec = match self.vary.as_ref().or(file.vary.as_ref()) {
            Some(v) => Spec::parse(v, Kind::Program).map_err(|e| usage(format!("--vary: {e}")))?,
            None => Spec::default(),
        };
        spec.apply(&mut controls);
        let ignore_outputs: Vec<String> = file.ignore.iter().chain(&self.ignore).cloned().collect();
        let ignore_stdout: Vec<String> = file
            .stdout_ignore
            .iter()
            .chain(&self.stdout_ignore)
            .cloned()
            .collect();
        let ignore =
            Ignore::new(&ignore_outputs, &ignore_stdout).map_err(|e| usage(format!("{e:#}")))?;
        let memory_limit_mb = self.memory.checked()?;
        let name = match &self.name {
            Some(n) if n.trim().is_empty() || n.contains('\0') => {
                return Err(usage("--name must not be empty"))
            }
            Some(n) => n.clone(),
            None => crate::run::default_name(&self.command),
        };
        let program = Program {
            command: self.command.clone(),
            name,
            threads_given: self.controls.threads.is_some()
                || std::env::var_os(crate::protocol::THREADS_ENV).is_some(),
            timeout: timeout(self.timeout.or(file.timeout))?,
            memory_limit_mb,
            stdout: self.stdout || file.stdout == Some(true) || ignore.masks_stdout(),
            keep: self.keep.clone(),
            ignore,
            config: project.as_ref().map(|p| p.path.clone()),
            trace: self.trace_options()?,
            seed_everything: self.seed_everything,
            world_size: self
                .world_size
                .unwrap_or(crate::run::distributed::DEFAULT_WORLD_SIZE),
            world_size_invariant: self.world_size_invariant,
            keep_going: self.keep_going,
        };
        self.check_world_size(&spec.variations)?;
        program.validate().map_err(|e| usage(format!("{e:#}")))?;
        let k = runs(self.runs.or(file.runs).unwrap_or(2))?;
        let mut config = SuiteConfig::new(vec![Backend::Cpu], controls, k);
        config.options.vary = spec.variations;
        config.snapshots = self.snapshots.clone();
        Ok((program, config))
    }
}
