//! `bitexact._native`, the Python package's native module, built by maturin from
//! `python/pyproject.toml` (whose `manifest-path` names this crate). The bindings live in their
//! own crate, as polars keeps `py-polars` beside its core, so the `bitexact` crate has no PyO3
//! in its dependency tree. They are a thin face of the `bitexact` library, never a second
//! implementation:
//! - `main`: the whole `bitexact` command line ([`bitexact::cli::main`]), behind the package's
//!   console script, so `pip install` puts the same command on PATH. Children that re-run the
//!   command line (`--isolate`, `--vary process`) start as `python -m bitexact __child`.
//! - `digest_ptr` / `digests_ptr`: the canonical digest ([`bitexact::digest::digest_parts`],
//!   chunked and parallel with rayon) of host memory the Python side hands over as an address
//!   and a length (numpy's `__array_interface__`, torch's `data_ptr()`), with the GIL
//!   released and no copy.
//! - `digest_bytes`: the same over a `bytes` object.
//! - `trace::trace_digests`: an op's tensors for the op tracer, labelled as trace records
//!   show them, with a cache of digests checked against the bytes (see `trace`).
//! - `trace_writer::TraceWriter`: the op tracer's trace file, written in order by a
//!   background thread that also hashes the records' tensors (see `trace_writer`), and
//!   `trace_hold::Held`: tensors' digests taken before an op writes them in place, for its
//!   record.
//! - `trace_lane::Lane`: the op tracer's fast lanes, one native call per record of its
//!   commonest ops and of `--trace modules` (see `trace_lane`; their text: `trace_line`; their
//!   last step, the line queued: `trace_queue`).
//! - `pytest`: what the pytest plugin needs: `bitexact run` returning its report, the
//!   explanation of two tensors, run digests and the snapshot assertion of `cargo test`.
//! - `cuda_status` / `digest_cuda_ptr`: the same digest of device memory, chunks hashed by
//!   the SHA-256 kernel on the GPU ([`bitexact::backend::cuda`]), where a CUDA device is usable.
//! - `trace_fingerprint_sums_cuda`: trace fingerprints of device memory, one kernel launch for
//!   many tensors ([`bitexact::backend::cuda::fingerprint`]) into a buffer torch allocated.
//!
//! Each of them releases the GIL through `fork_safe::detached`, so that in a forked child
//! (a DataLoader worker) their parallel work runs in a thread pool of the child's own.
//!
//! The Python wrappers in `python/bitexact/_digest.py` keep the owning array or tensor alive
//! for the whole call and check contiguity, dtype and byte order before an address crosses
//! over; these functions check the length against dtype × shape.

use bitexact::digest::{self, Digest};
use bitexact::harness::Launcher;
use bitexact::DType;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use rayon::prelude::*;
use std::ffi::OsString;
use std::path::PathBuf;

mod copy_pool;
mod fork_safe;
mod pytest;
mod strided;
mod trace;
mod trace_hold;
mod trace_lane;
mod trace_line;
mod trace_queue;
mod trace_record;
mod trace_writer;

/// Counts heap bytes so `bitexact run` and `report` show peak memory per run, as the binary
/// does.
#[global_allocator]
static ALLOC: bitexact::memory::CountingAlloc = bitexact::memory::CountingAlloc;

/// The dtype named `name` (`f32`, `bf16`, `f8e4m3`, … as in reports).
fn dtype(name: &str) -> PyResult<DType> {
    DType::ALL
        .into_iter()
        .find(|d| d.name() == name)
        .ok_or_else(|| {
            let names: Vec<&str> = DType::ALL.iter().map(|d| d.name()).collect();
            PyValueError::new_err(format!(
                "unknown dtype {name:?} (one of: {})",
                names.join(", ")
            ))
        })
}

/// Checks that `nbytes` is exactly `shape`'s element count times the dtype's size.
fn expect_bytes(dtype: DType, shape: &[usize], nbytes: usize) -> PyResult<()> {
    let want = shape
        .iter()
        .try_fold(dtype.size(), |n, &d| n.checked_mul(d))
        .ok_or_else(|| PyValueError::new_err(format!("shape {shape:?} overflows")))?;
    if want != nbytes {
        return Err(PyValueError::new_err(format!(
            "{nbytes} bytes do not hold a {dtype} tensor of shape {shape:?} ({want} bytes)"
        )));
    }
    Ok(())
}

