//! Writing snapshots (`bitexact snapshot update`) and finding pending ones.
//!
//! Every write goes through `crate::atomic::write_atomically` (temporary file, fsync,
//! rename); the class directory is created first. In CI nothing is written unless forced.
//! One snapshot that cannot be read or written does not stop the others: [`update_each`]
//! reports it as a [`Failed`] entry and goes on.

use super::compare::{explain, read_existing};
use super::format::Snapshot;
use super::in_ci;
use super::naming::{path, pending_path};
use crate::atomic::{temp_file_pid, write_atomically};
use crate::controls::Controls;
use crate::outcome::CaseReport;
use crate::platform::Platform;
use anyhow::{anyhow, bail, Result};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

/// What [`update`] did for one report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Update {
    /// A new snapshot was written.
    Written(PathBuf),
    /// The snapshot's digests changed and it was rewritten (with the explanation).
    Updated(PathBuf, String),
    /// The digests match the committed snapshot: left as it is.
    Unchanged(PathBuf),
    /// Not written (the case is not deterministic, errored or was skipped).
    NotWritten(String),
}

/// A snapshot [`update_each`] could not update: its path and why (e.g. the committed file is
/// malformed, or the directory is not writable).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failed {
    /// The `.snap` file.
    pub path: PathBuf,
    /// What went wrong.
    pub why: String,
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.why)
    }
}

impl std::error::Error for Failed {}

/// Writes `snapshot` to `file` atomically, creating its class directory. Checks nothing:
/// callers decide whether writing is allowed (CI).
pub(crate) fn write(file: &Path, snapshot: &Snapshot) -> Result<()> {
    if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| anyhow!("cannot create directory {}: {e}", dir.display()))?;
    }
    write_atomically(file, snapshot.file_text().as_bytes())
}

/// Writes `snapshot` (of `report`, made before its snapshot check) as the pending `.snap.new`
/// beside its committed path under `dir`, for `bitexact snapshot review` or `cargo insta
/// review`; never in CI. Returns what happened, in words (`bitexact run --snapshots`).
pub fn write_pending(
    dir: &Path,
    report: &CaseReport,
    snapshot: &Snapshot,
    controls: &Controls,
) -> String {
    let platform = Platform::detect();
    let file = path(
        dir,
        &platform.class_for(report.backend),
        &report.name,
        controls,
    );
    let pending = pending_path(&file);
    if in_ci() {
        return "CI is set: no pending snapshot written".to_string();
    }
    // A pending file is always bitexact's own: a symlink there is replaced, never followed.
    if std::fs::symlink_metadata(&pending).is_ok_and(|m| m.file_type().is_symlink()) {
        if let Err(e) = remove_if_present(&pending) {
            return format!("could not write the pending snapshot: {e:#}");
        }
    }
    match write(&pending, snapshot) {
        Ok(()) => format!(
            "pending snapshot written to {}; accept it with `bitexact snapshot review --accept --snapshots {}`",
            pending.display(),
            dir.display()
        ),
        Err(e) => format!("could not write the pending snapshot: {e:#}"),
    }
}

/// Removes `file`; one already gone (e.g. removed by a concurrent run) is fine.
pub(crate) fn remove_if_present(file: &Path) -> Result<()> {
    match std::fs::remove_file(file) {
        Err(e) if e.kind() != ErrorKind::NotFound => {
            Err(anyhow!("cannot remove {}: {e}", file.display()))
        }
        _ => Ok(()),
    }
}

/// Writes the snapshot of every deterministic report under `dir` (`bitexact snapshot update`),
/// one entry per report in order. Refuses in CI unless `force`. Unchanged snapshots are not
/// rewritten; a stale pending `.snap.new` beside a written snapshot is removed. A committed
/// snapshot that cannot be read, or a file that cannot be written, gives a [`Failed`] entry
/// and the others are still updated.
pub fn update_each(
    dir: &Path,
    reports: &[CaseReport],
    controls: &Controls,
    force: bool,
) -> Result<Vec<Result<Update, Failed>>> {
    update_in(dir, reports, controls, force, in_ci())
}

