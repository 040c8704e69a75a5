//! Atomic file writes: the one helper every part of bitexact writes its outputs with
//! (snapshots, reports, traces).
//!
//! [`write_atomically`] writes a hidden temporary file `.NAME.tmpPID-N` in the destination's
//! directory, fsyncs it, renames it over the destination and fsyncs the directory, so a reader
//! (or a crash) sees either the old file or the new one, never a half-written one. Errors name
//! the path the caller gave, never the temporary file, which is removed on any failure. A
//! symbolic link is followed: its target is replaced and the link stays a link. A missing
//! directory is an error (this module creates no directories).
//!
//! [`rename_no_replace`] and [`rename_onto_empty_dir`] move a run's output directory aside.
//!
//! [`ensure_writable`] answers, before any work is done, whether [`write_atomically`] could
//! write a path, so a command can fail fast (exit 2) on `--out /proc/version`.

use anyhow::{anyhow, bail, Result};
use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The marker between a file's name and the writer's process id in a temporary file's name.
pub const TEMP_MARKER: &str = ".tmp";

/// Renames `from` to `to` (same file system) unless something is at `to`: then an error of
/// kind `AlreadyExists`, and nothing is moved or replaced (renameat2 `RENAME_NOREPLACE`; where
/// the file system has none, `to` is checked first: for callers that no other process races).
pub fn rename_no_replace(from: &Path, to: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| std::ffi::CString::new(p.as_os_str().as_bytes());
    let (f, t) = (c(from)?, c(to)?);
    let (at, flags) = (libc::AT_FDCWD, libc::RENAME_NOREPLACE);
    // SAFETY: two NUL-terminated paths that outlive the call.
    if unsafe { libc::renameat2(at, f.as_ptr(), at, t.as_ptr(), flags) } == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    if !matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS)) {
        return Err(e);
    }
    if fs::symlink_metadata(to).is_ok() {
        return Err(ErrorKind::AlreadyExists.into());
    }
    fs::rename(from, to)
}

/// Moves the directory `from` onto `to`, which must be an empty directory (it is replaced);
/// anything else at `to` (a non-empty directory, a file, a link) is an error.
pub fn rename_onto_empty_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    fs::rename(from, to)
}

/// Writes `bytes` to `path` atomically (temporary file in the same directory, fsync, rename,
/// fsync of the directory). Follows a symbolic link to its target. Errors name `path`; the
/// directory must exist.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let target = resolve(path)?;
    refuse_special(path, &target)?;
    let dir = existing_dir(path, &target)?;
    let tmp = temp_path(&target)?;
    let result = (|| -> std::io::Result<()> {
        let mut f = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        if let Ok(m) = fs::metadata(&target) {
            // Keep the permissions of the file being replaced.
            let _ = f.set_permissions(m.permissions());
        }
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, &target)?;
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    result.map_err(|e| {
        let _ = fs::remove_file(&tmp);
        anyhow!("cannot write {}: {}", path.display(), describe(&e))
    })
}

/// Checks that [`write_atomically`] could write `path`, without writing it: an error (naming
/// the path) when it is a directory, when its directory does not exist, or when no file can be
/// created there (a read-only file system, `/proc`, missing permissions).
pub fn ensure_writable(path: &Path) -> Result<()> {
    let target = resolve(path)?;
    if fs::metadata(&target).is_ok_and(|m| m.is_dir()) {
        bail!("cannot write {}: it is a directory", path.display());
    }
    refuse_special(path, &target)?;
    let dir = existing_dir(path, &target)?;
    let probe = temp_path(&target)?;
    match OpenOptions::new().write(true).create_new(true).open(&probe) {
        Ok(f) => {
            drop(f);
            let _ = fs::remove_file(&probe);
            Ok(())
        }
        Err(e) => bail!(
            "cannot write {}: cannot create files in {} ({})",
            path.display(),
            dir.display(),
            describe(&e)
        ),
    }
}

