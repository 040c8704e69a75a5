//! `layer_norm` over the last axis of a `[rows, cols]` f32 buffer with per-column `gamma` and
//! `beta`: mean and variance by fixed-order sums, `y = (x - mean) / sqrt(var + eps) * gamma + beta`.
//! `cuda_rowwise` (`kernels/layer_norm.cu`) uses the same order without FMA: bit-identical.

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
    super::check_len("layer_norm", "x", x.len(), rows * cols)?;
    super::check_len("layer_norm", "gamma", gamma.len(), cols)?;
    super::check_len("layer_norm", "beta", beta.len(), cols)?;
    let mut y = ctx.scratch_f32(x.len());
    ctx.dispatch("layer_norm", &format!("{rows}x{cols}"), ALGOS, |a| {
        match a.name {
            "rowwise" => {
                y.par_chunks_mut(cols.max(1))
                    .zip(x.par_chunks(cols.max(1)))
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
            }
            "cuda_rowwise" => y = cuda::ops::layer_norm(x, gamma, beta, (rows, cols), eps)?,
            other => unreachable!("layer_norm implementation {other}"),
        }
        Ok(())
    })?;
    ctx.record(
        "layer_norm",
        &[x.into(), gamma.into(), beta.into()],
        (&y).into(),
    );
    Ok(y)
}