/// [`update_each`], failing (after updating every other snapshot) when any snapshot could not
/// be updated; the error names each of them.
pub fn update(
    dir: &Path,
    reports: &[CaseReport],
    controls: &Controls,
    force: bool,
) -> Result<Vec<Update>> {
    let all = update_each(dir, reports, controls, force)?;
    let failed: Vec<String> = all
        .iter()
        .filter_map(|u| u.as_ref().err().map(Failed::to_string))
        .collect();
    if !failed.is_empty() {
        bail!(
            "{} of {} snapshots could not be updated (the others were):\n  {}",
            failed.len(),
            all.len(),
            failed.join("\n  ")
        );
    }
    Ok(all.into_iter().flatten().collect())
}

/// [`update_each`] with the CI switch given.
pub(crate) fn update_in(
    dir: &Path,
    reports: &[CaseReport],
    controls: &Controls,
    force: bool,
    ci: bool,
) -> Result<Vec<Result<Update, Failed>>> {
    if ci && !force {
        bail!("refusing to write snapshots in CI (CI is set); pass --force to write them anyway");
    }
    let platform = Platform::detect();
    let mut out = Vec::new();
    for r in reports {
        let new = match Snapshot::of(r, controls, &platform) {
            Ok(s) => s,
            Err(e) => {
                let note = r.message.as_ref().map(|m| format!(" ({m})"));
                out.push(Ok(Update::NotWritten(format!(
                    "{e:#}{}",
                    note.unwrap_or_default()
                ))));
                continue;
            }
        };
        let file = path(dir, &platform.class_for(r.backend), &r.name, controls);
        let result = (|| -> Result<Update> {
            let old = read_existing(&file)
                .map_err(|e| anyhow!("{e:#}; remove it to write a fresh snapshot"))?;
            let status = match &old {
                Some(o) => match explain(&r.name, &file, o, &new) {
                    None => Update::Unchanged(file.clone()),
                    Some(e) => Update::Updated(file.clone(), e),
                },
                None => Update::Written(file.clone()),
            };
            if !matches!(status, Update::Unchanged(_)) {
                write(&file, &new)?;
            }
            remove_if_present(&pending_path(&file))?;
            Ok(status)
        })();
        out.push(result.map_err(|e| Failed {
            path: file.clone(),
            why: format!("{e:#}"),
        }));
    }
    Ok(out)
}

/// Whether the process `pid` is still running (a temporary file's writer).
fn alive(pid: u32) -> bool {
    if pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists; nothing is sent.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Pending `.snap.new` files and leftover temporary files under `dir`, each sorted.
fn scan(dir: &Path) -> (Vec<PathBuf>, Vec<PathBuf>) {
    fn walk(d: &Path, pending: &mut Vec<PathBuf>, temps: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(d) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            match e.file_type() {
                // Symbolic links to directories are not followed (no loops).
                Ok(t) if t.is_dir() => walk(&p, pending, temps),
                _ if temp_file_pid(&name).is_some() => temps.push(p),
                _ if name.ends_with(".snap.new") => pending.push(p),
                _ => {}
            }
        }
    }
    let (mut pending, mut temps) = (Vec::new(), Vec::new());
    walk(dir, &mut pending, &mut temps);
    pending.sort();
    temps.sort();
    (pending, temps)
}

/// Every pending `.snap.new` under `dir`, sorted (temporary files of interrupted writes are
/// not pending snapshots and are left out).
pub fn pending(dir: &Path) -> Vec<PathBuf> {
    scan(dir).0
}

