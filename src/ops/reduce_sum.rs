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
use crate::case::{Algo, Ctx};
use anyhow::Result;
use rayon::prelude::*;

/// Elements per chunk of the chunked implementations.
pub const CHUNK: usize = 1 << 14;

/// Implementations in fixed-choice order.
pub const ALGOS: &[Algo] = &[
    Algo {
        name: "atomic_cas",
        backend: Backend::Cpu,
        deterministic: false,
    },
    Algo {
        name: "rayon_sum",
        backend: Backend::Cpu,
        deterministic: false,
    },
    Algo {
        name: "chunked_tree",
        backend: Backend::Cpu,
        deterministic: true,
    },
    Algo {
        name: "cuda_atomic",
        backend: Backend::Cuda,
        deterministic: false,
    },
    Algo {
        name: "cuda_tree",
        backend: Backend::Cuda,
        deterministic: true,
    },
];

/// Sum of `x` by the implementation the controls pick.
pub fn reduce_sum(ctx: &mut Ctx, x: &[f32]) -> Result<f32> {
    let shape = x.len().to_string();
    let s = ctx.dispatch("reduce_sum", &shape, ALGOS, |a| {
        Ok(match a.name {
            "atomic_cas" => {
                let acc = std::sync::atomic::AtomicU32::new(0);
                x.par_chunks(CHUNK)
                    .for_each(|c| cpu::atomic_add_f32(&acc, cpu::chunk_sum(c)));
                f32::from_bits(acc.into_inner())
            }
            "rayon_sum" => x.par_iter().sum(),
            "chunked_tree" => {
                let partials: Vec<f32> = x.par_chunks(CHUNK).map(cpu::chunk_sum).collect();
                cpu::pairwise_sum(&partials)
            }
            "cuda_atomic" => cuda::ops::reduce_sum(x, true)?,
            "cuda_tree" => cuda::ops::reduce_sum(x, false)?,
            other => unreachable!("reduce_sum implementation {other}"),
        })
    })?;
    ctx.record("reduce_sum", &[x.into()], s.into());
    Ok(s)
}
