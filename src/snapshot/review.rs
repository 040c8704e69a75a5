//! Reviewing pending snapshots (`bitexact snapshot review [--accept]`): what each `.snap.new`
//! would change, and accepting them as `.snap` (never in CI).
//!
//! The result is structured ([`Review`]: entries and problems) so a caller can set its exit
//! code; its `Display` is the text the CLI prints. A pending file that cannot be read is a
//! problem listed beside the others, not a reason to list nothing.

use super::compare::{explain, read_existing};
use super::format::Snapshot;
use super::in_ci;
use super::naming::committed_path;
use super::store::{pending, remove_if_present, stale_temp_files, write};
use anyhow::{bail, Result};
use std::fmt;
use std::path::{Path, PathBuf};

/// One pending snapshot and what it changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReviewEntry {
    /// The pending `.snap.new` file.
    pub pending: PathBuf,
    /// The `.snap` it would replace or create.
    pub target: PathBuf,
    /// What accepting it changes (new snapshot, tensors that differ, or "same digests").
    pub change: String,
    /// Whether it was accepted (written as `target`, pending file removed).
    pub accepted: bool,
}

/// The result of [`review`]: the pending snapshots, and what went wrong with any of them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Review {
    /// The directory reviewed.
    pub dir: PathBuf,
    /// Whether pending snapshots were to be accepted.
    pub accept: bool,
    /// Every readable pending snapshot, sorted by path.
    pub entries: Vec<ReviewEntry>,
    /// Files that could not be reviewed or accepted, with why.
    pub problems: Vec<(PathBuf, String)>,
    /// Temporary files left by interrupted writes (their process is gone); removed when
    /// accepting.
    pub leftovers: Vec<PathBuf>,
}

impl Review {
    /// True when nothing went wrong (no [`Review::problems`]).
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }
}

impl fmt::Display for Review {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.entries.is_empty() && self.problems.is_empty() {
            writeln!(f, "no pending snapshots under {}", self.dir.display())?;
        }
        for e in &self.entries {
            writeln!(f, "{}\n    {}", e.pending.display(), e.change)?;
            if e.accepted {
                writeln!(f, "    accepted")?;
            }
        }
        if !self.accept && !self.entries.is_empty() {
            writeln!(
                f,
                "\n{} pending; review them with `cargo insta review` (cargo install cargo-insta), \
                 or accept all with `bitexact snapshot review --accept --snapshots {}`",
                self.entries.len(),
                self.dir.display()
            )?;
        }
        for p in &self.leftovers {
            let what = if self.accept { "removed" } else { "remove it" };
            writeln!(
                f,
                "leftover temporary file of an interrupted write: {} ({what})",
                p.display()
            )?;
        }
        if !self.problems.is_empty() {
            writeln!(f, "\n{} problem(s):", self.problems.len())?;
            for (p, why) in &self.problems {
                writeln!(f, "  {}: {why}", p.display())?;
            }
        }
        Ok(())
    }
}

/// Lists the pending snapshots under `dir` with what changed (`bitexact snapshot review`);
/// with `accept`, writes each as its `.snap` (atomically) and removes the pending file.
/// Errors when `dir` is not a directory, and when accepting in CI.
pub fn review(dir: &Path, accept: bool) -> Result<Review> {
    review_in(dir, accept, in_ci())
}

