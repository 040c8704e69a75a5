//! GPU implementations of the op families (kernels in `kernels/*.cu`). Each uploads its inputs,
//! launches between CUDA events on the backend's stream, and downloads the result. Arguments are
//! validated by the op functions in `src/ops/`, which call these from their dispatch.

use super::gpu;
use crate::rng::Stream;
use anyhow::{anyhow, Result};
use cudarc::driver::{LaunchArgs, LaunchConfig, PushKernelArg};

/// Launch geometry of every kernel (grid and block dimensions), as pure functions so the host
/// emulation test (`tests/kernels_host.rs`) launches the kernels exactly as this module does.
pub mod geometry {
    use super::MatmulKernel;

    /// `(x, y, z)` dimensions.
    pub type Dims = (u32, u32, u32);
    /// Grid and block dimensions of one launch.
    pub type Geometry = (Dims, Dims);

    /// Threads per block of the 1-D kernels.
    pub const BLOCK: u32 = 256;

    /// A 1-D launch of `blocks` blocks (clamped to `1..=2^20`; the kernels are grid-stride)
    /// of `threads` threads.
    pub fn blocks(blocks: u64, threads: u32) -> Geometry {
        ((blocks.clamp(1, 1 << 20) as u32, 1, 1), (threads, 1, 1))
    }

    /// Enough 256-thread blocks for `n` elements (grid-stride kernels cover the rest).
    pub fn cover(n: u64) -> Geometry {
        blocks(n.div_ceil(BLOCK as u64), BLOCK)
    }

    /// `reduce_chunks`: 32 chunks (8 lanes each) per 256-thread block.
    pub fn reduce_chunks(chunks: u64) -> Geometry {
        blocks(chunks.div_ceil(32), 256)
    }

    /// `reduce_partials`: one thread.
    pub fn reduce_partials() -> Geometry {
        blocks(1, 1)
    }

    /// `reduce_atomic`: one block (one atomicAdd) per 4096 elements.
    pub fn reduce_atomic(n: u64) -> Geometry {
        blocks(n.div_ceil(BLOCK as u64 * 16), BLOCK)
    }

    /// The matmul kernels: tile × tile threads per block of `C`; for split-K, `splits`
    /// neighbouring blocks per tile (`blockIdx.x = tile column * splits + segment`). Returns the
    /// kernel name, the geometry, and the segment length and count (split-K's extra arguments).
    pub fn matmul(
        m: u32,
        k: u32,
        n: u32,
        kernel: MatmulKernel,
    ) -> (&'static str, Geometry, (u32, u32)) {
        let (name, tile, splits) = match kernel {
            MatmulKernel::Tiled16 => ("matmul_tiled16", 16, 1),
            MatmulKernel::Tiled32 => ("matmul_tiled32", 32, 1),
            MatmulKernel::SplitKAtomic(s) => ("matmul_splitk_atomic", 16, s.max(1)),
        };
        let seg = k.div_ceil(splits).max(1);
        let grid = (n.div_ceil(tile) * splits, m.div_ceil(tile), 1);
        (name, (grid, (tile, tile, 1)), (seg, splits))
    }

    /// `col_sum_fixed`: one thread per column. `col_sum_atomic`: the same, times one grid row
    /// per 2 input rows (`blockIdx.y`).
    pub fn col_sum(rows: u32, cols: u32, atomic: bool) -> Geometry {
        let y = if atomic { rows.div_ceil(2).max(1) } else { 1 };
        ((cols.div_ceil(BLOCK).max(1), y, 1), (BLOCK, 1, 1))
    }

    /// The row kernels (softmax, layer_norm): one 256-thread block per row.
    pub fn rows(rows: u64) -> Geometry {
        blocks(rows, BLOCK)
    }

    /// `sha256_chunks`: one thread per chunk, 32 threads per block (so many SMs share the work).
    pub fn sha256(chunks: u64) -> Geometry {
        blocks(chunks.div_ceil(32), 32)
    }

    /// `philox_fill` with `grid` blocks, or enough for one Philox block per thread.
    pub fn philox(n: u64, grid: Option<u32>) -> Geometry {
        match grid {
            Some(b) => blocks(b as u64, BLOCK),
            None => cover(n.div_ceil(4) + 1),
        }
    }
}

use geometry::{cover, Geometry};

fn cfg((grid, block): Geometry) -> LaunchConfig {
    LaunchConfig {
        grid_dim: grid,
        block_dim: block,
        shared_mem_bytes: 0,
    }
}

fn launch(args: &mut LaunchArgs<'_>, cfg: LaunchConfig, what: &str) -> Result<()> {
    // SAFETY: every kernel's parameter list matches the arguments its caller pushes, and the
    // buffers are as long as the sizes passed with them.
    unsafe { args.launch(cfg) }
        .map(|_| ())
        .map_err(|e| anyhow!("launching {what}: {e:?}"))
}