/// One host tensor handed over by address: the bytes at `ptr`, `nbytes` long, or a strided
/// view (the op tracer's non-contiguous tensors, [`strided`]): `strides` in elements and the
/// `span` of bytes they reach from `ptr`.
struct Host {
    ptr: usize,
    nbytes: usize,
    dtype: DType,
    shape: Vec<usize>,
    strides: Option<Vec<usize>>,
    span: usize,
}

/// A tensor as the tracer hands it over: `(ptr, nbytes, dtype, shape)`, or with its element
/// strides as a fifth item for a view that is not contiguous.
#[derive(FromPyObject)]
enum Item {
    Plain(usize, usize, PyBackedStr, Vec<usize>),
    Strided(usize, usize, PyBackedStr, Vec<usize>, Vec<usize>),
}

impl Host {
    fn new(ptr: usize, nbytes: usize, dtype_name: &str, shape: Vec<usize>) -> PyResult<Host> {
        Host::with_strides(ptr, nbytes, dtype_name, shape, None)
    }

    fn with_strides(
        ptr: usize,
        nbytes: usize,
        dtype_name: &str,
        shape: Vec<usize>,
        strides: Option<Vec<usize>>,
    ) -> PyResult<Host> {
        let dtype = dtype(dtype_name)?;
        expect_bytes(dtype, &shape, nbytes)?;
        let span = match &strides {
            None => nbytes,
            Some(s) if s.len() == shape.len() => strided::span(dtype.size(), &shape, s)
                .ok_or_else(|| PyValueError::new_err(format!("strides {s:?} overflow")))?,
            Some(s) => {
                return Err(PyValueError::new_err(format!(
                    "{} strides for a shape of {} dimensions",
                    s.len(),
                    shape.len()
                )))
            }
        };
        if ptr == 0 && span > 0 {
            return Err(PyValueError::new_err(
                "a null address with a non-empty length",
            ));
        }
        Ok(Host {
            ptr,
            nbytes,
            dtype,
            shape,
            strides,
            span,
        })
    }

    /// `(ptr, nbytes, dtype, shape)` tuples from Python, checked.
    fn all(items: Vec<(usize, usize, String, Vec<usize>)>) -> PyResult<Vec<Host>> {
        items
            .into_iter()
            .map(|(p, n, d, s)| Host::new(p, n, &d, s))
            .collect()
    }

    /// [`Item`]s from the tracer, checked.
    fn items(items: Vec<Item>) -> PyResult<Vec<Host>> {
        items.into_iter().map(Host::item).collect()
    }

    /// An [`Item`] from the tracer, checked.
    fn item(item: Item) -> PyResult<Host> {
        match item {
            Item::Plain(p, n, d, s) => Host::new(p, n, &d, s),
            Item::Strided(p, n, d, s, st) => Host::with_strides(p, n, &d, s, Some(st)),
        }
    }

    /// The bytes at the address: the tensor's, or all that a strided view spans (what the
    /// digest cache checks).
    fn data(&self) -> &[u8] {
        if self.span == 0 {
            &[]
        } else {
            // SAFETY: the caller (the package's `_digest.py`, `_trace/digest.py`) passes the
            // address of a host buffer holding `span` bytes (a contiguous tensor's, or all a
            // view's strides reach) that it keeps alive for the whole call and that nothing
            // writes meanwhile (documented on `digest_ptr`).
            unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.span) }
        }
    }

    /// Appends the tensor's canonical (row-major) bytes to `out`.
    fn values_into(&self, out: &mut Vec<u8>) {
        match &self.strides {
            None => out.extend_from_slice(self.data()),
            Some(s) => strided::gather_into(out, self.data(), self.dtype.size(), &self.shape, s),
        }
    }

    /// The tensor's canonical (row-major) bytes: its memory, or a strided view's gathered.
    fn values(&self) -> std::borrow::Cow<'_, [u8]> {
        match &self.strides {
            None => std::borrow::Cow::Borrowed(self.data()),
            Some(_) => {
                let mut out = Vec::new();
                self.values_into(&mut out);
                std::borrow::Cow::Owned(out)
            }
        }
    }

    fn digest(&self) -> Digest {
        digest::digest_parts(self.dtype, &self.shape, &self.values())
    }

    /// The trace fingerprint of the tensor's canonical bytes ([`bitexact::fingerprint`]): a
    /// strided view's gathered a block at a time, never copied whole.
    fn fingerprint_strided(&self) -> bitexact::fingerprint::Fingerprint {
        match &self.strides {
            None => bitexact::fingerprint::fingerprint(self.data()),
            Some(s) => strided::fingerprint(self.data(), self.dtype.size(), &self.shape, s),
        }
    }
}

