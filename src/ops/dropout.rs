//! `dropout`: element `i` is kept when the Philox uniform at word `offset + i` of the stream is
//! `>= p`, and kept values are scaled by `1 / (1 - p)`. The mask is a pure function of the
//! element index, so it is the same for any thread count and on any device: `cuda_philox`
//! (`kernels/dropout.cu`, `kernels/philox.cuh`) computes the same mask and values bit for bit.

use crate::backend::{cuda, Backend};
use crate::case::{Algo, Ctx};
use crate::rng::Stream;
use anyhow::{bail, Result};
use rayon::prelude::*;

/// Implementations in fixed-choice order.
pub const ALGOS: &[Algo] = &[
    Algo {
        name: "philox",
        backend: Backend::Cpu,
        deterministic: true,
    },
    Algo {
        name: "cuda_philox",
        backend: Backend::Cuda,
        deterministic: true,
    },
];

/// Applies dropout with drop probability `p`, drawing from `stream` (advanced by `x.len()`).
/// Returns the output and the keep mask.
pub fn dropout(
    ctx: &mut Ctx,
    x: &[f32],
    p: f32,
    stream: &mut Stream,
) -> Result<(Vec<f32>, Vec<bool>)> {
    if !(0.0..1.0).contains(&p) {
        bail!("`dropout`: probability {p} is outside [0, 1)");
    }
    let start = *stream;
    stream.offset += x.len() as u64;
    let (y, mask) = ctx.dispatch("dropout", &x.len().to_string(), ALGOS, |a| {
        Ok(match a.name {
            "philox" => {
                let mut s = start;
                let u = s.uniform(x.len());
                let scale = 1.0 / (1.0 - p);
                let mask: Vec<bool> = u.par_iter().map(|&u| u >= p).collect();
                let y: Vec<f32> = x
                    .par_iter()
                    .zip(&mask)
                    .map(|(&v, &k)| if k { v * scale } else { 0.0 })
                    .collect();
                (y, mask)
            }
            "cuda_philox" => cuda::ops::dropout(x, p, 1.0 / (1.0 - p), start)?,
            other => unreachable!("dropout implementation {other}"),
        })
    })?;
    ctx.record("dropout", &[x.into()], (&y).into());
    Ok((y, mask))
}