/// The process id in a temporary file name written by [`write_atomically`]
/// (`.x.snap.tmp1234-0` → 1234), or `None` when `name` is not one.
pub fn temp_file_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix('.')?;
    let (_, tail) = rest.rsplit_once(TEMP_MARKER)?;
    let (pid, n) = tail.split_once('-')?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok()
}

/// Follows symbolic links (at most 40) to the file that is to be replaced.
fn resolve(path: &Path) -> Result<PathBuf> {
    let mut p = path.to_path_buf();
    for _ in 0..40 {
        match fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                let link = fs::read_link(&p)
                    .map_err(|e| anyhow!("cannot write {}: {}", path.display(), describe(&e)))?;
                p = parent_dir(&p).join(link);
            }
            _ => return Ok(p),
        }
    }
    bail!(
        "cannot write {}: too many levels of symbolic links",
        path.display()
    )
}

/// The directory a file lives in (`.` for a bare file name).
fn parent_dir(path: &Path) -> &Path {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// `.NAME.tmpPID-N` beside `target` (N counts this process's writes, so threads do not clash).
fn temp_path(target: &Path) -> Result<PathBuf> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = target
        .file_name()
        .ok_or_else(|| anyhow!("cannot write {}: no file name", target.display()))?
        .to_string_lossy();
    Ok(parent_dir(target).join(format!(
        ".{name}{TEMP_MARKER}{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )))
}

/// An I/O error in words, without the path of any temporary file.
fn describe(e: &std::io::Error) -> String {
    match e.kind() {
        ErrorKind::NotFound => "does not exist".to_string(),
        _ => e.to_string(),
    }
}

/// Reads `path`, which must be a regular file (symlinks followed) of at most `max` bytes: a
/// device (`/dev/zero`), a FIFO or an oversized file is an error naming it, never an endless
/// read or an allocation as large as the file claims.
pub fn read_regular(path: &Path, max: u64) -> Result<Vec<u8>> {
    use std::io::Read;
    let m =
        fs::metadata(path).map_err(|e| anyhow!("cannot read {}: {e}", crate::quote::path(path)))?;
    if !m.is_file() {
        bail!(
            "cannot read {}: not a regular file",
            crate::quote::path(path)
        );
    }
    if m.len() > max {
        bail!(
            "cannot read {}: {} bytes, more than the {max} expected",
            crate::quote::path(path),
            m.len()
        );
    }
    let mut bytes = Vec::new();
    fs::File::open(path)
        .and_then(|f| f.take(max + 1).read_to_end(&mut bytes))
        .map_err(|e| anyhow!("cannot read {}: {e}", crate::quote::path(path)))?;
    if bytes.len() as u64 > max {
        bail!(
            "cannot read {}: it grew past {max} bytes",
            crate::quote::path(path)
        );
    }
    Ok(bytes)
}

/// The directory `target` (the resolved `path`) would be written in; an error naming `path`
/// unless it exists and is a directory.
fn existing_dir<'a>(path: &Path, target: &'a Path) -> Result<&'a Path> {
    let dir = parent_dir(target);
    match fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(dir),
        Ok(_) => bail!(
            "cannot write {}: {} is not a directory",
            path.display(),
            dir.display()
        ),
        Err(e) => bail!(
            "cannot write {}: directory {} {}",
            path.display(),
            dir.display(),
            describe(&e)
        ),
    }
}

