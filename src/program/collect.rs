//! What a finished run left behind: the digest of every output under its `$BITEXACT_OUT`
//! (tensor files parsed, other files as raw bytes, in natural order of names), its standard
//! output when compared, and the Python helper's metadata (`.bitexact-platform.json`,
//! `.bitexact-memory.jsonl`), and loading one output back to explain a difference (the
//! harness compares and explains: [`crate::harness::explain`]).

use super::baseline::{Reuse, BASELINE_MIN_BYTES};
use crate::digest::Digest;
use crate::outcome::StepMemory;
use crate::tensor::Tensor;
use crate::tensor_files::{self, natural_cmp};
use anyhow::{anyhow, Result};
use std::collections::BTreeSet;
use std::path::Path;

/// The output name standard output is compared under (`--stdout`); no file can have it.
pub const STDOUT_NAME: &str = "<stdout>";

/// Outputs at most this large (bytes of the file holding them) are loaded to explain a
/// difference element by element; larger ones are named with their digests only, so
/// bitexact's memory stays bounded by the largest file.
pub const EXPLAIN_MAX_BYTES: u64 = 256 << 20;

/// Largest metadata file (`.bitexact-*`) read.
pub const METADATA_MAX_BYTES: u64 = 16 << 20;

/// What one run left behind.
pub struct RunOutputs {
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
    /// `.bitexact-state-rank<R>.jsonl` (`--vary resume`), every rank's, in the order written.
    pub state: Vec<crate::outcome::program::StateRecord>,
    /// The controls the program read through the helper (`.bitexact-controls.jsonl`), or
    /// `None` when it recorded none (it does not use the helper's control readers).
    pub controls_read: Option<BTreeSet<String>>,
    /// The op trace of every rank (`.bitexact-trace-rank<R>.jsonl`), when asked for and
    /// written (`--trace`).
    pub trace: Option<Vec<crate::trace::TraceEntry>>,
    /// The output files of at least [`BASELINE_MIN_BYTES`] with their digests (what run 0
    /// publishes to the later runs: [`super::baseline`]).
    pub files: Vec<(tensor_files::OutputFile, Vec<(String, Digest)>)>,
    /// Files of a run stopped early that could not be read: it was killed while writing them
    /// (left out, as the outputs it never wrote are).
    pub unfinished: Vec<String>,
}

/// Collects the outputs under `out` (and `stdout`, when compared), and the op traces when
/// `traces`. A malformed tensor or trace file is an error naming it.
pub fn collect(
    out: &Path,
    stdout: Option<&Path>,
    (traces, stopped): (bool, bool),
    reuse: Reuse,
) -> Result<RunOutputs> {
    let collected = collect_reusing(out, stdout, (traces, stopped), reuse);
    // What the collection freed (the watcher's hashes, the scan) goes back to the system.
    crate::memory::release_free_heap();
    collected
}

