//! Where a record comes from: the platform of a kept run directory, and what differs between
//! two of them.
//!
//! A kept run directory (`bitexact run --keep DIR`: `DIR/run-<i>`) holds two platform files:
//! - [`RECORD_FILE`] (`.bitexact-record.json`), written by bitexact into every kept run
//!   directory whether or not the program imports bitexact ([`write`](fn@write)):
//!   `{"bitexact_record": 1, "platform": {…}, "controls": {…}}`, where `platform` is
//!   [`Platform::fields`] (class, OS, CPU model and features, cores, libc, rustc, bitexact
//!   version, GPU, driver, CUDA) and `controls` the run's seed, deterministic and benchmark
//!   switches, workers, the thread count it exported (`threads`, absent when the program
//!   was left its default), `PYTHONHASHSEED` (`hashseed`), the poison byte, world size and
//!   batch size when given. Every value is a string.
//! - [`PLATFORM_FILE`] (`.bitexact-platform.json`), the program's own: Python, numpy, torch,
//!   CUDA, cuDNN, GPU, torch's thread count (`bitexact.write_platform`; the tracer writes it
//!   under `--trace`). A distributed run keeps it under `rank<R>/`.
//!
//! [`compare`] says what differs between two directories' files (`bitexact diff-trace` prints
//! it before the divergence): each differing key as `label A vs B`, under a label of its own
//! (`torch threads` for the program's `torch_num_threads`, `torch cuda` for its `cuda`),
//! leaving out keys that always differ and mean nothing ([`meaningless`]: timings, paths).

use super::Platform;
use crate::protocol::{PLATFORM_FILE, RECORD_FILE};
use crate::vary::RunSettings;
use anyhow::{anyhow, bail, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The `bitexact_record` version [`write`](fn@write) writes.
pub const RECORD_VERSION: u64 = 1;

/// Largest platform file read, in bytes.
const MAX_BYTES: u64 = 1 << 20;

/// The record of a run made under `settings` with the environment `env` (the thread count it
/// exported is read from it), on this machine: the text of [`RECORD_FILE`].
pub fn record_json(settings: &RunSettings, env: &BTreeMap<String, String>) -> String {
    let platform: serde_json::Map<String, serde_json::Value> = (Platform::detect().fields())
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.into()))
        .collect();
    let c = &settings.controls;
    let sw = |b: bool| if b { "on" } else { "off" }.to_string();
    let mut controls = serde_json::Map::new();
    controls.insert("seed".into(), c.seed.to_string().into());
    controls.insert("deterministic".into(), sw(c.deterministic).into());
    controls.insert("benchmark".into(), sw(c.benchmark).into());
    controls.insert("workers".into(), c.workers.to_string().into());
    if let Some(t) = env.get(crate::protocol::THREADS_ENV) {
        controls.insert("threads".into(), t.clone().into());
    }
    if let Some(h) = env.get("PYTHONHASHSEED") {
        controls.insert("hashseed".into(), h.clone().into());
    }
    if let Some(p) = settings.knobs.poison {
        controls.insert("poison".into(), format!("0x{p:02x}").into());
    }
    if let Some(w) = settings.knobs.world_size {
        controls.insert("world_size".into(), w.to_string().into());
    }
    if let Some(b) = settings.knobs.batch {
        controls.insert("batch".into(), b.to_string().into());
    }
    let record = serde_json::json!({
        "bitexact_record": RECORD_VERSION,
        "platform": platform,
        "controls": controls,
    });
    format!("{record:#}\n")
}

/// Writes [`record_json`] into the kept run directory `dir` as [`RECORD_FILE`], atomically.
pub fn write(dir: &Path, settings: &RunSettings, env: &BTreeMap<String, String>) -> Result<()> {
    let text = record_json(settings, env);
    crate::atomic::write_atomically(&dir.join(RECORD_FILE), text.as_bytes())
}

/// Whether a key of a platform file always differs between runs and means nothing for the
/// bits: a timing (`seed_everything_seconds`), a time stamp, a path, a process id.
pub fn meaningless(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    key.ends_with("seconds")
        || key.contains("time")
        || key.ends_with("path")
        || key.ends_with("_dir")
        || key == "pid"
}

