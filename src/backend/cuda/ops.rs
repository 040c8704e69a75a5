//! GPU implementations of the op families (kernels in `kernels/*.cu`), one function per kernel
//! configuration. Each uploads its inputs, launches between CUDA events on the backend's stream,
//! and downloads the result. Arguments are validated by the op functions in `src/ops/`, whose
//! implementation tables name these functions.

use super::geometry::{self, cover};
use super::{dim32, gpu, launch, Gpu};
use crate::digest::Digest;
use crate::rng::Stream;
use crate::tensor::DType;
use anyhow::{anyhow, Result};
use cudarc::driver::PushKernelArg;
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use std::sync::Arc;

/// `reduce_sum` by per-block tree sums added with atomicAdd (nondeterministic).
pub fn reduce_sum_atomic(x: &[f32]) -> Result<f32> {
    if x.is_empty() {
        return Ok(0.0);
    }
    let g = gpu()?;
    let dx = g.upload(x)?;
    let n = x.len() as u64;
    let mut out = g.zeros::<f32>(1)?;
    let f = g.function("reduce_sum.cu", "reduce_atomic")?;
    g.timed(|s| {
        let mut b = s.launch_builder(&f);
        b.arg(&dx).arg(&n).arg(&mut out);
        launch(&mut b, geometry::reduce_atomic(n), "reduce_atomic")
    })?;
    Ok(g.download(&out)?[0])
}

/// `reduce_sum` in the CPU's `chunked_tree` order: chunk sums, then a fixed pairwise tree.
pub fn reduce_sum_tree(x: &[f32]) -> Result<f32> {
    if x.is_empty() {
        return Ok(0.0);
    }
    let g = gpu()?;
    let dx = g.upload(x)?;
    let n = x.len() as u64;
    let mut out = g.zeros::<f32>(1)?;
    let chunks = n.div_ceil(crate::backend::cpu::SUM_CHUNK as u64);
    let chunks32 = u32::try_from(chunks).map_err(|_| anyhow!("reduce_sum: too many chunks"))?;
    let mut partials = g.zeros::<f32>(chunks as usize)?;
    let (fc, fp) = (
        g.function("reduce_sum.cu", "reduce_chunks")?,
        g.function("reduce_sum.cu", "reduce_partials")?,
    );
    g.timed(|s| {
        let mut b = s.launch_builder(&fc);
        b.arg(&dx).arg(&n).arg(&mut partials).arg(&chunks);
        launch(&mut b, geometry::reduce_chunks(chunks), "reduce_chunks")?;
        let mut b = s.launch_builder(&fp);
        b.arg(&partials).arg(&chunks32).arg(&mut out);
        launch(&mut b, geometry::reduce_partials(), "reduce_partials")
    })?;
    Ok(g.download(&out)?[0])
}

/// `col_sum` with one thread per column summing rows in ascending order: the CPU's
/// `fixed_rows` exactly (deterministic).
pub fn col_sum_fixed(x: &[f32], rows: usize, cols: usize) -> Result<Vec<f32>> {
    col_sum_launch(x, (rows, cols), "col_sum_fixed", |_, c| {
        geometry::col_sum_fixed(c)
    })
}

/// `col_sum` with row pairs added into the output with atomicAdd (nondeterministic).
pub fn col_sum_atomic(x: &[f32], rows: usize, cols: usize) -> Result<Vec<f32>> {
    col_sum_launch(x, (rows, cols), "col_sum_atomic", geometry::col_sum_atomic)
}

/// Launches the `col_sum.cu` kernel `entry` (both take `x, rows, cols, out`) with the geometry
/// `geo(rows, cols)`.
fn col_sum_launch(
    x: &[f32],
    (rows, cols): (usize, usize),
    entry: &str,
    geo: fn(u32, u32) -> geometry::Geometry,
) -> Result<Vec<f32>> {
    if cols == 0 {
        return Ok(Vec::new());
    }
    let g = gpu()?;
    let dx = g.upload(x)?;
    let (r, c) = (dim32(rows, "rows")?, dim32(cols, "cols")?);
    let mut out = g.zeros::<f32>(cols)?;
    let f = g.function("col_sum.cu", entry)?;
    g.timed(|s| {
        let mut b = s.launch_builder(&f);
        b.arg(&dx).arg(&r).arg(&c).arg(&mut out);
        launch(&mut b, geo(r, c), entry)
    })?;
    g.download(&out)
}

/// A tiled matmul kernel of `kernels/matmul.cu`: its entry point and tile edge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TiledKernel {
    /// Kernel entry point, e.g. `matmul_tiled16`.
    pub entry: &'static str,
    /// Tile edge (threads per block side and rows/columns of `C` per block).
    pub tile: u32,
}