/// Refuses to replace anything but a regular file: renaming over a device node (`/dev/null`),
/// a FIFO or a socket would destroy it.
fn refuse_special(path: &Path, target: &Path) -> Result<()> {
    match fs::metadata(target) {
        Ok(m) if !m.is_file() && !m.is_dir() => bail!(
            "cannot write {}: it is not a regular file (a device, FIFO or socket is never replaced)",
            path.display()
        ),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_and_fifos_are_never_replaced() {
        let e = ensure_writable(Path::new("/dev/null"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a regular file"), "{e}");
        let e = write_atomically(Path::new("/dev/null"), b"x")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/dev/null") && e.contains("not a regular file"),
            "{e}"
        );
    }

    use crate::scratch::Scratch;

    fn entries(d: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn writes_and_replaces_leaving_no_temp_file() {
        let s = Scratch::new();
        let f = s.0.join("a.txt");
        write_atomically(&f, b"one").unwrap();
        write_atomically(&f, b"two").unwrap();
        assert_eq!(fs::read(&f).unwrap(), b"two");
        assert_eq!(entries(&s.0), ["a.txt"]);
    }

    #[test]
    fn a_symlink_is_followed_and_stays_a_link() {
        let s = Scratch::new();
        let target = s.0.join("target.txt");
        fs::write(&target, "old").unwrap();
        let link = s.0.join("link.txt");
        std::os::unix::fs::symlink("target.txt", &link).unwrap();
        write_atomically(&link, b"new").unwrap();
        assert!(fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(fs::read_to_string(&target).unwrap(), "new");
    }

    #[test]
    fn a_missing_directory_is_named_and_not_created() {
        let s = Scratch::new();
        let f = s.0.join("missing/out.json");
        let e = write_atomically(&f, b"x").unwrap_err().to_string();
        assert!(e.contains(&f.display().to_string()), "{e}");
        assert!(
            e.contains(&format!(
                "directory {} does not exist",
                s.0.join("missing").display()
            )),
            "{e}"
        );
        assert!(!s.0.join("missing").exists());
    }

    #[test]
    fn a_failed_write_names_the_path_and_removes_the_temp_file() {
        let s = Scratch::new();
        // A directory in the way: the rename fails after the temporary file was written.
        let d = s.0.join("out.json");
        fs::create_dir(&d).unwrap();
        let e = write_atomically(&d, b"x").unwrap_err().to_string();
        assert!(e.contains("out.json") && e.contains("directory"), "{e}");
        assert!(!e.contains(TEMP_MARKER), "{e}");
        // A non-empty directory as the target of a link: rename itself fails.
        fs::write(d.join("inner"), "x").unwrap();
        let link = s.0.join("link.json");
        std::os::unix::fs::symlink(&d, &link).unwrap();
        let e = write_atomically(&link, b"x").unwrap_err().to_string();
        assert!(e.contains("link.json") && !e.contains(TEMP_MARKER), "{e}");
        assert_eq!(entries(&s.0), ["link.json", "out.json"]);
        // A write into an unwritable place: the error never shows the hidden temporary name.
        let e = write_atomically(Path::new("/proc/bitexact-test"), b"x")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("cannot write /proc/bitexact-test:") && !e.contains(TEMP_MARKER),
            "{e}"
        );
    }

    #[test]
    fn check_writable_rejects_directories_missing_parents_and_proc() {
        let s = Scratch::new();
        ensure_writable(&s.0.join("report.json")).unwrap();
        let e = ensure_writable(&s.0).unwrap_err().to_string();
        assert!(e.contains("is a directory"), "{e}");
        let f = s.0.join("no/such/report.json");
        let e = ensure_writable(&f).unwrap_err().to_string();
        assert!(
            e.contains(&f.display().to_string()) && e.contains("does not exist"),
            "{e}"
        );
        let e = ensure_writable(Path::new("/proc/version"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("/proc/version"), "{e}");
        assert_eq!(entries(&s.0), Vec::<String>::new(), "the probe is removed");
    }

    #[test]
    fn temp_file_names_are_recognised() {
        let s = Scratch::new();
        let t = temp_path(&s.0.join("x.snap")).unwrap();
        let name = t.file_name().unwrap().to_str().unwrap();
        assert_eq!(temp_file_pid(name), Some(std::process::id()));
        assert_eq!(temp_file_pid(".x.snap.tmp42-7"), Some(42));
        assert_eq!(temp_file_pid("x.snap.tmp42-7"), None);
        assert_eq!(temp_file_pid(".x.snap"), None);
        assert_eq!(temp_file_pid(".x.snap.tmpabc-1"), None);
    }
}
