//! [`ProgramSource`]: a program as a run source. Each run is spawned with the environment
//! contract ([`super::env_for`]) in a fresh output directory; its files are collected on a
//! background thread (while the next run executes), filtered by the ignore rules, and kept
//! until the harness drops them (then removed, unless `--keep`).

use super::baseline::{Baseline, Publisher, Reuse};
use super::files::{self, Remover, RunFiles, Scratch};
use super::{collect, env_for, spawn, watch, Program};
use crate::backend::Backend;
use crate::harness::{Collected, RunMeta, RunSource, Runs, Started};
use crate::outcome::{CaseReport, Failure, FailureKind, ProgramRun};
use crate::trace::Divergence;
use crate::vary::{Launch, RunSettings, Variation};
use anyhow::{Context, Result};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// A program as a source of runs. Every run, of every pass (the main one and blame's), sees
/// the **same** `$BITEXACT_OUT` path, so a program that records its output directory (a
/// checkpoint's `config.out_dir`) writes the same bytes each run: `ROOT/out`, created
/// exclusively before each run (never accepted if it exists) and moved aside when the run
/// ends (`ROOT/run-<i>` for the main pass, kept with `--keep DIR` as `DIR/run-<i>`; hidden
/// `ROOT/.pass<p>-run-<i>` for blame's, removed when no longer needed). `ROOT` is a private
/// directory with an unpredictable name in TMPDIR, or the `--keep` directory.
/// A program may write in `ROOT` too: see `super::files` for how names it took are avoided.
pub struct ProgramSource<'a> {
    pub(super) program: &'a Program,
    root: Scratch,
    /// Removes `root` if bitexact is stopped by a signal (not a `--keep` directory).
    _on_signal: Option<crate::cleanup::DirGuard>,
    passes: std::sync::atomic::AtomicUsize,
    /// The op whose tensors the tracer saves in the next runs (a localization re-run), and
    /// how the captured outputs differ.
    capture: super::trace::Capture,
    /// What run 0 of the current pass completed: later runs are compared with it while they
    /// run ([`watch`]).
    reference: std::sync::Mutex<Option<Arc<watch::Reference>>>,
    /// Run 0's collected files: a later run's file with the same bytes takes its digests.
    baseline: std::sync::Mutex<Option<Arc<Baseline>>>,
    /// Removes the runs' directories the harness is done with, in the background.
    remover: Arc<Remover>,
    /// Where kept runs' outputs went when not under their promised name (`--keep`).
    moved_elsewhere: std::sync::Mutex<Vec<String>>,
    /// What the killed launch of `--vary resume` left for the resumed one.
    killed: std::sync::Mutex<Option<super::killed::Killed>>,
}

/// One program run at a time per process: after each run the subreaper sweep reaps whatever
/// was left, which must not be another thread's program.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl Drop for ProgramSource<'_> {
    fn drop(&mut self) {
        // Every run directory is gone before the root goes (its field is dropped after this).
        self.remover.finish();
    }
}

