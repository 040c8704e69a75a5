//! `softmax` over the last axis of a `[rows, cols]` f32 buffer, row by row in fixed order
//! (max, then `exp(x - max)`, then a fixed-order sum, then division). `cuda_rowwise`
//! (`kernels/softmax.cu`) follows the same order; only `expf` may differ from the CPU's libm.

use crate::backend::{cpu, cuda, Backend};
use crate::case::{Algo, Ctx};
use anyhow::Result;
use rayon::prelude::*;

/// Implementations in fixed-choice order.
pub const ALGOS: &[Algo] = &[
    Algo {
        name: "rowwise",
        backend: Backend::Cpu,
        deterministic: true,
    },
    Algo {
        name: "cuda_rowwise",
        backend: Backend::Cuda,
        deterministic: true,
    },
];

/// Row-wise softmax of `x` (`rows × cols`).
pub fn softmax(ctx: &mut Ctx, x: &[f32], rows: usize, cols: usize) -> Result<Vec<f32>> {
    super::check_len("softmax", "x", x.len(), rows * cols)?;
    let mut y = ctx.scratch_f32(x.len());
    ctx.dispatch("softmax", &format!("{rows}x{cols}"), ALGOS, |a| {
        match a.name {
            "rowwise" => y
                .par_chunks_mut(cols.max(1))
                .zip(x.par_chunks(cols.max(1)))
                .for_each(|(yr, xr)| {
                    yr.copy_from_slice(xr);
                    softmax_row(yr)
                }),
            "cuda_rowwise" => y = cuda::ops::softmax(x, rows, cols)?,
            other => unreachable!("softmax implementation {other}"),
        }
        Ok(())
    })?;
    ctx.record("softmax", &[x.into()], (&y).into());
    Ok(y)
}

/// Softmax of one row in place.
pub fn softmax_row(row: &mut [f32]) {
    let m = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    row.iter_mut().for_each(|v| *v = (*v - m).exp());
    let s = cpu::chunk_sum(row);
    row.iter_mut().for_each(|v| *v /= s);
}
