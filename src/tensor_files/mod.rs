//! Tensor files a program wrote into its output directory (`$BITEXACT_OUT` in run mode):
//! `*.safetensors`, `*.npy`, `*.npz` and `torch.save`'s `*.pt` / `*.pth` (read without
//! executing pickle: see `torch.rs`) are parsed into tensors, any other file is one raw
//! `u8` tensor of shape `[len]`. Files whose name starts with [`crate::protocol::METADATA_PREFIX`] are the
//! Python helper's metadata, never outputs (`metadata_files` lists them).
//!
//! * **Names**: the path relative to the directory with `/` separators, plus `:key` for each
//!   tensor of a safetensors file or entry of an npz (`step_3.safetensors:fc1.weight`,
//!   `stats.npz:mean`, the `.npy` suffix of npz keys dropped as numpy does; the path inside
//!   a `torch.save` object, `ckpt.pt:model.fc1.weight`); an `.npy` or raw
//!   file is its path alone. Everything is ordered by `natural_cmp` (`step_2` < `step_10`).
//! * **Digests** are the canonical [`crate::digest::digest_parts`] of each tensor, so the same values
//!   digest the same whether numpy, safetensors or a Rust [`Tensor`](crate::tensor::Tensor) produced them.
//! * **Zero-copy**: files are memory-mapped (`memmap2`) and little-endian row-major data is
//!   hashed in place (chunked, in parallel). Big-endian or Fortran-order `.npy` data is
//!   converted to canonical order first (a copy); compressed npz entries are inflated as a
//!   stream. A file that another process truncates while it is mapped can kill the process
//!   (SIGBUS): outputs are read after the program that wrote them has exited.
//! * **Dtypes**: safetensors BOOL, U8, I8, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64,
//!   F8_E4M3, F8_E5M2; numpy `b1 i1 u1 i2 u2 i4 u4 i8 u8 f2 f4 f8` in either byte order, and
//!   `c8` / `c16` as their real view (`torch.view_as_real`: `f32` / `f64` with a trailing
//!   dimension of 2). Others (F4, F6, F8_E8M0, FNUZ fp8, C64 in safetensors; long double,
//!   strings, objects, datetimes, structured arrays in numpy) are errors naming dtype and file.
//! * **Errors**: a malformed or truncated file is an error naming the file and what is wrong
//!   (`step_0003.safetensors: header length 1000000000000 exceeds file size 4096`); no size
//!   from a header is allocated before it is checked against the bytes really there.
//!   safetensors `__metadata__` is not compared.

mod equal;
mod load;
mod natural;
mod npy;
mod npz;
mod pickle;
mod scan;
mod st;
mod torch;

pub use equal::{data_start, first_difference, same_bytes};
pub use load::{load, load_value};
pub use natural::natural_cmp;

use crate::digest::{chunk_digests_parts, digest_parts, Digest, CHUNK_BYTES};
use crate::tensor::DType;
use anyhow::{anyhow, bail, Result};
use rayon::prelude::*;
use std::borrow::Cow;
use std::io::Read;
use std::path::{Path, PathBuf};

/// How a file is read, from its extension (exact, lower-case).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// `*.safetensors`: one tensor per key.
    Safetensors,
    /// `*.npy`: one tensor.
    Npy,
    /// `*.npz`: one tensor per entry.
    Npz,
    /// `*.pt`, `*.pth` (`torch.save`): one tensor or value per leaf of the saved object.
    Torch,
    /// Anything else: the bytes as one `u8` tensor of shape `[len]`.
    Raw,
}

impl FileKind {
    /// The kind of a file called `name`.
    pub fn of(name: &str) -> FileKind {
        if name.ends_with(".safetensors") {
            FileKind::Safetensors
        } else if name.ends_with(".npy") {
            FileKind::Npy
        } else if name.ends_with(".npz") {
            FileKind::Npz
        } else if name.ends_with(".pt") || name.ends_with(".pth") {
            FileKind::Torch
        } else {
            FileKind::Raw
        }
    }
}

/// One file found by `scan`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputFile {
    /// Path relative to the scanned directory, `/`-separated.
    pub name: String,
    /// Where to read it (a symlink's resolved target).
    pub path: PathBuf,
    /// How it is parsed.
    pub kind: FileKind,
    /// Size in bytes when scanned.
    pub len: u64,
    /// Modification time when scanned (the order the program wrote its outputs).
    pub modified: Option<std::time::SystemTime>,
}

