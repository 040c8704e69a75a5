//! When a checkpoint is complete (`--vary resume`): the killed launch of the resume run is
//! stopped with SIGKILL, as a preemption would, right after its Nth checkpoint under
//! `$BITEXACT_OUT` is complete. A thread watches the output tree with inotify and feeds a
//! [`Detector`], which decides:
//!
//! - **Which paths are checkpoints** ([`Matcher`]): `--checkpoint GLOB` (matched against the
//!   path under `$BITEXACT_OUT`, or against the name alone when the glob has no `/`), by
//!   default any file or directory whose name contains `ckpt` or `checkpoint` (any case), at
//!   any depth. A temporary name never is one ([`temporary`]: `ckpt.pt.tmp`, `*.partial`,
//!   `tmp-checkpoint-500/`, …), nor anything inside a temporary directory.
//! - **When a file is complete**: when it is closed after writing, or renamed into place. A
//!   trainer that writes `ckpt.pt.tmp` and renames it to `ckpt.pt` is counted when the rename
//!   lands, never when the temporary file closes: a kill between the two would test a
//!   half-written checkpoint.
//! - **When a directory is complete** (the Trainer's `checkpoint-500/`): when it is renamed
//!   into place, at once; when it was created in place, once it holds a completed file and the
//!   program then completes a file outside it (the next step's output, a log line, the state
//!   record of the next optimizer step): the program has gone on. A directory still open when
//!   the program ends was never followed by more work, so nothing is left to resume from it.
//!
//! Each completed checkpoint records how many state-record lines ([`STATE_FILE_PREFIX`]) were
//! completed before it: the optimizer steps the launch took before its checkpoint, which the
//! resumed launch's steps are numbered from.

use super::inotify::{Event, Inotify};
use crate::protocol::{METADATA_PREFIX, STATE_FILE_PREFIX};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Which paths under `$BITEXACT_OUT` are checkpoints.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Matcher {
    /// `--checkpoint GLOB`; `None`: a name containing `ckpt` or `checkpoint`.
    pub glob: Option<String>,
}

impl Matcher {
    /// Whether the path `name` (under `$BITEXACT_OUT`) is a checkpoint by its name; a
    /// temporary name, or a path inside a temporary directory, never is.
    pub fn matches(&self, name: &str) -> bool {
        if name.split('/').any(temporary) {
            return false;
        }
        let base = name.rsplit('/').next().unwrap_or(name);
        match &self.glob {
            Some(g) if g.contains('/') => crate::glob::matches(g, name),
            Some(g) => crate::glob::matches(g, base),
            None => {
                let lower = base.to_ascii_lowercase();
                lower.contains("ckpt") || lower.contains("checkpoint")
            }
        }
    }

    /// How the report names the pattern (`*ckpt* or *checkpoint*`).
    pub fn describe(&self) -> String {
        match &self.glob {
            Some(g) => g.clone(),
            None => "*ckpt* or *checkpoint*".into(),
        }
    }
}

/// Whether one path component is a temporary name a saver renames away when done.
pub fn temporary(component: &str) -> bool {
    let c = component.to_ascii_lowercase();
    const ENDS: [&str; 7] = [".tmp", ".temp", ".part", ".partial", ".swp", ".lock", "~"];
    const STARTS: [&str; 4] = ["tmp-", "tmp_", ".tmp", "~"];
    ENDS.iter().any(|e| c.ends_with(e))
        || STARTS.iter().any(|s| c.starts_with(s))
        || c.contains(".tmp.")
        || c.contains(".tmp-")
}

/// One completed checkpoint.
#[derive(Clone, Debug, PartialEq)]
pub struct Completed {
    /// Its path under `$BITEXACT_OUT` (a directory ends in `/`).
    pub name: String,
    /// Seconds into the launch.
    pub at: f64,
    /// State-record lines completed before it: the optimizer steps taken before it.
    pub steps: usize,
}

