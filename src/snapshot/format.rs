//! The `.snap` file: insta's format (a YAML metadata header between `---` lines, then the
//! body), written and read by bitexact itself.
//!
//! [`Snapshot::file_text`] writes exactly the bytes insta writes for a file snapshot (in
//! `tests/it/snapshot_files.rs`, insta re-saves our files and the bytes do not change), so
//! `cargo insta review` works on them. [`Snapshot::from_bytes`] reads that format strictly:
//! every digest must be 64 lowercase hex digits and tensor names unique; an error gives the
//! line and quotes at most [`MAX_QUOTE`] bytes of the offending input. It never panics, on
//! any input (a proptest in `tests/it/snapshot_files.rs` checks this).

use super::naming::controls_suffix;
use super::yaml;
use crate::controls::Controls;
use crate::outcome::{CaseReport, Verdict};
use crate::platform::Platform;
use anyhow::{anyhow, bail, Result};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// The `source` field of every snapshot: the file that first wrote them, kept as it was so
/// committed snapshots stay byte-identical.
const SOURCE: &str = "src/snapshot.rs";

pub use crate::quote::{excerpt, MAX_QUOTE};

/// The `info` key prefix of an output's sketch in a program's snapshot (`sketch.<output
/// name>`: `f32[64,64]|<sketch>`, see [`crate::trace::sketch`]); never compared, read by
/// [`super::noise`] to classify a snapshot of another platform class.
pub const SKETCH_PREFIX: &str = "sketch.";

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

/// Why a `.snap` file was rejected: the 1-based line and what is wrong there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FormatError {
    /// 1-based line number in the file.
    pub line: usize,
    /// What is wrong, quoting at most [`MAX_QUOTE`] bytes of the input.
    pub message: String,
}

impl std::fmt::Display for FormatError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for FormatError {}

fn fail<T>(line: usize, message: impl Into<String>) -> Result<T, FormatError> {
    Err(FormatError {
        line,
        message: message.into(),
    })
}

