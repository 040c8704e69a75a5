//! `matmul`: `C[m×n] = A[m×k] · B[k×n]`, f32, row-major.
//!
//! CPU implementations: `split_k4_atomic` / `split_k16_atomic` (nondeterministic: `k` is cut into
//! 4 or 16 segments computed in parallel whose partial products are added into `C` with float
//! atomics, in whatever order they finish) and `tiled_r8` / `tiled_r32` (deterministic: blocks of
//! 8 or 32 rows in parallel, every element accumulated over `k` in ascending order, so both tile
//! sizes give the same bits). `adaptive_split` is deterministic but NOT batch-invariant: for
//! fewer than 64 rows it splits `k` into 4 segments summed in a fixed order (more parallelism
//! for small batches, like shape-dependent library heuristics), otherwise it runs `tiled_r32`;
//! so a row's bits depend on the batch it is computed in. Benchmark mode times all allowed
//! candidates per shape.
//!
//! CUDA implementations (`kernels/matmul.cu`): `cuda_splitk4_atomic` / `cuda_splitk16_atomic`
//! (nondeterministic: split-K with `atomicAdd`) and `cuda_tiled16` / `cuda_tiled32`
//! (deterministic, shared-memory tiles, `k` ascending without FMA: bit-identical to the CPU's
//! tiled kernels). Benchmark mode times them with CUDA events.

use crate::backend::cuda::ops::{self as gpu, TILED16, TILED32};
use crate::backend::{cpu, Backend};
use crate::case::{Ctx, Impl};
use anyhow::Result;
use rayon::prelude::*;
use std::ops::Range;

/// An implementation: `A · B` for `dims = (m, k, n)`.
pub type MatmulFn = fn(a: &[f32], b: &[f32], dims: (usize, usize, usize)) -> Result<Vec<f32>>;

/// Implementations in fixed-choice order.
pub const IMPLS: &[Impl<MatmulFn>] = &[
    Impl {
        name: "split_k4_atomic",
        backend: Backend::Cpu,
        deterministic: false,
        run: |a, b, (m, k, n)| Ok(split_k(a, b, m, k, n, 4)),
    },
    Impl {
        name: "split_k16_atomic",
        backend: Backend::Cpu,
        deterministic: false,
        run: |a, b, (m, k, n)| Ok(split_k(a, b, m, k, n, 16)),
    },
    Impl {
        name: "tiled_r8",
        backend: Backend::Cpu,
        deterministic: true,
        run: |a, b, (m, k, n)| Ok(tiled(a, b, m, k, n, 8)),
    },
    Impl {
        name: "tiled_r32",
        backend: Backend::Cpu,
        deterministic: true,
        run: |a, b, (m, k, n)| Ok(tiled(a, b, m, k, n, 32)),
    },
    Impl {
        name: "adaptive_split",
        backend: Backend::Cpu,
        deterministic: true,
        run: adaptive_split,
    },
    Impl {
        name: "cuda_splitk4_atomic",
        backend: Backend::Cuda,
        deterministic: false,
        run: |a, b, dims| gpu::matmul_splitk_atomic(a, b, dims, 4),
    },
    Impl {
        name: "cuda_splitk16_atomic",
        backend: Backend::Cuda,
        deterministic: false,
        run: |a, b, dims| gpu::matmul_splitk_atomic(a, b, dims, 16),
    },
    Impl {
        name: "cuda_tiled16",
        backend: Backend::Cuda,
        deterministic: true,
        run: |a, b, dims| gpu::matmul_tiled(a, b, dims, TILED16),
    },
    Impl {
        name: "cuda_tiled32",
        backend: Backend::Cuda,
        deterministic: true,
        run: |a, b, dims| gpu::matmul_tiled(a, b, dims, TILED32),
    },
];

/// Depth of the `k` blocks of the tiled kernel (keeps a block of `B` in cache).
const K_BLOCK: usize = 128;

/// `A · B` by the implementation the controls pick.
pub fn matmul(
    ctx: &mut Ctx,
    a: &[f32],
    b: &[f32],
    m: usize,
    k: usize,
    n: usize,
) -> Result<Vec<f32>> {
    super::expect_len("matmul", "a", a.len(), m * k)?;
    super::expect_len("matmul", "b", b.len(), k * n)?;
    let shape = format!("{m}x{k}x{n}");
    let c = ctx.dispatch("matmul", &shape, IMPLS, |f| f(a, b, (m, k, n)))?;
    ctx.record("matmul", &[a.into(), b.into()], (&c).into());
    Ok(c)
}

