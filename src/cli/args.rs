//! The command line's shape as clap parses it: [`Cli`], its [`Command`]s and their flags.
//! A flag several commands take is declared once, in a group flattened into each
//! ([`FilterArgs`], [`BackendArgs`], [`ControlArgs`], [`OutputArgs`], [`MemoryArgs`],
//! [`SnapshotDirArgs`]); a value list (formats, trace levels, variations) comes from the type
//! that owns it, so its help is written once. Nothing here validates:
//! [`super::settings`] turns these into settings.

use crate::protocol::TraceLevel;
use crate::report::Format;
use crate::vary::{Kind, Variation};
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Parser, Subcommand, ValueEnum};
use std::ffi::OsString;
use std::path::PathBuf;

/// The parsed command line.
#[derive(Parser)]
#[command(
    name = "bitexact",
    version,
    about = "Determinism test harness for GPU kernels and training steps"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// What to do.
#[derive(Subcommand)]
pub(crate) enum Command {
    /// Run every matching case K times per backend, compare the runs bit for bit, and report.
    Report(ReportArgs),
    /// List every case with its backends and the ops it uses.
    List(FilterArgs),
    /// Write or review committed snapshots (see `bitexact snapshot --help`).
    Snapshot {
        #[command(subcommand)]
        command: SnapshotCommand,
    },
    /// Compare two trace files (from `report --trace FILE`, or the op traces of programs kept
    /// with `run --trace ops --keep DIR`: a run directory or its `.jsonl`) and name the first
    /// diverging op.
    DiffTrace {
        /// First trace.
        a: PathBuf,
        /// Second trace.
        b: PathBuf,
        /// Output for program traces: `text`, or `json` (the platforms, the divergence with
        /// its noise judgement and growth series).
        #[arg(long, default_value = "text", value_parser = ["text", "json"])]
        format: String,
    },
    /// Run any program K times and compare the tensor files it writes into $BITEXACT_OUT
    /// (safetensors, npy, npz, torch.save .pt/.pth; other files as bytes): `bitexact run [flags] -- CMD ARGS...`.
    Run(Box<RunArgs>),
    /// Internal: serve a parent's request in a child process (see `crate::isolate`).
    #[command(name = "__child", hide = true)]
    Child,
}

/// `snapshot update` and `snapshot review`.
#[derive(Subcommand)]
pub(crate) enum SnapshotCommand {
    /// Run the cases and write their snapshots (`DIR/<class>/<case>@<controls>.snap`).
    /// Refuses in CI (`CI` set) unless --force.
    Update(UpdateArgs),
    /// List pending snapshots (`.snap.new`) with what changed; --accept moves them into place.
    Review {
        #[command(flatten)]
        dir: SnapshotDirArgs,
        /// Accept every pending snapshot (refused in CI).
        #[arg(long)]
        accept: bool,
    },
}

/// `--filter` (`report`, `list`, `snapshot update`).
#[derive(clap::Args)]
pub(crate) struct FilterArgs {
    /// Only cases whose name contains this (comma-separated; `*` globs).
    #[arg(long)]
    pub(crate) filter: Option<String>,
}

/// `--backend` (`report`, `snapshot update`).
#[derive(clap::Args)]
pub(crate) struct BackendArgs {
    /// Backends to run on (default: cpu, plus cuda when a driver is present); `all` runs both
    /// (CUDA cases are skipped with the reason when there is no GPU).
    #[arg(long, value_enum)]
    pub(crate) backend: Option<BackendArg>,
}

/// A `--backend` value.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum BackendArg {
    Cpu,
    Cuda,
    /// CPU and CUDA (`report` also compares the two).
    All,
}

/// `--snapshots DIR` of `snapshot update` and `snapshot review`.
#[derive(clap::Args)]
pub(crate) struct SnapshotDirArgs {
    /// Snapshot directory.
    #[arg(long, default_value = "snapshots")]
    pub(crate) snapshots: PathBuf,
}

/// The controls a run is made under; flags win over the environment.
#[derive(clap::Args)]
pub(crate) struct ControlArgs {
    /// Base seed of every random stream [env: BITEXACT_SEED].
    #[arg(long)]
    pub(crate) seed: Option<u64>,
    /// Deterministic-algorithms switch, on or off [env: BITEXACT_DETERMINISTIC].
    #[arg(long, value_parser = crate::controls::parse_switch)]
    pub(crate) deterministic: Option<bool>,
    /// Autotune switch, on or off [env: BITEXACT_BENCHMARK].
    #[arg(long, value_parser = crate::controls::parse_switch)]
    pub(crate) benchmark: Option<bool>,
    /// Data-loader worker threads, at most 256 [env: BITEXACT_WORKERS].
    #[arg(long)]
    pub(crate) workers: Option<usize>,
    /// CPU thread-pool size, 1 to 1024 [env: BITEXACT_THREADS].
    #[arg(long)]
    pub(crate) threads: Option<usize>,
}

