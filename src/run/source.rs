//! [`ProgramSource`]: a program as a run source. Each run is spawned with the environment
//! contract ([`super::env_for`]) in a fresh output directory; its files are collected on a
//! background thread (while the next run executes), filtered by the ignore rules, and kept
//! until the harness drops them (then removed, unless `--keep`).

use super::{collect, env_for, spawn, Program};
use crate::backend::Backend;
use crate::controls::Controls;
use crate::harness::{
    diagnose, CaseReport, Collected, Failure, FailureKind, Loader, Options, ProgramInfo,
    ProgramRun, RunMeta, RunSource, Started,
};
use crate::tensor::Tensor;
use crate::trace::Divergence;
use crate::vary::RunSettings;
use anyhow::{Context, Result};
use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::sync::Arc;

/// A directory removed on drop (unless kept).
struct Scratch(PathBuf, bool);
impl Drop for Scratch {
    fn drop(&mut self) {
        if !self.1 {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn scratch() -> Result<Scratch> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "bitexact-run-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    // Not create_dir_all: a missing TMPDIR is an error, never created.
    std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(Scratch(dir, false))
}

/// A program as a source of runs: each run spawned with the environment contract in a fresh
/// output directory, its files collected (hashed on a background thread while the next run
/// executes). The first pass (the main one) goes to `--keep` when given; every later pass
/// (blame) to scratch directories.
pub struct ProgramSource<'a> {
    program: &'a Program,
    passes: std::sync::atomic::AtomicUsize,
}

impl<'a> ProgramSource<'a> {
    /// A source for `program`.
    pub fn new(program: &'a Program) -> Result<ProgramSource<'a>> {
        spawn::become_subreaper();
        Ok(ProgramSource {
            program,
            passes: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    /// The directory run `index` writes to: under `--keep` for the main pass (the first,
    /// counted by its run 0), else a scratch directory of its own.
    fn out_dir(&self, index: usize) -> Result<(Arc<Scratch>, PathBuf)> {
        use std::sync::atomic::Ordering;
        if index == 0 {
            self.passes.fetch_add(1, Ordering::SeqCst);
        }
        let main_pass = self.passes.load(Ordering::SeqCst) == 1;
        let root = match self.program.keep.as_ref().filter(|_| main_pass) {
            Some(k) => {
                std::fs::create_dir_all(k).with_context(|| format!("creating {}", k.display()))?;
                Scratch(k.clone(), true)
            }
            None => scratch()?,
        };
        let dir = root.0.join(format!("run-{index}"));
        std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let dir = std::path::absolute(&dir)?;
        Ok((Arc::new(root), dir))
    }
}

/// A run's files, kept until the harness drops them (then removed unless kept).
struct RunFiles {
    _root: Arc<Scratch>,
    out: PathBuf,
    stdout: Option<PathBuf>,
}

impl Loader for RunFiles {
    fn load(&self, name: &str) -> Result<Tensor> {
        collect::load(&self.out, self.stdout.as_deref(), name)
    }

    fn text(&self, name: &str) -> Option<Vec<u8>> {
        let path = self
            .stdout
            .as_ref()
            .filter(|_| name == collect::STDOUT_NAME)?;
        crate::atomic::read_regular(path, collect::EXPLAIN_MAX_BYTES).ok()
    }
}

impl RunSource for ProgramSource<'_> {
    fn name(&self) -> String {
        self.program.name.clone()
    }

    fn backend(&self) -> Backend {
        Backend::Cpu
    }

    fn start(&self, index: usize, settings: &RunSettings) -> Started {
        let (root, dir) = match self.out_dir(index) {
            Ok(d) => d,
            Err(e) => {
                return Started::failed(
                    RunMeta::default(),
                    Failure::from_error(FailureKind::Harness, &e),
                )
            }
        };
        let stdout = self
            .program
            .stdout
            .then(|| root.0.join(format!("stdout-{index}")));
        let env = env_for(self.program, settings, index, &dir);
        // One program run at a time per process: after each run the subreaper sweep reaps
        // whatever was left, which must not be another thread's program.
        static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let ended = spawn::run(&spawn::Spawn {
            command: &self.program.command,
            env: &env,
            stdout: stdout.as_deref(),
            timeout: self.program.timeout,
            memory_limit_mb: self.program.memory_limit_mb,
        });
        drop(_one);
        let ended = match ended {
            Ok(e) => e,
            Err(e) => {
                return Started::failed(
                    RunMeta::default(),
                    Failure::from_error(FailureKind::Harness, &e),
                )
            }
        };
        let run = ProgramRun {
            index,
            exit_status: ended.status.code(),
            signal: ended.status.signal(),
            seconds: ended.seconds,
            peak_rss_bytes: ended.peak_rss_bytes,
        };
        let meta = RunMeta {
            seconds: ended.seconds,
            peak_bytes: ended.peak_rss_bytes,
            program: Some((run, env)),
            ..RunMeta::default()
        };
        if let Some(why) = spawn::failure(&ended, self.program.timeout) {
            let kind = if ended.timed_out {
                FailureKind::Timeout
            } else if ended.status.signal() == Some(libc::SIGKILL)
                && self.program.memory_limit_mb.is_some()
                || ended.stderr_tail.contains("MemoryError")
                || ended.stderr_tail.contains("out of memory")
            {
                FailureKind::OutOfMemory
            } else if ended.status.signal().is_some() {
                FailureKind::Signal
            } else {
                FailureKind::ExitStatus
            };
            return Started::failed(meta, Failure::new(kind, why));
        }
        let rules = self.program.ignore.clone();
        let handle = std::thread::spawn(move || {
            let unreadable =
                |e: anyhow::Error| Failure::from_error(FailureKind::UnreadableOutput, &e);
            let mut ignored = Vec::new();
            let stdout = match stdout {
                Some(raw) if rules.masks_stdout() => {
                    let masked = raw.with_extension("masked");
                    ignored = rules.mask_stdout(&raw, &masked).map_err(unreadable)?;
                    Some(masked)
                }
                other => other,
            };
            let mut c = collect::collect(&dir, stdout.as_deref()).map_err(unreadable)?;
            let mut by_glob = rules.filter(&mut c.digests);
            by_glob.append(&mut ignored);
            if c.digests.is_empty() {
                return Err(Failure::new(
                    FailureKind::NothingToCompare,
                    NOTHING_TO_COMPARE,
                ));
            }
            Ok(Collected {
                digests: c.digests,
                loader: Box::new(RunFiles {
                    _root: root,
                    out: dir,
                    stdout,
                }),
                trace: None,
                steps: c.steps,
                platform: c.platform,
                ignored: by_glob,
            })
        });
        Started {
            meta,
            outputs: Ok(Box::new(move || {
                handle.join().unwrap_or_else(|_| {
                    Err(Failure::new(
                        FailureKind::Harness,
                        "hashing the outputs panicked",
                    ))
                })
            })),
        }
    }

    fn localize(
        &self,
        first: &Collected,
        other: &Collected,
        _j: usize,
        _metas: &[RunMeta],
        _controls: &Controls,
        _opts: &Options,
    ) -> Option<Divergence> {
        diagnose::first_output_divergence(first, other)
    }

    fn describe(&self, report: &mut CaseReport, metas: &[RunMeta], first: Option<&Collected>) {
        if let Some(c) = first {
            let steps: Vec<(u64, u64)> = c.steps.iter().map(|s| (s.step, s.rss_bytes)).collect();
            report.memory_growth = crate::memory::step_growth(&steps);
        }
        let mut info = program_info(self.program, metas, first);
        info.harness_peak_rss_bytes = own_peak_rss();
        report.program = Some(info);
    }
}

/// What a run that wrote nothing is told.
const NOTHING_TO_COMPARE: &str = "wrote nothing to compare: write tensors into $BITEXACT_OUT (Python: `bitexact.dump(\"name\", x=tensor)` \
     or `bitexact.step(i, ...)`; numpy: `np.save(os.path.join(os.environ[\"BITEXACT_OUT\"], \"x.npy\"), x)`), \
     or pass --stdout to compare standard output";

/// This process's peak resident set size (`getrusage(RUSAGE_SELF)`), bytes.
fn own_peak_rss() -> Option<u64> {
    // SAFETY: an all-zero rusage is valid for getrusage to fill in.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into the local we pass.
    (unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } == 0)
        .then(|| (ru.ru_maxrss.max(0) as u64) * 1024)
}

fn program_info(program: &Program, metas: &[RunMeta], first: Option<&Collected>) -> ProgramInfo {
    let runs: Vec<&(ProgramRun, BTreeMap<String, String>)> =
        metas.iter().filter_map(|m| m.program.as_ref()).collect();
    let mut env = runs.first().map(|r| r.1.clone()).unwrap_or_default();
    env.insert(
        "BITEXACT_OUT".into(),
        "(a fresh empty directory per run)".into(),
    );
    env.insert(
        "BITEXACT_RUN".into(),
        format!("0..{}", runs.len().max(1) - 1),
    );
    let mut varied = BTreeMap::new();
    for k in env
        .keys()
        .filter(|k| !["BITEXACT_OUT", "BITEXACT_RUN"].contains(&k.as_str()))
    {
        let vals: Vec<String> = runs
            .iter()
            .map(|r| r.1.get(k).cloned().unwrap_or_default())
            .collect();
        if vals.iter().any(|v| *v != vals[0]) {
            varied.insert(k.clone(), vals);
        }
    }
    ProgramInfo {
        kind: "run".into(),
        command: program
            .command
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        env,
        varied,
        runs: runs.iter().map(|r| r.0.clone()).collect(),
        step_memory: first.map(|c| c.steps.clone()).unwrap_or_default(),
        platform: first.and_then(|c| c.platform.clone()),
        ignored: first.map(|c| c.ignored.clone()).unwrap_or_default(),
        config: program.config.as_ref().map(|p| p.display().to_string()),
        harness_peak_rss_bytes: None,
    }
}
