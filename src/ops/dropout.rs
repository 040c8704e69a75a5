//! `dropout`: element `i` is kept when the Philox uniform at word `offset + i` of the stream is
//! `>= p`, and kept values are scaled by `1 / (1 - p)`. The mask is a pure function of the
//! element index, so it is the same for any thread count and on any device: `cuda_philox`
//! (`kernels/dropout.cu`, `kernels/philox.cuh`) computes the same mask and values bit for bit.

use crate::backend::{cuda, Backend};
use crate::case::{Ctx, Impl};
use crate::rng::Stream;
use anyhow::{bail, Result};
use rayon::prelude::*;

/// An implementation: output and keep mask of dropout with probability `p` (in `[0, 1)`) drawing
/// from `start` (the stream is not advanced).
pub type DropoutFn = fn(x: &[f32], p: f32, start: Stream) -> Result<(Vec<f32>, Vec<bool>)>;

/// Implementations in fixed-choice order.
pub const IMPLS: &[Impl<DropoutFn>] = &[
    Impl {
        name: "philox",
        backend: Backend::Cpu,
        deterministic: true,
        run: philox,
    },
    Impl {
        name: "cuda_philox",
        backend: Backend::Cuda,
        deterministic: true,
        run: |x, p, start| cuda::ops::dropout(x, p, 1.0 / (1.0 - p), start),
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
    let shape = x.len().to_string();
    let (y, mask) = ctx.dispatch("dropout", &shape, IMPLS, |f| f(x, p, start))?;
    ctx.record("dropout", &[x.into()], (&y).into());
    Ok((y, mask))
}

/// The mask from the stream's uniforms on the CPU.
fn philox(x: &[f32], p: f32, start: Stream) -> Result<(Vec<f32>, Vec<bool>)> {
    let mut s = start;
    let u = s.uniform(x.len());
    let scale = 1.0 / (1.0 - p);
    let mask: Vec<bool> = u.par_iter().map(|&u| u >= p).collect();
    let y: Vec<f32> = x
        .par_iter()
        .zip(&mask)
        .map(|(&v, &k)| if k { v * scale } else { 0.0 })
        .collect();
    Ok((y, mask))
}