/// Temporary files under `dir` left by writes whose process is gone (killed mid-write).
pub fn stale_temp_files(dir: &Path) -> Vec<PathBuf> {
    scan(dir)
        .1
        .into_iter()
        .filter(|p| {
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            !temp_file_pid(&name).is_some_and(alive)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Backend;
    use crate::outcome::CaseReport;

    use crate::scratch::Scratch;

    fn report(name: &str, digest: &str) -> CaseReport {
        let mut r = CaseReport::new(name, Backend::Cpu);
        r.distinct_digests = 1;
        r = r.judge();
        r.runs = 2;
        r.run_digests = vec![digest.repeat(32); 2];
        r.digests = [("out".to_string(), digest.repeat(32))].into();
        r
    }

    #[test]
    fn update_refuses_in_ci_unless_forced() {
        let s = Scratch::new();
        let c = Controls::default();
        let e = update_in(&s.0, &[report("t/a", "ab")], &c, false, true).unwrap_err();
        assert!(
            e.to_string().contains("refusing to write snapshots in CI"),
            "{e}"
        );
        assert!(pending(&s.0).is_empty() && std::fs::read_dir(&s.0).unwrap().count() == 0);
        let done = update_in(&s.0, &[report("t/a", "ab")], &c, true, true).unwrap();
        assert!(matches!(done[..], [Ok(Update::Written(_))]), "{done:?}");
    }

    #[test]
    fn a_corrupt_snapshot_does_not_stop_the_others() {
        let s = Scratch::new();
        let c = Controls::default();
        let reports = [
            report("t/a", "ab"),
            report("t/b", "cd"),
            report("t/c", "ef"),
        ];
        let class = Platform::detect().class_for(Backend::Cpu);
        let bad = path(&s.0, &class, "t/b", &c);
        std::fs::create_dir_all(bad.parent().unwrap()).unwrap();
        std::fs::write(&bad, "---\ninfo:\n---\nrun: nonsense\n").unwrap();
        let done = update_in(&s.0, &reports, &c, false, false).unwrap();
        assert!(matches!(done[0], Ok(Update::Written(_))), "{done:?}");
        assert!(matches!(done[2], Ok(Update::Written(_))), "{done:?}");
        let f = done[1].as_ref().unwrap_err();
        assert_eq!(f.path, bad);
        assert!(
            f.why.contains("line 4") && f.why.contains("nonsense"),
            "{f}"
        );
        assert!(path(&s.0, &class, "t/c", &c).exists());
    }

    #[test]
    fn removing_a_pending_file_already_gone_is_fine() {
        let s = Scratch::new();
        remove_if_present(&s.0.join("x.snap.new")).unwrap();
        // Concurrent forced updates of the same snapshots, each removing the pending files.
        let c = Controls::default();
        let reports: Vec<CaseReport> = (0..8).map(|i| report(&format!("t/{i}"), "ab")).collect();
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    for _ in 0..5 {
                        for r in &reports {
                            let f = path(&s.0, &Platform::detect().class, &r.name, &c);
                            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
                            let _ = std::fs::write(pending_path(&f), "x");
                        }
                        for u in update_in(&s.0, &reports, &c, true, true).unwrap() {
                            u.unwrap();
                        }
                    }
                });
            }
        });
    }

    #[test]
    fn temp_files_are_not_pending_and_stale_ones_are_found() {
        let s = Scratch::new();
        let d = s.0.join("cpu");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("a.snap.new"), "x").unwrap();
        // A writer that is gone (pid beyond any real one) and one that is alive (us).
        let dead = d.join(".a.snap.new.tmp2147483647-0");
        std::fs::write(&dead, "x").unwrap();
        let ours = d.join(format!(".b.snap.tmp{}-3", std::process::id()));
        std::fs::write(&ours, "x").unwrap();
        assert_eq!(pending(&s.0), [d.join("a.snap.new")]);
        assert_eq!(stale_temp_files(&s.0), [dead]);
        // A symlink loop between directories is not followed.
        std::os::unix::fs::symlink(&s.0, d.join("loop")).unwrap();
        assert_eq!(pending(&s.0).len(), 1);
    }
}
