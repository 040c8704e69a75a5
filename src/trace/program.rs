//! Op traces of programs: the Python tracer's stream (`bitexact run --trace ops`; see
//! `python/bitexact/_trace/__init__.py`), one JSON object a line in
//! `$BITEXACT_OUT/.bitexact-trace-rank<R>.jsonl`, read into [`TraceEntry`] records:
//!
//! ```text
//! {"v": 4, "step": 0, "rank": 0, "phase": "forward", "module": "Net.fc1", "op": "aten::addmm",
//!  "src": "train.py:42", "in": ["f32[64,10]:<digest>"], "out": ["f32[64,10]:<digest>"]}
//! ```
//!
//! A record of a thread other than the one that started tracing also has `"thread":
//! "ema_loop#0"` ([`super::streams`]); lines without it (all lines of older traces) are the
//! main thread's.
//!
//! Optional fields (records of older tracers lack them): `"args": "eps=1e-05"`, the op's
//! non-tensor arguments, and `"sk": ["<sketch>", …]`, a float64 sketch of each result
//! ([`super::sketch`]; `""` for a result without one). Both serve [`super::noise`].
//!
//! Each tensor label is `dtype[shape]:<fingerprint>` (`:-` when not hashed): from version 4 on,
//! the 128-bit trace fingerprint (`docs/concepts/fingerprint.md`), in versions 2 and 3 the first
//! 32 hex digits of the canonical SHA-256. The two never compare ([`Labels`]): a trace mixing
//! them is an error, and [`same_labels`] says whether two traces can be compared. In the larger-batch
//! run of `--vary batch` (`$BITEXACT_TRACE_ROWS` = n), a tensor whose first dimension is a
//! multiple of n is labelled by its n row slices' digests instead,
//! `dtype[shape]/n:<d1>,...,<dn>` ([`super::batch`] parses and aligns them).
//!
//! Version 4 of the trace schema (version 1 is the built-in cases' trace file). Version 2
//! records also carry `"occ"`, the tracer's occurrence number: they are read, and the number
//! ignored (a record's occurrence is counted here, from the order of the records).

use super::kernels::Kernel;
use super::TraceEntry;
use anyhow::{anyhow, bail, Context, Result};
use serde::Deserialize;
use std::io::BufRead;
use std::path::Path;

/// The schema version of a program trace line, as the tracer writes it.
pub use crate::protocol::TRACE_RECORD_VERSION as VERSION;

/// The oldest schema version read: version 2 records also carry `"occ"`, which is ignored.
const OLDEST_VERSION: u32 = 2;

/// Most records read from one trace (a bound on memory; the rest is reported as cut).
pub const MAX_RECORDS: usize = 20_000_000;

/// The output name under which a traced run's op stream is compared (one digest over every
/// record), so a script that writes no file is still checked.
pub const OPS_NAME: &str = "<ops>";

/// How a report counts `trace`'s records: `57 op calls`, or `57 module records` for a
/// `--trace modules` trace ([`TraceEntry::is_module_trace`]), which holds no op calls.
pub fn count(trace: &[TraceEntry]) -> String {
    let what = match TraceEntry::is_module_trace(trace) {
        true => "module record",
        false => "op call",
    };
    match trace.len() {
        1 => format!("1 {what}"),
        n => format!("{n} {what}s"),
    }
}

/// One digest over every record of `trace` (all fields but the call position), stream by
/// stream ([`super::streams::canonical`]: how threads interleaved does not change it). A
/// record's thread is hashed only when it has one, so a trace of one thread digests as it did
/// before traces had threads.
pub fn digest(trace: &[TraceEntry]) -> crate::digest::Digest {
    use sha2::{Digest as _, Sha256};
    let mut h = Sha256::new();
    for e in super::streams::canonical(trace) {
        if !e.thread.is_empty() {
            h.update(b"thread");
            h.update((e.thread.len() as u64).to_le_bytes());
            h.update(e.thread.as_bytes());
        }
        let fields = [
            &e.rank.to_string(),
            &e.step.to_string(),
            &e.phase,
            &e.module,
            &e.op,
            &e.source,
            &e.inputs.join(";"),
            &e.output,
        ];
        for f in fields {
            h.update((f.len() as u64).to_le_bytes());
            h.update(f.as_bytes());
        }
    }
    crate::digest::Digest(h.finalize().into())
}

