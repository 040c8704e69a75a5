//! A program run's files as the harness sees them: kept until the harness drops them (then
//! removed unless kept), loaded lazily to explain a difference; and the names they get.
//!
//! **Names a program took.** A program knows the directory its `$BITEXACT_OUT` lies in
//! (`ROOT`, see [`super::ProgramSource`]) and may write there: nothing it puts there is used,
//! replaced or followed, and none of it can make a check fail. A run's directory (and its
//! `.stdout` file) is made empty before the run ([`reserve_dir`], [`reserve_file`]) under its
//! name (`run-<i>`, blame's `.pass<p>-run-<i>`) or, when that is taken (an earlier run made
//! `ROOT/run-1`), under a fresh one beside it (`run-1-<16 hex>`); the outputs are moved onto
//! it when the run ends, or, when the run itself put something there, to a fresh name made
//! with no-replace ([`move_out`]). With `--keep DIR`, which promises `DIR/run-<i>`, the
//! report's notes say where a run's outputs went when they are not there, and each kept run
//! directory gets bitexact's platform record ([`record_platform`]).

use super::collect;
use crate::harness::Loader;
use crate::quote;
use crate::tensor::Tensor;
use anyhow::{bail, Context, Result};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

/// 16 unpredictable hex digits (getrandom).
pub(super) fn random_hex() -> Result<String> {
    let mut random = [0u8; 8];
    // SAFETY: getrandom writes at most `random.len()` bytes into the buffer we pass.
    let n = unsafe { libc::getrandom(random.as_mut_ptr().cast(), random.len(), 0) };
    if n != random.len() as isize {
        bail!("getrandom failed: {}", std::io::Error::last_os_error());
    }
    Ok(random.iter().map(|b| format!("{b:02x}")).collect())
}

/// A new private directory in TMPDIR (mode 0700), created exclusively under an unpredictable
/// name. A missing TMPDIR is an error, never created.
pub(super) fn private_dir() -> Result<Scratch> {
    use std::os::unix::fs::DirBuilderExt;
    let hex = random_hex()?;
    let dir = std::env::temp_dir().join(format!("bitexact-run-{}-{hex}", std::process::id()));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .with_context(|| format!("creating {}", dir.display()))?;
    Ok(Scratch::new(dir, false))
}

/// Makes the file a run's standard output goes to, beside its directory `dest`.
pub(super) fn stdout_file(dest: &Path) -> Result<PathBuf> {
    let name = dest.file_name().unwrap_or_default().to_string_lossy();
    let dir = dest.parent().unwrap_or(Path::new("."));
    reserve_file(dir, &format!("{name}.stdout"))
}

/// The note for kept run `index`'s outputs, moved to `to`, when that is not `promised`.
pub(super) fn kept_elsewhere(index: usize, to: &Path, promised: &Path) -> Option<String> {
    (to != promised).then(|| {
        format!(
            "--keep: run {index}'s outputs are in {} ({} was taken: the program wrote there)",
            quote::path(to),
            quote::path(promised)
        )
    })
}

/// Writes bitexact's platform record (`.bitexact-record.json`:
/// [`crate::platform::record`]) into the run directory `dest` when it is `kept`: every kept
/// run says where it comes from, whether or not its program imports bitexact.
pub(super) fn record_platform(
    dest: &Path,
    kept: bool,
    settings: &crate::vary::RunSettings,
    env: &std::collections::BTreeMap<String, String>,
) -> Result<()> {
    match kept {
        true => crate::platform::record::write(dest, settings, env),
        false => Ok(()),
    }
}

/// Tries the name `dir/name`, then fresh ones `dir/name-<16 hex>`, until `make` makes one that
/// was not there: a program knows the directory its `$BITEXACT_OUT` lies in, and may have put
/// anything under any name there; nothing it put there is used or replaced.
fn fresh(dir: &Path, name: &str, make: impl Fn(&Path) -> std::io::Result<()>) -> Result<PathBuf> {
    let mut path = dir.join(name);
    for _ in 0..16 {
        match make(&path) {
            Ok(()) => return Ok(path),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => bail!("creating {}: {e}", quote::path(&path)),
        }
        path = dir.join(format!("{name}-{}", random_hex()?));
    }
    bail!("creating {}: every name tried exists", quote::path(&path))
}

/// Makes the empty directory a run's outputs will be moved onto ([`move_out`]), `dir/name` or
/// a fresh name beside it ([`fresh`]), before the run: so a name an earlier run took is never
/// the one used.
pub(super) fn reserve_dir(dir: &Path, name: &str) -> Result<PathBuf> {
    fresh(dir, name, |p| std::fs::create_dir(p))
}

/// Makes the empty file `dir/name` (never following a link or opening what is there) or a
/// fresh name beside it ([`fresh`]), before the run that writes it.
pub(super) fn reserve_file(dir: &Path, name: &str) -> Result<PathBuf> {
    let new = |p: &Path| std::fs::File::create_new(p).map(drop);
    fresh(dir, name, new)
}

/// Moves a finished run's `out` onto `to`, the empty directory [`reserve_dir`] made (a rename
/// replaces an empty directory), and returns where it went: when the run put something at
/// `to` meanwhile, a fresh name beside it, made with no-replace (renameat2
/// `RENAME_NOREPLACE`). No process of the run is left at this point.
pub(super) fn move_out(out: &Path, to: &Path) -> Result<PathBuf> {
    if crate::atomic::rename_onto_empty_dir(out, to).is_ok() {
        return Ok(to.to_path_buf());
    }
    let (Some(dir), Some(name)) = (to.parent(), to.file_name()) else {
        bail!("cannot move {} to {}", quote::path(out), quote::path(to));
    };
    let mv = |p: &Path| crate::atomic::rename_no_replace(out, p);
    fresh(dir, &name.to_string_lossy(), mv).map_err(|e| {
        let why = format!("{e:#}");
        let why = why.strip_prefix("creating ").unwrap_or(&why);
        anyhow::anyhow!("cannot move {} to {why}", quote::path(out))
    })
}

/// A directory (or file) removed on drop, unless kept.
pub(super) struct Scratch {
    /// What is removed.
    pub(super) path: PathBuf,
    /// Whether it is kept instead (`--keep`).
    pub(super) keep: bool,
}

impl Scratch {
    /// `path`, removed on drop unless `keep`.
    pub(super) fn new(path: PathBuf, keep: bool) -> Scratch {
        Scratch { path, keep }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !self.keep && std::fs::remove_dir_all(&self.path).is_err() {
            let _ = std::fs::remove_file(&self.path);
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
    /// How many records the run's trace holds (`57 op calls`: [`crate::trace::program::count`]).
    pub(super) records: Option<String>,
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
        if name.starts_with(crate::protocol::CAPTURE_FILE) {
            let path = self.out.join(crate::protocol::CAPTURE_FILE);
            let file = crate::tensor_files::OutputFile::new(crate::protocol::CAPTURE_FILE, &path)?;
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
            return self.records.clone().map(|n| match self.stopped_early {
                true => format!("{n} (stopped early)"),
                false => n,
            });
        }
        collect::load_value(&self.out, name).ok().flatten()
    }
}
