//! Hashing while the program writes, and stopping a run at its first divergence.
//!
//! During each run a thread watches `$BITEXACT_OUT` and its subdirectories with inotify. A file
//! is hashed as soon as it is complete: closed after writing (`IN_CLOSE_WRITE`) or renamed into
//! place (`IN_MOVED_TO`, how `bitexact.dump` and most savers publish a file). A file rewritten
//! later is hashed again. Files up to [`WATCH_MAX_BYTES`] are read into memory, never mapped
//! (a mapped file the program truncates would kill bitexact with SIGBUS); larger ones are
//! hashed at the end (in a later run, then only when their bytes differ from run 0's:
//! [`super::baseline`]). When the run ends, the outputs are collected as always
//! ([`super::collect`]), but a file whose last hash was taken after its last completion and
//! whose size and modification time are unchanged is not read again ([`Seen`]); anything the
//! watcher missed (no event, a queue overflow, a run killed mid-write) is hashed then. So the
//! final digests are exactly those of the files as the program left them.
//!
//! **Early stop.** Run 0 of each pass is the reference. In a later run, an output file of any
//! kind (safetensors, npy, npz, `torch.save`, or raw bytes: `.bin`, `.json`, `.csv`) that run 0
//! completed exactly once, and left as it completed it, is compared as soon as this run
//! completes it: when its digests differ, the
//! run's whole process group is stopped and the run is reported as stopped early, with the
//! time and the file. A file over [`WATCH_MAX_BYTES`] is compared with run 0's copy byte for
//! byte (read in blocks): a first difference after equal headers is a tensor that differs
//! ([`tensor_files::data_start`]; any byte of a raw file), and stops the run too. Files run 0
//! completed several times (checkpoints rewritten each epoch, logs that grow by appends, each
//! append a completion) are compared only at the end, as are the outputs the ignore rules
//! leave out and standard output. `--keep-going` turns early stop off. Under `--trace` the tracer's
//! writer flushes its records every millisecond, so a stopped run's op trace holds every op it
//! made up to a millisecond before the stop, and the first diverging op is looked for in what
//! both runs recorded (see [`crate::trace::ranks::cut_to`]). Capture re-runs are never stopped.

use super::inotify::Inotify;
use super::large;
pub use super::large::WATCH_MAX_BYTES;
use crate::digest::Digest;
use crate::protocol::METADATA_PREFIX;
use crate::tensor_files::{self, OutputFile};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

/// One completed file as the watcher hashed it.
#[derive(Clone, Debug)]
pub struct Seen {
    /// Its name under `$BITEXACT_OUT` (`rank0/step_0001.safetensors`).
    pub name: String,
    /// Its outputs' digests (`name` or `name:key`).
    pub digests: Vec<(String, Digest)>,
    /// Size and modification time when hashed.
    pub len: u64,
    /// See `len`.
    pub modified: Option<SystemTime>,
}

impl Seen {
    /// Whether a file of this size and modification time is still what was hashed (a file
    /// without a modification time never is).
    pub fn is_current(&self, len: u64, modified: Option<SystemTime>) -> bool {
        large::fresh((self.len, self.modified), (len, modified))
    }
}

/// Run 0's completed files: the ones it completed exactly once and left so, by name, whatever
/// their kind.
#[derive(Debug, Default)]
pub struct Reference {
    /// Files hashed while run 0 ran: their digests.
    hashed: HashMap<String, Vec<(String, Digest)>>,
    /// Files over [`WATCH_MAX_BYTES`] (not hashed during the run), compared by their bytes
    /// with run 0's copy under `moved_to` ([`large::differs`]).
    large: std::collections::HashSet<String>,
    /// Where run 0's outputs lie.
    moved_to: PathBuf,
}

