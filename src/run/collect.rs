//! What a finished run left behind: the digest of every output under its `$BITEXACT_OUT`
//! (tensor files parsed, other files as raw bytes, in natural order of names), its standard
//! output when compared, and the Python helper's metadata (`.bitexact-platform.json`,
//! `.bitexact-memory.jsonl`). Then how two runs differ: the first diverging output and an
//! element-level explanation of each differing tensor.

use crate::diff::{self, TensorDiff};
use crate::digest::Digest;
use crate::harness::StepMemory;
use crate::tensor::Tensor;
use crate::tensor_files::{self, natural_cmp};
use crate::trace::Divergence;
use anyhow::{anyhow, Result};
use std::path::{Path, PathBuf};

/// The output name standard output is compared under (`--stdout`); no file can have it.
pub const STDOUT_NAME: &str = "<stdout>";

/// Outputs at most this large (bytes of the file holding them) are loaded to explain a
/// difference element by element; larger ones are named with their digests only, so
/// bitexact's memory stays bounded by the largest file.
pub const EXPLAIN_MAX_BYTES: u64 = 256 << 20;

/// Largest metadata file (`.bitexact-*`) read.
pub const METADATA_MAX_BYTES: u64 = 16 << 20;

/// At most this many differing outputs are explained element by element (the rest are counted).
pub const EXPLAIN_MAX_OUTPUTS: usize = 8;

/// What one run left behind.
pub struct Collected {
    /// `(name, digest)` of every output, in the order the program wrote them: by the
    /// modification time of their file, then in natural order of names (within a file, or for
    /// files written in the same instant). For a script that dumps each step this is step order
    /// whatever the files are called, and it agrees with natural order for `step_2` /
    /// `step_10`.
    pub digests: Vec<(String, Digest)>,
    /// `.bitexact-platform.json`, when the program wrote one.
    pub platform: Option<serde_json::Value>,
    /// `.bitexact-memory.jsonl`, in step order.
    pub steps: Vec<StepMemory>,
}

/// Collects the outputs under `out` (and `stdout`, when compared). A malformed tensor file is
/// an error naming it.
pub fn collect(out: &Path, stdout: Option<&Path>) -> Result<Collected> {
    let mut digests = tensor_files::digest_dir(out)?;
    let files = tensor_files::scan(out)?;
    let written = |name: &str| {
        file_of(&files, name).and_then(|f| std::fs::metadata(&f.path).ok()?.modified().ok())
    };
    let mut keyed: Vec<_> = digests
        .drain(..)
        .map(|(n, d)| (written(&n), n, d))
        .collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| natural_cmp(&a.1, &b.1)));
    digests = keyed.into_iter().map(|(_, n, d)| (n, d)).collect();
    if let Some(path) = stdout {
        // Hashed from the mapped file as a raw output: memory stays bounded however much the
        // program printed.
        let file = tensor_files::OutputFile::new(STDOUT_NAME, path)?;
        let (_, d) = tensor_files::digest_file(&file)?.remove(0);
        digests.push((STDOUT_NAME.to_string(), d));
    }
    let mut platform = None;
    let mut steps = Vec::new();
    for f in tensor_files::metadata_files(out)? {
        let read = || -> Result<String> {
            let bytes = crate::atomic::read_regular(&f.path, METADATA_MAX_BYTES)?;
            String::from_utf8(bytes).map_err(|_| anyhow!("{}: not UTF-8", f.name))
        };
        if f.name == ".bitexact-platform.json" {
            let text = read()?;
            platform = Some(
                serde_json::from_str(&text).map_err(|e| anyhow!("{}: not JSON: {e}", f.name))?,
            );
        } else if f.name == ".bitexact-memory.jsonl" {
            for (i, line) in read()?.lines().enumerate() {
                if line.trim().is_empty() {
                    continue;
                }
                let s: StepMemory = serde_json::from_str(line)
                    .map_err(|e| anyhow!("{} line {}: {e}", f.name, i + 1))?;
                steps.push(s);
            }
        }
    }
    steps.sort_by_key(|s| s.step);
    Ok(Collected {
        digests,
        platform,
        steps,
    })
}

/// The names of two runs' outputs, in the earlier run's write order, then the later run's
/// extra names.
fn union<'a>(a: &'a [(String, Digest)], b: &'a [(String, Digest)]) -> Vec<&'a String> {
    let mut names: Vec<&String> = a.iter().map(|(n, _)| n).collect();
    let seen: std::collections::BTreeSet<&String> = names.iter().copied().collect();
    names.extend(b.iter().map(|(n, _)| n).filter(|n| !seen.contains(n)));
    names
}

/// The file that holds output `name` (`path` or `path:key`).
fn file_of<'a>(
    files: &'a [tensor_files::OutputFile],
    name: &str,
) -> Option<&'a tensor_files::OutputFile> {
    files.iter().find(|f| {
        name == f.name
            || name
                .strip_prefix(f.name.as_str())
                .is_some_and(|k| k.starts_with(':'))
    })
}

