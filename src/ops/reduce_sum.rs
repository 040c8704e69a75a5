//! `reduce_sum`: the sum of all elements of an f32 buffer.
//!
//! CPU implementations: `atomic_cas` (nondeterministic: each 16 Ki-element chunk's partial sum is
//! added into one float with compare-and-swap, in whatever order the threads finish),
//! `rayon_sum` (nondeterministic: `par_iter().sum()`, whose split follows work stealing), and
//! `chunked_tree` (deterministic: the same chunk partials combined by a fixed pairwise tree).
//!
//! CUDA implementations (`kernels/reduce_sum.cu`): `cuda_atomic` (nondeterministic: per-block
//! tree sums added with `atomicAdd`) and `cuda_tree` (deterministic: `chunked_tree`'s exact
//! order on the GPU, so bit-identical to the CPU).

use crate::backend::{cpu, cuda, Backend};
use crate::case::{Ctx, Impl};
use anyhow::Result;
use rayon::prelude::*;

use cpu::SUM_CHUNK as CHUNK;

/// An implementation: the sum of a buffer.
pub type SumFn = fn(&[f32]) -> Result<f32>;

/// Implementations in fixed-choice order.
pub const IMPLS: &[Impl<SumFn>] = &[
    Impl {
        name: "atomic_cas",
        backend: Backend::Cpu,
        deterministic: false,
        run: atomic_cas,
    },
    Impl {
        name: "rayon_sum",
        backend: Backend::Cpu,
        deterministic: false,
        run: |x| Ok(x.par_iter().sum()),
    },
    Impl {
        name: "chunked_tree",
        backend: Backend::Cpu,
        deterministic: true,
        run: chunked_tree,
    },
    Impl {
        name: "cuda_atomic",
        backend: Backend::Cuda,
        deterministic: false,
        run: cuda::ops::reduce_sum_atomic,
    },
    Impl {
        name: "cuda_tree",
        backend: Backend::Cuda,
        deterministic: true,
        run: cuda::ops::reduce_sum_tree,
    },
];

/// Sum of `x` by the implementation the controls pick.
pub fn reduce_sum(ctx: &mut Ctx, x: &[f32]) -> Result<f32> {
    let shape = x.len().to_string();
    let s = ctx.dispatch("reduce_sum", &shape, IMPLS, |f| f(x))?;
    ctx.record("reduce_sum", &[x.into()], s.into());
    Ok(s)
}

/// Chunk partial sums added into one float with compare-and-swap, in completion order.
fn atomic_cas(x: &[f32]) -> Result<f32> {
    let acc = std::sync::atomic::AtomicU32::new(0);
    x.par_chunks(CHUNK)
        .for_each(|c| cpu::atomic_add_f32(&acc, cpu::chunk_sum(c)));
    Ok(f32::from_bits(acc.into_inner()))
}

/// Chunk partial sums combined by a fixed pairwise tree.
fn chunked_tree(x: &[f32]) -> Result<f32> {
    let partials: Vec<f32> = x.par_chunks(CHUNK).map(cpu::chunk_sum).collect();
    Ok(cpu::pairwise_sum(&partials))
}