/// Decides from a launch's completions when its checkpoints are complete (see the module
/// docs).
#[derive(Debug, Default)]
pub struct Detector {
    matcher: Matcher,
    /// Directories that are checkpoints, created in place and not yet complete, with whether
    /// they hold a completed file.
    open: Vec<(String, bool)>,
    /// Checkpoint files found in a new directory, not yet seen closed.
    pending: Vec<String>,
    /// Checkpoints completed, in order.
    pub completed: Vec<Completed>,
    /// State-record lines completed so far.
    pub steps: usize,
    /// A checkpoint the program began after its last completed one (a checkpoint file opened,
    /// a checkpoint directory created) and never completed: where a kill that landed late
    /// found it.
    pub begun: Option<String>,
    /// Other files the program completed (their first few names, for an error message).
    pub others: Vec<String>,
    /// How many other files it completed.
    pub other_count: usize,
}

impl Detector {
    /// A detector for checkpoints `matcher` finds.
    pub fn new(matcher: Matcher) -> Detector {
        Detector {
            matcher,
            ..Detector::default()
        }
    }

    /// Takes one event seen `at` seconds into the launch.
    pub(super) fn event(&mut self, e: &Event, at: f64) {
        match e {
            Event::File(name) => self.file(name, at),
            Event::Listed(name) => self.listed(name),
            Event::Opened(name) => self.opened(name),
            Event::Dir { name, moved } => self.dir(name, *moved, at),
        }
    }

    /// A file closed after writing, or renamed into place.
    fn file(&mut self, name: &str, at: f64) {
        if self.in_complete_dir(name) {
            return;
        }
        // A listed checkpoint file now closed is complete; any other listed one, and every
        // filled open directory this file is not in, is complete too: the program went on.
        let own = self.pending.iter().position(|p| p == name);
        let own = own.map(|i| self.pending.remove(i));
        self.went_on(name, at);
        if own.is_some() {
            return self.complete(name.to_string(), at);
        }
        if self.matcher.matches(name) {
            // A checkpoint as the first thing in a matching directory: that one holds
            // checkpoints (a Lightning `checkpoints/`), it is not one itself.
            self.open.retain(|(d, filled)| *filled || !inside(name, d));
        }
        if let Some(open) = self.open.iter_mut().find(|(d, _)| inside(name, d)) {
            open.1 = true;
            return;
        }
        let base = name.rsplit('/').next().unwrap_or(name);
        if base == format!("{STATE_FILE_PREFIX}0.jsonl") {
            self.steps += 1; // rank 0's optimizer steps
        } else if base.starts_with(METADATA_PREFIX) {
        } else if self.matcher.matches(name) {
            self.complete(name.to_string(), at);
        } else {
            self.other_count += 1;
            if self.others.len() < 3 && !self.others.iter().any(|o| o == name) {
                self.others.push(name.to_string());
            }
        }
    }

    /// A file found in a directory when it appeared: it may still be open. Inside a directory
    /// checkpoint it fills it; a checkpoint file itself waits for its close, or for the program
    /// to complete another file (then it was closed before bitexact watched its directory).
    fn listed(&mut self, name: &str) {
        if self.in_complete_dir(name) {
            return;
        }
        if let Some(open) = self.open.iter_mut().find(|(d, _)| inside(name, d)) {
            open.1 = true;
        } else if self.matcher.matches(name) && !self.pending.iter().any(|p| p == name) {
            self.pending.push(name.to_string());
        }
    }

    /// A file opened: a checkpoint file, or one in a checkpoint directory not yet complete,
    /// begins a checkpoint.
    fn opened(&mut self, name: &str) {
        if self.begun.is_some() || self.in_complete_dir(name) {
            return;
        }
        if let Some((d, _)) = self.open.iter().find(|(d, _)| inside(name, d)) {
            self.begun = Some(format!("{d}/"));
        } else if self.matcher.matches(name) {
            self.begun = Some(name.to_string());
        }
    }

    fn dir(&mut self, name: &str, moved: bool, at: f64) {
        let part_of = |(d, filled): &(String, bool)| *filled && inside(name, d);
        if self.in_complete_dir(name)
            || !self.matcher.matches(name)
            || self.open.iter().any(part_of)
        {
            return;
        }
        // A checkpoint directory as the first thing in an open one: the outer one holds
        // checkpoints. A new one beside a filled one: the program went on past it.
        self.open.retain(|(d, filled)| *filled || !inside(name, d));
        self.went_on(name, at);
        match moved {
            true => self.complete(format!("{name}/"), at),
            false => {
                self.open.push((name.to_string(), false));
                self.begun.get_or_insert_with(|| format!("{name}/"));
            }
        }
    }