impl OutputFile {
    /// An output file for `path`, named `name` (kind from `name`'s extension).
    pub fn new(name: &str, path: &Path) -> Result<OutputFile> {
        let md = std::fs::metadata(path).map_err(|e| anyhow!("{name}: {e}"))?;
        Ok(OutputFile {
            name: name.to_string(),
            path: path.to_path_buf(),
            kind: FileKind::of(name),
            len: md.len(),
            modified: md.modified().ok(),
        })
    }

    /// The output name of the tensor stored under `key` in this file.
    fn tensor_name(&self, key: &Option<String>) -> String {
        match key {
            Some(k) => format!("{}:{k}", self.name),
            None => self.name.clone(),
        }
    }
}

/// Every output file under `dir`, recursively, in natural order of their names; `.bitexact-*`
/// metadata files left out. Symlinks to files inside `dir` are read under the link's name,
/// symlinked directories are not descended, symlinks out of `dir` (or dangling) are errors.
pub fn scan(dir: &Path) -> Result<Vec<OutputFile>> {
    Ok(scan::walk(dir)?.0)
}

/// The `.bitexact-*` metadata files under `dir` (what `scan` leaves out), in natural order.
pub fn metadata_files(dir: &Path) -> Result<Vec<OutputFile>> {
    Ok(scan::walk(dir)?.1)
}

/// `scan` and [`metadata_files`] in one walk: (outputs, metadata files).
pub fn scan_all(dir: &Path) -> Result<(Vec<OutputFile>, Vec<OutputFile>)> {
    scan::walk(dir)
}

/// Digests every tensor of every file in `files` (files in parallel), each file's digests in
/// natural order of names, in the order of `files`. Errors on two outputs with the same name
/// (e.g. a raw file literally named `a.npz:x` beside `a.npz` holding `x`).
pub fn digest_files(files: &[OutputFile]) -> Result<Vec<Vec<(String, Digest)>>> {
    digest_files_reusing(files, files.iter().map(|_| None).collect(), None)
}

/// [`digest_files`], taking a file's digests from `known` (one entry per file) instead when it
/// has them (run mode: what the output watcher already hashed, for a file unchanged since).
/// With `unfinished`, a file that cannot be read is not an error: its name goes there and it
/// has no outputs (a run stopped early, killed while it was writing that file).
pub fn digest_files_reusing(
    files: &[OutputFile],
    known: Vec<Option<Vec<(String, Digest)>>>,
    mut unfinished: Option<&mut Vec<String>>,
) -> Result<Vec<Vec<(String, Digest)>>> {
    let results: Vec<Result<Vec<(String, Digest)>>> = files
        .par_iter()
        .zip(known)
        .map(|(f, k)| k.map_or_else(|| digest_file(f), Ok))
        .collect();
    let mut per_file = Vec::with_capacity(results.len());
    for (f, r) in files.iter().zip(results) {
        match (r, unfinished.as_deref_mut()) {
            (Ok(ds), _) => per_file.push(ds),
            (Err(_), Some(names)) => {
                names.push(f.name.clone());
                per_file.push(Vec::new());
            }
            (Err(e), None) => return Err(e),
        }
    }
    let mut seen = std::collections::HashSet::new();
    for (n, _) in per_file.iter().flatten() {
        if !seen.insert(n.as_str()) {
            bail!("two outputs are both named {n:?}");
        }
    }
    Ok(per_file)
}

/// Digests every tensor in `file`, as `(name, digest)` in natural order of names. Data that is
/// little-endian row-major is hashed in place from the mapped file.
pub fn digest_file(file: &OutputFile) -> Result<Vec<(String, Digest)>> {
    digest_bytes_with(file, &map(file)?, &release)
}

/// [`digest_file`] of `file` whose content is `bytes` (read by the caller, e.g. from a file
/// another process may still truncate, which must not be mapped).
pub fn digest_bytes(file: &OutputFile, bytes: &[u8]) -> Result<Vec<(String, Digest)>> {
    digest_bytes_with(file, bytes, &|_| {})
}

