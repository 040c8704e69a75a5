//! Snapshots: the committed digests of a case under given controls on a platform class, stored
//! in insta's file format so `cargo insta review` works on them.
//!
//! **Layout.** `DIR/<class>/<case>@<controls>.snap`, where `<class>` is the platform class
//! (`cpu-x86_64`, `cuda-sm90`, ...; see [`Platform::class_for`]), `<case>` is the case name with
//! `/` replaced by `.` (`kernel.reduce_sum.small`), and `<controls>` names the controls that
//! legitimately change the bits: `seed<S>-det` or `seed<S>-nondet`, plus `-bench` when the
//! autotune switch is on ([`controls_suffix`]). Worker and thread counts are not in the name:
//! a deterministic case must give the same bits for any of them (the harness checks that with
//! variations); they are recorded in the metadata.
//!
//! **Body** (what is compared): the run digest and each tensor digest, in name order:
//! ```text
//! run: 3f1c…
//! tensors:
//!   sum: 9a0b…
//! ```
//! **Metadata** (insta's `description` and `info`, never compared): the case, backend and
//! controls, and the platform fingerprint of the machine that wrote it ([`Platform::fields`]).
//! On a mismatch, [`explain`] names the tensors whose digests changed and what differs between
//! the stored fingerprint and this machine's ("rustc changed (rustc 1.95.0 → rustc 1.96.0):
//! likely a toolchain change"), or says "same platform fingerprint: regression".
//!
//! **Writing.** In `cargo test` ([`assert_matches`]) insta writes a new or changed snapshot as
//! pending `.snap.new` (never in CI, where `CI` is set: a mismatch just fails), for
//! `cargo insta review` or `bitexact snapshot review`. `bitexact snapshot update` writes `.snap`
//! files directly ([`write_atomically`]: temporary file, fsync, rename), in the same bytes
//! insta writes, and refuses to in CI unless forced.

use crate::controls::Controls;
use crate::harness::{CaseReport, Verdict};
use crate::platform::Platform;
use anyhow::{anyhow, bail, Context, Result};
use insta::internals::Content;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// The `source` field insta records for snapshots asserted through this module.
const SOURCE: &str = "src/snapshot.rs";

/// [`CaseReport::snapshot`] of a case whose digests match its committed snapshot.
pub const MATCHES: &str = "matches the committed snapshot";

/// Whether this process runs in CI, by insta's rule (`CI` set to anything but empty, `0` or
/// `false`, or else `TF_BUILD` set): snapshots are then never written unless forced.
pub fn in_ci() -> bool {
    match std::env::var("CI").ok().as_deref() {
        Some("false") | Some("0") | Some("") => false,
        None => std::env::var_os("TF_BUILD").is_some(),
        Some(_) => true,
    }
}

/// The controls part of a snapshot's name: `seed0-det`, `seed7-nondet-bench`, ...
pub fn controls_suffix(controls: &Controls) -> String {
    format!(
        "seed{}-{}{}",
        controls.seed,
        if controls.deterministic {
            "det"
        } else {
            "nondet"
        },
        if controls.benchmark { "-bench" } else { "" }
    )
}

/// The case part of a snapshot's name: `kernel/reduce_sum/small` → `kernel.reduce_sum.small`
/// (dots rather than insta's `__`, which insta would read as a module prefix and show only
/// `small` in `cargo insta review`).
pub fn case_stem(case: &str) -> String {
    case.replace(['/', '\\'], ".")
}

/// `DIR/<class>/<case>@<controls>.snap`.
pub fn path(dir: &Path, class: &str, case: &str, controls: &Controls) -> PathBuf {
    dir.join(class).join(format!(
        "{}@{}.snap",
        case_stem(case),
        controls_suffix(controls)
    ))
}

/// The digests of one case (what is compared) and the metadata it was recorded with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// Run digest (hex).
    pub run: String,
    /// Tensor digests (hex) by output name.
    pub tensors: BTreeMap<String, String>,
    /// Human-readable one-liner (insta's `description`).
    pub description: String,
    /// Case, backend, controls and platform fingerprint (insta's `info`), in a fixed order.
    pub info: Vec<(String, String)>,
}