/// One line as the tracer writes it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    v: u32,
    step: u64,
    rank: u64,
    #[serde(default)]
    thread: String,
    phase: String,
    module: String,
    op: String,
    /// Version 2's occurrence number, ignored: [`super::streams::identities`] counts them.
    #[serde(default, rename = "occ")]
    _occ: serde::de::IgnoredAny,
    src: String,
    #[serde(rename = "in")]
    inputs: Vec<String>,
    out: Vec<String>,
    /// A module record's own state among its first inputs (version 6; by name from 8), its
    /// call number (7) and how many of its last inputs were labelled after its forward (8).
    #[serde(default)]
    own: Option<super::Own>,
    #[serde(default)]
    entered: Option<usize>,
    #[serde(default)]
    late: usize,
    #[serde(default)]
    args: String,
    #[serde(default)]
    sk: Vec<String>,
    #[serde(default)]
    gen: String,
    /// A compiled region's kernel record ([`super::kernels`]).
    #[serde(default)]
    kernel: Option<KernelLine>,
}

/// The `"kernel"` field of a kernel record.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KernelLine {
    #[serde(default)]
    fuses: Vec<String>,
    #[serde(default)]
    at: Vec<String>,
    #[serde(default)]
    reduction: bool,
}

/// Ops that tracers before 2026-11-26 recorded and today's does not (`python/bitexact/_trace/__init__.py`,
/// `_SAME_BYTES`): records of them in an older trace are dropped when it is read, so it lines
/// up with a newer one instead of showing diverging control flow. `aten::_unsafe_view` returns
/// its input's bytes under another shape: no new data, like a view.
pub const NOT_RECORDED: &[&str] = &["aten::_unsafe_view"];

/// What a trace's records hold: how tensors are labelled after the dtype and shape, and which
/// tensors an in-place op's inputs list. Traces of two kinds never compare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Labels {
    /// The first 32 hex digits of the canonical SHA-256 (record versions 2 and 3).
    Sha256Prefix,
    /// The 128-bit trace fingerprint, an in-place op's written tensor a result only (version
    /// 4).
    Fingerprint,
    /// The 128-bit trace fingerprint, an in-place op's written tensor also its first input, as
    /// it was before the op (version 5 on).
    FingerprintReadsWritten,
}

impl Labels {
    /// The labels of a record of version `v`.
    pub fn of_version(v: u32) -> Labels {
        if v < FINGERPRINT_VERSION {
            Labels::Sha256Prefix
        } else if v < READS_WRITTEN_VERSION {
            Labels::Fingerprint
        } else {
            Labels::FingerprintReadsWritten
        }
    }

    /// The record versions with these labels, as a reader says them.
    pub fn versions(self) -> String {
        match self {
            Labels::Sha256Prefix => "2 or 3 (SHA-256-prefix labels)".into(),
            Labels::Fingerprint => {
                "4 (fingerprint labels, in-place ops' inputs without the tensor they write)".into()
            }
            Labels::FingerprintReadsWritten => format!(
                "{READS_WRITTEN_VERSION} to {VERSION} (fingerprint labels, in-place ops' inputs \
                 with the tensor they write)"
            ),
        }
    }
}

/// The first record version whose labels are fingerprints.
pub const FINGERPRINT_VERSION: u32 = 4;

/// The first record version whose in-place ops list the tensor they write among their inputs.
pub const READS_WRITTEN_VERSION: u32 = 5;

/// In-place ops that read only part of the tensor they write (`python/bitexact/_trace/writes.py`,
/// `OVERWRITES`): the tracer does not list its value before the op as an input (the rest may
/// be memory never written), so their records hide a value they read.
const PARTIAL_WRITES: &[&str] = &[
    "aten::index_put_",
    "aten::_index_put_impl_",
    "aten::index_fill_",
    "aten::index_copy_",
    "aten::index_reduce_",
    "aten::masked_fill_",
    "aten::masked_scatter_",
    "aten::scatter_",
    "aten::scatter_reduce_",
    "aten::put_",
];

/// Whether a record of version `v` of `op` hides a value the op read: the tensor an in-place
/// op wrote, as it was before ([`super::noise::in_place`]), which records before version 5
/// leave out, and which partial writes (`PARTIAL_WRITES`) leave out still.
pub fn hides_what_it_overwrote(op: &str, v: u32) -> bool {
    super::noise::in_place(op)
        && (v < READS_WRITTEN_VERSION
            || PARTIAL_WRITES.contains(&op.split('.').next().unwrap_or(op)))
}