/// [`digest_bytes`], calling `release` on each window of borrowed data once it is hashed
/// (see [`release`]; only for data mapped from a file).
fn digest_bytes_with(
    file: &OutputFile,
    bytes: &[u8],
    release: &(dyn Fn(&[u8]) + Sync),
) -> Result<Vec<(String, Digest)>> {
    let mut sink = DigestSink::default();
    read(file, bytes, &mut sink).map_err(|e| anyhow!("{}: {e:#}", file.name))?;
    let mut out: Vec<(String, Digest)> = sink
        .pending
        .into_par_iter()
        .map(|(k, v)| {
            let d = crate::digest::digest_parts_releasing(v.dtype, &v.shape, &v.data, release);
            (k, d)
        })
        .chain(sink.done)
        .map(|(k, d)| (file.tensor_name(&k), d))
        .collect();
    out.sort_by(|a, b| natural_cmp(&a.0, &b.0));
    Ok(out)
}

/// Drops the whole pages inside `bytes` (part of a read-only file mapping) from this process's
/// resident set once they are hashed; they are read again from the page cache if touched.
fn release(bytes: &[u8]) {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
    let start = (bytes.as_ptr() as usize).div_ceil(page) * page;
    let end = (bytes.as_ptr() as usize + bytes.len()) / page * page;
    if end > start {
        // SAFETY: the range lies inside a live read-only mapping; MADV_DONTNEED on such a
        // file mapping only drops pages, which later reads fault in again unchanged.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
    }
}

/// Digests every output under `dir` (`scan` then [`digest_file`] on each, files in
/// parallel), in natural order of names. Errors on two outputs with the same name (e.g. a raw
/// file literally named `a.npz:x` beside `a.npz` holding `x`).
pub fn digest_dir(dir: &Path) -> Result<Vec<(String, Digest)>> {
    let files = scan(dir)?;
    let mut out: Vec<_> = digest_files(&files)?.into_iter().flatten().collect();
    out.sort_by(|a, b| natural_cmp(&a.0, &b.0));
    Ok(out)
}

/// A tensor read from a file: dtype, shape and canonical bytes (borrowed when possible).
pub(crate) struct View<'a> {
    dtype: DType,
    shape: Vec<usize>,
    data: Cow<'a, [u8]>,
    /// A value's canonical text (torch.save files), compared as `u8` and explained as text.
    text: bool,
}

impl<'a> View<'a> {
    /// Checks that `data` fits dtype and shape (and bools are 0 or 1).
    pub(crate) fn new(dtype: DType, shape: Vec<usize>, data: Cow<'a, [u8]>) -> Result<View<'a>> {
        let need = shape
            .iter()
            .try_fold(dtype.size(), |a, &d| a.checked_mul(d));
        if need != Some(data.len()) {
            bail!("{} bytes of data for {dtype} {shape:?}", data.len());
        }
        if dtype == DType::Bool {
            if let Some(b) = data.iter().find(|&&b| b > 1) {
                bail!("bool tensor holds the byte {b} (only 0 and 1 are bools)");
            }
        }
        Ok(View {
            dtype,
            shape,
            data,
            text: false,
        })
    }

    /// A value's canonical text, as one `u8` tensor.
    pub(crate) fn text(text: String) -> View<'static> {
        View {
            dtype: DType::U8,
            shape: vec![text.len()],
            data: Cow::Owned(text.into_bytes()),
            text: true,
        }
    }

    /// The bytes as one `u8` tensor of shape `[len]`.
    pub(crate) fn raw(data: &'a [u8]) -> View<'a> {
        View {
            dtype: DType::U8,
            shape: vec![data.len()],
            data: Cow::Borrowed(data),
            text: false,
        }
    }

    /// The same view owning its bytes.
    pub(crate) fn into_owned(self) -> View<'static> {
        View {
            dtype: self.dtype,
            shape: self.shape,
            data: Cow::Owned(self.data.into_owned()),
            text: self.text,
        }
    }
}

/// Receives the tensors a reader finds; `key` is `None` for a whole-file tensor.
pub(crate) trait Sink<'a> {
    /// Whether the tensor under `key` is wanted (unwanted ones are not decoded).
    fn wants(&self, key: &str) -> bool;
    /// Takes one tensor.
    fn take(&mut self, key: Option<String>, view: View<'a>) -> Result<()>;
    /// Takes one tensor whose canonical bytes (exactly `len`) are read from `r`.
    fn stream(
        &mut self,
        key: String,
        dtype: DType,
        shape: Vec<usize>,
        len: usize,
        r: &mut dyn Read,
    ) -> Result<()> {
        let data = npz::read_up_to(r, len as u64)?;
        npz::short(data.len(), len)?;
        self.take(Some(key), View::new(dtype, shape, Cow::Owned(data))?)
    }
}

