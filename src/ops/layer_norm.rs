//! `layer_norm` over the last axis of a `[rows, cols]` f32 buffer with per-column `gamma` and
//! `beta`: mean and variance by fixed-order sums, `y = (x - mean) / sqrt(var + eps) * gamma + beta`.
//! `cuda_rowwise` (`kernels/layer_norm.cu`) uses the same order without FMA: bit-identical.

use crate::backend::{cpu, cuda, Backend};
use crate::case::{Ctx, Impl};
use anyhow::Result;
use rayon::prelude::*;

/// The arguments of one `layer_norm` call (lengths checked).
#[derive(Clone, Copy, Debug)]
pub struct LayerNormArgs<'a> {
    /// Input, `rows × cols`.
    pub x: &'a [f32],
    /// Per-column scale (`cols`).
    pub gamma: &'a [f32],
    /// Per-column shift (`cols`).
    pub beta: &'a [f32],
    /// Rows of `x`.
    pub rows: usize,
    /// Columns of `x`.
    pub cols: usize,
    /// Added to the variance.
    pub eps: f32,
}

/// An implementation: writes the normalised rows into `y`, a scratch buffer of `x.len()`
/// elements (see [`Ctx::scratch_f32`]) that it may also replace.
pub type LayerNormFn = fn(args: &LayerNormArgs<'_>, y: &mut Vec<f32>) -> Result<()>;

/// Implementations in fixed-choice order.
pub const IMPLS: &[Impl<LayerNormFn>] = &[
    Impl {
        name: "rowwise",
        backend: Backend::Cpu,
        deterministic: true,
        run: |args, y| rowwise(args, y),
    },
    Impl {
        name: "cuda_rowwise",
        backend: Backend::Cuda,
        deterministic: true,
        run: |a, y| {
            *y = cuda::ops::layer_norm(a.x, a.gamma, a.beta, (a.rows, a.cols), a.eps)?;
            Ok(())
        },
    },
];

/// Layer normalisation of `x` (`rows × cols`).
pub fn layer_norm(
    ctx: &mut Ctx,
    x: &[f32],
    gamma: &[f32],
    beta: &[f32],
    rows: usize,
    cols: usize,
    eps: f32,
) -> Result<Vec<f32>> {
    super::expect_len("layer_norm", "x", x.len(), rows * cols)?;
    super::expect_len("layer_norm", "gamma", gamma.len(), cols)?;
    super::expect_len("layer_norm", "beta", beta.len(), cols)?;
    let mut y = ctx.scratch_f32(x.len());
    let args = LayerNormArgs {
        x,
        gamma,
        beta,
        rows,
        cols,
        eps,
    };
    let shape = format!("{rows}x{cols}");
    ctx.dispatch("layer_norm", &shape, IMPLS, |f| f(&args, &mut y))?;
    ctx.record(
        "layer_norm",
        &[x.into(), gamma.into(), beta.into()],
        (&y).into(),
    );
    Ok(y)
}

/// Rows in parallel, each with fixed-order sums for mean and variance.
fn rowwise(a: &LayerNormArgs<'_>, y: &mut [f32]) -> Result<()> {
    let (x, gamma, beta, eps) = (a.x, a.gamma, a.beta, a.eps);
    y.par_chunks_mut(a.cols.max(1))
        .zip(x.par_chunks(a.cols.max(1)))
        .for_each(|(row, xr)| {
            row.copy_from_slice(xr);
            let n = row.len() as f32;
            let mean = cpu::chunk_sum(row) / n;
            let sq: Vec<f32> = row.iter().map(|v| (v - mean) * (v - mean)).collect();
            let inv = 1.0 / (cpu::chunk_sum(&sq) / n + eps).sqrt();
            for ((v, g), b) in row.iter_mut().zip(gamma).zip(beta) {
                *v = (*v - mean) * inv * g + b;
            }
        });
    Ok(())
}