/// Whether `d` is a digest as bitexact writes them: 64 lowercase hex digits.
pub fn is_digest(d: &str) -> bool {
    d.len() == 64 && d.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

impl Snapshot {
    /// The snapshot of a deterministic case report made under `controls` on `platform`.
    pub fn of(report: &CaseReport, controls: &Controls, platform: &Platform) -> Result<Snapshot> {
        if report.verdict_so_far() != Verdict::Deterministic {
            bail!(
                "{} on {} is {}: only deterministic results can be snapshotted",
                report.name,
                report.backend,
                report.verdict_so_far().name()
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
        // A program's own report (`.bitexact-platform.json`: python, torch, CUDA, cuDNN ...)
        // joins the fingerprint as `program.<key>`.
        let program = report.program.as_ref().and_then(|p| p.platform.as_ref());
        if let Some(serde_json::Value::Object(m)) = program {
            for (k, v) in m.iter().filter(|(_, v)| !v.is_null()) {
                let text = match v {
                    serde_json::Value::String(s) => s.clone(),
                    v => v.to_string(),
                };
                info.push((format!("program.{k}"), text));
            }
        }
        // Its outputs' sketches, when made (`--snapshots`): what classifies a snapshot of another
        // platform class within or beyond noise (super::noise).
        if let Some(p) = &report.program {
            for (name, sketch) in &p.sketches {
                info.push((format!("{SKETCH_PREFIX}{name}"), sketch.clone()));
            }
        }
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

    /// Parses [`Snapshot::body`] text (metadata left empty), validating every digest.
    pub fn parse_body(text: &str) -> Result<Snapshot> {
        let (run, tensors) =
            parse_body_lines(numbered(text, 1), 1).map_err(|e| anyhow!("snapshot body {e}"))?;
        Ok(Snapshot {
            run,
            tensors,
            description: String::new(),
            info: Vec::new(),
        })
    }

    /// Parses a whole `.snap` or `.snap.new` file (as written by insta or by
    /// [`Snapshot::file_text`]). Unknown header fields (`source`, `assertion_line`,
    /// `expression`, ...) are ignored; a binary snapshot or a malformed line is an error.
    pub fn from_bytes(bytes: &[u8]) -> Result<Snapshot, FormatError> {
        let text = std::str::from_utf8(bytes).map_err(|e| FormatError {
            line: 1 + bytes[..e.valid_up_to()]
                .iter()
                .filter(|&&b| b == b'\n')
                .count(),
            message: "not UTF-8 text".into(),
        })?;
        let mut lines = numbered(text, 1);
        if !matches!(lines.next(), Some((_, "---"))) {
            return fail(
                1,
                "the file does not start with `---` (insta's metadata header)",
            );
        }
        let (mut description, mut info) = (String::new(), Vec::<(String, String)>::new());
        let (mut in_info, mut last) = (false, 1);
        let mut closed = false;
        for (n, l) in lines.by_ref() {
            last = n;
            if l == "---" {
                closed = true;
                break;
            }
            if l.trim().is_empty() {
                continue;
            }
            if let Some(entry) = l.strip_prefix("  ").filter(|_| in_info) {
                if entry.starts_with(' ') {
                    return fail(n, format!("nested value in `info`: {}", excerpt(l)));
                }
                let (k, v) =
                    yaml::key_value(entry).or_else(|m| fail(n, format!("{m}: {}", excerpt(l))))?;
                if info.iter().any(|(key, _)| *key == k) {
                    return fail(n, format!("`info` key {} appears twice", excerpt(&k)));
                }
                info.push((k, v));
                continue;
            }
            if l.starts_with(' ') {
                return fail(n, format!("unexpected indented line {}", excerpt(l)));
            }
            let (k, v) = yaml::key_value(l).or_else(|m| fail(n, format!("{m}: {}", excerpt(l))))?;
            in_info = k == "info";
            match k.as_str() {
                "info" if !v.is_empty() => return fail(n, "`info` must be a map"),
                "description" => description = v,
                "snapshot_kind" if v != "text" => {
                    return fail(n, format!("not a text snapshot (kind {})", excerpt(&v)))
                }
                _ => {}
            }
        }
        if !closed {
            return fail(last, "the metadata header is not closed by `---`");
        }
        let (run, tensors) = parse_body_lines(lines, last + 1)?;
        Ok(Snapshot {
            run,
            tensors,
            description,
            info,
        })
    }

    /// Loads a `.snap` or `.snap.new` file; errors name the file (and the line when the
    /// content is malformed).
    pub fn load(file: &Path) -> Result<Snapshot> {
        let bytes =
            crate::atomic::read_regular(file, 64 << 20).map_err(|e| anyhow!("snapshot: {e:#}"))?;
        Snapshot::from_bytes(&bytes)
            .map_err(|e| anyhow!("invalid snapshot file {}, {e}", file.display()))
    }

    /// A value of the stored metadata.
    pub fn info(&self, key: &str) -> Option<&str> {
        self.info
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The whole `.snap` file as insta writes it (header, `---`, body).
    pub fn file_text(&self) -> String {
        let mut s = format!(
            "---\nsource: {SOURCE}\ndescription: {}\ninfo:\n",
            yaml::emit(&self.description)
        );
        for (k, v) in &self.info {
            let _ = writeln!(s, "  {}: {}", yaml::emit(k), yaml::emit(v));
        }
        s.push_str("---\n");
        s.push_str(&self.body());
        s.push('\n');
        s
    }
}

/// The lines of `text` numbered from `first`, without their `\r\n` / `\n`.
fn numbered(text: &str, first: usize) -> impl Iterator<Item = (usize, &str)> {
    text.split('\n')
        .enumerate()
        .map(move |(i, l)| (first + i, l.strip_suffix('\r').unwrap_or(l)))
}

/// Parses the body lines (`run:`, `tensors:`, one line per tensor); `first` is the line number
/// the body would start at, for the error on an empty body.
fn parse_body_lines<'a>(
    mut lines: impl Iterator<Item = (usize, &'a str)>,
    first: usize,
) -> Result<(String, BTreeMap<String, String>), FormatError> {
    let (n, l) = lines.next().unwrap_or((first, ""));
    let Some(run) = l.strip_prefix("run: ").map(str::trim_end) else {
        return fail(n, format!("expected `run: <digest>`, found {}", excerpt(l)));
    };
    if !is_digest(run) {
        return fail(
            n,
            format!("run digest {} is not 64 lowercase hex digits", excerpt(run)),
        );
    }
    match lines.next() {
        Some((_, l)) if l.trim_end() == "tensors:" => {}
        Some((n, l)) => return fail(n, format!("expected `tensors:`, found {}", excerpt(l))),
        None => return fail(n + 1, "expected `tensors:` after the run digest"),
    }
    let mut tensors = BTreeMap::new();
    let mut first_seen = BTreeMap::new();
    for (n, l) in lines.filter(|(_, l)| !l.trim().is_empty()) {
        let Some((k, v)) = l.strip_prefix("  ").and_then(|l| l.rsplit_once(": ")) else {
            return fail(
                n,
                format!("expected `  <tensor>: <digest>`, found {}", excerpt(l)),
            );
        };
        let v = v.trim_end();
        if !is_digest(v) {
            return fail(
                n,
                format!(
                    "digest {} of tensor {} is not 64 lowercase hex digits",
                    excerpt(v),
                    excerpt(k)
                ),
            );
        }
        if let Some(prev) = first_seen.insert(k.to_string(), n) {
            return fail(
                n,
                format!("tensor {} appears twice (also line {prev})", excerpt(k)),
            );
        }
        tensors.insert(k.to_string(), v.to_string());
    }
    Ok((run.to_string(), tensors))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Backend;
    use crate::outcome::CaseReport;

    fn snapshot() -> Snapshot {
        let mut r = CaseReport::new("kernel/test/small", Backend::Cpu);
        r.distinct_digests = 1;
        r = r.judge();
        r.runs = 2;
        r.run_digests = vec!["ab".repeat(32); 2];
        r.digests = [("x", "11"), ("y: z", "22")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.repeat(32)))
            .collect();
        Snapshot::of(&r, &Controls::default(), &Platform::detect()).unwrap()
    }

    #[test]
    fn file_text_round_trips() {
        let s = snapshot();
        assert_eq!(Snapshot::from_bytes(s.file_text().as_bytes()).unwrap(), s);
        let back = Snapshot::parse_body(&s.body()).unwrap();
        assert_eq!((back.run, back.tensors), (s.run.clone(), s.tensors.clone()));
    }

    #[test]
    fn bad_digests_and_duplicates_are_rejected_with_line() {
        let text = snapshot().file_text();
        let body_line = text.lines().position(|l| l.starts_with("run: ")).unwrap() + 1;
        let e = Snapshot::from_bytes(text.replace(&"11".repeat(32), "XYZ").as_bytes()).unwrap_err();
        assert_eq!(e.line, body_line + 2, "{e}");
        assert!(e.message.contains("\"XYZ\" of tensor \"x\""), "{e}");
        let upper = text.replace(&"ab".repeat(32), &"AB".repeat(32));
        let e = Snapshot::from_bytes(upper.as_bytes()).unwrap_err();
        assert_eq!(e.line, body_line, "{e}");
        let dup = text.replace(
            "\n  y: z: ",
            &format!("\n  x: {}\n  y: z: ", "11".repeat(32)),
        );
        let e = Snapshot::from_bytes(dup.as_bytes()).unwrap_err();
        assert_eq!(e.line, body_line + 3, "{e}");
        assert!(e.message.contains("appears twice (also line"), "{e}");
    }

    #[test]
    fn quoted_input_is_capped() {
        let huge = "z".repeat(50 << 20);
        let text = format!("---\ninfo:\n---\nrun: {}\ntensors:\n", "0".repeat(64));
        let e = Snapshot::from_bytes(format!("{text}  {huge}\n").as_bytes()).unwrap_err();
        assert!(e.message.len() < 400, "{} bytes", e.message.len());
        assert!(
            e.message
                .ends_with(&format!("… ({} bytes)", huge.len() + 2)),
            "{e}"
        );
        let e = Snapshot::from_bytes(format!("---\n{huge}\n---\n").as_bytes()).unwrap_err();
        assert!(e.to_string().len() < 400 && e.line == 2, "{e}");
    }

    #[test]
    fn malformed_headers_name_the_line() {
        for (text, line) in [
            ("", 1),
            ("run: x", 1),
            ("---\ninfo:\n  a: 1\n", 4),
            ("---\n  a: 1\n---\n", 2),
            ("---\nsnapshot_kind: binary\n---\n", 2),
            ("---\n---\n", 3),
            ("---\ninfo:\n  a: 1\n  a: 2\n---\n", 4),
        ] {
            let e = Snapshot::from_bytes(text.as_bytes()).unwrap_err();
            assert_eq!(e.line, line, "{text:?}: {e}");
        }
        let e = Snapshot::from_bytes(b"---\n\xff\n").unwrap_err();
        assert_eq!((e.line, e.message.as_str()), (2, "not UTF-8 text"));
    }
}