/// The keys of bitexact's own record (platform and controls): a program key of the same name
/// gets another label.
const RECORD_KEYS: &[&str] = &[
    "class",
    "os",
    "arch",
    "cpu",
    "cpu_features",
    "cores",
    "libc",
    "rustc",
    "bitexact",
    "gpu",
    "compute_capability",
    "driver",
    "cuda",
    "nvrtc",
    "seed",
    "deterministic",
    "benchmark",
    "workers",
    "threads",
    "hashseed",
    "poison",
    "world_size",
    "batch",
];

/// The label of a key of the program's `.bitexact-platform.json`: `torch threads` for
/// `torch_num_threads`, `torch cuda` and `torch gpu` for what torch reports, `program <key>`
/// for another key bitexact's record has too, else the key with spaces for underscores.
pub fn program_label(key: &str) -> String {
    match key {
        "torch_num_threads" => "torch threads".into(),
        "cuda" | "gpu" | "cuda_available" | "gpu_capability" => {
            format!("torch {}", key.replace('_', " "))
        }
        k if RECORD_KEYS.contains(&k) => format!("program {}", k.replace('_', " ")),
        k => k.replace('_', " "),
    }
}

/// One directory's platform files, as `(label, value)` pairs in file order; `None` for a file
/// that is not there.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Side {
    /// bitexact's [`RECORD_FILE`]: the platform fields, then the controls.
    pub record: Option<Vec<(String, String)>>,
    /// The program's [`PLATFORM_FILE`] (null values and [`meaningless`] keys left out).
    pub program: Option<Vec<(String, String)>>,
}

/// The first of `candidates` that exists (`None` when none does).
fn first_existing(candidates: &[PathBuf]) -> Option<&PathBuf> {
    candidates
        .iter()
        .find(|p| std::fs::symlink_metadata(p).is_ok())
}

/// The JSON object in `path`; an error names the file.
fn read_object(path: &Path) -> Result<serde_json::Map<String, serde_json::Value>> {
    let bytes = crate::atomic::read_regular(path, MAX_BYTES)?;
    let q = crate::quote::path(path);
    match serde_json::from_slice(&bytes) {
        Ok(serde_json::Value::Object(m)) => Ok(m),
        Ok(_) => bail!("{q}: not a JSON object"),
        Err(e) => bail!("{q}: not JSON: {e}"),
    }
}

/// A JSON value as the text compared: a string as it is, anything else as JSON.
fn text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        v => v.to_string(),
    }
}

impl Side {
    /// The platform files of the run that `path` names: a kept run directory, or a trace file
    /// in it (or in its `rank<R>/`). A file that is there but unreadable or malformed is an
    /// error naming it.
    pub fn read(path: &Path) -> Result<Side> {
        let dir = match path.is_dir() {
            true => path.to_path_buf(),
            false => path.parent().unwrap_or(Path::new(".")).to_path_buf(),
        };
        let in_rank = dir
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix("rank"))
            .is_some_and(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_digit()));
        let up = dir.parent().unwrap_or(Path::new(".")).to_path_buf();
        let (record_at, program_at) = match in_rank {
            true => (
                vec![dir.join(RECORD_FILE), up.join(RECORD_FILE)],
                vec![dir.join(PLATFORM_FILE), up.join(PLATFORM_FILE)],
            ),
            false => (
                vec![dir.join(RECORD_FILE)],
                vec![
                    dir.join(PLATFORM_FILE),
                    dir.join("rank0").join(PLATFORM_FILE),
                ],
            ),
        };
        let record = first_existing(&record_at)
            .map(|p| Side::record(p))
            .transpose()?;
        let program = first_existing(&program_at)
            .map(|p| -> Result<_> {
                Ok((read_object(p)?.iter())
                    .filter(|(k, v)| !v.is_null() && !meaningless(k))
                    .map(|(k, v)| (program_label(k), text(v)))
                    .collect())
            })
            .transpose()?;
        Ok(Side { record, program })
    }

    /// The fields of bitexact's record at `path`: `platform`, then `controls`.
    fn record(path: &Path) -> Result<Vec<(String, String)>> {
        let m = read_object(path)?;
        let version = m.get("bitexact_record").and_then(|v| v.as_u64());
        if version != Some(RECORD_VERSION) {
            let q = crate::quote::path(path);
            return Err(anyhow!(
                "{q}: not a bitexact record of version {RECORD_VERSION}"
            ));
        }
        let mut fields = Vec::new();
        for part in ["platform", "controls"] {
            if let Some(serde_json::Value::Object(o)) = m.get(part) {
                fields.extend(
                    (o.iter())
                        .filter(|(k, v)| !v.is_null() && !meaningless(k))
                        .map(|(k, v)| (k.replace('_', " "), text(v))),
                );
            }
        }
        Ok(fields)
    }
}