/// `reduce_sum`: the CPU's chunked tree (`atomic` false) or per-block atomicAdd (`atomic` true).
pub fn reduce_sum(x: &[f32], atomic: bool) -> Result<f32> {
    if x.is_empty() {
        return Ok(0.0);
    }
    let g = gpu()?;
    let dx = g.upload(x)?;
    let n = x.len() as u64;
    let mut out = g.zeros::<f32>(1)?;
    if atomic {
        let f = g.function("reduce_sum.cu", "reduce_atomic")?;
        g.timed(|s| {
            let mut b = s.launch_builder(&f);
            b.arg(&dx).arg(&n).arg(&mut out);
            launch(&mut b, cfg(geometry::reduce_atomic(n)), "reduce_atomic")
        })?;
    } else {
        let chunks = n.div_ceil(crate::ops::reduce_sum::CHUNK as u64);
        let chunks32 = u32::try_from(chunks).map_err(|_| anyhow!("reduce_sum: too many chunks"))?;
        let mut partials = g.zeros::<f32>(chunks as usize)?;
        let (fc, fp) = (
            g.function("reduce_sum.cu", "reduce_chunks")?,
            g.function("reduce_sum.cu", "reduce_partials")?,
        );
        g.timed(|s| {
            let mut b = s.launch_builder(&fc);
            b.arg(&dx).arg(&n).arg(&mut partials).arg(&chunks);
            launch(
                &mut b,
                cfg(geometry::reduce_chunks(chunks)),
                "reduce_chunks",
            )?;
            let mut b = s.launch_builder(&fp);
            b.arg(&partials).arg(&chunks32).arg(&mut out);
            launch(&mut b, cfg(geometry::reduce_partials()), "reduce_partials")
        })?;
    }
    Ok(g.download(&out)?[0])
}

/// `col_sum`: one thread per column in ascending row order, the CPU's `fixed_rows` exactly
/// (`atomic` false), or row pairs added with atomicAdd (`atomic` true).
pub fn col_sum(x: &[f32], rows: usize, cols: usize, atomic: bool) -> Result<Vec<f32>> {
    if cols == 0 {
        return Ok(Vec::new());
    }
    let g = gpu()?;
    let dx = g.upload(x)?;
    let (r, c) = (dim32(rows, "rows")?, dim32(cols, "cols")?);
    let mut out = g.zeros::<f32>(cols)?;
    let name = if atomic {
        "col_sum_atomic"
    } else {
        "col_sum_fixed"
    };
    let f = g.function("col_sum.cu", name)?;
    g.timed(|s| {
        let mut b = s.launch_builder(&f);
        b.arg(&dx).arg(&r).arg(&c).arg(&mut out);
        launch(&mut b, cfg(geometry::col_sum(r, c, atomic)), name)
    })?;
    g.download(&out)
}

/// A matmul kernel configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatmulKernel {
    /// 16×16 tiles, no split (deterministic).
    Tiled16,
    /// 32×32 tiles, no split (deterministic).
    Tiled32,
    /// 16×16 tiles, `k` split into this many segments added with atomics (nondeterministic).
    SplitKAtomic(u32),
}

fn dim32(v: usize, what: &str) -> Result<u32> {
    u32::try_from(v).map_err(|_| anyhow!("{what} = {v} is too large for the CUDA kernels"))
}

/// `C = A · B` (`m×k` by `k×n`) with kernel configuration `kernel`.
pub fn matmul(
    a: &[f32],
    b: &[f32],
    (m, k, n): (usize, usize, usize),
    kernel: MatmulKernel,
) -> Result<Vec<f32>> {
    if m * n == 0 || k == 0 {
        return Ok(vec![0.0; m * n]); // empty sums (no zero-length device buffers)
    }
    let (m32, k32, n32) = (dim32(m, "m")?, dim32(k, "k")?, dim32(n, "n")?);
    let g = gpu()?;
    let (da, db) = (g.upload(a)?, g.upload(b)?);
    let mut dc = g.zeros::<f32>(m * n)?;
    let (name, geo, (seg, splits)) = geometry::matmul(m32, k32, n32, kernel);
    let f = g.function("matmul.cu", name)?;
    g.timed(|s| {
        let mut l = s.launch_builder(&f);
        l.arg(&da)
            .arg(&db)
            .arg(&mut dc)
            .arg(&m32)
            .arg(&k32)
            .arg(&n32);
        if let MatmulKernel::SplitKAtomic(_) = kernel {
            l.arg(&seg).arg(&splits);
        }
        launch(&mut l, cfg(geo), name)
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
        launch(&mut l, cfg(cover(n * d as u64)), "scatter_atomic")
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
        launch(&mut l, cfg(cover((m * d) as u64)), "scatter_segments")
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
        launch(&mut l, cfg(geometry::rows(rows as u64)), "softmax_rows")
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
        launch(&mut l, cfg(geometry::rows(rows as u64)), "layer_norm_rows")
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
        launch(&mut l, cfg(cover(n)), "dropout_philox")
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
        launch(&mut l, cfg(geo), "philox_fill")
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
    let chunks = data.len().div_ceil(chunk_bytes);
    let mut out = g.zeros::<u8>(32 * chunks)?;
    let (len, cb) = (data.len() as u64, chunk_bytes as u64);
    let f = g.function("sha256.cu", "sha256_chunks")?;
    g.timed(|s| {
        let mut l = s.launch_builder(&f);
        l.arg(&dd).arg(&len).arg(&cb).arg(&mut out);
        launch(
            &mut l,
            cfg(geometry::sha256(chunks as u64)),
            "sha256_chunks",
        )
    })?;
    Ok(g.download(&out)?
        .chunks_exact(32)
        .map(|c| c.try_into().expect("32 bytes"))
        .collect())
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
