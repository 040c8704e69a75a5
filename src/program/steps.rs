//! The steps of one program run ([`super::ProgramSource`]) and what passes between them:
//! prepared ([`Prepared`]), spawned ([`Spawned`]), its outputs moved aside ([`move_aside`]),
//! then collected on a background thread while the next run executes ([`Collecting`]:
//! standard output masked by the ignore rules, files digested reusing what the watcher and
//! run 0 already hashed, the op trace digested, ignored names filtered out).

use super::baseline::{Baseline, Publisher, Reuse};
use super::files::{self, Remover, RunFiles, Scratch};
use super::ignore::Ignore;
use super::{collect, spawn, tracer, watch};
use crate::harness::{Collected, RunMeta, Started};
use crate::outcome::{Failure, FailureKind, ProgramRun};
use anyhow::Result;
use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Run `index` made ready to spawn (`ProgramSource::prepare_run`).
pub(super) struct Prepared {
    /// Where its outputs go when it ends.
    pub dest: PathBuf,
    /// Whether they are kept (`--keep`, main pass).
    pub keep: bool,
    /// What its files' loader removes when dropped (unless kept).
    pub owned: Vec<Scratch>,
    /// Where its standard output goes (`--stdout`).
    pub stdout: Option<PathBuf>,
    /// Run 0's baseline, for a later run to reuse digests from.
    pub baseline: Option<Arc<Baseline>>,
    /// Run 0's publisher of its baseline.
    pub publisher: Option<Publisher>,
    /// Its environment.
    pub env: BTreeMap<String, String>,
    /// Whether it is a capture re-run (never stopped early).
    pub capturing: bool,
}

/// How a spawned run ended (`ProgramSource::spawn_run`).
pub(super) struct Spawned {
    /// Its end, or why it could not be run.
    pub ended: Result<spawn::Ended>,
    /// What the watcher of its outputs saw.
    pub watched: watch::Watched,
    /// What its tracer recorded.
    pub records: Vec<tracer::Record>,
}

/// A run that failed for a reason of bitexact's own.
pub(super) fn harness_failure(e: anyhow::Error) -> Started {
    Started::failed(
        RunMeta::default(),
        Failure::from_error(FailureKind::Harness, &e),
    )
}

/// The facts of run `index`, which ended as `ended` in `env`.
pub(super) fn run_meta(
    index: usize,
    ended: &spawn::Ended,
    watched: &watch::Watched,
    env: BTreeMap<String, String>,
) -> RunMeta {
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
    RunMeta {
        seconds: ended.seconds,
        peak_bytes: ended.peak_rss_bytes,
        program: Some((run, env)),
        ..RunMeta::default()
    }
}

/// Moves an ended run's outputs from `out` to `dest` (or to a fresh name beside it:
/// [`files::move_out`]), so that the next run gets the same path, new and empty. Gives how the
/// program replaced `out`, if it did, and where the outputs went (`None`: not moved, as it
/// replaced `out`). What is at `out` is checked, never followed: a program that replaced it
/// with a symlink (to `/`) must not make bitexact read elsewhere.
pub(super) fn move_aside(
    out: &Path,
    dest: &Path,
) -> (Option<&'static str>, Result<Option<PathBuf>>) {
    let replaced = match std::fs::symlink_metadata(out) {
        Err(_) => Some("removed $BITEXACT_OUT"),
        Ok(m) if !m.is_dir() => {
            let _ = std::fs::remove_file(out);
            Some("replaced $BITEXACT_OUT with a symlink or a file (not followed)")
        }
        Ok(_) => None,
    };
    let moved = match replaced {
        None => files::move_out(out, dest).map(Some),
        Some(_) => Ok(None),
    };
    (replaced, moved)
}

/// What collecting one ended run's outputs needs.
pub(super) struct Collecting {
    /// The ignore rules (`--ignore`, `--ignore-stdout`).
    pub rules: Ignore,
    /// Whether the program's op calls are traced (`--trace`).
    pub trace_ops: bool,
    /// Whether the op trace is compared as one output (not when batch sizes vary).
    pub ops_compared: bool,
    /// Whether the run was stopped early: its outputs are partial.
    pub partial: bool,
    /// Digests already known, from the watcher and run 0.
    pub reuse: Reuse,
    /// Run 0's publisher of its files, for the later runs' [`Reuse`].
    pub publisher: Option<Publisher>,
    /// The tracer's notes on the run.
    pub notes: Vec<String>,
    /// What the run's files' loader removes when dropped (unless kept).
    pub owned: Vec<Scratch>,
    /// Removes the runs' directories in the background.
    pub remover: Arc<Remover>,
    /// Where the run's outputs lie.
    pub dest: PathBuf,
    /// Where its standard output went (`--stdout`).
    pub stdout: Option<PathBuf>,
    /// Whether its files are kept (`--keep`).
    pub keep: bool,
}

impl Collecting {
    /// Starts collecting on a background thread; the harness joins it when it takes them.
    pub fn start(self) -> Box<dyn FnOnce() -> Result<Collected, Failure> + Send> {
        let handle = std::thread::spawn(move || self.collect());
        Box::new(move || {
            handle.join().unwrap_or_else(|_| {
                Err(Failure::new(
                    FailureKind::Harness,
                    "hashing the outputs panicked",
                ))
            })
        })
    }

    /// The run's outputs, digested and filtered, or why they could not be.
    fn collect(mut self) -> Result<Collected, Failure> {
        let unreadable = |e: anyhow::Error| Failure::from_error(FailureKind::UnreadableOutput, &e);
        let mut ignored = Vec::new();
        let stdout = match self.stdout.take() {
            Some(raw) if self.rules.masks_stdout() => {
                let mut masked = raw.clone().into_os_string();
                masked.push(".masked");
                let masked = PathBuf::from(masked);
                self.owned.push(Scratch::new(masked.clone(), self.keep));
                ignored = self.rules.mask_stdout(&raw, &masked).map_err(unreadable)?;
                Some(masked)
            }
            other => other,
        };
        let partial = self.partial;
        let compared = stdout.as_deref().filter(|_| !partial); // cut short if stopped
        let traced = (self.trace_ops, partial);
        let mut c =
            collect::collect(&self.dest, compared, traced, self.reuse).map_err(unreadable)?;
        if let Some(p) = self.publisher {
            p.publish(std::mem::take(&mut c.files));
        }
        let trace = c.trace.take();
        if let Some(t) = trace.as_ref().filter(|_| self.ops_compared) {
            let ops = crate::trace::program::OPS_NAME.to_string();
            c.digests.push((ops, crate::trace::program::digest(t)));
        }
        let mut by_glob = self.rules.filter(&mut c.digests);
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
                owned: self.owned,
                remover: self.remover,
                out: self.dest,
                stdout,
                records: trace.as_deref().map(crate::trace::program::count),
                stopped_early: partial,
            }),
            trace,
            steps: c.steps,
            state: c.state,
            platform: c.platform,
            ignored: by_glob,
            controls_read: c.controls_read,
            partial,
            notes: self.notes,
        })
    }
}

/// What a run that wrote nothing is told.
const NOTHING_TO_COMPARE: &str = "wrote nothing to compare: write tensors into $BITEXACT_OUT (Python: `bitexact.dump(\"name\", x=tensor)` \
     or `bitexact.step(i, ...)`; numpy: `np.save(os.path.join(os.environ[\"BITEXACT_OUT\"], \"x.npy\"), x)`), \
     or pass --stdout to compare standard output";