fn collect_reusing(
    out: &Path,
    stdout: Option<&Path>,
    (traces, stopped): (bool, bool),
    mut reuse: Reuse,
) -> Result<RunOutputs> {
    // One walk: every file with the time it was written, then its digests: the watcher's when
    // it hashed the file as it is now (same size and time, after its last completion), else
    // run 0's when the file holds the same bytes as run 0's, else hashed now.
    let (files, metadata) = tensor_files::scan_all(out)?;
    let known = reuse.known(&files);
    drop(reuse);
    let mut unfinished = Vec::new();
    let mut per_file =
        tensor_files::digest_files_reusing(&files, known, stopped.then_some(&mut unfinished))?;
    // The scan is let go before the digests are listed: each file's time is all that is left
    // to order them, except for the files run 0 publishes.
    let mut modified = Vec::with_capacity(files.len());
    let mut published = Vec::new();
    for (f, ds) in files.into_iter().zip(&per_file) {
        modified.push(f.modified);
        if f.len >= BASELINE_MIN_BYTES {
            published.push((f, ds.clone()));
        }
    }
    // Sorted as places (file, output), so that each name is moved once into `digests`: a run
    // of 100 000 outputs holds no other copy of their names.
    let mut order: Vec<(usize, usize)> = (per_file.iter().enumerate())
        .flat_map(|(i, ds)| (0..ds.len()).map(move |j| (i, j)))
        .collect();
    order.sort_unstable_by(|&(i, j), &(k, l)| {
        let by_name = || natural_cmp(&per_file[i][j].0, &per_file[k][l].0);
        modified[i].cmp(&modified[k]).then_with(by_name)
    });
    let mut digests: Vec<(String, Digest)> = Vec::with_capacity(order.len() + 1);
    for (i, j) in order {
        let (n, d) = &mut per_file[i][j];
        digests.push((std::mem::take(n), *d));
    }
    drop(per_file);
    if let Some(path) = stdout {
        // Hashed from the mapped file as a raw output: memory stays bounded however much the
        // program printed.
        let file = tensor_files::OutputFile::new(STDOUT_NAME, path)?;
        let (_, d) = tensor_files::digest_file(&file)?.remove(0);
        digests.push((STDOUT_NAME.to_string(), d));
    }
    let mut platform = None;
    let mut steps = Vec::new();
    let mut state = Vec::new();
    let mut controls_read = None;
    let mut trace_files = Vec::new();
    for f in metadata {
        // A rank of a distributed run keeps its metadata under `rank<R>/`: read by base
        // name; memory and platform from the first file in name order (rank 0).
        let base = f.name.rsplit('/').next().unwrap_or(&f.name);
        let read = || -> Result<String> {
            let bytes = crate::atomic::read_regular(&f.path, METADATA_MAX_BYTES)?;
            String::from_utf8(bytes).map_err(|_| anyhow!("{}: not UTF-8", f.name))
        };
        if base == crate::protocol::PLATFORM_FILE && platform.is_none() {
            let text = read()?;
            platform = Some(
                serde_json::from_str(&text).map_err(|e| anyhow!("{}: not JSON: {e}", f.name))?,
            );
        } else if base == crate::protocol::CONTROLS_FILE {
            let read_now = read_controls(&read()?);
            controls_read
                .get_or_insert_with(BTreeSet::new)
                .extend(read_now);
        } else if base == crate::protocol::MEMORY_FILE && steps.is_empty() {
            for (i, line) in read()?.lines().enumerate() {
                if line.trim().is_empty() {
                    continue;
                }
                let s: StepMemory = serde_json::from_str(line)
                    .map_err(|e| anyhow!("{} line {}: {e}", f.name, i + 1))?;
                steps.push(s);
            }
        } else if base.starts_with(crate::protocol::STATE_FILE_PREFIX) {
            // A line cut by a kill mid-write is not a record; the others still are.
            let text = read()?;
            state.extend(text.lines().filter_map(|l| serde_json::from_str(l).ok()));
        } else if let Some(rank) = crate::trace::program::rank_of(base).filter(|_| traces) {
            trace_files.push((rank, f.path.clone()));
        }
    }
    steps.sort_by_key(|s| s.step);
    Ok(RunOutputs {
        digests,
        platform,
        steps,
        state,
        controls_read,
        trace: crate::trace::program::read_ranks(trace_files)?,
        files: published,
        unfinished,
    })
}

/// The control names in a [`crate::protocol::CONTROLS_FILE`]; lines that are not such an object are skipped
/// (a line cut short by a killed writer must not hide the others).
fn read_controls(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v.get("control")?.as_str().map(str::to_string))
        .collect()
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

/// The canonical text of output `name` of the run that wrote into `out`, when it is a value
/// of a `torch.save` file (`None` for tensors and every other output).
pub fn load_value(out: &Path, name: &str) -> Result<Option<String>> {
    if name == STDOUT_NAME {
        return Ok(None);
    }
    let files = tensor_files::scan(out)?;
    match file_of(&files, name) {
        Some(f) if f.kind == tensor_files::FileKind::Torch && f.len <= EXPLAIN_MAX_BYTES => {
            tensor_files::load_value(f, name)
        }
        _ => Ok(None),
    }
}

/// Loads output `name` of the run that wrote into `out` (and `stdout`), unless its file is too
/// large to load.
pub fn load(out: &Path, stdout: Option<&Path>, name: &str) -> Result<Tensor> {
    if name == STDOUT_NAME {
        let path = stdout.ok_or_else(|| anyhow!("no stdout"))?;
        let bytes = crate::atomic::read_regular(path, EXPLAIN_MAX_BYTES)?;
        return Ok(Tensor::from_slice(&[bytes.len()], &bytes));
    }
    let files = tensor_files::scan(out)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stopped_run_leaves_out_the_file_it_was_killed_writing() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.bin"), b"whole").unwrap();
        // What a run killed inside `torch.save` leaves: the zip's first bytes only.
        std::fs::write(dir.path().join("b.pt"), b"PK\x03\x04\x14\x00").unwrap();
        let err = collect(dir.path(), None, (false, false), Reuse::default());
        assert!(err.is_err(), "an unreadable file fails a run that ended");
        let c = collect(dir.path(), None, (false, true), Reuse::default()).unwrap();
        assert_eq!(c.unfinished, ["b.pt"]);
        let names: Vec<&str> = c.digests.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["a.bin"]);
    }
}