/// 16×16 tiles, no split (deterministic).
pub const TILED16: TiledKernel = TiledKernel {
    entry: "matmul_tiled16",
    tile: 16,
};

/// 32×32 tiles, no split (deterministic).
pub const TILED32: TiledKernel = TiledKernel {
    entry: "matmul_tiled32",
    tile: 32,
};

/// `C = A · B` (`m×k` by `k×n`) with the tiled kernel `kernel`: `k` ascending, no split
/// (deterministic; every tile size gives the CPU's tiled bits).
pub fn matmul_tiled(
    a: &[f32],
    b: &[f32],
    dims: (usize, usize, usize),
    kernel: TiledKernel,
) -> Result<Vec<f32>> {
    matmul_launch(a, b, dims, kernel.entry, |m, _, n| {
        (geometry::matmul_tiled(m, n, kernel.tile), None)
    })
}

/// `C = A · B` with `k` split into `splits` segments whose partial products are added with
/// atomicAdd (`matmul_splitk_atomic`; nondeterministic).
pub fn matmul_splitk_atomic(
    a: &[f32],
    b: &[f32],
    dims: (usize, usize, usize),
    splits: u32,
) -> Result<Vec<f32>> {
    matmul_launch(a, b, dims, "matmul_splitk_atomic", |m, k, n| {
        let (geo, extra) = geometry::matmul_splitk(m, k, n, splits);
        (geo, Some(extra))
    })
}

/// Launches the `matmul.cu` kernel `entry` on `A, B, C, m, k, n` with the geometry and extra
/// arguments (split-K's segment length and count) that `geo(m, k, n)` gives.
fn matmul_launch(
    a: &[f32],
    b: &[f32],
    (m, k, n): (usize, usize, usize),
    entry: &str,
    geo: impl FnOnce(u32, u32, u32) -> (geometry::Geometry, Option<(u32, u32)>),
) -> Result<Vec<f32>> {
    if m * n == 0 || k == 0 {
        return Ok(vec![0.0; m * n]); // empty sums (no zero-length device buffers)
    }
    let (m32, k32, n32) = (dim32(m, "m")?, dim32(k, "k")?, dim32(n, "n")?);
    let g = gpu()?;
    let (da, db) = (g.upload(a)?, g.upload(b)?);
    let mut dc = g.zeros::<f32>(m * n)?;
    let (geo, extra) = geo(m32, k32, n32);
    let f = g.function("matmul.cu", entry)?;
    g.timed(|s| {
        let mut l = s.launch_builder(&f);
        l.arg(&da)
            .arg(&db)
            .arg(&mut dc)
            .arg(&m32)
            .arg(&k32)
            .arg(&n32);
        if let Some((seg, splits)) = &extra {
            l.arg(seg).arg(splits);
        }
        launch(&mut l, geo, entry)
    })?;
    g.download(&dc)
}

/// `scatter_add` with one atomicAdd per source element (nondeterministic).
pub fn scatter_add_atomic(src: &[f32], index: &[i64], m: usize, d: usize) -> Result<Vec<f32>> {
    if m * d == 0 || index.is_empty() {
        return Ok(vec![0.0; m * d]);
    }
    let g = gpu()?;
    let (ds, di) = (g.upload(src)?, g.upload(index)?);
    let mut out = g.zeros::<f32>(m * d)?;
    let (n, d32) = (index.len() as u64, dim32(d, "d")?);
    let f = g.function("scatter_add.cu", "scatter_atomic")?;
    g.timed(|s| {
        let mut l = s.launch_builder(&f);
        l.arg(&ds).arg(&di).arg(&mut out).arg(&n).arg(&d32);
        launch(&mut l, cover(n * d as u64), "scatter_atomic")
    })?;
    g.download(&out)
}

/// `scatter_add` by segmented sums over the stable sort of source rows by index: output row
/// `r` sums source rows `order[start[r]..start[r + 1]]` in that order (deterministic).
pub fn scatter_add_sorted(
    src: &[f32],
    order: &[u64],
    start: &[u64],
    m: usize,
    d: usize,
) -> Result<Vec<f32>> {
    if m * d == 0 {
        return Ok(vec![0.0; m * d]);
    }
    let g = gpu()?;
    let ds = g.upload(if src.is_empty() { &[0.0f32][..] } else { src })?;
    let dorder = g.upload(if order.is_empty() { &[0u64][..] } else { order })?;
    let dstart = g.upload(start)?;
    let mut out = g.zeros::<f32>(m * d)?;
    let (m32, d32) = (dim32(m, "m")?, dim32(d, "d")?);
    let f = g.function("scatter_add.cu", "scatter_segments")?;
    g.timed(|s| {
        let mut l = s.launch_builder(&f);
        l.arg(&ds)
            .arg(&dorder)
            .arg(&dstart)
            .arg(&mut out)
            .arg(&m32)
            .arg(&d32);
        launch(&mut l, cover((m * d) as u64), "scatter_segments")
    })?;
    g.download(&out)
}

