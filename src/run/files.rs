//! A program run's files as the harness sees them: kept until the harness drops them (then
//! removed unless kept), loaded lazily to explain a difference.

use super::collect;
use crate::harness::Loader;
use crate::tensor::Tensor;
use anyhow::Result;
use std::path::PathBuf;

/// A directory removed on drop (unless kept).
pub(super) struct Scratch(pub(super) PathBuf, pub(super) bool);
impl Drop for Scratch {
    fn drop(&mut self) {
        if !self.1 && std::fs::remove_dir_all(&self.0).is_err() {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

/// Removes run directories on threads of their own, so that removing one (35 ms for a 1 GiB
/// file here) overlaps removing the next and whatever bitexact does meanwhile;
/// [`Remover::finish`] waits for them all, and removals asked for after it are made at once.
#[derive(Default)]
pub(super) struct Remover(std::sync::Mutex<Option<Vec<std::thread::JoinHandle<()>>>>);

impl Remover {
    /// A remover that takes removals until [`Remover::finish`].
    pub(super) fn new() -> Remover {
        Remover(std::sync::Mutex::new(Some(Vec::new())))
    }

    fn remove(&self, s: Scratch) {
        let mut pending = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let Some(threads) = &mut *pending else {
            return drop(s);
        };
        // Threads that are done are joined here, so only removals still going hold one.
        for t in std::mem::take(threads) {
            match t.is_finished() {
                true => drop(t.join()),
                false => threads.push(t),
            }
        }
        // When no thread can be made, the closure is dropped, and `s` with it: removed here.
        if let Ok(t) = std::thread::Builder::new().spawn(move || drop(s)) {
            threads.push(t);
        }
    }

    /// Waits for every removal asked for so far.
    pub(super) fn finish(&self) {
        let threads = self.0.lock().unwrap_or_else(|e| e.into_inner()).take();
        for t in threads.into_iter().flatten() {
            let _ = t.join();
        }
    }
}

/// A run's files, kept until the harness drops them (then removed unless kept).
pub(super) struct RunFiles {
    /// The run's directory and files, removed with the loader (unless kept).
    pub(super) owned: Vec<Scratch>,
    /// Who removes them.
    pub(super) remover: std::sync::Arc<Remover>,
    pub(super) out: PathBuf,
    pub(super) stdout: Option<PathBuf>,
    /// How many op calls the run's trace holds (`--trace ops`).
    pub(super) op_calls: Option<usize>,
    /// Whether the run was stopped early (its trace ends there).
    pub(super) stopped_early: bool,
}

impl Drop for RunFiles {
    fn drop(&mut self) {
        for s in self.owned.drain(..) {
            self.remover.remove(s);
        }
    }
}

impl Loader for RunFiles {
    fn load(&self, name: &str) -> Result<Tensor> {
        if name.starts_with(super::trace::CAPTURE_FILE) {
            let path = self.out.join(super::trace::CAPTURE_FILE);
            let file = crate::tensor_files::OutputFile::new(super::trace::CAPTURE_FILE, &path)?;
            return crate::tensor_files::load(&file, name);
        }
        collect::load(&self.out, self.stdout.as_deref(), name)
    }

    fn raw(&self, name: &str) -> Option<(PathBuf, bool)> {
        if name == collect::STDOUT_NAME {
            return self.stdout.clone().map(|p| (p, true));
        }
        let path = self.out.join(name);
        let plain = crate::tensor_files::FileKind::of(name) == crate::tensor_files::FileKind::Raw;
        let regular = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file());
        (plain && regular).then_some((path, false))
    }

    fn value(&self, name: &str) -> Option<String> {
        if name == crate::trace::program::OPS_NAME {
            return self.op_calls.map(|n| match self.stopped_early {
                true => format!("{n} op calls (stopped early)"),
                false => format!("{n} op calls"),
            });
        }
        collect::load_value(&self.out, name).ok().flatten()
    }
}
