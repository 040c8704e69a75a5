//! `scatter_add` (index_add, embedding backward): `out[index[i], :] += src[i, :]` for
//! `src: [n × d]`, `index: [n]` in `0..m`, `out: [m × d]` starting from zero.
//!
//! CPU implementations: `atomic_cas` (nondeterministic: rows added with float atomics from
//! rayon tasks) and `sorted_segments` (deterministic: a stable counting sort by index, then each
//! output row sums its source rows in ascending source order).
//!
//! CUDA implementations (`kernels/scatter_add.cu`): `cuda_atomic` (nondeterministic:
//! `atomicAdd` per element) and `cuda_sorted` (deterministic: the same stable sort of the integer
//! indices, done on the host, then segmented sums on the GPU in ascending source order:
//! bit-identical to `sorted_segments`).

use crate::backend::{cpu, cuda, Backend};
use crate::case::{Ctx, Impl};
use anyhow::{bail, Result};
use rayon::prelude::*;

/// An implementation: `m × d` output rows, `out[index[i], :] += src[i, :]` (indices checked).
pub type ScatterFn = fn(src: &[f32], index: &[i64], m: usize, d: usize) -> Result<Vec<f32>>;

/// Implementations in fixed-choice order.
pub const IMPLS: &[Impl<ScatterFn>] = &[
    Impl {
        name: "atomic_cas",
        backend: Backend::Cpu,
        deterministic: false,
        run: atomic_cas,
    },
    Impl {
        name: "sorted_segments",
        backend: Backend::Cpu,
        deterministic: true,
        run: |src, index, m, d| Ok(sorted_segments(src, index, m, d)),
    },
    Impl {
        name: "cuda_atomic",
        backend: Backend::Cuda,
        deterministic: false,
        run: cuda::ops::scatter_add_atomic,
    },
    Impl {
        name: "cuda_sorted",
        backend: Backend::Cuda,
        deterministic: true,
        run: cuda_sorted,
    },
];

/// Scatter-adds rows of `src` (`n × d`) into `m` output rows chosen by `index`.
pub fn scatter_add(
    ctx: &mut Ctx,
    src: &[f32],
    index: &[i64],
    m: usize,
    d: usize,
) -> Result<Vec<f32>> {
    let n = index.len();
    super::expect_len("scatter_add", "src", src.len(), n * d)?;
    if let Some((pos, &bad)) = index
        .iter()
        .enumerate()
        .find(|(_, &i)| i < 0 || i as usize >= m)
    {
        bail!("`scatter_add`: index[{pos}] = {bad} is outside 0..{m}");
    }
    let shape = format!("{n}x{d}->{m}");
    let out = ctx.dispatch("scatter_add", &shape, IMPLS, |f| f(src, index, m, d))?;
    ctx.record("scatter_add", &[src.into(), index.into()], (&out).into());
    Ok(out)
}

/// Rows added with float atomics from rayon tasks of 64 rows.
fn atomic_cas(src: &[f32], index: &[i64], m: usize, d: usize) -> Result<Vec<f32>> {
    let out = cpu::atomic_zeros(m * d);
    src.par_chunks(d.max(1) * 64)
        .enumerate()
        .for_each(|(blk, rows)| {
            for (r, row) in rows.chunks(d.max(1)).enumerate() {
                let dst = index[blk * 64 + r] as usize * d;
                for (j, v) in row.iter().enumerate() {
                    cpu::atomic_add_f32(&out[dst + j], *v);
                }
            }
        });
    Ok(cpu::atomic_into_f32(out))
}

/// The stable sort on the host, then segmented sums on the GPU.
fn cuda_sorted(src: &[f32], index: &[i64], m: usize, d: usize) -> Result<Vec<f32>> {
    let (start, order) = sort_by_index(index, m);
    let as64 = |v: Vec<usize>| v.into_iter().map(|x| x as u64).collect::<Vec<u64>>();
    cuda::ops::scatter_add_sorted(src, &as64(order), &as64(start), m, d)
}

/// Stable counting sort of source rows by index: `(start, order)` where output row `r`'s
/// source rows, ascending, are `order[start[r]..start[r + 1]]`.
pub fn sort_by_index(index: &[i64], m: usize) -> (Vec<usize>, Vec<usize>) {
    let mut start = vec![0usize; m + 1];
    for &i in index {
        start[i as usize + 1] += 1;
    }
    for r in 0..m {
        start[r + 1] += start[r];
    }
    let mut next = start.clone();
    let mut order = vec![0usize; index.len()];
    for (pos, &i) in index.iter().enumerate() {
        order[next[i as usize]] = pos;
        next[i as usize] += 1;
    }
    (start, order)
}

fn sorted_segments(src: &[f32], index: &[i64], m: usize, d: usize) -> Vec<f32> {
    let (start, order) = sort_by_index(index, m);
    let mut out = vec![0.0f32; m * d];
    out.par_chunks_mut(d.max(1))
        .enumerate()
        .for_each(|(r, orow)| {
            for &pos in &order[start[r]..start[r + 1]] {
                for (o, v) in orow.iter_mut().zip(&src[pos * d..(pos + 1) * d]) {
                    *o += v;
                }
            }
        });
    out
}
