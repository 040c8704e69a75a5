//! [`assert_matches`]: the snapshot assertion behind `bitexact::check(&case).assert_snapshot()`.
//!
//! It compares with the committed `.snap`, writes the pending `.snap.new` itself (through the
//! same writer as `bitexact snapshot update`, in the bytes insta writes) and fails with one
//! panic that says what was written and how to accept it. insta's assertion machinery is not
//! used: it prints its own summary, panics before we can explain, and writes
//! `stored new snapshot …` straight to the process's stderr, past the test harness's capture.
//! insta's switches are honoured as insta reads them (the `insta.yaml` file is not read):
//!
//! - `INSTA_UPDATE=auto` (the default) or `new`: a pending `.snap.new`; in CI nothing.
//! - `unseen`: a missing snapshot is written as `.snap`, a changed one as pending (in CI
//!   nothing).
//! - `always` or `1`: the `.snap` is written in place and the assertion passes, even in CI
//!   (an explicit opt-in, like `snapshot update --force`).
//! - `force`: as `always`, and a matching snapshot whose metadata changed is rewritten.
//! - `no`: nothing written.
//!
//! `INSTA_FORCE_PASS=1` reports the failure on standard error instead of panicking. `CI` is
//! read as insta reads it ([`super::in_ci`]).

use super::compare::{explain, read_existing};
use super::format::Snapshot;
use super::naming::{path, pending_path};
use super::store::{remove_if_present, write};
use super::{ci_from, in_ci};
use crate::controls::Controls;
use crate::outcome::CaseReport;
use crate::platform::Platform;
use std::path::Path;

/// insta's `INSTA_UPDATE` modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Auto,
    New,
    Unseen,
    Always,
    Force,
    No,
}

/// insta's environment switches, as they apply to one assertion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Switches {
    mode: Mode,
    force_pass: bool,
    ci: bool,
}

impl Switches {
    /// Reads `INSTA_UPDATE`, `INSTA_FORCE_PASS` and `CI` through `get`.
    fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Switches, String> {
        let mode = match get("INSTA_UPDATE").as_deref().unwrap_or("") {
            "" | "auto" => Mode::Auto,
            "new" => Mode::New,
            "unseen" => Mode::Unseen,
            "always" | "1" => Mode::Always,
            "force" => Mode::Force,
            "no" => Mode::No,
            other => {
                return Err(format!(
                    "INSTA_UPDATE={other:?} is not one of auto, new, unseen, always, force, no"
                ))
            }
        };
        let mode = match get("INSTA_FORCE_UPDATE").as_deref() {
            Some("1") => Mode::Force,
            _ => mode,
        };
        let force_pass = match get("INSTA_FORCE_PASS").as_deref().unwrap_or("") {
            "" | "0" => false,
            "1" => true,
            other => return Err(format!("INSTA_FORCE_PASS={other:?} is not 0 or 1")),
        };
        Ok(Switches {
            mode,
            force_pass,
            ci: ci_from(&get),
        })
    }
}

/// Asserts that a deterministic report matches its snapshot under `dir`. A new or changed
/// snapshot is written as pending `.snap.new` (not in CI; see the module docs for insta's
/// switches), and the one panic names the case, the tensors that changed, what differs in the
/// platform fingerprint, the file written and how to accept it.
pub fn assert_matches(dir: &Path, report: &CaseReport, controls: &Controls) {
    let switches = Switches::from_vars(|k| std::env::var(k).ok())
        .unwrap_or_else(|e| panic!("bitexact snapshot assertion: {e}"));
    debug_assert_eq!(switches.ci, in_ci());
    match verify(dir, report, controls, &switches, INSTA_REVIEW) {
        Ok(None) => {}
        Ok(Some(note)) => eprintln!("bitexact: {note}"),
        Err(msg) if switches.force_pass => {
            eprintln!("{msg}\n(INSTA_FORCE_PASS is set: the assertion passes)")
        }
        Err(msg) => panic!("{msg}"),
    }
}

/// The first way to accept a pending snapshot that a failed Rust assertion names.
const INSTA_REVIEW: &str = "cargo insta review";

/// The assertion for another test runner (the pytest plugin, through
/// `bitexact._native.snapshot_check`): [`assert_matches`] returning instead of panicking,
/// `Ok` (with a note when a file was written) when it passes, `Err` with the failure message.
/// insta's switches and `CI` apply as there. `update` writes the `.snap` in place and passes
/// (pytest's `--bitexact-update`; like `INSTA_UPDATE=always`, an explicit request, so it writes
/// in CI too). `accept` is the first way to accept a pending file the failure names.
pub fn check_matches(
    dir: &Path,
    report: &CaseReport,
    controls: &Controls,
    update: bool,
    accept: &str,
) -> Result<Option<String>, String> {
    let mut sw = Switches::from_vars(|k| std::env::var(k).ok())
        .map_err(|e| format!("bitexact snapshot assertion: {e}"))?;
    if update && sw.mode != Mode::Force {
        sw.mode = Mode::Always;
    }
    verify(dir, report, controls, &sw, accept)
}