/// [`review`] with the CI switch given.
pub(crate) fn review_in(dir: &Path, accept: bool, ci: bool) -> Result<Review> {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => bail!("snapshot directory {} is not a directory", dir.display()),
        Err(e) => bail!("cannot read snapshot directory {}: {e}", dir.display()),
    }
    if accept && ci {
        bail!("refusing to accept snapshots in CI (CI is set): review and accept them locally");
    }
    let mut out = Review {
        dir: dir.to_path_buf(),
        accept,
        leftovers: stale_temp_files(dir),
        ..Review::default()
    };
    for p in pending(dir) {
        let target = committed_path(&p);
        let new = match Snapshot::load(&p) {
            Ok(s) => s,
            Err(e) => {
                out.problems.push((p, format!("{e:#}")));
                continue;
            }
        };
        let case = new.info("case").unwrap_or("?").to_string();
        let change = match read_existing(&target) {
            Ok(Some(old)) => explain(&case, &target, &old, &new)
                .unwrap_or_else(|| format!("{case}: same digests as {}", target.display())),
            Ok(None) => format!("{case}: new snapshot {}", target.display()),
            Err(e) => format!("{case}: replaces an unreadable snapshot ({e:#})"),
        };
        let mut entry = ReviewEntry {
            pending: p.clone(),
            target: target.clone(),
            change,
            accepted: false,
        };
        if accept {
            // Rewritten rather than renamed, to drop insta's volatile `assertion_line` as
            // `cargo insta accept` does.
            match write(&target, &new).and_then(|()| remove_if_present(&p)) {
                Ok(()) => entry.accepted = true,
                Err(e) => out.problems.push((p, format!("not accepted: {e:#}"))),
            }
        }
        out.entries.push(entry);
    }
    if accept {
        for t in &out.leftovers {
            if let Err(e) = remove_if_present(t) {
                out.problems.push((t.clone(), format!("{e:#}")));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::scratch::Scratch;

    fn scratch() -> Scratch {
        let s = Scratch::new();
        std::fs::create_dir_all(s.0.join("cpu")).unwrap();
        s
    }

    fn text(digest: &str) -> String {
        format!(
            "---\nsource: src/snapshot.rs\ndescription: d\ninfo:\n  case: t/x\n---\n\
             run: {0}\ntensors:\n  out: {0}\n",
            digest.repeat(32)
        )
    }

    #[test]
    fn accepting_in_ci_is_refused() {
        let s = scratch();
        let p = s.0.join("cpu/x.snap.new");
        std::fs::write(&p, text("ab")).unwrap();
        let e = review_in(&s.0, true, true).unwrap_err();
        assert!(
            e.to_string().contains("refusing to accept snapshots in CI"),
            "{e}"
        );
        assert!(p.exists() && !s.0.join("cpu/x.snap").exists());
        // Listing is fine in CI.
        assert_eq!(review_in(&s.0, false, true).unwrap().entries.len(), 1);
    }

    #[test]
    fn a_corrupt_pending_file_is_reported_and_the_others_listed() {
        let s = scratch();
        std::fs::write(s.0.join("cpu/a.snap.new"), text("ab")).unwrap();
        std::fs::write(s.0.join("cpu/b.snap.new"), "garbage").unwrap();
        std::fs::write(s.0.join("cpu/c.snap.new"), text("cd")).unwrap();
        let r = review_in(&s.0, true, false).unwrap();
        assert!(!r.is_ok());
        assert_eq!(r.entries.len(), 2, "{r}");
        assert!(r.entries.iter().all(|e| e.accepted), "{r}");
        assert_eq!(r.problems.len(), 1, "{r}");
        assert_eq!(r.problems[0].0, s.0.join("cpu/b.snap.new"));
        assert!(r.to_string().contains("line 1"), "{r}");
        assert!(s.0.join("cpu/a.snap").exists() && s.0.join("cpu/c.snap").exists());
        assert!(s.0.join("cpu/b.snap.new").exists());
    }

    #[test]
    fn a_missing_directory_or_a_file_is_an_error_naming_it() {
        let s = scratch();
        let missing = s.0.join("nope");
        let e = review_in(&missing, false, false).unwrap_err().to_string();
        assert!(e.contains(&missing.display().to_string()), "{e}");
        let file = s.0.join("file");
        std::fs::write(&file, "x").unwrap();
        let e = review_in(&file, false, false).unwrap_err().to_string();
        assert!(
            e.contains(&file.display().to_string()) && e.contains("not a directory"),
            "{e}"
        );
    }

    #[test]
    fn leftover_temp_files_are_reported_and_removed_on_accept() {
        let s = scratch();
        let t = s.0.join("cpu/.x.snap.tmp2147483647-0");
        std::fs::write(&t, "partial").unwrap();
        let r = review_in(&s.0, false, false).unwrap();
        assert!(r.entries.is_empty() && r.is_ok());
        assert_eq!(r.leftovers, std::slice::from_ref(&t));
        assert!(r.to_string().contains("leftover temporary file"), "{r}");
        review_in(&s.0, true, false).unwrap();
        assert!(!t.exists());
    }
}