impl Reference {
    /// The reference a finished run 0 gives: its tensor files completed once, still as they
    /// were when completed under `out` (whose files then move to `moved_to`); the outputs the
    /// `ignore` rules leave out are dropped (and large files are compared only without rules,
    /// since their bytes are compared whole).
    pub fn new(
        w: &Watched,
        out: &Path,
        moved_to: &Path,
        ignore: &super::ignore::Ignore,
    ) -> Reference {
        let once = |s: &&Seen| {
            let count = w.completions.as_ref().and_then(|c| c.get(&s.name));
            count == Some(&1) && large::still(&out.join(&s.name), (s.len, s.modified))
        };
        let hashed = w.seen.iter().filter(once).map(|s| {
            let mut digests = s.digests.clone();
            ignore.filter(&mut digests);
            (s.name.clone(), digests)
        });
        let large = w
            .large
            .iter()
            .filter(once)
            .filter(|_| !ignore.filters_outputs());
        Reference {
            hashed: hashed.collect(),
            large: large.map(|s| s.name.clone()).collect(),
            moved_to: moved_to.to_path_buf(),
        }
    }
}

/// Why a run was stopped early.
#[derive(Clone, Debug)]
pub struct Stopped {
    /// Seconds into the run.
    pub at: f64,
    /// The file that differed from run 0's.
    pub name: String,
}

/// What the watcher of one run saw.
#[derive(Debug, Default)]
pub struct Watched {
    /// Every hash it took, in completion order.
    pub seen: Vec<Seen>,
    /// Completions of files over [`WATCH_MAX_BYTES`], not hashed (no digests).
    pub large: Vec<Seen>,
    /// Which of them (indices into `large`) were found equal to run 0's copy, byte for byte.
    pub equal: Vec<usize>,
    /// Set when it stopped the run.
    pub stopped: Option<Stopped>,
    /// How many times each file was completed, hashed or not (a hash that raced a rewrite is
    /// not in `seen`, yet the file was completed); `None` once events were lost.
    pub completions: Option<HashMap<String, usize>>,
}

impl Watched {
    /// Stops the run: `name` differs from run 0's (`t0`: when the run started).
    fn stop(&mut self, c: &Compare, name: &str, t0: Instant) {
        c.stop.store(true, Ordering::SeqCst);
        self.stopped = Some(Stopped {
            at: t0.elapsed().as_secs_f64(),
            name: name.to_string(),
        });
    }

    /// The large files whose last completion was found equal to run 0's copy, by name: their
    /// digests are run 0's while the file is still as it was then ([`super::baseline::Reuse`]).
    /// An earlier equal completion counts for nothing (the file may have been patched in place
    /// within the same tick of the clock, with the same size and time).
    pub fn equal_to_run_0(&self) -> HashMap<String, Seen> {
        let last: HashMap<&str, usize> = self
            .large
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.as_str(), i))
            .collect();
        self.equal
            .iter()
            .filter(|&&i| last.get(self.large[i].name.as_str()) == Some(&i))
            .map(|&i| (self.large[i].name.clone(), self.large[i].clone()))
            .collect()
    }
}

/// A watcher thread; [`Watcher::finish`] after the run has ended.
pub struct Watcher {
    done: Arc<AtomicBool>,
    /// Written by [`Watcher::finish`] to wake the thread from its wait at once.
    wake: Arc<Wake>,
    thread: Option<std::thread::JoinHandle<Watched>>,
}

/// An eventfd the watcher waits on beside inotify.
struct Wake(libc::c_int);

impl Drop for Wake {
    fn drop(&mut self) {
        // SAFETY: our own fd, closed once.
        unsafe { libc::close(self.0) };
    }
}

/// How a later run is compared while it runs.
pub struct Compare {
    /// Run 0's reference (the ignore rules already applied).
    pub reference: Arc<Reference>,
    /// Outputs left out of the comparison (applied to this run's files).
    pub ignore: super::ignore::Ignore,
    /// Set to stop the run (read by [`super::spawn::run`]).
    pub stop: Arc<AtomicBool>,
}

/// Starts watching `out` (which must exist). `None` when inotify is not available: the run
/// is then hashed after it ends, as before, and never stopped early.
pub fn start(out: &Path, compare: Option<Compare>) -> Option<Watcher> {
    let mut inotify = Inotify::new().ok()?;
    inotify.add(out, String::new()).ok()?;
    // SAFETY: plain syscall with flags.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    inotify.wake = fd;
    let wake = Arc::new(Wake(fd));
    let done = Arc::new(AtomicBool::new(false));
    let (flag, keep) = (done.clone(), wake.clone());
    let out = out.to_path_buf();
    let thread = std::thread::spawn(move || {
        let _keep = keep;
        watch(inotify, &out, compare, &flag)
    });
    Some(Watcher {
        done,
        wake,
        thread: Some(thread),
    })
}