/// Runs the `bitexact` command line with `argv` (the program name first) and returns its exit
/// code. `python` is the interpreter that children re-run the command line with
/// (`python -m bitexact __child`); `package` is this package's directory, which `bitexact run
/// --trace` gives the program's Python ([`bitexact::program::tracer`]). The GIL is released for the
/// whole run.
#[pyfunction]
#[pyo3(signature = (argv, python, package=None))]
fn main(py: Python<'_>, argv: Vec<OsString>, python: PathBuf, package: Option<PathBuf>) -> u8 {
    if let Some(dir) = package {
        bitexact::program::tracer::set_own_package(dir);
    }
    let me = Launcher::Command {
        program: python,
        args: vec!["-m".into(), "bitexact".into()],
    };
    fork_safe::detached(py, || bitexact::cli::main(argv, me))
}

/// The canonical hex digest of the `nbytes` bytes at address `ptr`, read as a `dtype` tensor
/// of `shape` (row-major, little-endian). Unsafe by contract: the buffer must stay alive and
/// unchanged for the call; use `bitexact.digest`, which guarantees it.
#[pyfunction]
fn digest_ptr(
    py: Python<'_>,
    ptr: usize,
    nbytes: usize,
    dtype: &str,
    shape: Vec<usize>,
) -> PyResult<String> {
    let t = Host::new(ptr, nbytes, dtype, shape)?;
    Ok(fork_safe::detached(py, || t.digest()).hex())
}

/// [`digest_ptr`] for many tensors at once, `(ptr, nbytes, dtype, shape)` each, hashed in
/// parallel with one release of the GIL; digests in the order given.
#[pyfunction]
fn digests_ptr(
    py: Python<'_>,
    items: Vec<(usize, usize, String, Vec<usize>)>,
) -> PyResult<Vec<String>> {
    let tensors = Host::all(items)?;
    // Small batches on this thread: waking the pool costs more than hashing them. Larger ones
    // in parallel, in jobs of about a chunk's worth of bytes each; large tensors are also
    // chunked in parallel inside `digest_parts`.
    let total: usize = tensors.iter().map(|t| t.nbytes).sum();
    if total <= digest::CHUNK_BYTES {
        return Ok(fork_safe::detached(py, || {
            tensors.iter().map(|t| t.digest().hex()).collect()
        }));
    }
    let per_job = (digest::CHUNK_BYTES * tensors.len() / total).max(1);
    Ok(fork_safe::detached(py, || {
        tensors
            .par_iter()
            .with_min_len(per_job)
            .map(|t| t.digest().hex())
            .collect()
    }))
}

/// Equality fingerprints of many host tensors, `(ptr, nbytes, dtype, shape)` each: the
/// XXH3-128 of the dtype's name, the shape and the bytes, as 32 hex digits, in the order given
/// (in parallel for large batches, one release of the GIL). Not the canonical digest: state
/// records (`--vary resume`) need equality between two runs of one program, not a digest that
/// matches files or other tools, and XXH3 reads memory about ten times faster than SHA-256.
/// Accidental collisions are negligible (2^-128 per pair); it is not meant to resist an
/// adversary. Unsafe by contract, as [`digest_ptr`].
#[pyfunction]
fn fingerprints_ptr(
    py: Python<'_>,
    items: Vec<(usize, usize, String, Vec<usize>)>,
) -> PyResult<Vec<String>> {
    let tensors = Host::all(items)?;
    let one = |t: &Host| {
        let mut h = twox_hash::XxHash3_128::new();
        h.write(t.dtype.name().as_bytes());
        for d in &t.shape {
            h.write(&(*d as u64).to_le_bytes());
        }
        h.write(t.data());
        format!("{:032x}", h.finish_128())
    };
    Ok(fork_safe::detached(py, || {
        tensors.par_iter().map(one).collect()
    }))
}

/// The canonical hex digest of a `bytes` object read as a `dtype` tensor of `shape`.
#[pyfunction]
fn digest_bytes(py: Python<'_>, data: &[u8], dtype: &str, shape: Vec<usize>) -> PyResult<String> {
    let d = self::dtype(dtype)?;
    expect_bytes(d, &shape, data.len())?;
    Ok(fork_safe::detached(py, || digest::digest_parts(d, &shape, data)).hex())
}

