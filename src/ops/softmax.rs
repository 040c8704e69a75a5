//! `softmax` over the last axis of a `[rows, cols]` f32 buffer, row by row in fixed order
//! (max, then `exp(x - max)`, then a fixed-order sum, then division). `cuda_rowwise`
//! (`kernels/softmax.cu`) follows the same order; only `expf` may differ from the CPU's libm.

use crate::backend::{cpu, cuda, Backend};
use crate::case::{Ctx, Impl};
use anyhow::Result;
use rayon::prelude::*;

/// An implementation: writes the row-wise softmax of `x` (`rows × cols`) into `y`, a scratch
/// buffer of `x.len()` elements (see [`Ctx::scratch_f32`]) that it may also replace.
pub type SoftmaxFn = fn(x: &[f32], rows: usize, cols: usize, y: &mut Vec<f32>) -> Result<()>;

/// Implementations in fixed-choice order.
pub const IMPLS: &[Impl<SoftmaxFn>] = &[
    Impl {
        name: "rowwise",
        backend: Backend::Cpu,
        deterministic: true,
        run: |x, rows, cols, y| rowwise(x, rows, cols, y),
    },
    Impl {
        name: "cuda_rowwise",
        backend: Backend::Cuda,
        deterministic: true,
        run: |x, rows, cols, y| {
            *y = cuda::ops::softmax(x, rows, cols)?;
            Ok(())
        },
    },
];

/// Row-wise softmax of `x` (`rows × cols`).
pub fn softmax(ctx: &mut Ctx, x: &[f32], rows: usize, cols: usize) -> Result<Vec<f32>> {
    super::expect_len("softmax", "x", x.len(), rows * cols)?;
    let mut y = ctx.scratch_f32(x.len());
    let shape = format!("{rows}x{cols}");
    ctx.dispatch("softmax", &shape, IMPLS, |f| f(x, rows, cols, &mut y))?;
    ctx.record("softmax", &[x.into()], (&y).into());
    Ok(y)
}

/// Rows in parallel, each by [`softmax_row`].
fn rowwise(x: &[f32], _rows: usize, cols: usize, y: &mut [f32]) -> Result<()> {
    y.par_chunks_mut(cols.max(1))
        .zip(x.par_chunks(cols.max(1)))
        .for_each(|(yr, xr)| {
            yr.copy_from_slice(xr);
            softmax_row(yr)
        });
    Ok(())
}

/// Softmax of one row in place.
pub fn softmax_row(row: &mut [f32]) {
    let m = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    row.iter_mut().for_each(|v| *v = (*v - m).exp());
    let s = cpu::chunk_sum(row);
    row.iter_mut().for_each(|v| *v /= s);
}