/// Where the report goes and in which format (`report` and `run`).
#[derive(clap::Args)]
pub(crate) struct OutputArgs {
    /// Output format.
    #[arg(long, default_value = "text", value_parser = one_of(Format::ALL))]
    pub(crate) format: Format,
    /// Write the report to this file instead of standard output.
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
}

/// `--memory-limit` (`report --isolate` and `run`).
#[derive(clap::Args)]
pub(crate) struct MemoryArgs {
    /// Address-space limit in MiB of each child: an isolated case (`report` needs --isolate)
    /// or a run of the program. At least 64.
    #[arg(long, value_name = "MB")]
    pub(crate) memory_limit: Option<u64>,
}

/// `snapshot update`.
#[derive(clap::Args)]
pub(crate) struct UpdateArgs {
    #[command(flatten)]
    pub(crate) dir: SnapshotDirArgs,
    #[command(flatten)]
    pub(crate) filter: FilterArgs,
    #[command(flatten)]
    pub(crate) backend: BackendArgs,
    /// Runs per case (2 to 10000): only deterministic results are written.
    #[arg(long, default_value_t = 2)]
    pub(crate) runs: usize,
    #[command(flatten)]
    pub(crate) controls: ControlArgs,
    /// Write even in CI.
    #[arg(long)]
    pub(crate) force: bool,
}

/// `report`.
#[derive(clap::Args)]
pub(crate) struct ReportArgs {
    #[command(flatten)]
    pub(crate) backend: BackendArgs,
    #[command(flatten)]
    pub(crate) filter: FilterArgs,
    /// Runs per case (2 to 10000).
    #[arg(long, default_value_t = 2)]
    pub(crate) runs: usize,
    #[command(flatten)]
    pub(crate) controls: ControlArgs,
    #[command(flatten)]
    pub(crate) output: OutputArgs,
    #[arg(long, help = Variation::help(Kind::Case))]
    pub(crate) vary: Option<String>,
    /// Run each case in its own child process, so crashes, hangs and OOM become errors
    /// (default time limit 600 s per case; see --timeout).
    #[arg(long)]
    pub(crate) isolate: bool,
    /// Seconds before an isolated case (or a child run) is killed with its process group.
    #[arg(long)]
    pub(crate) timeout: Option<f64>,
    #[command(flatten)]
    pub(crate) memory: MemoryArgs,
    /// Record the digest of every op's inputs and output and save the traces to this file.
    #[arg(long)]
    pub(crate) trace: Option<PathBuf>,
    /// Compare every deterministic case with its committed snapshot under this directory
    /// (matched / missing / mismatch per case; a difference is `snapshot-mismatch`).
    #[arg(long)]
    pub(crate) snapshots: Option<PathBuf>,
}

