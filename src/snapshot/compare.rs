//! Comparing a report with its committed snapshot, and explaining a mismatch: which tensors
//! changed and what differs between the stored platform fingerprint and this machine's.

use super::format::Snapshot;
use super::naming::path;
use crate::controls::Controls;
use crate::outcome::CaseReport;
use crate::platform::Platform;
use anyhow::{anyhow, Result};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

/// [`CaseReport::snapshot`] of a case whose digests match its committed snapshot.
pub const MATCHES: &str = "matches the committed snapshot";

/// Changed tensors a mismatch explanation names (the rest are counted).
pub const MAX_TENSORS_NAMED: usize = 8;

/// Why a fingerprint field may change the bits.
fn cause(field: &str) -> &'static str {
    match field {
        "rustc" => "likely a toolchain change",
        "bitexact" => "likely a change in bitexact itself",
        "cpu" | "cpu_features" | "arch" => {
            "likely a CPU difference (different instructions, e.g. FMA or vector width)"
        }
        "os" | "libc" => "likely a C library / libm difference",
        "gpu" | "compute_capability" => "likely a GPU difference",
        "driver" | "cuda" | "nvrtc" => "likely a CUDA driver or toolkit change",
        f if f.starts_with("program.") => {
            "the program's own environment changed (library versions it reported in .bitexact-platform.json)"
        }
        _ => "platform difference",
    }
}

/// Explains how `new` differs from the committed `old`, or `None` when the digests match:
/// each changed tensor, then what differs in the platform fingerprint (or "same platform
/// fingerprint: regression").
pub fn explain(case: &str, file: &Path, old: &Snapshot, new: &Snapshot) -> Option<String> {
    if old.body() == new.body() {
        return None;
    }
    let short =
        |d: Option<&String>| d.map_or("(absent)".to_string(), |d| d.chars().take(12).collect());
    let names: std::collections::BTreeSet<&String> =
        old.tensors.keys().chain(new.tensors.keys()).collect();
    let tensors: Vec<String> = names
        .into_iter()
        .filter(|n| old.tensors.get(*n) != new.tensors.get(*n))
        .map(|n| {
            format!(
                "tensor `{n}` {} → {}",
                short(old.tensors.get(n)),
                short(new.tensors.get(n))
            )
        })
        .collect();
    let mut platform = Vec::new();
    for (k, v) in &new.info {
        let timing = k
            .strip_prefix("program.")
            .is_some_and(crate::platform::record::meaningless);
        let sketch = k.starts_with(super::format::SKETCH_PREFIX);
        if timing || sketch || matches!(k.as_str(), "case" | "backend" | "controls" | "cores") {
            continue;
        }
        match old.info(k) {
            Some(o) if o == v => {}
            Some(o) => platform.push(format!("{k} changed ({o} → {v}): {}", cause(k))),
            None if !old.info.is_empty() => {
                platform.push(format!("{k} not recorded before (now {v}): {}", cause(k)))
            }
            None => {}
        }
    }
    let why = if old.info.is_empty() {
        "the committed snapshot records no platform fingerprint".to_string()
    } else if platform.is_empty() {
        "same platform fingerprint: regression (the code changed, or the case is not \
         deterministic across processes)"
            .to_string()
    } else {
        format!("platform differs: {}", platform.join("; "))
    };
    let tensors = match tensors.len() {
        0 => "run digest differs".to_string(),
        n if n > MAX_TENSORS_NAMED => format!(
            "{}, and {} more tensors",
            tensors[..MAX_TENSORS_NAMED].join(", "),
            n - MAX_TENSORS_NAMED
        ),
        _ => tensors.join(", "),
    };
    Some(format!(
        "snapshot mismatch for {case} ({}): {tensors}; {why}",
        file.display()
    ))
}

/// The snapshot stored at `file`, or `None` when nothing is there. Anything else that stops
/// it from being read (a symlink loop, a dangling link, a directory, no permission, malformed
/// content) is an error naming the file.
pub fn read_existing(file: &Path) -> Result<Option<Snapshot>> {
    match std::fs::symlink_metadata(file) {
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(anyhow!("cannot read snapshot {}: {e}", file.display())),
        Ok(_) => Snapshot::load(file).map(Some),
    }
}

/// The result of comparing a report with its committed snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Comparison {
    /// Digests match.
    Match,
    /// No committed snapshot at this path.
    Missing(PathBuf),
    /// Digests differ: the explanation.
    Mismatch(String),
}