/// `None` when digests of CUDA memory can be computed on the device here, else the reason
/// they cannot (no driver, no device, no NVRTC), as `bitexact report` words it.
#[pyfunction]
fn cuda_status(py: Python<'_>) -> Option<String> {
    fork_safe::detached(py, || bitexact::backend::cuda::Gpu::get().err())
}

/// The canonical hex digest of `nbytes` bytes of device memory at `ptr` on CUDA device 0 (in
/// the primary context torch also uses), read as a `dtype` tensor of `shape`, hashed on
/// `stream` (torch's current stream, `torch.cuda.current_stream().cuda_stream`), so it runs
/// after the work queued there. Chunks are hashed by the SHA-256 kernel on the device; only the
/// 32-byte chunk digests come back.
#[pyfunction]
fn digest_cuda_ptr(
    py: Python<'_>,
    ptr: u64,
    nbytes: usize,
    dtype: &str,
    shape: Vec<usize>,
    stream: u64,
) -> PyResult<String> {
    let d = self::dtype(dtype)?;
    expect_bytes(d, &shape, nbytes)?;
    fork_safe::detached(py, || {
        bitexact::backend::cuda::ops::device_digest(ptr, nbytes, d, &shape, stream)
    })
    .map(|d| d.hex())
    .map_err(|e| PyRuntimeError::new_err(format!("{e:#}")))
}

/// Launches bitexact's fingerprint kernel on `stream` (torch's current stream of CUDA device 0)
/// over `count` tensors listed at device address `items` (`count` int64 pairs: the address of
/// a tensor's canonical bytes, their length), the longest `max_words` 64-bit words, adding
/// tensor y's two lanes' sums into the zeroed int64 pair at `out + 16 y`; does not wait (the
/// caller reads `out` after the stream's work, and finishes the fingerprints: see
/// `bitexact._fingerprint`). Unsafe by contract, as [`digest_cuda_ptr`]: the caller allocates
/// `items` and `out` with torch and keeps them and the tensors alive until then.
#[pyfunction]
fn trace_fingerprint_sums_cuda(
    py: Python<'_>,
    items: u64,
    count: usize,
    max_words: u64,
    out: u64,
    stream: u64,
) -> PyResult<()> {
    use bitexact::backend::cuda::fingerprint::launch_sums;
    // SAFETY: the caller's contract, above. The GIL is released: the first call compiles the
    // kernel with NVRTC.
    fork_safe::detached(py, || unsafe {
        launch_sums(items, count, max_words, out, stream)
    })
    .map_err(|e| PyRuntimeError::new_err(format!("{e:#}")))
}

/// The module `bitexact._native`.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    fork_safe::init();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("CHUNK_BYTES", digest::CHUNK_BYTES)?;
    m.add_function(wrap_pyfunction!(main, m)?)?;
    m.add_function(wrap_pyfunction!(digest_ptr, m)?)?;
    m.add_function(wrap_pyfunction!(digests_ptr, m)?)?;
    m.add_function(wrap_pyfunction!(digest_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(fingerprints_ptr, m)?)?;
    m.add_function(wrap_pyfunction!(cuda_status, m)?)?;
    m.add_function(wrap_pyfunction!(digest_cuda_ptr, m)?)?;
    m.add_function(wrap_pyfunction!(trace_fingerprint_sums_cuda, m)?)?;
    m.add_function(wrap_pyfunction!(trace::trace_digests, m)?)?;
    m.add_function(wrap_pyfunction!(trace::sketch_text, m)?)?;
    m.add_function(wrap_pyfunction!(trace::trace_fingerprints, m)?)?;
    m.add_function(wrap_pyfunction!(trace::fingerprint_bytes, m)?)?;
    m.add_class::<trace_writer::TraceWriter>()?;
    m.add_class::<trace_hold::Held>()?;
    m.add_class::<trace_lane::Lane>()?;
    m.add_function(wrap_pyfunction!(pytest::run_report, m)?)?;
    m.add_function(wrap_pyfunction!(pytest::explain, m)?)?;
    m.add_function(wrap_pyfunction!(pytest::same, m)?)?;
    m.add_function(wrap_pyfunction!(pytest::snapshot_check, m)?)?;
    Ok(())
}