impl Watcher {
    /// Reads the last events (the run is over) and returns what was seen.
    pub fn finish(mut self) -> Watched {
        self.stop();
        let thread = self.thread.take();
        thread
            .map(|t| t.join().unwrap_or_default())
            .unwrap_or_default()
    }

    /// Tells the thread the run is over, and wakes it.
    fn stop(&self) {
        self.done.store(true, Ordering::SeqCst);
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live buffer to our eventfd.
        unsafe { libc::write(self.wake.0, one.as_ptr().cast(), one.len()) };
    }
}

impl Drop for Watcher {
    /// Not finished (bitexact is unwinding): the thread is told to end, not waited for.
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.stop();
        }
    }
}

/// The watcher's loop: until `done`, then one last drain.
fn watch(mut ino: Inotify, out: &Path, compare: Option<Compare>, done: &AtomicBool) -> Watched {
    let t0 = Instant::now();
    let mut w = Watched::default();
    let mut completions = HashMap::new();
    loop {
        let last = done.load(Ordering::SeqCst);
        let names = ino.read(if last { 0 } else { 20 });
        for name in names {
            *completions.entry(name.clone()).or_insert(0) += 1;
            if let Some((len, modified)) = large::completed(out, &name) {
                let completed = Seen {
                    name: name.clone(),
                    digests: Vec::new(),
                    len,
                    modified,
                };
                let run_0s = compare
                    .as_ref()
                    .filter(|c| c.reference.large.contains(&name));
                if let (Some(c), None) = (run_0s, &w.stopped) {
                    // Cut short when the run ends: collecting compares it faster (every core).
                    let go_on = || !done.load(Ordering::SeqCst);
                    let theirs = &c.reference.moved_to;
                    match large::differs(out, &name, (len, modified), theirs, &go_on) {
                        Some(true) => w.stop(c, &name, t0),
                        Some(false) => w.equal.push(w.large.len()),
                        None => {}
                    }
                }
                w.large.push(completed);
                continue;
            }
            let Some(seen) = hash(out, &name) else {
                continue;
            };
            if let (Some(c), None) = (&compare, &w.stopped) {
                if differs(c, &seen) {
                    w.stop(c, &seen.name, t0);
                }
            }
            w.seen.push(seen);
        }
        if last {
            w.completions = (!ino.overflowed).then_some(completions);
            return w;
        }
    }
}

/// Whether `seen` differs from run 0's file of that name (see the module docs).
fn differs(c: &Compare, seen: &Seen) -> bool {
    let Some(theirs) = c.reference.hashed.get(&seen.name) else {
        return false;
    };
    let mut ours = seen.digests.clone();
    c.ignore.filter(&mut ours);
    ours != *theirs
}