/// Compares a deterministic report with `DIR/<class>/<case>@<controls>.snap`; an unreadable
/// or malformed snapshot file is an error naming it.
pub fn compare(
    dir: &Path,
    report: &CaseReport,
    controls: &Controls,
    platform: &Platform,
) -> Result<Comparison> {
    let new = Snapshot::of(report, controls, platform)?;
    let file = path(
        dir,
        &platform.class_for(report.backend),
        &report.name,
        controls,
    );
    let Some(old) = read_existing(&file)? else {
        return Ok(Comparison::Missing(file));
    };
    Ok(match explain(&report.name, &file, &old, &new) {
        None => Comparison::Match,
        Some(e) => Comparison::Mismatch(e),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Backend;
    use crate::outcome::CaseReport;

    fn report(tensors: &[(&str, &str)]) -> CaseReport {
        let mut r = CaseReport::new("kernel/test/small", Backend::Cpu);
        r.distinct_digests = 1;
        r = r.judge();
        r.runs = 2;
        r.run_digests = vec!["ab".repeat(32); 2];
        r.digests = tensors
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        r
    }

    #[test]
    fn explanations_name_tensor_and_cause() {
        let p = Platform::detect();
        let c = Controls::default();
        let old = Snapshot::of(&report(&[("a", "1111"), ("b", "2222")]), &c, &p).unwrap();
        let mut r = report(&[("a", "1111"), ("b", "3333")]);
        r.run_digests[0] = "cd".repeat(32);
        let new = Snapshot::of(&r, &c, &p).unwrap();
        let f = Path::new("f.snap");
        assert_eq!(explain("k", f, &old, &old), None);
        let e = explain("kernel/test/small", f, &old, &new).unwrap();
        assert!(
            e.contains("kernel/test/small") && e.contains("tensor `b` 2222 → 3333"),
            "{e}"
        );
        assert!(!e.contains("tensor `a`"), "{e}");
        assert!(e.contains("same platform fingerprint: regression"), "{e}");
        let mut older = old.clone();
        for (k, v) in older.info.iter_mut() {
            if k == "rustc" {
                *v = "rustc 1.0.0 (old)".into();
            }
        }
        // A program's torch version joins the fingerprint; its seeding time (always
        // different) is no platform difference.
        let (mut torch_old, mut torch_new) = (old.clone(), new.clone());
        torch_old
            .info
            .push(("program.torch".into(), "2.9.1".into()));
        torch_new
            .info
            .push(("program.torch".into(), "2.15.0".into()));
        let mut same_torch = new.clone();
        same_torch
            .info
            .push(("program.torch".into(), "2.9.1".into()));
        torch_old
            .info
            .push(("program.seed_everything_seconds".into(), "0.1".into()));
        same_torch
            .info
            .push(("program.seed_everything_seconds".into(), "0.2".into()));
        let e = explain("k", f, &torch_old, &same_torch).unwrap();
        assert!(e.contains("same platform fingerprint: regression"), "{e}");
        let e = explain("k", f, &torch_old, &torch_new).unwrap();
        assert!(e.contains("program.torch changed (2.9.1 → 2.15.0)"), "{e}");
        let e = explain("kernel/test/small", f, &older, &new).unwrap();
        assert!(
            e.contains("rustc changed (rustc 1.0.0 (old) → ")
                && e.contains("likely a toolchain change"),
            "{e}"
        );
    }

    #[test]
    fn nondeterministic_reports_are_not_snapshotted() {
        let mut r = report(&[("a", "1")]);
        r.distinct_digests = 2;
        r = r.judge();
        let e = Snapshot::of(&r, &Controls::default(), &Platform::detect()).unwrap_err();
        assert!(e.to_string().contains("only deterministic"), "{e}");
    }

    #[test]
    fn symlink_loops_and_unreadable_snapshots_are_errors_naming_the_file() {
        let scratch = crate::scratch::Scratch::absent();
        let dir = scratch.0.clone();
        let c = Controls::default();
        let p = Platform::detect();
        let r = report(&[("a", &"1".repeat(64))]);
        let file = path(&dir, &p.class_for(Backend::Cpu), &r.name, &c);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        assert_eq!(
            compare(&dir, &r, &c, &p).unwrap(),
            Comparison::Missing(file.clone())
        );
        let name = file.display().to_string();
        // A link to itself (a loop), a dangling link and a directory in its place.
        std::os::unix::fs::symlink(&file, &file).unwrap();
        let e = format!("{:#}", compare(&dir, &r, &c, &p).unwrap_err());
        assert!(e.contains(&name) && e.contains("symbolic links"), "{e}");
        std::fs::remove_file(&file).unwrap();
        std::os::unix::fs::symlink(dir.join("nowhere"), &file).unwrap();
        let e = format!("{:#}", compare(&dir, &r, &c, &p).unwrap_err());
        assert!(e.contains(&name), "{e}");
        std::fs::remove_file(&file).unwrap();
        std::fs::create_dir(&file).unwrap();
        let e = format!("{:#}", compare(&dir, &r, &c, &p).unwrap_err());
        assert!(e.contains(&name), "{e}");
    }
}
