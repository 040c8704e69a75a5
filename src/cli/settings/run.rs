//! `run`'s settings: its flags over the project file over the defaults, with the
//! environment's controls, validated into a [`Program`] and the suite settings to check it
//! under.

use super::{controls, memory_limit, outputs, runs, timeout, vary, Output};
use crate::backend::Backend;
use crate::cli::args::{ProjectFileArgs, RunArgs};
use crate::cli::usage::usage;
use crate::program::ignore::Ignore;
use crate::program::project::{self, Project};
use crate::program::trace::TraceOptions;
use crate::program::Program;
use crate::protocol;
use crate::suite::SuiteConfig;
use crate::vary::{Kind, Spec, Variation};
use anyhow::Result;

/// Program mode's settings (`bitexact run`): the program, the suite settings to check it
/// under, and where the report goes.
pub(crate) struct ProgramSettings {
    /// The program and how to run and compare it.
    pub(crate) program: Program,
    /// Controls, runs, variations, snapshots (CPU only).
    pub(crate) config: SuiteConfig,
    /// The report's format and destination.
    pub(crate) output: Output,
}

impl ProgramSettings {
    /// `run`'s flags over the project file (`--config FILE`, none with `--no-config`, else the
    /// nearest one from the current directory up) over the defaults, with the environment's
    /// controls; the program must be startable.
    pub(crate) fn resolve(args: RunArgs) -> Result<Self> {
        let mut controls = controls(&args.controls)?;
        let project = project_file(&args.project)?;
        let file = project.as_ref().map(|p| p.run.clone()).unwrap_or_default();
        let spec = vary(args.vary.as_deref().or(file.vary.as_deref()), Kind::Program)?;
        spec.apply(&mut controls);
        let ignore_outputs: Vec<String> = file.ignore.iter().chain(&args.ignore).cloned().collect();
        let ignore_stdout: Vec<String> = file
            .stdout_ignore
            .iter()
            .chain(&args.stdout_ignore)
            .cloned()
            .collect();
        let ignore =
            Ignore::new(&ignore_outputs, &ignore_stdout).map_err(|e| usage(format!("{e:#}")))?;
        let memory_limit_mb = memory_limit(&args.memory)?;
        let name = match &args.name {
            Some(n) if n.trim().is_empty() || n.contains('\0') => {
                return Err(usage("--name must not be empty"))
            }
            Some(n) => n.clone(),
            None => crate::program::default_name(&args.command),
        };
        let program = Program {
            command: args.command.clone(),
            name,
            threads_given: args.controls.threads.is_some()
                || std::env::var_os(protocol::THREADS_ENV).is_some(),
            timeout: timeout(args.timeout.or(file.timeout))?,
            memory_limit_mb,
            stdout: args.stdout || file.stdout == Some(true) || ignore.masks_stdout(),
            keep: args.keep.clone(),
            ignore,
            config: project.as_ref().map(|p| p.path.clone()),
            trace: trace_options(&args)?,
            seed_everything: args.seed_everything,
            world_size: args
                .world_size
                .unwrap_or(crate::program::distributed::DEFAULT_WORLD_SIZE),
            world_size_invariant: args.world_size_invariant,
            keep_going: args.keep_going,
            sketch_outputs: args.snapshots.is_some(),
            resume: resume_spec(&args, &spec.variations)?,
        };
        check_world_size(&args, &spec.variations)?;
        check_batch(&args, &spec, &program)?;
        program.validate().map_err(|e| usage(format!("{e:#}")))?;
        let k = runs(args.runs.or(file.runs).unwrap_or(2))?;
        let mut config = SuiteConfig::new(vec![Backend::Cpu], controls, k);
        config.options.vary = spec.variations;
        config.snapshots = args.snapshots;
        let output = outputs(args.output, None, config.snapshots.as_deref())?;
        Ok(ProgramSettings {
            program,
            config,
            output,
        })
    }
}

/// The project file `run` reads: `--config FILE` (which must have a `[tool.bitexact]` table),
/// none with `--no-config`, else the nearest one from the current directory up.
fn project_file(a: &ProjectFileArgs) -> Result<Option<Project>> {
    match (&a.config, a.no_config) {
        (_, true) => Ok(None),
        (Some(f), _) => project::read(f)
            .and_then(|p| p.ok_or_else(|| anyhow::anyhow!("no [tool.bitexact] table")))
            .map(Some)
            .map_err(|e| usage(format!("--config {}: {e:#}", f.display()))),
        (None, _) => {
            let cwd =
                std::env::current_dir().map_err(|e| usage(format!("current directory: {e}")))?;
            project::discover(&cwd).map_err(|e| usage(format!("{e:#}")))
        }
    }
}

