//! [`ProgramSource`]: a program as a run source. Each run is spawned with the environment
//! contract ([`super::env_for`]) in a fresh output directory; its files are collected on a
//! background thread (while the next run executes), filtered by the ignore rules, and kept
//! until the harness drops them (then removed, unless `--keep`).

use super::baseline::{Baseline, Publisher, Reuse};
use super::files::{self, Remover, Scratch};
use super::killed::{Killed, Resumable};
use super::steps::{self, harness_failure, run_meta, Collecting, Prepared, Spawned};
use super::{ended, env_for, spawn, watch, Program};
use crate::backend::Backend;
use crate::harness::{Collected, RunMeta, RunSource, Runs, Started};
use crate::outcome::{CaseReport, Failure, FailureKind};
use crate::trace::Divergence;
use crate::vary::{Launch, RunSettings, Variation};
use anyhow::{Context, Result};
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
    killed: std::sync::Mutex<Option<Killed>>,
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

    /// Step 1 of run `index`: its output directories, its standard output file, run 0's
    /// baseline, and its environment (with the capture key of a localization re-run, and the
    /// killed launch's steps for the `resumed` launch of `--vary resume`).
    fn prepare_run(
        &self,
        index: usize,
        settings: &RunSettings,
        resumed: Option<&Killed>,
    ) -> Result<Prepared> {
        let (dest, keep) = self.prepare(index, resumed.is_some())?;
        let (baseline, publisher) = self.baseline(index, &dest);
        let mut owned = vec![Scratch::new(dest.clone(), keep)];
        let stdout = match self.program.stdout {
            true => Some(files::stdout_file(&dest)?),
            false => None,
        };
        owned.extend(stdout.clone().map(|p| Scratch::new(p, keep)));
        let mut env = env_for(self.program, settings, index, &self.out_path());
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
        if let Some(k) = resumed {
            let steps = k.checkpoint.steps.to_string();
            env.insert(crate::protocol::RESUME_STEP_ENV.into(), steps);
        }
        Ok(Prepared {
            dest,
            keep,
            owned,
            stdout,
            baseline,
            publisher,
            env,
            capturing,
        })
    }

    /// Step 2: spawns the program (one at a time) while its outputs are watched, and reads
    /// what its tracer recorded.
    fn spawn_run(
        &self,
        index: usize,
        settings: &RunSettings,
        run: &Prepared,
        resumed: bool,
    ) -> Spawned {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let batch = (settings.knobs.batch).unwrap_or(settings.controls.batch_pair[0]);
        let world_size = settings.knobs.world_size;
        let command = match resumed {
            true => self.program.resumed_command(world_size, Some(batch)),
            false => self.program.command_for(world_size, Some(batch)),
        };
        let (watcher, stop) = self.watcher(index, run.capturing);
        let inject = super::trace::inject_dir(&self.out_path());
        super::tracer::clear(&inject);
        let ended = spawn::run(&spawn::Spawn {
            command: &command,
            env: &run.env,
            stdout: run.stdout.as_deref(),
            timeout: self.program.timeout,
            memory_limit_mb: self.program.memory_limit_mb,
            stop: Some(&stop),
            pid: None,
        });
        let records = super::tracer::read(&inject);
        drop(_one);
        Spawned {
            ended,
            watched: watcher.map(watch::Watcher::finish).unwrap_or_default(),
            records,
        }
    }

    /// Step 3, once the run is over and its processes gone: its outputs move aside
    /// ([`steps::move_aside`]; `--keep` notes where they went when not under their promised
    /// name), and run 0's become the reference later runs are compared with while they run.
    /// Says how the program replaced `$BITEXACT_OUT`, if it did.
    fn move_outputs(
        &self,
        index: usize,
        run: &mut Prepared,
        watched: &watch::Watched,
    ) -> Result<Option<&'static str>> {
        let out = self.out_path();
        let (replaced, moved) = steps::move_aside(&out, &run.dest);
        if let Ok(Some(to)) = &moved {
            let promised = self.root.path.join(format!("run-{index}"));
            let elsewhere = files::kept_elsewhere(index, to, &promised);
            if let Some(n) = elsewhere.filter(|_| run.keep) {
                self.moved_elsewhere
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(n);
            }
            if *to != run.dest {
                run.owned.push(Scratch::new(to.clone(), run.keep));
                run.dest = to.clone();
            }
        }
        if index == 0 {
            // Run 0's files, completed once and left so, now lie in `dest` (a rename keeps
            // their sizes and times); `out` is as the program left it when they were not moved.
            let now = match (&moved, replaced) {
                (Ok(_), None) => &run.dest,
                _ => &out,
            };
            let reference = watch::Reference::new(watched, now, &run.dest, &self.program.ignore);
            let reference = Arc::new(reference);
            *self.reference.lock().unwrap_or_else(|e| e.into_inner()) = Some(reference);
        }
        moved.map(|_| replaced)
    }
}