impl<'a> ProgramSource<'a> {
    /// A source for `program`.
    pub fn new(program: &'a Program) -> Result<ProgramSource<'a>> {
        spawn::become_subreaper();
        let root = match &program.keep {
            Some(k) => {
                std::fs::create_dir_all(k).with_context(|| format!("creating {}", k.display()))?;
                Scratch::new(std::path::absolute(k)?, true)
            }
            None => files::private_dir()?,
        };
        let on_signal = (!root.keep).then(|| crate::cleanup::register_dir(&root.path));
        if program.injects() {
            super::trace::write_inject_dir(&root.path)?;
        }
        Ok(ProgramSource {
            program,
            root,
            _on_signal: on_signal,
            passes: std::sync::atomic::AtomicUsize::new(0),
            capture: Default::default(),
            reference: std::sync::Mutex::new(None),
            baseline: std::sync::Mutex::new(None),
            remover: Arc::new(Remover::new()),
            moved_elsewhere: std::sync::Mutex::new(Vec::new()),
            killed: std::sync::Mutex::new(None),
        })
    }

    /// The watcher of run `index`'s outputs, and the flag it sets to stop the run: a later
    /// run is compared with run 0 while it runs, unless `--keep-going` or it is a capture
    /// re-run (those are never stopped). With `--trace` the tracer writes each record as it is
    /// made, so a stopped run's trace holds every op it made before it was stopped.
    fn watcher(&self, index: usize, capturing: bool) -> (Option<watch::Watcher>, Arc<AtomicBool>) {
        let stop = Arc::new(AtomicBool::new(false));
        let reference = match index {
            0 => None,
            _ => self
                .reference
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        };
        let compare = reference
            .filter(|_| !self.program.keep_going && !capturing)
            .map(|reference| watch::Compare {
                reference,
                ignore: self.program.ignore.clone(),
                stop: stop.clone(),
            });
        (watch::start(&self.out_path(), compare), stop)
    }

    /// Run 0's baseline for run `index`, whose outputs go to `dest`: run 0 starts a new one
    /// and gets its publisher; a later run gets the current one to reuse digests from.
    fn baseline(
        &self,
        index: usize,
        dest: &std::path::Path,
    ) -> (Option<Arc<Baseline>>, Option<Publisher>) {
        let mut current = self.baseline.lock().unwrap_or_else(|e| e.into_inner());
        if index > 0 {
            return (current.clone(), None);
        }
        let (b, p) = Baseline::new(dest.to_path_buf());
        *current = Some(b.clone());
        (Some(b), Some(p))
    }

    /// The `$BITEXACT_OUT` of every run.
    pub fn out_path(&self) -> PathBuf {
        self.root.path.join("out")
    }

    /// What the killed launch of `--vary resume` left, once it was killed after its checkpoint.
    pub(super) fn killed_launch(&self) -> Option<super::killed::Killed> {
        self.killed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The killed launch of `--vary resume`'s run `index` ([`super::killed::start_killed`]),
    /// one program at a time like every run; what it left is kept for the resumed launch.
    fn start_killed(&self, index: usize, settings: &RunSettings) -> Started {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let out = self.out_path();
        let env = env_for(self.program, settings, index, &out);
        let (started, killed) = super::killed::start_killed(self.program, &out, settings, env);
        *self.killed.lock().unwrap_or_else(|e| e.into_inner()) = killed;
        started
    }

    /// Creates the output directory for run `index` (exclusively; `resumed`: the resumed launch
    /// of `--vary resume` finds the one the killed launch left) and says where it goes when
    /// the run ends, and whether it is kept.
    fn prepare(&self, index: usize, resumed: bool) -> Result<(PathBuf, bool)> {
        use std::sync::atomic::Ordering;
        if index == 0 {
            self.passes.fetch_add(1, Ordering::SeqCst);
        }
        let pass = self.passes.load(Ordering::SeqCst);
        let out = self.out_path();
        let made = match resumed {
            true => Ok(()),
            false => std::fs::create_dir(&out),
        };
        made.with_context(|| {
            format!(
                "creating {} for run {index} (it must not exist: did a process of an earlier run survive and recreate it?)",
                out.display()
            )
        })?;
        let (name, keep) = match pass {
            1 => (format!("run-{index}"), self.program.keep.is_some()),
            p => (format!(".pass{p}-run-{index}"), false),
        };
        Ok((files::reserve_dir(&self.root.path, &name)?, keep))
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
        let harness_failure = |e: anyhow::Error| {
            Started::failed(
                RunMeta::default(),
                Failure::from_error(FailureKind::Harness, &e),
            )
        };
        let resumed = match settings.knobs.resume {
            Some(Launch::Killed) => return self.start_killed(index, settings),
            Some(Launch::Resumed) => self.killed_launch(),
            None => None,
        };
        let (mut dest, keep) = match self.prepare(index, resumed.is_some()) {
            Ok(d) => d,
            Err(e) => return harness_failure(e),
        };
        let (baseline, publisher) = self.baseline(index, &dest);
        let mut owned = vec![Scratch::new(dest.clone(), keep)];
        let stdout = match self.program.stdout.then(|| files::stdout_file(&dest)) {
            Some(Err(e)) => return harness_failure(e),
            made => made.and_then(Result::ok),
        };
        owned.extend(stdout.clone().map(|p| Scratch::new(p, keep)));
        let out = self.out_path();
        let mut env = env_for(self.program, settings, index, &out);
        let capture = self
            .capture
            .key
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let capturing = capture.is_some();
        if let Some(key) = capture {
            env.insert(crate::protocol::TRACE_CAPTURE_ENV.into(), key);
        }
        if let Some(k) = &resumed {
            let steps = k.checkpoint.steps.to_string();
            env.insert(crate::protocol::RESUME_STEP_ENV.into(), steps);
        }
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let batch = (settings.knobs.batch).unwrap_or(settings.controls.batch_pair[0]);
        let command = match resumed {
            Some(_) => self
                .program
                .resumed_command(settings.knobs.world_size, Some(batch)),
            None => self
                .program
                .command_for(settings.knobs.world_size, Some(batch)),
        };
        let (watcher, stop) = self.watcher(index, capturing);
        let inject = super::trace::inject_dir(&out);
        super::tracer::clear(&inject);
        let ended = spawn::run(&spawn::Spawn {
            command: &command,
            env: &env,
            stdout: stdout.as_deref(),
            timeout: self.program.timeout,
            memory_limit_mb: self.program.memory_limit_mb,
            stop: Some(&stop),
            pid: None,
        });
        let records = super::tracer::read(&inject);
        drop(_one);
        let mut watched = watcher.map(watch::Watcher::finish).unwrap_or_default();
        // The run is over and its processes gone: its outputs move aside, so the next run gets
        // the same path, new and empty. What is at `out` now is checked, never followed: a
        // program that replaced it with a symlink (to `/`) must not make bitexact read elsewhere.
        let replaced = match std::fs::symlink_metadata(&out) {
            Err(_) => Some("removed $BITEXACT_OUT"),
            Ok(m) if !m.is_dir() => {
                let _ = std::fs::remove_file(&out);
                Some("replaced $BITEXACT_OUT with a symlink or a file (not followed)")
            }
            Ok(_) => None,
        };
        let moved = match replaced {
            None => files::move_out(&out, &dest).map(|to| {
                let promised = self.root.path.join(format!("run-{index}"));
                if let Some(n) = files::kept_elsewhere(index, &to, &promised).filter(|_| keep) {
                    self.moved_elsewhere
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(n);
                }
                (to != dest).then_some(to)
            }),
            Some(_) => Ok(None),
        };
        if let Ok(Some(to)) = &moved {
            owned.push(Scratch::new(to.clone(), keep));
            dest = to.clone();
        }
        if index == 0 {
            // Run 0's files, completed once and left so, now lie in `dest` (a rename keeps
            // their sizes and times); `out` is as the program left it when they were not moved.
            let now = match (&moved, replaced) {
                (Ok(_), None) => &dest,
                _ => &out,
            };
            let reference = watch::Reference::new(&watched, now, &dest, &self.program.ignore);
            let reference = Arc::new(reference);
            *self.reference.lock().unwrap_or_else(|e| e.into_inner()) = Some(reference);
        }
        let ended = match (ended, moved) {
            (Ok(e), Ok(_)) => e,
            (Err(e), _) | (_, Err(e)) => return harness_failure(e),
        };
        if let Err(e) = files::record_platform(&dest, keep, settings, &env) {
            return harness_failure(e);
        }
        let run = ProgramRun {
            index,
            exit_status: ended.status.code(),
            signal: ended.status.signal(),
            seconds: ended.seconds,
            peak_rss_bytes: ended.peak_rss_bytes,
            stopped_early: watched.stopped.as_ref().filter(|_| ended.stopped).map(|w| {
                format!(
                    "stopped early at {:.2}s: {} differs from run 0's",
                    w.at, w.name
                )
            }),
        };
        let meta = RunMeta {
            seconds: ended.seconds,
            peak_bytes: ended.peak_rss_bytes,
            program: Some((run, env)),
            ..RunMeta::default()
        };
        let limited = self.program.memory_limit_mb.is_some();
        let failed = spawn::failed(&ended, self.program.timeout, limited).or_else(|| {
            let what = replaced?;
            Some(Failure::new(
                FailureKind::UnreadableOutput,
                format!("the program {what}"),
            ))
        });
        // A run whose Python could not trace (or seed) fails too, before another run is made.
        let notes =
            match super::tracer::notes_or_failure(self.program, &records, ended.stopped, failed) {
                Ok(notes) => notes,
                Err(f) => return Started::failed(meta, f),
            };
        let rules = self.program.ignore.clone();
        let trace_ops = self.program.trace.is_some();
        // Runs at other batch sizes make other op calls: their op streams are compared request
        // by request when localizing, never as one output.
        let ops_compared = !settings.varied.contains(&Variation::Batch);
        let partial = ended.stopped;
        let reuse = Reuse {
            hashed: Reuse::last_hashes(std::mem::take(&mut watched.seen)),
            equal: watched.equal_to_run_0(),
            baseline: baseline.filter(|_| publisher.is_none()),
        };
        let remover = self.remover.clone();
        let handle = std::thread::spawn(move || {
            let unreadable =
                |e: anyhow::Error| Failure::from_error(FailureKind::UnreadableOutput, &e);
            let mut ignored = Vec::new();
            let stdout = match stdout {
                Some(raw) if rules.masks_stdout() => {
                    let mut masked = raw.clone().into_os_string();
                    masked.push(".masked");
                    let masked = PathBuf::from(masked);
                    owned.push(Scratch::new(masked.clone(), keep));
                    ignored = rules.mask_stdout(&raw, &masked).map_err(unreadable)?;
                    Some(masked)
                }
                other => other,
            };
            let compared = stdout.as_deref().filter(|_| !partial); // cut short if stopped
            let mut c = collect::collect(&dest, compared, (trace_ops, partial), reuse)
                .map_err(unreadable)?;
            if let Some(p) = publisher {
                p.publish(std::mem::take(&mut c.files));
            }
            let trace = c.trace.take();
            if let Some(t) = trace.as_ref().filter(|_| ops_compared) {
                let ops = crate::trace::program::OPS_NAME.to_string();
                c.digests.push((ops, crate::trace::program::digest(t)));
            }
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
                    owned,
                    remover,
                    out: dest,
                    stdout,
                    op_calls: trace.as_ref().map(Vec::len),
                    stopped_early: partial,
                }),
                trace,
                steps: c.steps,
                state: c.state,
                platform: c.platform,
                ignored: by_glob,
                controls_read: c.controls_read,
                partial,
                notes,
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
        j: usize,
        _metas: &[RunMeta],
        planner: &mut dyn Runs,
    ) -> Option<Divergence> {
        super::trace::localize(self, &self.capture, first, other, j, planner)
    }

    fn describe(
        &self,
        report: &mut CaseReport,
        metas: &[RunMeta],
        first: Option<&Collected>,
        planner: &mut dyn Runs,
    ) {
        let moved = self
            .moved_elsewhere
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        super::info::describe(self, report, metas, first, planner, moved);
        report.captured =
            std::mem::take(&mut self.capture.diffs.lock().unwrap_or_else(|e| e.into_inner()));
    }
}

/// What a run that wrote nothing is told.
const NOTHING_TO_COMPARE: &str = "wrote nothing to compare: write tensors into $BITEXACT_OUT (Python: `bitexact.dump(\"name\", x=tensor)` \
     or `bitexact.step(i, ...)`; numpy: `np.save(os.path.join(os.environ[\"BITEXACT_OUT\"], \"x.npy\"), x)`), \
     or pass --stdout to compare standard output";