/// `run`'s validated `--trace` settings, if tracing.
fn trace_options(a: &RunArgs) -> Result<Option<TraceOptions>> {
    let Some(level) = a.trace else {
        return Ok(None);
    };
    let steps = match &a.trace_steps {
        Some(s) => {
            Some(TraceOptions::parse_steps(s).map_err(|e| usage(format!("--trace-steps: {e:#}")))?)
        }
        None => None,
    };
    let t = TraceOptions {
        level,
        steps,
        max_bytes: a
            .trace_max_bytes
            .unwrap_or(crate::program::trace::DEFAULT_MAX_BYTES),
        skip: a.trace_skip.clone(),
        capture: match &a.capture {
            Some(_) if level != crate::protocol::TraceLevel::Ops => {
                return Err(usage(format!(
                    "--capture needs --trace ops (not --trace {level}): only the op tracer sees op calls"
                )))
            }
            Some(id) => Some(
                crate::trace::parse_identity(id).map_err(|e| usage(format!("--capture: {e}")))?,
            ),
            None => None,
        },
    };
    t.validate().map_err(|e| usage(format!("{e:#}")))?;
    Ok(Some(t))
}

/// Checks `--vary batch` against the command: it must take its batch size from `{batch}`, and
/// under `--trace` the larger size must be a multiple of the smaller (the larger run's results
/// are compared with the smaller run's in row slices).
fn check_batch(a: &RunArgs, spec: &Spec, program: &Program) -> Result<()> {
    use crate::program::batch::{uses, BATCH};
    if !spec.variations.contains(&Variation::Batch) {
        return Ok(());
    }
    if !uses(&a.command, BATCH) {
        return Err(usage(format!(
            "--vary batch: the command must take its batch size from {BATCH} (e.g. python infer.py --batch-size {BATCH}), so bitexact can run it at two batch sizes"
        )));
    }
    let [x, y] = spec
        .batch_pair
        .unwrap_or_else(crate::controls::default_batch_pair);
    if program.trace.is_some() && x.max(y) % x.min(y) != 0 {
        return Err(usage(format!(
            "--vary batch={x},{y} with --trace: the larger batch size must be a multiple of the smaller, so each op's result can be compared request by request"
        )));
    }
    Ok(())
}

/// Checks `run`'s world-size flags against the command: `{nproc}` must be in it for
/// `--world-size` and `--vary world-size`, which compares N ≥ 2 processes with 1.
fn check_world_size(a: &RunArgs, vary: &[Variation]) -> Result<()> {
    use crate::program::distributed::{uses_nproc, NPROC};
    let varied = vary.contains(&Variation::WorldSize);
    let has = uses_nproc(&a.command);
    if varied && !has {
        return Err(usage(format!(
            "--vary world-size: the command must take its process count from {NPROC} (e.g. torchrun --nproc-per-node {NPROC} train.py), so bitexact can run it with 1 process"
        )));
    }
    if a.world_size.is_some() && !has {
        return Err(usage(format!(
            "--world-size: the command has no {NPROC} to replace (e.g. torchrun --nproc-per-node {NPROC} train.py)"
        )));
    }
    if varied && a.world_size == Some(1) {
        return Err(usage(
            "--vary world-size compares --world-size N with 1 process: N must be at least 2",
        ));
    }
    if a.world_size_invariant && !varied {
        return Err(usage("--world-size-invariant needs --vary world-size"));
    }
    Ok(())
}

/// `run`'s resume flags checked against `--vary` and the command: `--vary resume` needs
/// `--resume-with`, the other flags need `--vary resume`, and `{resume}` in the command needs
/// it too. The state record is always asked for (see [`crate::program::resume`]).
fn resume_spec(a: &RunArgs, vary: &[Variation]) -> Result<Option<crate::program::resume::Spec>> {
    use crate::program::resume::{words, Spec, RESUME};
    let varied = vary.contains(&Variation::Resume);
    let placeholder = a.command.iter().any(|w| w == RESUME);
    let given = [
        (a.resume_with.is_some(), "--resume-with"),
        (a.resume_at.is_some(), "--resume-at"),
        (a.checkpoint.is_some(), "--checkpoint"),
        (placeholder, RESUME),
    ];
    if let (false, Some((_, flag))) = (varied, given.iter().find(|(g, _)| *g)) {
        return Err(usage(format!("{flag} needs --vary resume")));
    }
    if !varied {
        return Ok(None);
    }
    let Some(text) = &a.resume_with else {
        return Err(usage(format!(
            "--vary resume needs --resume-with ARGS: the arguments that make the program resume from its checkpoint, put where {RESUME} stands in the command or appended (e.g. --resume-with=--init_from=resume)"
        )));
    };
    // An empty `--resume-with=` relaunches the same command: for a program that resumes by
    // itself when it finds a checkpoint (torchtitan's, Lightning's `ckpt_path="last"`).
    let args = words(text).map_err(|e| usage(format!("--resume-with: {e}")))?;
    let at = a.resume_at.unwrap_or(1);
    if at == 0 {
        return Err(usage(
            "--resume-at must be at least 1 (1 = the first checkpoint)",
        ));
    }
    if a.checkpoint.as_deref().is_some_and(|g| g.trim().is_empty()) {
        return Err(usage("--checkpoint must not be empty"));
    }
    Ok(Some(Spec {
        args,
        at,
        matcher: crate::program::checkpoint::Matcher {
            glob: a.checkpoint.clone(),
        },
    }))
}
