//! Launch geometry of every kernel (grid and block dimensions), as pure functions so the host
//! emulation test (`tests/it/kernels_host.rs`) launches the kernels exactly as the CUDA ops do.

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

/// Tile edge of `matmul_splitk_atomic`.
pub const SPLITK_TILE: u32 = 16;

/// The tiled matmul kernels: `tile × tile` threads per `tile × tile` block of `C` (`m×n`).
pub fn matmul_tiled(m: u32, n: u32, tile: u32) -> Geometry {
    ((n.div_ceil(tile), m.div_ceil(tile), 1), (tile, tile, 1))
}

/// `matmul_splitk_atomic` with `k` cut into `splits` segments: [`SPLITK_TILE`]² threads per
/// block of `C`, `splits` neighbouring blocks per tile (`blockIdx.x = tile column * splits +
/// segment`). Returns the geometry and the kernel's extra arguments: segment length and count.
pub fn matmul_splitk(m: u32, k: u32, n: u32, splits: u32) -> (Geometry, (u32, u32)) {
    let (splits, tile) = (splits.max(1), SPLITK_TILE);
    let seg = k.div_ceil(splits).max(1);
    let grid = (n.div_ceil(tile) * splits, m.div_ceil(tile), 1);
    ((grid, (tile, tile, 1)), (seg, splits))
}

/// `col_sum_fixed`: one thread per column.
pub fn col_sum_fixed(cols: u32) -> Geometry {
    ((cols.div_ceil(BLOCK).max(1), 1, 1), (BLOCK, 1, 1))
}

/// `col_sum_atomic`: one thread per column, times one grid row per 2 input rows (`blockIdx.y`).
pub fn col_sum_atomic(rows: u32, cols: u32) -> Geometry {
    let ((x, _, _), block) = col_sum_fixed(cols);
    ((x, rows.div_ceil(2).max(1), 1), block)
}

/// The row kernels (softmax, layer_norm): one 256-thread block per row.
pub fn rows(rows: u64) -> Geometry {
    blocks(rows, BLOCK)
}

/// `sha256_chunks`: one thread per chunk, 32 threads per block (so many SMs share the work).
pub fn sha256(chunks: u64) -> Geometry {
    blocks(chunks.div_ceil(32), 32)
}

/// Blocks along x of `fingerprint_sums` at most: about one full wave of an H100 or H200 (132
/// SMs × 8 blocks of 256 threads) for each tensor; its loop is grid-stride, and the sums do
/// not depend on the grid.
pub const FINGERPRINT_BLOCKS: u64 = 1024;

/// `fingerprint_sums` over `items` buffers, the longest `max_words` 64-bit words: one grid row
/// per buffer (`blockIdx.y`), 256-thread blocks along x enough for the longest, at most
/// [`FINGERPRINT_BLOCKS`].
pub fn fingerprint(max_words: u64, items: u32) -> Geometry {
    let x = max_words
        .div_ceil(BLOCK as u64)
        .clamp(1, FINGERPRINT_BLOCKS) as u32;
    ((x, items.max(1), 1), (BLOCK, 1, 1))
}

/// `philox_fill` with `grid` blocks, or enough for one Philox block per thread.
pub fn philox(n: u64, grid: Option<u32>) -> Geometry {
    match grid {
        Some(b) => blocks(b as u64, BLOCK),
        None => cover(n.div_ceil(4) + 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matmul_grids_cover_the_output() {
        assert_eq!(matmul_tiled(33, 17, 16), ((2, 3, 1), (16, 16, 1)));
        assert_eq!(matmul_tiled(33, 17, 32), ((1, 2, 1), (32, 32, 1)));
        assert_eq!(
            matmul_splitk(33, 100, 17, 4),
            (((8, 3, 1), (16, 16, 1)), (25, 4))
        );
        assert_eq!(col_sum_atomic(5, 300), ((2, 3, 1), (256, 1, 1)));
        assert_eq!(col_sum_fixed(300), ((2, 1, 1), (256, 1, 1)));
        assert_eq!(fingerprint(0, 0), ((1, 1, 1), (256, 1, 1)));
        assert_eq!(fingerprint(257, 3), ((2, 3, 1), (256, 1, 1)));
        assert_eq!(fingerprint(1 << 40, 2), ((1024, 2, 1), (256, 1, 1)));
    }
}
