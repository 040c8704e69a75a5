//! Run 0's collected files, shared with the later runs of its pass: a later run's file that
//! holds the same bytes as run 0's file of that name takes run 0's digests instead of being
//! hashed again. Comparing two files costs one read of each at memory speed; hashing costs
//! SHA-256 over every byte, about 2.5× more here even sixteen lanes at a time (0.076 s to
//! compare two 1 GiB files, 0.2 s to hash one, on 2 cores: `cargo bench --bench run_mode`).
//! So for a deterministic program only run 0's outputs are hashed, and a file that differs
//! costs one extra read before it is hashed as before.
//!
//! Run 0's outputs are collected on a background thread while run 1 executes; a later run's
//! collection compares first and waits for run 0's digests only for the files found equal,
//! on its own thread: never on a rayon worker, which run 0's hashing may need to finish.
//! Run 0's collection always publishes, even when it fails (then nothing is reused), so no
//! later run waits forever.

use super::large::{regular_inside, Stamp};
use super::watch::Seen;
use crate::digest::Digest;
use crate::tensor_files::{same_bytes, OutputFile};
use rayon::prelude::*;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};

/// Run 0's digests of one file, and the file they were taken from.
type Files = HashMap<String, (OutputFile, Vec<(String, Digest)>)>;

/// Run 0's files of the current pass, published once they are collected.
pub struct Baseline {
    /// Where run 0's outputs lie once it has ended.
    dir: PathBuf,
    /// `None` until published; then run 0's files (`None` when its collection failed).
    slot: Mutex<Option<Option<Arc<Files>>>>,
    ready: Condvar,
}

impl Baseline {
    /// A baseline for run 0's outputs, which will lie in `dir`, not yet published, and the
    /// guard run 0's collection publishes through.
    pub fn new(dir: PathBuf) -> (Arc<Baseline>, Publisher) {
        let b = Arc::new(Baseline {
            dir,
            slot: Mutex::new(None),
            ready: Condvar::new(),
        });
        (b.clone(), Publisher(Some(b)))
    }

    fn publish(&self, files: Option<Files>) {
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        *slot = Some(files.map(Arc::new));
        self.ready.notify_all();
    }

    fn wait(&self) -> Option<Arc<Files>> {
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(files) = &*slot {
                return files.clone();
            }
            slot = self.ready.wait(slot).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Whether run 0 left a regular file of `file`'s name (a later run's output, finished)
    /// with the same bytes (compared unless `known_equal`: the output watcher found them
    /// equal, and the file is as it was then); if so, its size and time now, for
    /// [`Baseline::published`] to check against what run 0 hashed.
    fn equal(&self, file: &OutputFile, known_equal: bool) -> Option<Stamp> {
        let theirs = self.dir.join(&file.name);
        let now = regular_inside(&self.dir, &file.name)?;
        if now.len() != file.len || !(known_equal || same_bytes(&theirs, &file.path).ok()?) {
            return None;
        }
        Some((now.len(), now.modified().ok()))
    }

    /// Run 0's digests of its file `name`, which [`Baseline::equal`] found as `stamp`, when
    /// run 0 hashed it in that state. Waits until run 0's collection publishes: never call it
    /// on a rayon worker (run 0's collection needs the pool to get there).
    fn published(&self, name: &str, stamp: Stamp) -> Option<Vec<(String, Digest)>> {
        let files = self.wait()?;
        let (f, digests) = files.get(name)?;
        (f.path == self.dir.join(name) && (f.len, f.modified) == stamp).then(|| digests.clone())
    }
}

/// A file's outputs' digests.
type Digests = Vec<(String, Digest)>;

/// Files smaller than this are hashed, never compared with run 0's copy, and run 0 does not
/// publish them: comparing a file opens and reads two files where hashing reads one, which for
/// a small file costs more than the hashing it saves (about 12 KB breaks even here), and
/// 100 000 tiny outputs would otherwise keep 100 000 entries in the baseline.
pub const BASELINE_MIN_BYTES: u64 = 64 << 10;

/// What collecting a run's outputs may take instead of hashing a file again.
#[derive(Default)]
pub struct Reuse {
    /// The output watcher's last hash of each file, sorted by name ([`Reuse::last_hashes`]).
    pub hashed: Vec<Seen>,
    /// Large files the watcher found equal to run 0's copy, byte for byte, when completed.
    pub equal: HashMap<String, Seen>,
    /// Run 0's files, for a later run.
    pub baseline: Option<Arc<Baseline>>,
}