/// Row-wise softmax of `rows × cols`.
pub fn softmax(x: &[f32], rows: usize, cols: usize) -> Result<Vec<f32>> {
    if rows * cols == 0 {
        return Ok(Vec::new());
    }
    let g = gpu()?;
    let dx = g.upload(x)?;
    let mut dy = g.zeros::<f32>(x.len())?;
    let (r32, c32) = (dim32(rows, "rows")?, dim32(cols, "cols")?);
    let f = g.function("softmax.cu", "softmax_rows")?;
    g.timed(|s| {
        let mut l = s.launch_builder(&f);
        l.arg(&dx).arg(&mut dy).arg(&r32).arg(&c32);
        launch(&mut l, geometry::rows(rows as u64), "softmax_rows")
    })?;
    g.download(&dy)
}

/// Row-wise layer norm of `rows × cols` with per-column `gamma`, `beta`.
pub fn layer_norm(
    x: &[f32],
    gamma: &[f32],
    beta: &[f32],
    (rows, cols): (usize, usize),
    eps: f32,
) -> Result<Vec<f32>> {
    if rows * cols == 0 {
        return Ok(Vec::new());
    }
    let g = gpu()?;
    let (dx, dg, db) = (g.upload(x)?, g.upload(gamma)?, g.upload(beta)?);
    let mut dy = g.zeros::<f32>(x.len())?;
    let (r32, c32) = (dim32(rows, "rows")?, dim32(cols, "cols")?);
    let f = g.function("layer_norm.cu", "layer_norm_rows")?;
    g.timed(|s| {
        let mut l = s.launch_builder(&f);
        l.arg(&dx)
            .arg(&dg)
            .arg(&db)
            .arg(&mut dy)
            .arg(&r32)
            .arg(&c32)
            .arg(&eps);
        launch(&mut l, geometry::rows(rows as u64), "layer_norm_rows")
    })?;
    g.download(&dy)
}

/// Dropout of `x` with the Philox words of `stream` from its offset: output and keep mask.
pub fn dropout(x: &[f32], p: f32, scale: f32, stream: Stream) -> Result<(Vec<f32>, Vec<bool>)> {
    if x.is_empty() {
        return Ok((Vec::new(), Vec::new()));
    }
    let g = gpu()?;
    let dx = g.upload(x)?;
    let mut dy = g.zeros::<f32>(x.len())?;
    let mut dm = g.zeros::<u8>(x.len())?;
    let n = x.len() as u64;
    let f = g.function("dropout.cu", "dropout_philox")?;
    g.timed(|s| {
        let mut l = s.launch_builder(&f);
        l.arg(&dx)
            .arg(&mut dy)
            .arg(&mut dm)
            .arg(&n)
            .arg(&stream.seed)
            .arg(&stream.stream)
            .arg(&stream.offset)
            .arg(&p)
            .arg(&scale);
        launch(&mut l, cover(n), "dropout_philox")
    })?;
    let mask = g.download(&dm)?.into_iter().map(|b| b != 0).collect();
    Ok((g.download(&dy)?, mask))
}

/// `n` words of `stream` from its offset, computed on the GPU with `blocks` blocks of 256
/// threads (`None`: enough blocks for one Philox block per thread). Any grid gives the same words.
pub fn philox_fill(stream: Stream, n: usize, blocks: Option<u32>) -> Result<Vec<u32>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    let g = gpu()?;
    let mut out = g.zeros::<u32>(n)?;
    let n64 = n as u64;
    let f = g.function("philox.cu", "philox_fill")?;
    let geo = geometry::philox(n64, blocks);
    g.timed(|s| {
        let mut l = s.launch_builder(&f);
        l.arg(&mut out)
            .arg(&n64)
            .arg(&stream.seed)
            .arg(&stream.stream)
            .arg(&stream.offset);
        launch(&mut l, geo, "philox_fill")
    })?;
    g.download(&out)
}

