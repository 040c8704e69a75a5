//! Where the tracer comes from, and whether it ran.
//!
//! **The tracer goes where bitexact is.** `bitexact` is usually installed in an environment of
//! its own (`pipx`, `uv tool install`, a CI image's tool venv) while the program runs under its
//! project's Python, which has torch but not bitexact. So the injected directory
//! (`ROOT/.bitexact-inject/`, first on the program's `PYTHONPATH`) holds, beside the
//! `sitecustomize.py`, a link named `bitexact` to **bitexact's own package**
//! ([`own_package`]): the package of the `bitexact` console script that is running, or, for a
//! binary built by cargo, the package directory `$BITEXACT_PYTHON_PACKAGE` names. Its native
//! module is abi3 (CPython ≥ 3.9, the platform it was built for), so any such Python loads it.
//! Nothing else of bitexact's environment is on that path, so no other package leaks into the
//! program's imports. A program whose environment has its own `bitexact` of the same version
//! keeps using it; one of another version gets bitexact's own, and the report says so. A
//! binary with no package of its own leaves the program's Python to import its own `bitexact`.
//!
//! **When it cannot work, the run fails and says why.** Each Python process that tries records
//! what happened in `ROOT/.bitexact-inject/records.jsonl` ([`TRACER_RECORDS_FILE`], written by
//! `python/bitexact/_sitecustomize.py`; cleared before each run, runs being one at a time). A
//! run in which no process started the tracer (or, for `--seed-everything`, seeded) fails with
//! [`FailureKind::TraceUnavailable`], naming the interpreter and the reason:
//! `--trace ops: /usr/bin/python3 has no torch (...)`, `cannot load bitexact's native module
//! (...)`, `cannot import bitexact's tracer (...)`, or that no Python
//! process started it at all (the program ran no Python, or its Python skipped `PYTHONPATH`:
//! `python -I`, `-E`, `-S`; or a Python older than 3.9 said so). A run stopped early is judged on
//! its outputs alone. A program that runs several Pythons (torchrun's agent, DataLoader
//! workers, a helper script) is fine as long as one traces: each rank's first process does.

use crate::outcome::{Failure, FailureKind};
use crate::protocol::{PYTHON_PACKAGE_ENV, TRACER_RECORDS_FILE};
use anyhow::{bail, Result};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

static OWN_PACKAGE: OnceLock<PathBuf> = OnceLock::new();

/// Tells run mode where bitexact's own Python package is: the console script
/// (`python/bitexact/_cli.py`) passes its package's directory.
pub fn set_own_package(dir: PathBuf) {
    let _ = OWN_PACKAGE.set(dir);
}

/// bitexact's own Python package directory: the console script's, else `$BITEXACT_PYTHON_PACKAGE`;
/// `None` when there is neither. An unusable `$BITEXACT_PYTHON_PACKAGE` is an error naming it.
pub fn own_package() -> Result<Option<PathBuf>> {
    if let Some(dir) = OWN_PACKAGE.get() {
        return Ok(Some(dir.clone()));
    }
    let Some(dir) = std::env::var_os(PYTHON_PACKAGE_ENV).filter(|d| !d.is_empty()) else {
        return Ok(None);
    };
    let dir = std::path::absolute(PathBuf::from(dir))?;
    if !dir.join("__init__.py").is_file() || !dir.join("_trace").join("__init__.py").is_file() {
        bail!(
            "${PYTHON_PACKAGE_ENV} {}: not a bitexact Python package directory (no __init__.py and _trace/__init__.py)",
            dir.display()
        );
    }
    Ok(Some(dir))
}

/// Links `inject/bitexact` to bitexact's own package, when there is one.
pub fn link_own_package(inject: &Path) -> Result<()> {
    if let Some(dir) = own_package()? {
        let link = inject.join("bitexact");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&dir, &link)
            .map_err(|e| anyhow::anyhow!("linking {} to {}: {e}", link.display(), dir.display()))?;
    }
    Ok(())
}

/// How a process that could not import the bitexact package words it
/// (`python/bitexact/_sitecustomize.py`).
const NO_PACKAGE: &str = "cannot import bitexact's tracer";

/// One process's record.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct Record {
    /// `tracing`, `seeded` or `failed`.
    pub event: String,
    /// The interpreter (`sys.executable`).
    pub python: String,
    /// Why it failed (`failed` only).
    pub reason: Option<String>,
    /// The version of the bitexact package the process imported.
    pub bitexact: Option<String>,
    /// Where that package lies.
    pub package: Option<String>,
    /// What the report should say about the package chosen (another version shadowed).
    pub note: Option<String>,
}