impl Snapshot {
    /// The snapshot of a deterministic case report made under `controls` on `platform`.
    pub fn of(report: &CaseReport, controls: &Controls, platform: &Platform) -> Result<Snapshot> {
        if report.verdict != Verdict::Deterministic {
            bail!(
                "{} on {} is {}: only deterministic results can be snapshotted",
                report.name,
                report.backend,
                report.verdict.name()
            );
        }
        let run = report
            .run_digests
            .first()
            .cloned()
            .ok_or_else(|| anyhow!("{}: no completed run", report.name))?;
        let mut info = vec![
            ("case".to_string(), report.name.clone()),
            ("backend".to_string(), report.backend.name().to_string()),
            ("controls".to_string(), controls.summary()),
        ];
        info.extend(
            platform
                .fields()
                .into_iter()
                .map(|(k, v)| (k.to_string(), v)),
        );
        Ok(Snapshot {
            run,
            tensors: report.digests.clone(),
            description: format!(
                "bitexact digests of {} on {} ({})",
                report.name,
                report.backend,
                controls_suffix(controls)
            ),
            info,
        })
    }

    /// The compared text: `run: <hex>`, then `tensors:` and one `  <name>: <hex>` per tensor.
    pub fn body(&self) -> String {
        let mut s = format!("run: {}\ntensors:", self.run);
        for (k, v) in &self.tensors {
            let _ = write!(s, "\n  {k}: {v}");
        }
        s
    }

    /// Parses [`Snapshot::body`] text (metadata left empty).
    pub fn parse_body(text: &str) -> Result<Snapshot> {
        let mut lines = text.lines();
        let run = lines
            .next()
            .and_then(|l| l.strip_prefix("run: "))
            .ok_or_else(|| anyhow!("snapshot body does not start with `run: <digest>`"))?;
        if lines.next().map(str::trim_end) != Some("tensors:") {
            bail!("snapshot body has no `tensors:` line after the run digest");
        }
        let mut tensors = BTreeMap::new();
        for l in lines.filter(|l| !l.trim().is_empty()) {
            let (k, v) = l
                .strip_prefix("  ")
                .and_then(|l| l.rsplit_once(": "))
                .ok_or_else(|| anyhow!("malformed tensor line {l:?} in snapshot body"))?;
            tensors.insert(k.to_string(), v.trim().to_string());
        }
        Ok(Snapshot {
            run: run.trim().to_string(),
            tensors,
            description: String::new(),
            info: Vec::new(),
        })
    }

    /// Loads a `.snap` or `.snap.new` file (as written by insta or by [`Snapshot::file_text`]).
    pub fn load(file: &Path) -> Result<Snapshot> {
        let snap = insta::Snapshot::from_file(file)
            .map_err(|e| anyhow!("cannot read snapshot {}: {e}", file.display()))?;
        let text = snap
            .as_text()
            .ok_or_else(|| anyhow!("{} is not a text snapshot", file.display()))?
            .to_string();
        let mut s = Snapshot::parse_body(&text).with_context(|| file.display().to_string())?;
        s.description = snap.metadata().description().unwrap_or("").to_string();
        if let Some(Content::Map(m)) = snap.metadata().private_info() {
            s.info = m
                .iter()
                .filter_map(|(k, v)| Some((k.as_str()?.to_string(), content_text(v)?)))
                .collect();
        }
        Ok(s)
    }