/// SHA-256 of each `chunk_bytes` chunk of `data` (the last may be shorter), computed on the GPU.
pub fn sha256_chunks(data: &[u8], chunk_bytes: usize) -> Result<Vec<[u8; 32]>> {
    if data.is_empty() || chunk_bytes == 0 {
        return Err(anyhow!("sha256_chunks: empty data or chunk size"));
    }
    let g = gpu()?;
    let dd = g.upload(data)?;
    let (ptr, _sync) = dd.device_ptr(g.stream());
    let mut out = g.zeros::<u8>(32 * data.len().div_ceil(chunk_bytes))?;
    g.timed(|s| launch_sha256(&g, s, ptr, data.len(), chunk_bytes, &mut out))?;
    Ok(split_digests(&g.download(&out)?))
}

/// Launches `sha256_chunks` on stream `s` over `len` bytes of device memory at `ptr`, one
/// 32-byte digest per `chunk_bytes` chunk into `out`.
fn launch_sha256(
    g: &Gpu,
    s: &Arc<CudaStream>,
    ptr: u64,
    len: usize,
    chunk_bytes: usize,
    out: &mut CudaSlice<u8>,
) -> Result<()> {
    let chunks = len.div_ceil(chunk_bytes) as u64;
    let (len, cb) = (len as u64, chunk_bytes as u64);
    let f = g.function("sha256.cu", "sha256_chunks")?;
    let mut l = s.launch_builder(&f);
    l.arg(&ptr).arg(&len).arg(&cb).arg(out);
    launch(&mut l, geometry::sha256(chunks), "sha256_chunks")
}

fn split_digests(bytes: &[u8]) -> Vec<[u8; 32]> {
    bytes
        .chunks_exact(32)
        .map(|c| c.try_into().expect("32 bytes"))
        .collect()
}

/// The canonical digest of a `dtype` tensor of `shape` whose `len` bytes live in device memory
/// at `ptr` on device 0, hashed in order on `stream`, a raw `CUstream` of the primary context
/// (torch's current stream: 0 is the legacy default stream), so the kernel runs after the
/// work torch queued there. Chunks are hashed on the device and combined on the host exactly as
/// [`crate::digest::digest_parts`] combines them, so the digest equals the host digest of the
/// same bytes; a tensor of at most one chunk is copied down and hashed on the host (the
/// canonical encoding hashes it whole).
pub fn device_digest(
    ptr: u64,
    len: usize,
    dtype: DType,
    shape: &[usize],
    stream: u64,
) -> Result<Digest> {
    use crate::digest::{self, CHUNK_BYTES};
    let g = gpu()?;
    g.bind()?;
    // SAFETY: the caller passes torch's current stream of device 0, which torch keeps alive
    // for the call; device 0's primary context is the one `Gpu` retains.
    let s = unsafe { g.borrowed_stream(stream) };
    fn fail(what: &'static str) -> impl Fn(cudarc::driver::DriverError) -> anyhow::Error {
        move |e| anyhow!("{what} on the GPU: {e:?}")
    }
    if len <= CHUNK_BYTES {
        let mut host = vec![0u8; len];
        if len > 0 {
            // SAFETY: `host` holds `len` bytes; the caller vouches for `len` bytes at `ptr`.
            unsafe { cudarc::driver::result::memcpy_dtoh_async(&mut host, ptr, s.cu_stream()) }
                .map_err(fail("copying the tensor"))?;
            s.synchronize().map_err(fail("waiting for the copy"))?;
        }
        return Ok(digest::digest_parts(dtype, shape, &host));
    }
    let mut out = s
        .alloc_zeros::<u8>(32 * len.div_ceil(CHUNK_BYTES))
        .map_err(fail("allocating the chunk digests"))?;
    launch_sha256(&g, &s, ptr, len, CHUNK_BYTES, &mut out)?;
    let chunks = s
        .clone_dtoh(&out)
        .map_err(fail("copying the chunk digests"))?;
    s.synchronize().map_err(fail("hashing"))?;
    Ok(digest::chunk_digests_parts(
        dtype,
        shape,
        &split_digests(&chunks),
    ))
}

/// The canonical digest of `t` ([`crate::digest::tensor_digest`]) with the chunks of a large
/// tensor hashed on the GPU; tensors of at most one chunk are hashed on the host.
pub fn tensor_digest(t: &crate::tensor::Tensor) -> Result<crate::digest::Digest> {
    use crate::digest::{self, CHUNK_BYTES};
    if t.bytes().len() <= CHUNK_BYTES {
        return Ok(digest::tensor_digest(t));
    }
    let chunks = sha256_chunks(t.bytes(), CHUNK_BYTES)?;
    Ok(digest::from_chunk_digests(t, &chunks))
}