/// What [`compare`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Comparison {
    /// The files one side lacks: `platform unknown for A: no .bitexact-record.json`.
    pub unknown: Vec<String>,
    /// Each differing key, `label A vs B` (`torch 2.9.1 vs 2.15.0`); `(none)` for a key one
    /// side lacks.
    pub differences: Vec<String>,
}

impl Comparison {
    /// Whether the two platforms differ in any key compared.
    pub fn differ(&self) -> bool {
        !self.differences.is_empty()
    }

    /// The lines to print: the unknown sides, then `platforms differ: …` when they do.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = self.unknown.clone();
        if self.differ() {
            lines.push(format!("platforms differ: {}", self.differences.join("; ")));
        }
        lines
    }
}

/// The differing keys of two lists of fields, in `a`'s order then `b`'s extra keys.
fn differing(a: &[(String, String)], b: &[(String, String)]) -> Vec<String> {
    let find =
        |f: &[(String, String)], k: &str| f.iter().find(|(l, _)| l == k).map(|(_, v)| v.clone());
    let mut keys: Vec<&String> = a.iter().map(|(k, _)| k).collect();
    keys.extend(b.iter().map(|(k, _)| k).filter(|k| find(a, k).is_none()));
    keys.into_iter()
        .filter_map(|k| {
            let (x, y) = (find(a, k), find(b, k));
            let none = || "(none)".to_string();
            (x != y).then(|| {
                format!(
                    "{k} {} vs {}",
                    x.unwrap_or_else(none),
                    y.unwrap_or_else(none)
                )
            })
        })
        .collect()
}