/// The assertion without the panic: `Ok` when it passes (with a note when a snapshot was
/// written in place), `Err` with the failure message, whose first way to accept a pending
/// file is `accept`.
fn verify(
    dir: &Path,
    report: &CaseReport,
    controls: &Controls,
    sw: &Switches,
    accept: &str,
) -> Result<Option<String>, String> {
    let platform = Platform::detect();
    let new = Snapshot::of(report, controls, &platform).map_err(|e| format!("{e:#}"))?;
    let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let file = path(
        &dir,
        &platform.class_for(report.backend),
        &report.name,
        controls,
    );
    let pending = pending_path(&file);
    let (exists, headline) = match read_existing(&file) {
        Ok(Some(old)) => match explain(&report.name, &file, &old, &new) {
            None => {
                if !sw.ci {
                    // A pending file from an earlier failure is stale now.
                    let _ = remove_if_present(&pending);
                }
                if sw.mode == Mode::Force && old != new {
                    write(&file, &new).map_err(|e| format!("{e:#}"))?;
                    return Ok(Some(format!(
                        "INSTA_UPDATE=force: rewrote {} (same digests, new metadata)",
                        file.display()
                    )));
                }
                return Ok(None);
            }
            Some(e) => (true, e),
        },
        Ok(None) => (
            false,
            format!(
                "no committed snapshot for {} at {}",
                report.name,
                file.display()
            ),
        ),
        Err(e) => (true, format!("{e:#}")),
    };
    let in_place = match sw.mode {
        Mode::Always | Mode::Force => true,
        Mode::No => return Err(format!("{headline}\nINSTA_UPDATE=no: nothing written.")),
        _ if sw.ci => return Err(ci_message(&headline, &pending)),
        Mode::Unseen => !exists,
        Mode::Auto | Mode::New => false,
    };
    if in_place {
        write(&file, &new).map_err(|e| format!("{headline}\n{e:#}"))?;
        let _ = remove_if_present(&pending);
        return Ok(Some(format!("{headline}\nwrote {}", file.display())));
    }
    write(&pending, &new)
        .map_err(|e| format!("{headline}\ncould not write the new digests: {e:#}"))?;
    Err(format!(
        "{headline}\nwrote the new digests to {p}; to accept them, run one of:\n    \
         {accept}\n    \
         bitexact snapshot review --accept --snapshots {d}\n    \
         mv {p} {f}",
        p = pending.display(),
        d = dir.display(),
        f = file.display(),
    ))
}