    /// A value of the stored metadata.
    pub fn info(&self, key: &str) -> Option<&str> {
        self.info
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The metadata as insta `info` content.
    pub fn info_content(&self) -> Content {
        Content::Map(
            self.info
                .iter()
                .map(|(k, v)| (Content::from(k.as_str()), Content::from(v.as_str())))
                .collect(),
        )
    }

    /// The whole `.snap` file as insta writes it (header, `---`, body).
    pub fn file_text(&self) -> String {
        let mut s = format!(
            "---\nsource: {SOURCE}\ndescription: {}\ninfo:\n",
            yaml_str(&self.description)
        );
        for (k, v) in &self.info {
            let _ = writeln!(s, "  {}: {}", yaml_str(k), yaml_str(v));
        }
        s.push_str("---\n");
        s.push_str(&self.body());
        s.push('\n');
        s
    }
}

/// A scalar of insta metadata as text.
fn content_text(v: &Content) -> Option<String> {
    v.as_str()
        .map(str::to_string)
        .or_else(|| v.as_u64().map(|n| n.to_string()))
        .or_else(|| v.as_i64().map(|n| n.to_string()))
        .or_else(|| v.as_f64().map(|n| n.to_string()))
        .or_else(|| v.as_bool().map(|b| b.to_string()))
}

/// A YAML scalar exactly as insta's emitter writes it: plain when safe, else double-quoted.
fn yaml_str(s: &str) -> String {
    let needs_quotes = s.is_empty()
        || s.starts_with(' ')
        || s.ends_with(' ')
        || s.starts_with(['&', '*', '?', '|', '-', '<', '>', '=', '!', '%', '@', '.'])
        || s.contains(|c: char| {
            matches!(c, ':' | '{' | '}' | '[' | ']' | ',' | '#' | '`' | '"' | '\'' | '\\'
                | '\0'..='\x06' | '\t' | '\n' | '\r' | '\x0e'..='\x1a' | '\x1c'..='\x1f')
        })
        || [
            "yes", "Yes", "YES", "no", "No", "NO", "True", "TRUE", "true", "False", "FALSE",
            "false", "on", "On", "ON", "off", "Off", "OFF", "null", "Null", "NULL", "~",
        ]
        .contains(&s)
        || s.starts_with("0x")
        || s.parse::<i64>().is_ok()
        || s.parse::<f64>().is_ok();
    if !needs_quotes {
        return s.to_string();
    }
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\x08' => o.push_str("\\b"),
            '\t' => o.push_str("\\t"),
            '\n' => o.push_str("\\n"),
            '\x0c' => o.push_str("\\f"),
            '\r' => o.push_str("\\r"),
            c if (c as u32) < 0x20 || c == '\x7f' => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

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
        |d: Option<&String>| d.map_or("(absent)".to_string(), |d| d[..12.min(d.len())].to_string());
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
        if matches!(k.as_str(), "case" | "backend" | "controls" | "cores") {
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
    let tensors = if tensors.is_empty() {
        "run digest differs".to_string()
    } else {
        tensors.join(", ")
    };
    Some(format!(
        "snapshot mismatch for {case} ({}): {tensors}; {why}",
        file.display()
    ))
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

/// Compares a deterministic report with `DIR/<class>/<case>@<controls>.snap`.
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
    if !file.exists() {
        return Ok(Comparison::Missing(file));
    }
    let old = Snapshot::load(&file)?;
    Ok(match explain(&report.name, &file, &old, &new) {
        None => Comparison::Match,
        Some(e) => Comparison::Mismatch(e),
    })
}

/// Checks every deterministic report against its snapshot under `dir` (`report --snapshots`):
/// a mismatch turns the verdict into `snapshot-mismatch` with the explanation in
/// [`CaseReport::snapshot`]; a missing snapshot is noted there without failing.
pub fn check_reports(dir: &Path, reports: &mut [CaseReport], controls: &Controls) {
    let platform = Platform::detect();
    for r in reports
        .iter_mut()
        .filter(|r| r.verdict == Verdict::Deterministic)
    {
        r.snapshot = Some(match compare(dir, r, controls, &platform) {
            Ok(Comparison::Match) => MATCHES.to_string(),
            Ok(Comparison::Missing(p)) => format!(
                "no committed snapshot at {} (`bitexact snapshot update` writes it)",
                p.display()
            ),
            Ok(Comparison::Mismatch(e)) => {
                r.verdict = Verdict::SnapshotMismatch;
                e
            }
            Err(e) => {
                r.verdict = Verdict::Error;
                format!("{e:#}")
            }
        });
    }
}

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

/// Writes the snapshot of every deterministic report under `dir` (`bitexact snapshot update`).
/// Refuses in CI unless `force`. Unchanged snapshots are not rewritten; a stale pending
/// `.snap.new` beside a written snapshot is removed.
pub fn update(
    dir: &Path,
    reports: &[CaseReport],
    controls: &Controls,
    force: bool,
) -> Result<Vec<Update>> {
    if in_ci() && !force {
        bail!("refusing to write snapshots in CI (CI is set); pass --force to write them anyway");
    }
    let platform = Platform::detect();
    let mut out = Vec::new();
    for r in reports {
        let new = match Snapshot::of(r, controls, &platform) {
            Ok(s) => s,
            Err(e) => {
                out.push(Update::NotWritten(format!(
                    "{e:#}{}",
                    r.message
                        .as_ref()
                        .map(|m| format!(" ({m})"))
                        .unwrap_or_default()
                )));
                continue;
            }
        };
        let file = path(dir, &platform.class_for(r.backend), &r.name, controls);
        let old = file.exists().then(|| Snapshot::load(&file)).transpose()?;
        let status = match &old {
            Some(o) => match explain(&r.name, &file, o, &new) {
                None => Update::Unchanged(file.clone()),
                Some(e) => Update::Updated(file.clone(), e),
            },
            None => Update::Written(file.clone()),
        };
        if !matches!(status, Update::Unchanged(_)) {
            write_atomically(&file, new.file_text().as_bytes())?;
        }
        let pending = pending_path(&file);
        if pending.exists() {
            std::fs::remove_file(&pending)
                .with_context(|| format!("removing {}", pending.display()))?;
        }
        out.push(status);
    }
    Ok(out)
}

/// `x.snap` → `x.snap.new`.
pub fn pending_path(file: &Path) -> PathBuf {
    let mut s = file.as_os_str().to_owned();
    s.push(".new");
    PathBuf::from(s)
}

/// Every pending `.snap.new` under `dir`, sorted.
pub fn pending(dir: &Path) -> Vec<PathBuf> {
    fn walk(d: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(d) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.to_string_lossy().ends_with(".snap.new") {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, &mut out);
    out.sort();
    out
}

/// Lists the pending snapshots under `dir` with what changed (`bitexact snapshot review`);
/// with `accept`, writes each as its `.snap` (atomically) and removes the pending file.
pub fn review(dir: &Path, accept: bool) -> Result<String> {
    let list = pending(dir);
    if list.is_empty() {
        return Ok(format!("no pending snapshots under {}\n", dir.display()));
    }
    let mut o = String::new();
    for p in &list {
        let target = PathBuf::from(p.to_string_lossy().trim_end_matches(".new"));
        let new = Snapshot::load(p)?;
        let case = new.info("case").unwrap_or("?").to_string();
        let what = if target.exists() {
            explain(&case, &target, &Snapshot::load(&target)?, &new)
                .unwrap_or_else(|| format!("{case}: same digests as {}", target.display()))
        } else {
            format!("{case}: new snapshot {}", target.display())
        };
        let _ = writeln!(o, "{}\n    {what}", p.display());
        if accept {
            // Rewritten rather than renamed, to drop insta's volatile `assertion_line` as
            // `cargo insta accept` does.
            write_atomically(&target, new.file_text().as_bytes())?;
            std::fs::remove_file(p).with_context(|| format!("removing {}", p.display()))?;
            let _ = writeln!(o, "    accepted");
        }
    }
    if !accept {
        let _ = writeln!(
            o,
            "\n{} pending; review them with `cargo insta review` (cargo install cargo-insta), \
             or accept all with `bitexact snapshot review --accept`",
            list.len()
        );
    }
    Ok(o)
}

/// Writes `bytes` to `file` atomically: a temporary file in the same directory (created with
/// the directory if needed), fsync, rename over `file`, fsync of the directory.
pub fn write_atomically(file: &Path, bytes: &[u8]) -> Result<()> {
    let dir = file
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let name = file
        .file_name()
        .ok_or_else(|| anyhow!("{} has no file name", file.display()))?
        .to_string_lossy();
    let tmp = dir.join(format!(".{name}.tmp{}", std::process::id()));
    let result = (|| -> Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, file)?;
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.with_context(|| format!("writing {}", file.display()))
}

/// Asserts that a deterministic report matches its snapshot under `dir` through insta, so a
/// new or changed snapshot becomes a pending `.snap.new` for `cargo insta review` (not in CI,
/// where insta writes nothing). Panics with the explanation of [`explain`] on a mismatch.
pub fn assert_matches(dir: &Path, report: &CaseReport, controls: &Controls) {
    let platform = Platform::detect();
    let new = Snapshot::of(report, controls, &platform).unwrap_or_else(|e| panic!("{e:#}"));
    let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let class = platform.class_for(report.backend);
    let file = path(&dir, &class, &report.name, controls);
    let explanation = match file.exists().then(|| Snapshot::load(&file)) {
        Some(Ok(old)) => explain(&report.name, &file, &old, &new),
        Some(Err(e)) => Some(format!("{e:#}")),
        None => Some(format!(
            "no committed snapshot for {} at {}",
            report.name,
            file.display()
        )),
    };
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path(dir.join(&class));
    settings.set_prepend_module_to_snapshot(false);
    settings.set_snapshot_suffix(controls_suffix(controls));
    settings.set_omit_expression(true);
    settings.set_description(new.description.clone());
    settings.set_raw_info(&new.info_content());
    let name = case_stem(&report.name);
    let body = new.body();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        settings.bind(|| insta::assert_snapshot!(name.as_str(), body.as_str()));
    }));
    if let Err(payload) = outcome {
        let insta_msg = payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        let new_file = pending_path(&file);
        let pending = if new_file.exists() {
            format!(
                "pending snapshot written to {} — review with `cargo insta review` or `bitexact snapshot review`",
                new_file.display()
            )
        } else if in_ci() {
            "CI: nothing written".to_string()
        } else {
            "no pending snapshot written (see INSTA_UPDATE)".to_string()
        };
        panic!(
            "{}\n{pending}\n(insta: {insta_msg})",
            explanation.unwrap_or_else(|| format!("snapshot mismatch for {}", report.name))
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Backend;
    use crate::harness::empty_report;

    fn report(tensors: &[(&str, &str)]) -> CaseReport {
        let mut r = empty_report("kernel/test/small", Backend::Cpu);
        r.verdict = Verdict::Deterministic;
        r.runs = 2;
        r.run_digests = vec!["ab".repeat(32); 2];
        r.digests = tensors
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        r
    }

    #[test]
    fn names_and_paths() {
        let c = Controls {
            seed: 7,
            benchmark: true,
            ..Controls::default()
        };
        assert_eq!(
            path(
                Path::new("snapshots"),
                "cpu-x86_64",
                "kernel/reduce_sum/small",
                &c
            ),
            Path::new("snapshots/cpu-x86_64/kernel.reduce_sum.small@seed7-det-bench.snap")
        );
    }

    #[test]
    fn body_round_trips_and_yaml_quotes_like_insta() {
        let p = Platform::detect();
        let s = Snapshot::of(
            &report(&[("x", "11"), ("y: z", "22")]),
            &Controls::default(),
            &p,
        )
        .unwrap();
        let back = Snapshot::parse_body(&s.body()).unwrap();
        assert_eq!((back.run, back.tensors), (s.run.clone(), s.tensors.clone()));
        assert_eq!(yaml_str("plain text (1)"), "plain text (1)");
        assert_eq!(yaml_str("a: b"), "\"a: b\"");
        assert_eq!(yaml_str("2"), "\"2\"");
        assert_eq!(yaml_str("say \"hi\"\n"), "\"say \\\"hi\\\"\\n\"");
    }

    #[test]
    fn file_text_loads_back_through_insta() {
        let dir = std::env::temp_dir().join(format!("bitexact-snap-unit-{}", std::process::id()));
        let p = Platform::detect();
        let s = Snapshot::of(
            &report(&[("sum", "cd".repeat(32).as_str())]),
            &Controls::default(),
            &p,
        )
        .unwrap();
        let file = dir.join("cpu/x@seed0-det.snap");
        write_atomically(&file, s.file_text().as_bytes()).unwrap();
        let back = Snapshot::load(&file).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(back, s);
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
        r.verdict = Verdict::Nondeterministic;
        let e = Snapshot::of(&r, &Controls::default(), &Platform::detect()).unwrap_err();
        assert!(e.to_string().contains("only deterministic"), "{e}");
    }
}
