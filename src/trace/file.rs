//! Trace files of built-in cases (`bitexact report --trace FILE`), read and compared by
//! `bitexact diff-trace A B`.

use super::{first_divergence, Divergence, TraceEntry};
use serde::{Deserialize, Serialize};

/// The traces of one case on one backend, as saved by `--trace FILE`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaseTraces {
    /// Case name.
    pub name: String,
    /// Backend name.
    pub backend: String,
    /// One trace per run.
    pub runs: Vec<Vec<TraceEntry>>,
}

/// A trace file: `{"version": 1, "platform": ..., "cases": [...]}`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TraceFile {
    /// Format version (1).
    pub version: u32,
    /// Fingerprint of the machine that recorded it (free-form JSON).
    pub platform: serde_json::Value,
    /// Traces per case and backend.
    pub cases: Vec<CaseTraces>,
}

impl TraceFile {
    /// Reads a trace file; errors name the file. Only regular files up to
    /// [`MAX_TRACE_FILE_BYTES`] are read (not a directory, a FIFO or `/dev/zero`).
    pub fn load(path: &std::path::Path) -> anyhow::Result<TraceFile> {
        use anyhow::Context;
        use std::io::Read;
        let what = || format!("reading trace file {}", path.display());
        let file = std::fs::File::open(path).with_context(what)?;
        let meta = file.metadata().with_context(what)?;
        if !meta.is_file() {
            anyhow::bail!("trace file {}: not a regular file", path.display());
        }
        let mut bytes = Vec::new();
        file.take(MAX_TRACE_FILE_BYTES + 1)
            .read_to_end(&mut bytes)
            .with_context(what)?;
        if bytes.len() as u64 > MAX_TRACE_FILE_BYTES {
            anyhow::bail!(
                "trace file {}: larger than {MAX_TRACE_FILE_BYTES} bytes",
                path.display()
            );
        }
        TraceFile::parse(&bytes)
            .with_context(|| format!("{} is not a valid bitexact trace file", path.display()))
    }

    /// Parses and validates trace-file bytes: JSON of the right shape, `version` 1, each
    /// (case, backend) at most once, at least one run per case.
    pub fn parse(bytes: &[u8]) -> anyhow::Result<TraceFile> {
        let file: TraceFile = serde_json::from_slice(bytes)?;
        if file.version != 1 {
            anyhow::bail!(
                "unsupported trace version {} (this build reads version 1)",
                file.version
            );
        }
        let mut seen = std::collections::BTreeSet::new();
        for c in &file.cases {
            if !seen.insert((&c.name, &c.backend)) {
                anyhow::bail!("case {} [{}] appears twice", c.name, c.backend);
            }
            if c.runs.is_empty() {
                anyhow::bail!("case {} [{}] has no runs", c.name, c.backend);
            }
        }
        Ok(file)
    }
}

/// Largest trace file `diff-trace` reads (1 GiB).
pub const MAX_TRACE_FILE_BYTES: u64 = 1 << 30;

/// Compares run 0 of every case in either file: `(case, backend, first divergence)`, in the
/// first file's order and then the second's; a case present in only one file is a divergence
/// that says which file lacks it.
pub fn diff_files(a: &TraceFile, b: &TraceFile) -> Vec<(String, String, Option<Divergence>)> {
    let find = |f: &TraceFile, c: &CaseTraces| {
        f.cases
            .iter()
            .find(|x| x.name == c.name && x.backend == c.backend)
            .and_then(|x| x.runs.first())
            .cloned()
    };
    let missing = |which: &str| {
        Some(Divergence {
            call: 0,
            op: String::new(),
            inputs_matched: false,
            explanation: format!("no trace of this case in the {which} file"),
            ..Divergence::default()
        })
    };
    let mut out = Vec::new();
    for ca in &a.cases {
        let d = match (ca.runs.first(), find(b, ca)) {
            (Some(x), Some(y)) => first_divergence(x, &y),
            _ => missing("second"),
        };
        out.push((ca.name.clone(), ca.backend.clone(), d));
    }
    for cb in b.cases.iter().filter(|cb| find(a, cb).is_none()) {
        out.push((cb.name.clone(), cb.backend.clone(), missing("first")));
    }
    out
}
