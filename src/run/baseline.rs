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

/// What collecting a run's outputs may take instead of hashing a file again.
#[derive(Default)]
pub struct Reuse {
    /// The output watcher's last hash of each file.
    pub hashed: HashMap<String, Seen>,
    /// Large files the watcher found equal to run 0's copy, byte for byte, when completed.
    pub equal: HashMap<String, Seen>,
    /// Run 0's files, for a later run.
    pub baseline: Option<Arc<Baseline>>,
}

impl Reuse {
    /// The digests of those of `files` (as they are now) that are known without hashing
    /// them, by name: the watcher's hash of a file unchanged since, else run 0's for the same
    /// bytes. The byte comparisons run in parallel (rayon); the wait for run 0's digests is
    /// made after them, on the calling thread: a rayon worker blocked in it could keep run
    /// 0's collection, which needs the pool, from ever publishing.
    pub fn known(&self, files: &[OutputFile]) -> HashMap<String, Vec<(String, Digest)>> {
        let found: Vec<(Option<Digests>, Option<Stamp>)> = files
            .par_iter()
            .map(|f| {
                let current = |s: &&Seen| s.is_current(f.len, f.modified);
                if let Some(s) = self.hashed.get(&f.name).filter(current) {
                    return (Some(s.digests.clone()), None);
                }
                let known_equal = self.equal.get(&f.name).filter(current).is_some();
                let stamp = self.baseline.as_ref().and_then(|b| b.equal(f, known_equal));
                (None, stamp)
            })
            .collect();
        let published = |f: &OutputFile, stamp| self.baseline.as_ref()?.published(&f.name, stamp);
        files
            .iter()
            .zip(found)
            .filter_map(|(f, found)| {
                let digests = match found {
                    (Some(d), _) => Some(d),
                    (None, Some(stamp)) => published(f, stamp),
                    (None, None) => None,
                };
                Some((f.name.clone(), digests?))
            })
            .collect()
    }
}

/// Publishes run 0's files to its [`Baseline`]; dropped unpublished (run 0 failed, or its
/// collection did), it publishes that nothing can be reused.
pub struct Publisher(Option<Arc<Baseline>>);

impl Publisher {
    /// Publishes run 0's collected files with their digests.
    pub fn publish(mut self, files: impl IntoIterator<Item = (OutputFile, Vec<(String, Digest)>)>) {
        if let Some(b) = self.0.take() {
            b.publish(Some(
                files
                    .into_iter()
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

    fn file(dir: &std::path::Path, name: &str, bytes: &[u8]) -> OutputFile {
        std::fs::write(dir.join(name), bytes).unwrap();
        OutputFile::new(name, &dir.join(name)).unwrap()
    }

    #[test]
    fn a_file_with_run_0s_bytes_takes_its_digests_once_published() {
        let (run0, later) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (b, publisher) = Baseline::new(run0.path().to_path_buf());
        let theirs = file(run0.path(), "a.bin", b"same");
        file(run0.path(), "b.bin", b"run 0");
        let marker = vec![("a.bin".to_string(), Digest([7; 32]))];
        let same = file(later.path(), "a.bin", b"same");
        let other = file(later.path(), "b.bin", b"run 1");
        let only_here = file(later.path(), "c.bin", b"new");
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
        let theirs = file(run0.path(), "big.bin", b"AAAA");
        let digests = vec![("big.bin".to_string(), Digest([9; 32]))];
        publisher.publish([(theirs, digests.clone())]);
        let ours = file(later.path(), "big.bin", b"BBBB");
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
        let known = |r: &Reuse| r.known(std::slice::from_ref(&ours)).remove("big.bin");
        assert_eq!(known(&reuse), Some(digests));
        // Changed since the watcher compared it: compared again (and found different).
        reuse.equal.get_mut("big.bin").unwrap().len = 3;
        assert_eq!(known(&reuse), None);
    }

    #[test]
    fn a_failed_run_0_publishes_nothing_and_nobody_waits() {
        let (run0, later) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (b, publisher) = Baseline::new(run0.path().to_path_buf());
        file(run0.path(), "a.bin", b"same");
        let same = file(later.path(), "a.bin", b"same");
        drop(publisher);
        assert_eq!(same_as(&b, &same), None);
    }

    #[test]
    fn run_0s_file_changed_after_it_was_hashed_is_not_reused() {
        let (run0, later) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (b, publisher) = Baseline::new(run0.path().to_path_buf());
        let theirs = file(run0.path(), "a.bin", b"old!");
        publisher.publish([(theirs, vec![("a.bin".to_string(), Digest([7; 32]))])]);
        file(run0.path(), "a.bin", b"new bytes");
        let same = file(later.path(), "a.bin", b"new bytes");
        assert_eq!(same_as(&b, &same), None);
    }
}