/// Hashes the completed file `name` under `out`; `None` when it is gone (a temporary file
/// renamed away), metadata, or unreadable (the final collection reports that).
fn hash(out: &Path, name: &str) -> Option<Seen> {
    let base = name.rsplit('/').next().unwrap_or(name);
    if base.starts_with(METADATA_PREFIX) {
        return None;
    }
    // A program that replaced `$BITEXACT_OUT` with a link must not make bitexact read
    // elsewhere (the run then fails when it ends); links to files are never followed.
    if !std::fs::symlink_metadata(out).is_ok_and(|m| m.is_dir()) {
        return None;
    }
    let path = out.join(name);
    let stat = || large::stamp(&path);
    let before = stat()?;
    if before.0 > WATCH_MAX_BYTES {
        return None;
    }
    // Read, never mapped: the program may truncate the file at any moment (a mapped file
    // would then kill bitexact with SIGBUS). A file that changed while it was read is left
    // to its next completion, or to the end.
    let bytes = std::fs::read(&path).ok()?;
    let file = OutputFile::new(name, &path).ok()?;
    let digests = tensor_files::digest_bytes(&file, &bytes).ok()?;
    if bytes.len() as u64 != before.0 || stat()? != before {
        return None;
    }
    Some(Seen {
        name: name.to_string(),
        digests,
        len: before.0,
        modified: before.1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completed_files_are_hashed_in_subdirectories_and_again_when_rewritten() {
        let dir = tempfile::tempdir().unwrap();
        let w = start(dir.path(), None).expect("inotify");
        std::fs::create_dir_all(dir.path().join("rank1/deep")).unwrap();
        std::fs::write(dir.path().join("rank1/deep/a.bin"), b"one").unwrap();
        std::fs::write(dir.path().join("top.bin"), b"first").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        std::fs::write(dir.path().join("top.bin"), b"second").unwrap();
        std::fs::write(dir.path().join(".bitexact-memory.jsonl"), b"{}").unwrap();
        let seen = w.finish().seen;
        let names: Vec<&str> = seen.iter().map(|s| s.name.as_str()).collect();
        assert!(names.contains(&"rank1/deep/a.bin"), "{names:?}");
        assert_eq!(
            names.iter().filter(|n| **n == "top.bin").count(),
            2,
            "{names:?}"
        );
        assert!(!names.iter().any(|n| n.contains(".bitexact-")), "{names:?}");
        let last = w_last(&seen, "top.bin");
        assert_eq!(last.len, 6);
    }

    fn w_last<'a>(seen: &'a [Seen], name: &str) -> &'a Seen {
        seen.iter().rev().find(|s| s.name == name).unwrap()
    }

    #[test]
    fn the_reference_holds_files_of_any_kind_completed_once_and_left_so() {
        let dir = tempfile::tempdir().unwrap();
        let seen_of = |name: &str, bytes: &[u8]| {
            let p = dir.path().join(name);
            std::fs::write(&p, bytes).unwrap();
            hash(dir.path(), name).unwrap()
        };
        let npy = |v: u8| {
            let mut b = b"\x93NUMPY\x01\x00".to_vec();
            let h = "{'descr': '|u1', 'fortran_order': False, 'shape': (1,), }";
            let pad = 128 - 10 - h.len() - 1;
            b.extend_from_slice(&((h.len() + pad + 1) as u16).to_le_bytes());
            b.extend_from_slice(h.as_bytes());
            b.extend(std::iter::repeat_n(b' ', pad));
            b.push(b'\n');
            b.push(v);
            b
        };
        let once = seen_of("once.npy", &npy(1));
        let twice = [seen_of("twice.npy", &npy(1)), seen_of("twice.npy", &npy(2))];
        let raw = seen_of("step_0.bin", b"\x01\x02");
        let log = [
            seen_of("log.txt", b"loss 1"),
            seen_of("log.txt", b"loss 1\nloss 2"),
        ];
        let changed = seen_of("changed.npy", &npy(3));
        // Past the file system's coarse clock tick, so the rewrite has another time.
        std::thread::sleep(std::time::Duration::from_millis(50));
        std::fs::write(dir.path().join("changed.npy"), npy(4)).unwrap();
        // Completed twice, hashed once: the other hash raced a rewrite.
        let raced = seen_of("raced.bin", b"ab");
        let all = [
            vec![once, raw, changed, raced],
            twice.to_vec(),
            log.to_vec(),
        ]
        .concat();
        let mut completions: HashMap<String, usize> = HashMap::new();
        for s in &all {
            *completions.entry(s.name.clone()).or_default() += 1;
        }
        *completions.get_mut("raced.bin").unwrap() += 1;
        let mut w = Watched {
            seen: all,
            completions: Some(completions),
            ..Watched::default()
        };
        let r = Reference::new(&w, dir.path(), dir.path(), &Default::default());
        let mut names: Vec<&String> = r.hashed.keys().collect();
        names.sort();
        assert_eq!(
            names,
            vec!["once.npy", "step_0.bin"],
            "only files completed once and unchanged, of any kind"
        );
        // Events lost (the queue overflowed): nothing is known to be completed once.
        w.completions = None;
        let r = Reference::new(&w, dir.path(), dir.path(), &Default::default());
        assert!(r.hashed.is_empty());
    }
}
