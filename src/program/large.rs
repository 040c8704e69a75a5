//! Output files over [`WATCH_MAX_BYTES`] during a run: not hashed while the program runs (the
//! watcher reads what it hashes into memory), but a later run's completed large tensor file is
//! compared with run 0's copy byte for byte, so that a checkpoint that differs stops the run
//! too (the output watcher, `super::watch`, calls [`differs`]).

use crate::tensor_files::{self, FileKind};
use std::path::Path;
use std::time::SystemTime;

/// Largest file hashed while the program runs (it is read into memory, so this bounds what the
/// watcher adds to bitexact's resident set); larger ones are hashed when the run ends, from
/// the mapped file in windows dropped behind the cursor, and compared early by their bytes.
pub const WATCH_MAX_BYTES: u64 = 64 << 20;

/// A file's size and modification time.
pub type Stamp = (u64, Option<SystemTime>);

/// The size and time of `name` under `out` when it is a regular file over [`WATCH_MAX_BYTES`].
pub(super) fn completed(out: &Path, name: &str) -> Option<Stamp> {
    let m = regular_inside(out, name)?;
    (m.len() > WATCH_MAX_BYTES).then(|| (m.len(), m.modified().ok()))
}

/// The size and time of the regular file at `path` (a final symlink is not followed).
pub(super) fn stamp(path: &Path) -> Option<Stamp> {
    let m = std::fs::symlink_metadata(path).ok()?;
    m.is_file().then(|| (m.len(), m.modified().ok()))
}

/// Whether a file stamped `known` (when hashed or compared) is unchanged if it is stamped `now`
/// (a stamp without a time never is).
pub(super) fn fresh(known: Stamp, now: Stamp) -> bool {
    known.1.is_some() && known == now
}

/// Whether the file at `path` is still as `stamp` says (a stamp without a time never is).
pub(super) fn still(path: &Path, stamp: Stamp) -> bool {
    self::stamp(path).is_some_and(|now| fresh(stamp, now))
}

/// Whether this run's large completed file `name` (under `out`, completed as `stamp`) differs
/// from run 0's copy (under `theirs`) in its tensor data (`Some(true)`), or equals it byte for
/// byte (`Some(false)`): the bytes are compared (read, never mapped), and a first difference
/// after headers that are byte for byte equal is a tensor whose values differ. Anything less
/// sure (`None`: headers or lengths that differ, a zip-based format, a file changed while it
/// was read, the run over first) is left to the end.
pub(super) fn differs(
    out: &Path,
    name: &str,
    stamp: Stamp,
    theirs: &Path,
    go_on: &dyn Fn() -> bool,
) -> Option<bool> {
    let path = out.join(name);
    // Run 0's copy is read only inside run 0's tree (no symlinked directory on the way).
    regular_inside(theirs, name)?;
    let theirs = &theirs.join(name);
    let Some(at) = tensor_files::first_difference(&path, theirs, go_on).ok()? else {
        return still(&path, stamp).then_some(false);
    };
    let mut head = [0u8; 12];
    let read = std::fs::File::open(theirs).and_then(|f| {
        use std::os::unix::fs::FileExt;
        f.read_exact_at(&mut head, 0)?;
        f.metadata()
    });
    let meta = read.ok()?;
    let start = tensor_files::data_start(FileKind::of(name), &head);
    (meta.len() == stamp.0 && start.is_some_and(|s| at >= s) && still(&path, stamp)).then_some(true)
}

/// The metadata of the regular file `name` (`/`-separated) under `dir`, when every directory
/// on the way is a real one: a symlinked directory a program left in its tree never leads
/// bitexact to map or read a file elsewhere.
pub(super) fn regular_inside(dir: &Path, name: &str) -> Option<std::fs::Metadata> {
    let mut at = dir.to_path_buf();
    let mut parts = name.split('/').peekable();
    while let Some(part) = parts.next() {
        if matches!(part, "" | "." | "..") {
            return None;
        }
        at.push(part);
        let m = std::fs::symlink_metadata(&at).ok()?;
        match parts.peek() {
            Some(_) if m.is_dir() => {}
            Some(_) => return None,
            None => return m.is_file().then_some(m),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_real_directories_lead_to_a_file() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("real/sub")).unwrap();
        std::fs::write(d.path().join("real/sub/f"), b"x").unwrap();
        std::os::unix::fs::symlink(d.path().join("real"), d.path().join("link")).unwrap();
        assert!(regular_inside(d.path(), "real/sub/f").is_some());
        assert!(regular_inside(d.path(), "link/sub/f").is_none());
        assert!(
            regular_inside(d.path(), "real/sub").is_none(),
            "a directory"
        );
        assert!(regular_inside(d.path(), "real/../real/sub/f").is_none());
    }
}