impl Resumable for ProgramSource<'_> {
    fn program(&self) -> &Program {
        self.program
    }

    fn out_path(&self) -> PathBuf {
        self.root.path.join("out")
    }

    fn killed_launch(&self) -> Option<Killed> {
        self.killed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl RunSource for ProgramSource<'_> {
    fn name(&self) -> String {
        self.program.name.clone()
    }

    fn backend(&self) -> Backend {
        Backend::Cpu
    }

    /// Run `index`: prepared, spawned, its outputs moved aside, then collected on a
    /// background thread while the next run executes.
    fn start(&self, index: usize, settings: &RunSettings) -> Started {
        let resumed = match settings.knobs.resume {
            Some(Launch::Killed) => return self.start_killed(index, settings),
            Some(Launch::Resumed) => self.killed_launch(),
            None => None,
        };
        let mut run = match self.prepare_run(index, settings, resumed.as_ref()) {
            Ok(run) => run,
            Err(e) => return harness_failure(e),
        };
        let spawned = self.spawn_run(index, settings, &run, resumed.is_some());
        let mut watched = spawned.watched;
        let moved = self.move_outputs(index, &mut run, &watched);
        let (ended, replaced) = match (spawned.ended, moved) {
            (Ok(e), Ok(replaced)) => (e, replaced),
            (Err(e), _) | (_, Err(e)) => return harness_failure(e),
        };
        if let Err(e) = files::record_platform(&run.dest, run.keep, settings, &run.env) {
            return harness_failure(e);
        }
        let meta = run_meta(index, &ended, &watched, std::mem::take(&mut run.env));
        let limited = self.program.memory_limit_mb.is_some();
        let failed = ended::failed(&ended, self.program.timeout, limited).or_else(|| {
            let what = replaced?;
            Some(Failure::new(
                FailureKind::UnreadableOutput,
                format!("the program {what}"),
            ))
        });
        // A run whose Python could not trace (or seed) fails too, before another run is made.
        let records = &spawned.records;
        let notes =
            match super::tracer::notes_or_failure(self.program, records, ended.stopped, failed) {
                Ok(notes) => notes,
                Err(f) => return Started::failed(meta, f),
            };
        let reuse = Reuse {
            hashed: Reuse::last_hashes(std::mem::take(&mut watched.seen)),
            equal: watched.equal_to_run_0(),
            baseline: run.baseline.filter(|_| run.publisher.is_none()),
        };
        let collecting = Collecting {
            rules: self.program.ignore.clone(),
            trace_ops: self.program.trace.is_some(),
            // Runs at other batch sizes make other op calls: their op streams are compared
            // request by request when localizing, never as one output.
            ops_compared: !settings.varied.contains(&Variation::Batch),
            partial: ended.stopped,
            reuse,
            publisher: run.publisher,
            notes,
            owned: run.owned,
            remover: self.remover.clone(),
            dest: run.dest,
            stdout: run.stdout,
            keep: run.keep,
        };
        Started {
            meta,
            outputs: Ok(collecting.start()),
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