/// Removes the last run's records from the injected directory `inject`, before a run.
pub fn clear(inject: &Path) {
    let _ = std::fs::remove_file(inject.join(TRACER_RECORDS_FILE));
}

/// The records of the run that just ended, from the injected directory `inject` (none when no
/// process wrote any; a link there is not followed).
pub fn read(inject: &Path) -> Vec<Record> {
    let path = inject.join(TRACER_RECORDS_FILE);
    if !std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file()) {
        return Vec::new();
    }
    let bytes = crate::atomic::read_regular(&path, super::collect::METADATA_MAX_BYTES);
    bytes
        .map(|b| parse(&String::from_utf8_lossy(&b)))
        .unwrap_or_default()
}

/// How a run of `program` ended, given its `records` and the program's own `failed`ure: a
/// reason a process gave for not tracing (or seeding) comes first (it explains the program's
/// failure too: no torch), then the program's failure, then no process tracing at all. A run
/// `stopped` early is judged on its outputs. `Ok`: the report's notes.
pub fn notes_or_failure(
    program: &super::Program,
    records: &[Record],
    stopped: bool,
    failed: Option<Failure>,
) -> Result<Vec<String>, Failure> {
    if !program.injects() || stopped {
        return failed.map_or(Ok(Vec::new()), Err);
    }
    let level = program.trace.as_ref().map(|t| t.level.name());
    let own = own_package().is_ok_and(|p| p.is_some());
    match (
        check_starts(records, level, program.seed_everything, own),
        failed,
    ) {
        (Err(f), _) if records.iter().any(|r| r.event == "failed") => Err(f),
        (_, Some(f)) | (Err(f), None) => Err(f),
        (Ok(notes), None) => Ok(notes),
    }
}

/// The records in the text of a [`TRACER_RECORDS_FILE`]; lines that are not a record are
/// skipped (a process killed mid-write must not hide the others).
pub fn parse(text: &str) -> Vec<Record> {
    text.lines()
        .filter_map(|l| serde_json::from_str::<Record>(l).ok())
        .collect()
}