/// Collects digests: borrowed (mapped) views are hashed together in parallel at the end,
/// owned ones at once so their memory is freed.
#[derive(Default)]
struct DigestSink<'a> {
    pending: Vec<(Option<String>, View<'a>)>,
    done: Vec<(Option<String>, Digest)>,
}

impl<'a> Sink<'a> for DigestSink<'a> {
    fn wants(&self, _: &str) -> bool {
        true
    }
    fn take(&mut self, key: Option<String>, v: View<'a>) -> Result<()> {
        match v.data {
            Cow::Borrowed(_) => self.pending.push((key, v)),
            Cow::Owned(_) => {
                let d = digest_parts(v.dtype, &v.shape, &v.data);
                self.done.push((key, d));
            }
        }
        Ok(())
    }
    fn stream(
        &mut self,
        key: String,
        dtype: DType,
        shape: Vec<usize>,
        len: usize,
        r: &mut dyn Read,
    ) -> Result<()> {
        let d = stream_digest(dtype, &shape, len, r)?;
        self.done.push((Some(key), d));
        Ok(())
    }
}

/// The canonical digest of `len` bytes read from `r`, holding at most 32 chunks at a time (two
/// groups of [`crate::sha_lanes`], one for each of two threads).
fn stream_digest(dtype: DType, shape: &[usize], len: usize, r: &mut dyn Read) -> Result<Digest> {
    if len <= CHUNK_BYTES {
        let data = npz::read_up_to(r, len as u64)?;
        npz::short(data.len(), len)?;
        return Ok(digest_parts(dtype, shape, &data));
    }
    let mut buf = Vec::new();
    // Grows with the data read, not with the length a header claims.
    let mut chunks = Vec::with_capacity(len.div_ceil(CHUNK_BYTES).min(1 << 16));
    let mut left = len;
    while left > 0 {
        let n = left.min(32 * CHUNK_BYTES);
        buf.clear();
        r.take(n as u64).read_to_end(&mut buf)?;
        if buf.len() < n {
            npz::short(len - left + buf.len(), len)?;
        }
        chunks.extend(crate::sha_lanes::chunk_digests(&buf, CHUNK_BYTES));
        left -= n;
    }
    Ok(chunk_digests_parts(dtype, shape, &chunks))
}

/// Parses `bytes` (the content of `file`) into `sink`.
fn read<'a>(file: &OutputFile, bytes: &'a [u8], sink: &mut dyn Sink<'a>) -> Result<()> {
    match file.kind {
        FileKind::Safetensors => st::read(bytes, sink),
        FileKind::Npz => npz::read(bytes, sink),
        FileKind::Torch => torch::read(bytes, sink),
        FileKind::Npy => sink.take(None, npy::parse(bytes)?),
        FileKind::Raw => sink.take(None, View::raw(bytes)),
    }
}

/// A file's bytes, memory-mapped (empty files are not mapped).
enum Mapped {
    Empty,
    Map(memmap2::Mmap),
}

impl std::ops::Deref for Mapped {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Mapped::Empty => &[],
            Mapped::Map(m) => m,
        }
    }
}

fn map(file: &OutputFile) -> Result<Mapped> {
    let f = std::fs::File::open(&file.path).map_err(|e| anyhow!("{}: {e}", file.name))?;
    map_open(&f).map_err(|e| anyhow!("{}: {e}", file.name))
}

/// Maps the open file `f` read-only (an empty file is not mapped).
fn map_open(f: &std::fs::File) -> Result<Mapped> {
    if f.metadata()?.len() == 0 {
        return Ok(Mapped::Empty);
    }
    // SAFETY: the mapping is read-only and lives as long as the borrow of it; the file is a
    // finished run's output. Truncation by another process would fault (documented above).
    let m = unsafe { memmap2::Mmap::map(f) }.map_err(|e| anyhow!("mmap: {e}"))?;
    Ok(Mapped::Map(m))
}

#[cfg(test)]
mod tests;