/// A trace as read, with what its labels hold (`None`: no record).
#[derive(Debug)]
pub struct Read {
    /// Its records.
    pub entries: Vec<TraceEntry>,
    /// Its labels' kind.
    pub labels: Option<Labels>,
}

/// An error unless two traces' labels can be compared: a trace of version 2 or 3
/// (SHA-256-prefix labels) against one of version 4 (fingerprints) would show every tensor as
/// differing. The error names both traces and their versions.
pub fn same_labels(a: (&Path, Option<Labels>), b: (&Path, Option<Labels>)) -> Result<()> {
    match (a.1, b.1) {
        (Some(x), Some(y)) if x != y => bail!(
            "{} is a trace of record version {} and {} one of version {}: their tensor labels \
             are computed differently and cannot be compared; record both with the same \
             bitexact version",
            a.0.display(),
            x.versions(),
            b.0.display(),
            y.versions()
        ),
        _ => Ok(()),
    }
}

/// An error when a record of version `v` does not label tensors as the records before it
/// (`labels`, set by the first).
fn same_kind(labels: &mut Option<Labels>, v: u32) -> Result<()> {
    let kind = Labels::of_version(v);
    let first = *labels.get_or_insert(kind);
    if first != kind {
        bail!(
            "a record of version {v} after records of version {}",
            first.versions()
        );
    }
    Ok(())
}

/// Reads a rank's trace. A last line cut short (a run killed mid-write) is dropped when a
/// whole record came before it; any other malformed line is an error naming the file and line. Records of [`NOT_RECORDED`] ops are
/// dropped.
pub fn read_jsonl(path: &Path) -> Result<Vec<TraceEntry>> {
    Ok(read_jsonl_labelled(path)?.entries)
}