/// What a run's records say: the notes for the report when every asked-for start happened in
/// some process, else the failure. `trace` is the `--trace` level asked for, `seed` whether
/// `--seed-everything` was, `own` whether bitexact gave the program its own package (without
/// one, a Python that cannot import bitexact is told how to get it).
pub fn check_starts(
    records: &[Record],
    trace: Option<&str>,
    seed: bool,
    own: bool,
) -> Result<Vec<String>, Failure> {
    let asked = [
        trace.map(|level| (format!("--trace {level}"), "tracing")),
        seed.then(|| ("--seed-everything".to_string(), "seeded")),
    ];
    for (flag, event) in asked.into_iter().flatten() {
        if records.iter().any(|r| r.event == event) {
            continue;
        }
        let mut reasons: Vec<String> = Vec::new();
        for r in records.iter().filter(|r| r.event == "failed") {
            let line = format!(
                "{} {}",
                r.python,
                r.reason.as_deref().unwrap_or("failed to start it")
            );
            if !reasons.contains(&line) {
                reasons.push(line);
            }
        }
        let mut why = match reasons.is_empty() {
            true => "no Python process started it: the program ran no Python, or its Python skipped PYTHONPATH or site (python -I, -E or -S), where bitexact's start-up code is".to_string(),
            false => reasons.join("; "),
        };
        if !own && why.contains(NO_PACKAGE) {
            why.push_str(&format!(
                " (this bitexact has no Python package of its own to give the program: run the `bitexact` command of a pip or pipx install, set ${PYTHON_PACKAGE_ENV} to a bitexact package directory, or install bitexact-harness where the program runs)"
            ));
        }
        return Err(Failure::new(
            FailureKind::TraceUnavailable,
            format!("{flag}: {why}"),
        ));
    }
    let ours = env!("CARGO_PKG_VERSION");
    let mut notes: Vec<String> = Vec::new();
    for r in records.iter().filter(|r| r.event != "failed") {
        let note = r.note.clone().or_else(|| {
            let theirs = r.bitexact.as_deref().filter(|v| *v != ours)?;
            Some(format!(
                "{} used bitexact {theirs} ({}), not this bitexact's {ours}: its records may not be read right; run the bitexact of the program's environment, or install bitexact-harness {ours} there",
                r.python,
                r.package.as_deref().unwrap_or("?")
            ))
        });
        if let Some(n) = note.filter(|n| !notes.contains(n)) {
            notes.push(n);
        }
    }
    Ok(notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(event: &str, reason: Option<&str>) -> Record {
        Record {
            event: event.into(),
            python: "/usr/bin/python3".into(),
            reason: reason.map(str::to_string),
            bitexact: Some(env!("CARGO_PKG_VERSION").into()),
            ..Record::default()
        }
    }

    #[test]
    fn no_record_names_the_missing_python() {
        let f = check_starts(&[], Some("ops"), false, true).unwrap_err();
        assert_eq!(f.kind, FailureKind::TraceUnavailable);
        assert!(f
            .message
            .starts_with("--trace ops: no Python process started it"));
        let f = check_starts(&[], None, true, true).unwrap_err();
        assert!(
            f.message.starts_with("--seed-everything: "),
            "{}",
            f.message
        );
        assert_eq!(check_starts(&[], None, false, true), Ok(vec![]));
    }

    #[test]
    fn a_failure_names_the_interpreter_unless_another_process_traced() {
        let failed = rec("failed", Some("has no torch (No module named 'torch')"));
        let f = check_starts(std::slice::from_ref(&failed), Some("ops"), false, true).unwrap_err();
        assert_eq!(
            f.message,
            "--trace ops: /usr/bin/python3 has no torch (No module named 'torch')"
        );
        // A helper Python without torch beside a rank that traced: fine.
        assert_eq!(
            check_starts(
                &[failed.clone(), rec("tracing", None)],
                Some("ops"),
                false,
                true
            ),
            Ok(vec![])
        );
        // Tracing alone does not satisfy --seed-everything.
        assert!(check_starts(&[rec("tracing", None)], Some("ops"), true, true).is_err());
    }

    #[test]
    fn without_a_package_of_its_own_bitexact_says_how_to_get_one() {
        let reason =
            "cannot import bitexact's tracer (ModuleNotFoundError: No module named 'bitexact')";
        let failed = rec("failed", Some(reason));
        let f = check_starts(std::slice::from_ref(&failed), Some("ops"), false, false).unwrap_err();
        assert!(f.message.contains(PYTHON_PACKAGE_ENV), "{}", f.message);
        let f = check_starts(&[failed], Some("ops"), false, true).unwrap_err();
        assert!(!f.message.contains(PYTHON_PACKAGE_ENV), "{}", f.message);
    }

    #[test]
    fn a_reason_comes_before_the_programs_failure_and_a_stopped_run_is_not_checked() {
        let mut p = super::super::Program::new(vec!["python".into()]);
        p.trace = Some(super::super::trace::TraceOptions::default());
        let exited = || {
            Some(Failure::new(
                FailureKind::ExitStatus,
                "exited with status 1",
            ))
        };
        let failed = [rec("failed", Some("has no torch"))];
        let kind = |r: Result<Vec<String>, Failure>| r.unwrap_err().kind;
        assert_eq!(
            kind(notes_or_failure(&p, &failed, false, exited())),
            FailureKind::TraceUnavailable
        );
        assert_eq!(
            kind(notes_or_failure(&p, &[], false, exited())),
            FailureKind::ExitStatus
        );
        assert_eq!(
            kind(notes_or_failure(&p, &[], false, None)),
            FailureKind::TraceUnavailable
        );
        assert_eq!(notes_or_failure(&p, &[], true, None), Ok(vec![]));
        assert_eq!(
            kind(notes_or_failure(&p, &[], true, exited())),
            FailureKind::ExitStatus
        );
        assert_eq!(
            notes_or_failure(&p, &[rec("tracing", None)], false, None),
            Ok(vec![])
        );
    }

    #[test]
    fn another_version_is_named() {
        let mut r = rec("tracing", None);
        r.bitexact = Some("0.0.1".into());
        r.package = Some("/venv/site-packages/bitexact".into());
        let notes = check_starts(&[r.clone(), r], Some("ops"), false, true).unwrap();
        assert_eq!(notes.len(), 1);
        assert!(notes[0].contains("bitexact 0.0.1 (/venv/site-packages/bitexact)"));
    }

    #[test]
    fn parse_skips_broken_lines() {
        let text = "{\"event\":\"tracing\",\"python\":\"p\",\"pid\":3}\n{\"event\":\"fa\n\n";
        let r = parse(text);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].event, "tracing");
    }

    proptest::proptest! {
        #[test]
        fn parse_never_panics(s in "\\PC{0,200}") {
            let _ = parse(&s);
        }
    }
}