    /// The program completed `name`: every listed checkpoint file, and every filled open
    /// directory that does not hold `name`, is complete.
    fn went_on(&mut self, name: &str, at: f64) {
        for p in std::mem::take(&mut self.pending) {
            self.complete(p, at);
        }
        let (done, open): (Vec<_>, Vec<_>) = std::mem::take(&mut self.open)
            .into_iter()
            .partition(|(d, filled)| *filled && !inside(name, d));
        self.open = open;
        for (d, _) in done {
            self.complete(format!("{d}/"), at);
        }
    }

    /// Whether `name` lies in a directory checkpoint already complete (its files are part of
    /// it, not checkpoints of their own).
    fn in_complete_dir(&self, name: &str) -> bool {
        let mut dirs = self
            .completed
            .iter()
            .filter_map(|c| c.name.strip_suffix('/'));
        dirs.any(|d| inside(name, d))
    }

    fn complete(&mut self, name: String, at: f64) {
        self.begun = None;
        let steps = self.steps;
        self.completed.push(Completed { name, at, steps });
    }

    /// What was seen, for an error when the wanted checkpoint never completed:
    /// `1 wanted, 0 seen; the program wrote step_0001.safetensors, …`.
    pub fn seen(&self, wanted: usize) -> String {
        let mut s = format!("{wanted} wanted, {} seen", self.completed.len());
        if !self.open.is_empty() {
            let open: Vec<&str> = self.open.iter().map(|(d, _)| d.as_str()).collect();
            s.push_str(&format!(
                "; {} never followed by a write outside it",
                open.join(", ")
            ));
        }
        match self.other_count {
            0 => s.push_str("; the program wrote no other file"),
            n => {
                let more = if n > self.others.len() { ", …" } else { "" };
                s.push_str(&format!(
                    "; the program wrote {}{more}",
                    self.others.join(", ")
                ));
            }
        }
        s
    }
}

/// Whether `name` lies inside directory `dir` (both under the root).
fn inside(name: &str, dir: &str) -> bool {
    name.strip_prefix(dir).is_some_and(|r| r.starts_with('/'))
}

/// A thread that kills a launch's process group right after its `wanted`th checkpoint.
pub struct Watch {
    done: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Detector>>,
}

/// Starts watching `out` (which must exist) for checkpoints: when the `wanted`th completes,
/// the process group led by the pid in `pid` (set once the launch started) is sent SIGKILL
/// and `stop` is set (so the launch is reported as stopped, not crashed). `None` when inotify
/// is unavailable.
pub fn watch(
    out: &Path,
    matcher: Matcher,
    wanted: usize,
    pid: Arc<AtomicI32>,
    stop: Arc<AtomicBool>,
) -> Option<Watch> {
    let mut ino = Inotify::new().ok()?;
    ino.add(out, String::new()).ok()?;
    let done = Arc::new(AtomicBool::new(false));
    let flag = done.clone();
    let thread = std::thread::spawn(move || {
        let t0 = Instant::now();
        let mut d = Detector::new(matcher);
        loop {
            let last = flag.load(Ordering::SeqCst);
            for e in ino.read_events(if last { 0 } else { 5 }) {
                d.event(&e, t0.elapsed().as_secs_f64());
                if d.completed.len() >= wanted && !stop.load(Ordering::SeqCst) && !last {
                    stop.store(true, Ordering::SeqCst);
                    kill(&pid);
                }
            }
            if last {
                return d;
            }
        }
    });
    Some(Watch {
        done,
        thread: Some(thread),
    })
}

/// Sends SIGKILL to the process group whose leader's pid is in `pid`, waiting briefly for the
/// launch to have set it.
fn kill(pid: &AtomicI32) {
    for _ in 0..1000 {
        let p = pid.load(Ordering::SeqCst);
        if p > 0 {
            // SAFETY: signals the process group the launch leads (see `process::contain`).
            unsafe { libc::kill(-p, libc::SIGKILL) };
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

impl Watch {
    /// The launch is over: the last events, and what the detector decided.
    pub fn finish(mut self) -> Detector {
        self.done.store(true, Ordering::SeqCst);
        let thread = self.thread.take();
        thread.and_then(|t| t.join().ok()).unwrap_or_default()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.done.store(true, Ordering::SeqCst);
    }
}

#[cfg(test)]
#[path = "checkpoint_tests.rs"]
mod tests;