/// [`read_jsonl`], with the kind of the trace's labels; records of both kinds in one trace are
/// an error.
pub fn read_jsonl_labelled(path: &Path) -> Result<Read> {
    let file = std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let mut lines = std::io::BufReader::new(file).lines().peekable();
    let mut out = Vec::new();
    let mut labels = None;
    // Kernel records waiting for their region's record, by thread (see super::kernels).
    let mut kernels: std::collections::HashMap<String, Vec<Kernel>> = Default::default();
    let mut n = 0;
    while let Some(line) = lines.next() {
        n += 1;
        let line = line.with_context(|| format!("reading {}", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let mut parsed: Line = match serde_json::from_str(&line) {
            Ok(l) => l,
            // Cut short by the end of the run, after a whole record: a file whose only line is
            // not a record is not a trace (`diff-trace` of it said "identical").
            Err(_) if lines.peek().is_none() && labels.is_some() => break,
            Err(e) => {
                return Err(anyhow!(
                    "{} line {n}: not a bitexact op trace record: {e}",
                    path.display()
                ))
            }
        };
        if !(OLDEST_VERSION..=VERSION).contains(&parsed.v) {
            bail!(
                "{} line {n}: trace version {} (this build reads {OLDEST_VERSION} to {VERSION})",
                path.display(),
                parsed.v
            );
        }
        same_kind(&mut labels, parsed.v)
            .map_err(|e| anyhow!("{} line {n}: {e}", path.display()))?;
        if NOT_RECORDED.contains(&parsed.op.as_str()) {
            continue;
        }
        if out.len() == MAX_RECORDS {
            bail!("{}: more than {MAX_RECORDS} op records", path.display());
        }
        let kernel = parsed.kernel.take();
        let v = parsed.v;
        let mut entry = entry(parsed, out.len());
        entry.hides_read = hides_what_it_overwrote(&entry.op, v)
            || entry.inputs.iter().any(|label| label.ends_with(":-"));
        if let Some(k) = kernel {
            let waiting = kernels.entry(entry.thread.clone()).or_default();
            if waiting.len() == MAX_RECORDS {
                bail!("{}: more than {MAX_RECORDS} kernel records", path.display());
            }
            waiting.push(Kernel {
                record: entry,
                fuses: k.fuses,
                at: k.at,
                reduction: k.reduction,
            });
            continue;
        }
        if let Some(waiting) = kernels.remove(&entry.thread) {
            if entry.op.starts_with("compiled ") {
                entry.kernels = waiting;
            }
        }
        out.push(entry);
    }
    Ok(Read {
        entries: out,
        labels,
    })
}

/// The record a parsed line holds, at position `call`.
fn entry(parsed: Line, call: usize) -> TraceEntry {
    TraceEntry {
        call,
        op: parsed.op,
        algorithm: String::new(),
        inputs: parsed.inputs,
        output: parsed.out.join(";"),
        step: parsed.step,
        rank: parsed.rank,
        thread: parsed.thread,
        phase: parsed.phase,
        module: parsed.module,
        source: parsed.src,
        args: parsed.args,
        own: parsed.own,
        entered: parsed.entered,
        late: parsed.late,
        sketches: parsed.sk,
        generator: parsed.gen,
        kernels: Vec::new(),
        hides_read: false,
    }
}

/// The rank `R` of a trace file named `.bitexact-trace-rank<R>.jsonl`.
pub fn rank_of(name: &str) -> Option<u64> {
    name.strip_prefix(crate::protocol::TRACE_FILE_PREFIX)?
        .strip_suffix(".jsonl")?
        .parse()
        .ok()
}

/// The traces of `(rank, file)` pairs, concatenated in rank order (each record's `call` is its
/// position in the whole); `None` when there is none. Two files of one rank are an error.
pub fn read_ranks(files: Vec<(u64, std::path::PathBuf)>) -> Result<Option<Vec<TraceEntry>>> {
    Ok(read_ranks_labelled(files)?.map(|r| r.entries))
}

/// [`read_ranks`], with the kind of the traces' labels: ranks whose labels differ are an error.
pub fn read_ranks_labelled(mut files: Vec<(u64, std::path::PathBuf)>) -> Result<Option<Read>> {
    if files.is_empty() {
        return Ok(None);
    }
    files.sort();
    if let Some(w) = files.windows(2).find(|w| w[0].0 == w[1].0) {
        bail!(
            "two op traces of rank {}: {} and {}",
            w[0].0,
            w[0].1.display(),
            w[1].1.display()
        );
    }
    let mut all = Vec::new();
    let mut labels: Option<(Labels, &Path)> = None;
    for (_, f) in &files {
        let read = read_jsonl_labelled(f)?;
        if let (Some(mine), Some((first, at))) = (read.labels, labels) {
            same_labels((at, Some(first)), (f, Some(mine)))?;
        }
        labels = labels.or(read.labels.map(|l| (l, f.as_path())));
        all.extend(read.entries);
    }
    for (i, e) in all.iter_mut().enumerate() {
        e.call = i;
    }
    Ok(Some(Read {
        entries: all,
        labels: labels.map(|l| l.0),
    }))
}

/// The traces of every rank under `dir` (`.bitexact-trace-rank<R>.jsonl`, in `dir` or in its
/// subdirectories up to [`MAX_DEPTH`] levels down: a run's `rank<R>/`, or one directory per
/// node of a multi-node job gathered into one), concatenated in rank order; `None` when there
/// is none. Two traces of one rank are an error (point at one run, not a `--keep` directory
/// of several). Symbolic links are not followed.
pub fn read_dir(dir: &Path) -> Result<Option<Vec<TraceEntry>>> {
    Ok(read_dir_labelled(dir)?.map(|r| r.entries))
}

/// [`read_dir`], with the kind of the traces' labels.
pub fn read_dir_labelled(dir: &Path) -> Result<Option<Read>> {
    let mut files = Vec::new();
    let mut todo = vec![(dir.to_path_buf(), 0)];
    while let Some((d, depth)) = todo.pop() {
        for e in std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
            let e = e?;
            let ty = e.file_type()?;
            if ty.is_dir() && depth < MAX_DEPTH {
                todo.push((e.path(), depth + 1));
            } else if let (Some(rank), true) =
                (rank_of(&e.file_name().to_string_lossy()), ty.is_file())
            {
                files.push((rank, e.path()));
            }
        }
    }
    read_ranks_labelled(files)
}

/// How deep [`read_dir`] looks for rank traces below the directory it is given.
pub const MAX_DEPTH: usize = 3;

#[cfg(test)]
#[path = "program_tests.rs"]
mod tests;