/// `run`: a program and how to check it.
#[derive(clap::Args)]
pub(crate) struct RunArgs {
    /// Runs of the program (2 to 10000; default 2, or `runs` in the project file).
    #[arg(long)]
    pub(crate) runs: Option<usize>,
    #[command(flatten)]
    pub(crate) controls: ControlArgs,
    #[arg(long, help = Variation::help(Kind::Program))]
    pub(crate) vary: Option<String>,
    /// Seconds before a run is killed with its whole process group (default: no limit).
    #[arg(long)]
    pub(crate) timeout: Option<f64>,
    #[command(flatten)]
    pub(crate) memory: MemoryArgs,
    /// Compare the outputs with the committed snapshot under this directory; a missing or
    /// changed one is written as pending `.snap.new` (never in CI).
    #[arg(long)]
    pub(crate) snapshots: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) output: OutputArgs,
    /// Case name in the report and snapshots (default `run/<program or script file name>`).
    #[arg(long)]
    pub(crate) name: Option<String>,
    /// Keep each run's outputs under `DIR/run-<i>` (an empty or new directory).
    #[arg(long, value_name = "DIR")]
    pub(crate) keep: Option<PathBuf>,
    /// Compare standard output too (first differing line shown).
    #[arg(long)]
    pub(crate) stdout: bool,
    /// Leave outputs whose name matches this glob out of the comparison (`logs/*`,
    /// `ckpt.pt:optimizer.*`; `*` matches any run of characters). Repeatable.
    #[arg(long, value_name = "GLOB")]
    pub(crate) ignore: Vec<String>,
    /// Mask what this regular expression matches in every line of standard output before
    /// comparing it (`'[0-9.]+ ms/batch'`); implies --stdout. Repeatable.
    #[arg(long, value_name = "REGEX")]
    pub(crate) stdout_ignore: Vec<String>,
    #[command(flatten)]
    pub(crate) project: ProjectFileArgs,
    /// `ops`: trace every PyTorch op of the program's Python process (no code change: a
    /// `sitecustomize` starts bitexact's tracer) and name the first op that diverged, with its
    /// module, step and source line. `modules`: the cheaper rung for long runs, module outputs
    /// and parameter gradients only.
    #[arg(long, value_name = "LEVEL", value_parser = one_of(TraceLevel::ALL.map(|l| (l, l.name()))))]
    pub(crate) trace: Option<TraceLevel>,
    /// Seed the program's Python at start-up with `bitexact.seed_everything()` (random, numpy,
    /// torch from the run's seed), through the same injected `sitecustomize` as --trace: a
    /// script that never imports bitexact then follows --seed and --vary seed. Its own seeding
    /// still wins where it seeds.
    #[arg(long)]
    pub(crate) seed_everything: bool,
    /// With --trace: record only these steps (`A..B` inclusive, `A..`, or `N`), e.g. the first
    /// diverging step found by a run without tracing.
    #[arg(long, value_name = "A..B", requires = "trace")]
    pub(crate) trace_steps: Option<String>,
    /// With --trace: tensors larger than this many bytes are recorded by dtype and shape only
    /// (not compared; the report counts them). Default 64 MiB.
    #[arg(long, value_name = "BYTES", requires = "trace")]
    pub(crate) trace_max_bytes: Option<u64>,
    /// With --trace: do not record ops whose name matches this glob (`aten::copy_*`).
    /// Repeatable.
    #[arg(long, value_name = "GLOB", requires = "trace")]
    pub(crate) trace_skip: Vec<String>,
    /// With --trace ops: every run saves this op call's input and output tensors (and its
    /// arguments) to `.bitexact-capture.safetensors` in its output directory, kept with --keep,
    /// so that `bitexact diff-trace` replays the op in float64 and says which side is closer.
    /// The identity is the JSON list `diff-trace` prints after `capture it with:`,
    /// `[rank, thread, step, phase, module, op, occurrence]`, e.g.
    /// `'[0,"",0,"forward","","aten::mean",0]'`.
    #[arg(long, value_name = "OP_IDENTITY", requires = "trace")]
    pub(crate) capture: Option<String>,
    /// Processes of a distributed command: the value of `{nproc}` in its arguments
    /// (`torchrun --nproc-per-node {nproc} train.py`). Default 2.
    #[arg(long, value_name = "N")]
    pub(crate) world_size: Option<usize>,
    /// With --vary world-size: results that depend on the world size fail the check (exit 1)
    /// instead of being reported as information.
    #[arg(long)]
    pub(crate) world_size_invariant: bool,
    /// With --vary resume: the arguments that make the program resume from its checkpoint,
    /// put where `{resume}` stands in the command (a whole argument) or appended (`--resume-with
    /// --init_from=resume`). Split into words as a shell would (quotes keep spaces). Empty
    /// (`--resume-with=`): the same command, for a program that resumes by itself.
    #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
    pub(crate) resume_with: Option<String>,
    /// With --vary resume: kill the launch right after its Nth completed checkpoint. Default 1.
    #[arg(long, value_name = "N")]
    pub(crate) resume_at: Option<usize>,
    /// With --vary resume: which paths under $BITEXACT_OUT are checkpoints, a glob matched
    /// against the path (against the name when it has no `/`). Default: any file or directory
    /// whose name contains `ckpt` or `checkpoint`, at any depth.
    #[arg(long, value_name = "GLOB")]
    pub(crate) checkpoint: Option<String>,
    /// Run every run to its end and list every difference. By default a run after the first
    /// is stopped (its whole process group) as soon as an output file it completes differs from
    /// run 0's (one run 0 completed once and left so), and reported as stopped early.
    #[arg(long)]
    pub(crate) keep_going: bool,
    /// The program and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD", value_parser = clap::value_parser!(OsString))]
    pub(crate) command: Vec<OsString>,
}

/// Which project file `run` reads (`bitexact.toml` or `pyproject.toml` `[tool.bitexact]`).
#[derive(clap::Args)]
pub(crate) struct ProjectFileArgs {
    /// Read settings from this project file instead of the nearest `bitexact.toml` or
    /// `pyproject.toml` `[tool.bitexact]` table of the current directory and its parents.
    #[arg(long, value_name = "FILE", conflicts_with = "no_config")]
    pub(crate) config: Option<PathBuf>,
    /// Ignore any project file.
    #[arg(long)]
    pub(crate) no_config: bool,
}

/// A parser accepting exactly the names in `values` (its owner's list, e.g. [`Format::ALL`]),
/// which `--help` and the error for any other value then list.
fn one_of<T, const N: usize>(values: [(T, &'static str); N]) -> impl TypedValueParser<Value = T>
where
    T: Clone + Send + Sync + 'static,
{
    let names = values.clone().map(|(_, name)| name);
    PossibleValuesParser::new(names).map(move |s| {
        values
            .iter()
            .find(|(_, name)| *name == s)
            .map(|(v, _)| v.clone())
            .expect("a possible value")
    })
}