/// The failure in CI: nothing is written, and a pending file already there is not this run's.
fn ci_message(headline: &str, pending: &Path) -> String {
    let mut msg = format!(
        "{headline}\nCI is set: nothing written. Run the test without CI to write the new \
         digests as a pending snapshot for review."
    );
    if std::fs::symlink_metadata(pending).is_ok() {
        msg.push_str(&format!(
            "\n{} is left over from an earlier run, not written by this one: it may not hold \
             these digests.",
            pending.display()
        ));
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Backend;
    use crate::outcome::CaseReport;
    use std::path::PathBuf;

    use crate::scratch::Scratch;

    fn report(digest: &str) -> CaseReport {
        let mut r = CaseReport::new("kernel/test/small", Backend::Cpu);
        r.distinct_digests = 1;
        r = r.judge();
        r.runs = 2;
        r.run_digests = vec![digest.repeat(32); 2];
        r.digests = [("sum".to_string(), digest.repeat(32))].into();
        r
    }

    fn switches(vars: &[(&str, &str)]) -> Switches {
        Switches::from_vars(|k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
        .unwrap()
    }

    fn file_of(dir: &Path) -> PathBuf {
        let p = Platform::detect();
        path(
            dir,
            &p.class_for(Backend::Cpu),
            "kernel/test/small",
            &Controls::default(),
        )
    }

    #[test]
    fn a_first_assertion_writes_pending_and_says_how_to_accept() {
        let s = Scratch::absent();
        let c = Controls::default();
        let msg = verify(&s.0, &report("ab"), &c, &switches(&[]), INSTA_REVIEW).unwrap_err();
        let file = file_of(&s.0);
        let pending = pending_path(&file);
        assert!(
            msg.starts_with("no committed snapshot for kernel/test/small at "),
            "{msg}"
        );
        assert!(
            msg.contains(&format!("wrote the new digests to {}", pending.display())),
            "{msg}"
        );
        assert!(msg.contains("cargo insta review"), "{msg}");
        assert!(
            msg.contains(&format!(
                "bitexact snapshot review --accept --snapshots {}",
                s.0.display()
            )),
            "{msg}"
        );
        assert!(
            msg.contains(&format!("mv {} {}", pending.display(), file.display())),
            "{msg}"
        );
        let ours = Snapshot::of(&report("ab"), &c, &Platform::detect()).unwrap();
        assert_eq!(std::fs::read_to_string(&pending).unwrap(), ours.file_text());
        // Accepted with `mv`, the assertion passes and nothing is pending any more.
        std::fs::rename(&pending, &file).unwrap();
        assert_eq!(
            verify(&s.0, &report("ab"), &c, &switches(&[]), INSTA_REVIEW),
            Ok(None)
        );
    }

    #[test]
    fn in_ci_a_stale_pending_file_is_not_claimed_as_written() {
        let s = Scratch::absent();
        let c = Controls::default();
        let pending = pending_path(&file_of(&s.0));
        std::fs::create_dir_all(pending.parent().unwrap()).unwrap();
        std::fs::write(&pending, "stale").unwrap();
        let msg = verify(
            &s.0,
            &report("ab"),
            &c,
            &switches(&[("CI", "true")]),
            INSTA_REVIEW,
        )
        .unwrap_err();
        assert!(msg.contains("CI is set: nothing written"), "{msg}");
        assert!(msg.contains("left over from an earlier run"), "{msg}");
        assert!(!msg.contains("wrote"), "{msg}");
        assert_eq!(std::fs::read_to_string(&pending).unwrap(), "stale");
    }

    #[test]
    fn insta_update_switches_are_honoured() {
        let c = Controls::default();
        let s = Scratch::absent();
        let msg = verify(
            &s.0,
            &report("ab"),
            &c,
            &switches(&[("INSTA_UPDATE", "no")]),
            INSTA_REVIEW,
        );
        assert!(msg
            .unwrap_err()
            .contains("INSTA_UPDATE=no: nothing written"));
        assert!(!s.0.exists());
        let msg = verify(
            &s.0,
            &report("ab"),
            &c,
            &switches(&[("INSTA_UPDATE", "new"), ("CI", "1")]),
            INSTA_REVIEW,
        );
        assert!(msg.unwrap_err().contains("CI is set: nothing written"));
        assert!(!s.0.exists());
        // `unseen`: a missing snapshot is written in place, a changed one as pending.
        let note = verify(
            &s.0,
            &report("ab"),
            &c,
            &switches(&[("INSTA_UPDATE", "unseen")]),
            INSTA_REVIEW,
        );
        assert!(note.unwrap().unwrap().contains("wrote"));
        assert!(file_of(&s.0).exists());
        let msg = verify(
            &s.0,
            &report("cd"),
            &c,
            &switches(&[("INSTA_UPDATE", "unseen")]),
            INSTA_REVIEW,
        );
        assert!(msg
            .unwrap_err()
            .contains("tensor `sum` abababababab → cdcdcdcdcdcd"));
        assert!(pending_path(&file_of(&s.0)).exists());
        // `always` writes in place, even in CI, and removes the pending file.
        let sw = switches(&[("INSTA_UPDATE", "always"), ("CI", "true")]);
        assert!(verify(&s.0, &report("cd"), &c, &sw, INSTA_REVIEW)
            .unwrap()
            .is_some());
        assert!(!pending_path(&file_of(&s.0)).exists());
        assert_eq!(
            verify(&s.0, &report("cd"), &c, &switches(&[]), INSTA_REVIEW),
            Ok(None)
        );
        // `force` refreshes metadata of a matching snapshot.
        let mut old = Snapshot::load(&file_of(&s.0)).unwrap();
        old.description = "old".into();
        write(&file_of(&s.0), &old).unwrap();
        let sw = switches(&[("INSTA_UPDATE", "force")]);
        assert!(verify(&s.0, &report("cd"), &c, &sw, INSTA_REVIEW)
            .unwrap()
            .is_some());
        assert_ne!(Snapshot::load(&file_of(&s.0)).unwrap().description, "old");
        assert!(
            Switches::from_vars(|k| (k == "INSTA_UPDATE").then(|| "sometimes".into())).is_err()
        );
        assert!(switches(&[("INSTA_FORCE_PASS", "1")]).force_pass);
    }

    #[test]
    fn an_unreadable_committed_snapshot_is_named_not_missing() {
        let s = Scratch::absent();
        let file = file_of(&s.0);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(&file, &file).unwrap();
        let msg = verify(
            &s.0,
            &report("ab"),
            &Controls::default(),
            &switches(&[("CI", "1")]),
            INSTA_REVIEW,
        )
        .unwrap_err();
        assert!(msg.contains(&file.display().to_string()), "{msg}");
        assert!(!msg.contains("no committed snapshot"), "{msg}");
    }
}