impl Reuse {
    /// The last hash of each file among the watcher's hashes `seen` (in completion order),
    /// sorted by name: moved, not copied (a run that writes 100 000 files hashes 100 000).
    pub fn last_hashes(mut seen: Vec<Seen>) -> Vec<Seen> {
        // Reversed, a stable sort puts each name's last hash first, which dedup keeps.
        seen.reverse();
        seen.sort_by(|a, b| a.name.cmp(&b.name));
        seen.dedup_by(|later, first| later.name == first.name);
        seen
    }

    /// The digests of those of `files` (as they are now) that are known without hashing
    /// them, one entry per file: the watcher's hash of a file unchanged since (moved out of
    /// `self`), else run 0's for the same bytes. The byte comparisons run in parallel (rayon);
    /// the wait for run 0's digests is made after them, on the calling thread: a rayon worker
    /// blocked in it could keep run 0's collection, which needs the pool, from ever
    /// publishing.
    pub fn known(&mut self, files: &[OutputFile]) -> Vec<Option<Digests>> {
        let mut known: Vec<Option<Digests>> = files
            .iter()
            .map(|f| {
                let i = self.hashed.binary_search_by(|s| s.name.cmp(&f.name)).ok()?;
                let s = Some(&mut self.hashed[i]).filter(|s| current(f, s))?;
                Some(std::mem::take(&mut s.digests))
            })
            .collect();
        let Some(baseline) = &self.baseline else {
            return known;
        };
        let equal = &self.equal;
        let stamps: Vec<Option<Stamp>> = files
            .par_iter()
            .zip(&known)
            .map(|(f, k)| {
                if k.is_some() || f.len < BASELINE_MIN_BYTES {
                    return None;
                }
                let known_equal = equal.get(&f.name).is_some_and(|s| current(f, s));
                baseline.equal(f, known_equal)
            })
            .collect();
        for ((f, k), stamp) in files.iter().zip(&mut known).zip(stamps) {
            if let Some(stamp) = stamp {
                *k = baseline.published(&f.name, stamp);
            }
        }
        known
    }
}

/// Whether the watcher's hash `s` is of `f` as it is now.
fn current(f: &OutputFile, s: &Seen) -> bool {
    s.is_current(f.len, f.modified)
}

/// Publishes run 0's files to its [`Baseline`]; dropped unpublished (run 0 failed, or its
/// collection did), it publishes that nothing can be reused.
pub struct Publisher(Option<Arc<Baseline>>);