/// Split-K in a fixed order below 64 rows, else `tiled_r32`: deterministic, not batch-invariant.
fn adaptive_split(a: &[f32], b: &[f32], (m, k, n): (usize, usize, usize)) -> Result<Vec<f32>> {
    Ok(if m < 64 {
        split_k_fixed(a, b, m, k, n, 4)
    } else {
        tiled(a, b, m, k, n, 32)
    })
}

/// Accumulates rows `rows` of `A[:, ks] · B[ks, :]` into `c` (rows × n), `k` ascending.
fn accumulate(
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    rows: Range<usize>,
    (k, n): (usize, usize),
    ks: Range<usize>,
) {
    let mut kb = ks.start;
    while kb < ks.end {
        let ke = (kb + K_BLOCK).min(ks.end);
        for (ci, i) in c.chunks_mut(n).zip(rows.clone()) {
            let arow = &a[i * k..(i + 1) * k];
            for (kk, &av) in arow.iter().enumerate().take(ke).skip(kb) {
                let brow = &b[kk * n..(kk + 1) * n];
                for (cv, bv) in ci.iter_mut().zip(brow) {
                    *cv += av * bv;
                }
            }
        }
        kb = ke;
    }
}

fn tiled(a: &[f32], b: &[f32], m: usize, k: usize, n: usize, rows: usize) -> Vec<f32> {
    let mut c = vec![0.0f32; m * n];
    c.par_chunks_mut(rows * n.max(1))
        .enumerate()
        .for_each(|(blk, cb)| {
            let r0 = blk * rows;
            accumulate(a, b, cb, r0..r0 + cb.len() / n.max(1), (k, n), 0..k);
        });
    c
}

fn split_k(a: &[f32], b: &[f32], m: usize, k: usize, n: usize, splits: usize) -> Vec<f32> {
    let c = cpu::atomic_zeros(m * n);
    let rows = 32;
    let seg = k.div_ceil(splits).max(1);
    let tasks: Vec<(usize, usize)> = (0..m.div_ceil(rows))
        .flat_map(|rb| (0..k.div_ceil(seg)).map(move |s| (rb, s)))
        .collect();
    tasks.par_iter().for_each(|&(rb, s)| {
        let (r0, r1) = (rb * rows, ((rb + 1) * rows).min(m));
        let mut part = vec![0.0f32; (r1 - r0) * n];
        accumulate(
            a,
            b,
            &mut part,
            r0..r1,
            (k, n),
            s * seg..((s + 1) * seg).min(k),
        );
        for (cell, v) in c[r0 * n..r1 * n].iter().zip(&part) {
            cpu::atomic_add_f32(cell, *v);
        }
    });
    cpu::atomic_into_f32(c)
}

/// Split-K with the segment partials summed in segment order (deterministic).
fn split_k_fixed(a: &[f32], b: &[f32], m: usize, k: usize, n: usize, splits: usize) -> Vec<f32> {
    let seg = k.div_ceil(splits).max(1);
    let parts: Vec<Vec<f32>> = (0..k.div_ceil(seg))
        .into_par_iter()
        .map(|s| {
            let mut part = vec![0.0f32; m * n];
            accumulate(
                a,
                b,
                &mut part,
                0..m,
                (k, n),
                s * seg..((s + 1) * seg).min(k),
            );
            part
        })
        .collect();
    let mut c = vec![0.0f32; m * n];
    for p in &parts {
        c.iter_mut().zip(p).for_each(|(c, v)| *c += v);
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_implementations_agree_on_integers() {
        let (m, k, n) = (37, 300, 19);
        let a: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 - 3.0).collect();
        let b: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32 - 2.0).collect();
        let mut want = vec![0.0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                want[i * n + j] = (0..k).map(|kk| a[i * k + kk] * b[kk * n + j]).sum();
            }
        }
        assert_eq!(tiled(&a, &b, m, k, n, 8), want);
        assert_eq!(tiled(&a, &b, m, k, n, 32), want);
        assert_eq!(split_k(&a, &b, m, k, n, 4), want);
        assert_eq!(split_k(&a, &b, m, k, n, 16), want);
        assert_eq!(split_k_fixed(&a, &b, m, k, n, 4), want);
    }
}