/// The first output, in the order the earlier run wrote them (see [`Collected::digests`]),
/// whose digest differs between two runs or that only one of them wrote; every output before
/// it is identical.
pub fn first_divergence(a: &[(String, Digest)], b: &[(String, Digest)]) -> Option<Divergence> {
    let names = union(a, b);
    let get = |v: &[(String, Digest)], n: &str| v.iter().find(|(k, _)| k == n).map(|(_, d)| *d);
    names.into_iter().enumerate().find_map(|(i, n)| {
        let (x, y) = (get(a, n), get(b, n));
        (x != y).then(|| Divergence {
            call: i,
            op: n.clone(),
            inputs_matched: true,
            explanation: format!(
                "first divergence: {n}{} (every earlier output identical)",
                match (x, y) {
                    (Some(_), None) => " (missing in the later run)",
                    (None, Some(_)) => " (missing in the earlier run)",
                    _ => "",
                }
            ),
        })
    })
}

/// A run's output directory and captured standard output, for explanations.
pub struct RunFiles<'a> {
    /// The run's index.
    pub index: usize,
    /// Its `$BITEXACT_OUT`.
    pub out: &'a Path,
    /// Its captured standard output, when compared.
    pub stdout: Option<PathBuf>,
}

/// Explains each output that differs between runs `a` and `b` (at most
/// [`EXPLAIN_MAX_OUTPUTS`], in write order).
pub fn explain(
    a: (&RunFiles, &[(String, Digest)]),
    b: (&RunFiles, &[(String, Digest)]),
) -> Vec<TensorDiff> {
    let runs = [a.0.index, b.0.index];
    let names = union(a.1, b.1);
    let get = |v: &[(String, Digest)], n: &str| v.iter().find(|(k, _)| k == n).map(|(_, d)| *d);
    let differing: Vec<&String> = names
        .into_iter()
        .filter(|n| get(a.1, n) != get(b.1, n))
        .collect();
    let mut out: Vec<TensorDiff> = differing
        .iter()
        .take(EXPLAIN_MAX_OUTPUTS)
        .map(|n| match (get(a.1, n), get(b.1, n)) {
            (Some(_), None) => diff::missing(n, runs, true),
            (None, Some(_)) => diff::missing(n, runs, false),
            _ => match (load(a.0, n), load(b.0, n)) {
                (Ok(x), Ok(y)) => diff::explain(n, runs, &x, &y),
                (Err(e), _) | (_, Err(e)) => {
                    let mut d = diff::missing(n, runs, true);
                    d.note = Some(format!(
                        "digests differ; not explained element by element: {e:#}"
                    ));
                    d
                }
            },
        })
        .collect();
    if differing.len() > EXPLAIN_MAX_OUTPUTS {
        let mut d = diff::missing("…", runs, true);
        d.note = Some(format!(
            "{} more differing outputs not shown",
            differing.len() - EXPLAIN_MAX_OUTPUTS
        ));
        out.push(d);
    }
    out
}

/// Loads output `name` of a run, unless its file is too large to load.
fn load(run: &RunFiles, name: &str) -> Result<Tensor> {
    if name == STDOUT_NAME {
        let path = run.stdout.as_ref().ok_or_else(|| anyhow!("no stdout"))?;
        let bytes = crate::atomic::read_regular(path, EXPLAIN_MAX_BYTES)?;
        return Ok(Tensor::from_slice(&[bytes.len()], &bytes));
    }
    let files = tensor_files::scan(run.out)?;
    let file = file_of(&files, name).ok_or_else(|| anyhow!("{name}: file not found"))?;
    if file.len > EXPLAIN_MAX_BYTES {
        return Err(anyhow!(
            "{} is {} bytes, over the {} MiB explained in memory",
            file.name,
            file.len,
            EXPLAIN_MAX_BYTES >> 20
        ));
    }
    tensor_files::load(file, name)
}

/// The first line where two captured standard outputs differ, in words.
pub fn first_differing_line(a: &Path, b: &Path) -> Option<String> {
    let read = |p| crate::atomic::read_regular(p, EXPLAIN_MAX_BYTES).ok();
    let (x, y) = (read(a)?, read(b)?);
    let (x, y) = (String::from_utf8_lossy(&x), String::from_utf8_lossy(&y));
    let (mut lx, mut ly) = (x.lines(), y.lines());
    for n in 1.. {
        match (lx.next(), ly.next()) {
            (None, None) => return None,
            (p, q) if p == q => continue,
            (p, q) => {
                let cap = |s: Option<&str>| match s {
                    None => "(no line)".to_string(),
                    Some(s) if s.chars().count() > 120 => {
                        format!("{:?}…", s.chars().take(120).collect::<String>())
                    }
                    Some(s) => format!("{s:?}"),
                };
                return Some(format!(
                    "stdout: first differing line {n}: {} vs {}",
                    cap(p),
                    cap(q)
                ));
            }
        }
    }
    None
}