impl Publisher {
    /// Publishes run 0's collected files with their digests (those of at least
    /// [`BASELINE_MIN_BYTES`]: the others are never compared).
    pub fn publish(mut self, files: impl IntoIterator<Item = (OutputFile, Vec<(String, Digest)>)>) {
        if let Some(b) = self.0.take() {
            b.publish(Some(
                files
                    .into_iter()
                    .filter(|(f, _)| f.len >= BASELINE_MIN_BYTES)
                    .map(|(f, d)| (f.name.clone(), (f, d)))
                    .collect(),
            ));
        }
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        if let Some(b) = self.0.take() {
            b.publish(None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run 0's digests for `file` when its bytes equal run 0's (waits for the publication).
    fn same_as(b: &Baseline, file: &OutputFile) -> Option<Vec<(String, Digest)>> {
        b.published(&file.name, b.equal(file, false)?)
    }

    /// `bytes` made as large as the files run 0 publishes.
    fn big(bytes: &[u8]) -> Vec<u8> {
        let mut v = bytes.to_vec();
        v.resize(BASELINE_MIN_BYTES as usize, b'.');
        v
    }

    fn file(dir: &std::path::Path, name: &str, bytes: &[u8]) -> OutputFile {
        std::fs::write(dir.join(name), bytes).unwrap();
        OutputFile::new(name, &dir.join(name)).unwrap()
    }

    #[test]
    fn a_file_with_run_0s_bytes_takes_its_digests_once_published() {
        let (run0, later) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (b, publisher) = Baseline::new(run0.path().to_path_buf());
        let theirs = file(run0.path(), "a.bin", &big(b"same"));
        file(run0.path(), "b.bin", &big(b"run 0"));
        let marker = vec![("a.bin".to_string(), Digest([7; 32]))];
        let same = file(later.path(), "a.bin", &big(b"same"));
        let other = file(later.path(), "b.bin", &big(b"run 1"));
        let only_here = file(later.path(), "c.bin", &big(b"new"));
        // Asked before run 0 is published: the answer waits for it.
        let published = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            publisher.publish([(theirs, vec![("a.bin".to_string(), Digest([7; 32]))])]);
        });
        assert_eq!(same_as(&b, &same), Some(marker));
        published.join().unwrap();
        assert_eq!(same_as(&b, &other), None, "different bytes are hashed");
        assert_eq!(same_as(&b, &only_here), None, "no such file in run 0");
    }

    #[test]
    fn the_watchers_equality_spares_the_comparison_while_the_file_is_unchanged() {
        let (run0, later) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (b, publisher) = Baseline::new(run0.path().to_path_buf());
        // Run 0's bytes differ from this run's: only the watcher's word makes them "equal",
        // which shows that no comparison was made.
        let size = BASELINE_MIN_BYTES as usize;
        let theirs = file(run0.path(), "big.bin", &vec![b'A'; size]);
        let digests = vec![("big.bin".to_string(), Digest([9; 32]))];
        publisher.publish([(theirs, digests.clone())]);
        let ours = file(later.path(), "big.bin", &vec![b'B'; size]);
        let seen = Seen {
            name: "big.bin".into(),
            digests: Vec::new(),
            len: ours.len,
            modified: ours.modified,
        };
        let mut reuse = Reuse {
            equal: [("big.bin".to_string(), seen.clone())].into(),
            baseline: Some(b),
            ..Reuse::default()
        };
        let known = |r: &mut Reuse| r.known(std::slice::from_ref(&ours)).remove(0);
        assert_eq!(known(&mut reuse), Some(digests));
        // Changed since the watcher compared it: compared again (and found different).
        reuse.equal.get_mut("big.bin").unwrap().len = 3;
        assert_eq!(known(&mut reuse), None);
    }

    #[test]
    fn the_last_hash_of_each_file_is_kept_sorted_by_name() {
        let seen = |name: &str, len| Seen {
            name: name.into(),
            digests: Vec::new(),
            len,
            modified: None,
        };
        let all = vec![
            seen("b", 1),
            seen("a", 1),
            seen("b", 2),
            seen("c", 1),
            seen("b", 3),
        ];
        let last: Vec<_> = Reuse::last_hashes(all)
            .iter()
            .map(|s| (s.name.clone(), s.len))
            .collect();
        let want = [("a", 1), ("b", 3), ("c", 1)].map(|(n, l)| (n.to_string(), l));
        assert_eq!(last, want);
    }

    #[test]
    fn small_files_are_hashed_never_compared_nor_published() {
        let (run0, later) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (b, publisher) = Baseline::new(run0.path().to_path_buf());
        let theirs = file(run0.path(), "small.bin", b"same");
        publisher.publish([(theirs, vec![("small.bin".to_string(), Digest([7; 32]))])]);
        assert!(b.wait().is_some_and(|files| files.is_empty()));
        let ours = file(later.path(), "small.bin", b"same");
        let mut reuse = Reuse {
            baseline: Some(b),
            ..Reuse::default()
        };
        assert_eq!(reuse.known(&[ours]), vec![None]);
    }

    #[test]
    fn a_failed_run_0_publishes_nothing_and_nobody_waits() {
        let (run0, later) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (b, publisher) = Baseline::new(run0.path().to_path_buf());
        file(run0.path(), "a.bin", &big(b"same"));
        let same = file(later.path(), "a.bin", &big(b"same"));
        drop(publisher);
        assert_eq!(same_as(&b, &same), None);
    }

    #[test]
    fn run_0s_file_changed_after_it_was_hashed_is_not_reused() {
        let (run0, later) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (b, publisher) = Baseline::new(run0.path().to_path_buf());
        let theirs = file(run0.path(), "a.bin", &big(b"old!"));
        publisher.publish([(theirs, vec![("a.bin".to_string(), Digest([7; 32]))])]);
        file(run0.path(), "a.bin", &big(b"new bytes"));
        let same = file(later.path(), "a.bin", &big(b"new bytes"));
        assert_eq!(same_as(&b, &same), None);
    }
}