/// What differs between the platforms of `a` and `b` (named `names` in the lines on a side
/// whose files are missing): each file is compared only when both sides have it.
pub fn compare(a: &Side, b: &Side, names: [&str; 2]) -> Comparison {
    let mut c = Comparison::default();
    for (side, name) in [a, b].into_iter().zip(names) {
        if side.record.is_none() {
            c.unknown
                .push(format!("platform unknown for {name}: no {RECORD_FILE}"));
        }
        if side.program.is_none() {
            c.unknown.push(format!(
                "program platform unknown for {name}: no {PLATFORM_FILE}"
            ));
        }
    }
    if let (Some(x), Some(y)) = (&a.record, &b.record) {
        c.differences.extend(differing(x, y));
    }
    if let (Some(x), Some(y)) = (&a.program, &b.program) {
        c.differences.extend(differing(x, y));
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controls::Controls;

    fn fields(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_written_record_reads_back_with_platform_and_controls() {
        let dir = tempfile::tempdir().unwrap();
        let mut settings = RunSettings::for_run(&Controls::default(), &[], 0, true);
        settings.knobs.batch = Some(8);
        let env = BTreeMap::from([(crate::protocol::THREADS_ENV.to_string(), "3".to_string())]);
        write(dir.path(), &settings, &env).unwrap();
        let side = Side::read(dir.path()).unwrap();
        assert_eq!(side.program, None);
        let record = side.record.unwrap();
        let get = |k: &str| record.iter().find(|(l, _)| l == k).map(|(_, v)| v.as_str());
        assert_eq!(get("threads"), Some("3"));
        assert_eq!(get("batch"), Some("8"));
        assert_eq!(get("deterministic"), Some("on"));
        assert_eq!(get("bitexact"), Some(env!("CARGO_PKG_VERSION")));
        assert_eq!(
            get("cpu features"),
            Some(Platform::detect().cpu_features.as_str())
        );
        // Without an exported thread count the record says nothing of threads.
        let text = record_json(&settings, &BTreeMap::new());
        assert!(!text.contains("\"threads\""), "{text}");
    }

    #[test]
    fn program_keys_get_labels_of_their_own() {
        assert_eq!(program_label("torch_num_threads"), "torch threads");
        assert_eq!(program_label("cuda"), "torch cuda");
        assert_eq!(program_label("gpu_capability"), "torch gpu capability");
        assert_eq!(program_label("os"), "program os");
        assert_eq!(program_label("seed"), "program seed");
        assert_eq!(program_label("torch"), "torch");
        assert_eq!(
            program_label("python_implementation"),
            "python implementation"
        );
        assert!(meaningless("seed_everything_seconds") && meaningless("start_time"));
        assert!(
            !meaningless("torch") && !meaningless("torch_num_threads") && !meaningless("cores")
        );
    }

    #[test]
    fn differences_name_each_differing_key_of_files_both_sides_have() {
        let a = Side {
            record: Some(fields(&[("cpu", "X"), ("threads", "1"), ("os", "linux")])),
            program: Some(fields(&[("torch", "2.9.1"), ("torch threads", "1")])),
        };
        let b = Side {
            record: Some(fields(&[("cpu", "Y"), ("os", "linux"), ("gpu", "H100")])),
            program: Some(fields(&[("torch", "2.15.0"), ("torch threads", "4")])),
        };
        let c = compare(&a, &b, ["A", "B"]);
        assert!(c.unknown.is_empty(), "{c:?}");
        assert_eq!(
            c.lines(),
            [
                "platforms differ: cpu X vs Y; threads 1 vs (none); gpu (none) vs H100; \
              torch 2.9.1 vs 2.15.0; torch threads 1 vs 4"
            ]
        );
        assert!(!compare(&a, &a, ["A", "B"]).differ());
        // A side without bitexact's record: said, and only the program's files compared.
        let old = Side {
            record: None,
            ..b.clone()
        };
        let c = compare(&a, &old, ["A", "B"]);
        assert_eq!(
            c.unknown,
            [format!("platform unknown for B: no {RECORD_FILE}")]
        );
        assert_eq!(
            c.differences,
            ["torch 2.9.1 vs 2.15.0", "torch threads 1 vs 4"]
        );
        let c = compare(&Side::default(), &Side::default(), ["A", "B"]);
        assert_eq!(c.unknown.len(), 4);
        assert!(!c.differ() && c.lines()[3].starts_with("program platform unknown for B"));
    }

    #[test]
    fn program_files_are_found_beside_a_trace_and_timings_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let rank = dir.path().join("rank0");
        std::fs::create_dir(&rank).unwrap();
        let platform = r#"{"torch": "2.9.1", "seed_everything_seconds": 0.25, "cudnn": null,
                           "torch_num_threads": 2}"#;
        std::fs::write(rank.join(PLATFORM_FILE), platform).unwrap();
        let want = Some(fields(&[("torch", "2.9.1"), ("torch threads", "2")]));
        assert_eq!(Side::read(dir.path()).unwrap().program, want);
        let trace = rank.join(".bitexact-trace-rank0.jsonl");
        assert_eq!(Side::read(&trace).unwrap().program, want);
        // Malformed files are errors naming them; a record of another version too.
        std::fs::write(rank.join(PLATFORM_FILE), "{").unwrap();
        let e = format!("{:#}", Side::read(dir.path()).unwrap_err());
        assert!(e.contains(PLATFORM_FILE) && e.contains("not JSON"), "{e}");
        std::fs::write(dir.path().join(RECORD_FILE), r#"{"bitexact_record": 9}"#).unwrap();
        let e = format!("{:#}", Side::read(&trace).unwrap_err());
        assert!(e.contains(RECORD_FILE) && e.contains("version 1"), "{e}");
    }
}
