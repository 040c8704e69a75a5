//! `col_sum`: the column sums of a `[rows × cols]` f32 buffer (a bias gradient: the sum over
//! the batch of the output gradient). Added for the training step.
//!
//! CPU implementations: `atomic_rows` (nondeterministic: rows are added into the output with
//! float atomics from rayon tasks of [`ATOMIC_ROWS`] rows, in whatever order the tasks run —
//! what a GPU kernel with one thread block per few rows and `atomicAdd` does) and `fixed_rows`
//! (deterministic: columns in parallel blocks, each column summed over rows in ascending order).
//!
//! CUDA implementations (`kernels/col_sum.cu`): `cuda_atomic` (row pairs added with
//! `atomicAdd`) and `cuda_fixed` (one thread per column, rows in ascending order: bit-identical
//! to `fixed_rows`).

use crate::backend::{cpu, cuda, Backend};
use crate::case::{Ctx, Impl};
use anyhow::Result;
use rayon::prelude::*;

/// An implementation: the column sums of `x` (`rows × cols`).
pub type ColSumFn = fn(x: &[f32], rows: usize, cols: usize) -> Result<Vec<f32>>;

/// Implementations in fixed-choice order.
pub const IMPLS: &[Impl<ColSumFn>] = &[
    Impl {
        name: "atomic_rows",
        backend: Backend::Cpu,
        deterministic: false,
        run: atomic_rows,
    },
    Impl {
        name: "fixed_rows",
        backend: Backend::Cpu,
        deterministic: true,
        run: |x, rows, cols| Ok(fixed_rows(x, rows, cols)),
    },
    Impl {
        name: "cuda_atomic",
        backend: Backend::Cuda,
        deterministic: false,
        run: cuda::ops::col_sum_atomic,
    },
    Impl {
        name: "cuda_fixed",
        backend: Backend::Cuda,
        deterministic: true,
        run: cuda::ops::col_sum_fixed,
    },
];

/// Rows per task of `atomic_rows` (small, so tasks of both threads interleave on the output).
pub const ATOMIC_ROWS: usize = 2;

/// Columns per parallel block of `fixed_rows`.
const COL_BLOCK: usize = 64;

/// Column sums of `x` (`rows × cols`).
pub fn col_sum(ctx: &mut Ctx, x: &[f32], rows: usize, cols: usize) -> Result<Vec<f32>> {
    super::expect_len("col_sum", "x", x.len(), rows * cols)?;
    let shape = format!("{rows}x{cols}");
    let out = ctx.dispatch("col_sum", &shape, IMPLS, |f| f(x, rows, cols))?;
    ctx.record("col_sum", &[x.into()], (&out).into());
    Ok(out)
}

/// Rows added into the output with float atomics, [`ATOMIC_ROWS`] rows per rayon task.
fn atomic_rows(x: &[f32], _rows: usize, cols: usize) -> Result<Vec<f32>> {
    let out = cpu::atomic_zeros(cols);
    x.par_chunks(ATOMIC_ROWS * cols.max(1)).for_each(|blk| {
        for row in blk.chunks(cols.max(1)) {
            for (cell, v) in out.iter().zip(row) {
                cpu::atomic_add_f32(cell, *v);
            }
        }
    });
    Ok(cpu::atomic_into_f32(out))
}

fn fixed_rows(x: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0.0f32; cols];
    out.par_chunks_mut(COL_BLOCK)
        .enumerate()
        .for_each(|(blk, o)| {
            let c0 = blk * COL_BLOCK;
            for r in 0..rows {
                let row = &x[r * cols + c0..r * cols + c0 + o.len()];
                o.iter_mut().zip(row).for_each(|(o, v)| *o += v);
            }
        });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controls::Controls;

    #[test]
    fn implementations_agree_on_integers() {
        let (rows, cols) = (37, 130);
        let x: Vec<f32> = (0..rows * cols).map(|i| (i % 11) as f32 - 5.0).collect();
        let want: Vec<f32> = (0..cols)
            .map(|c| (0..rows).map(|r| x[r * cols + c]).sum())
            .collect();
        for det in [true, false] {
            let controls = Controls {
                deterministic: det,
                ..Controls::default()
            };
            let mut ctx = Ctx::new(Backend::Cpu, controls);
            assert_eq!(col_sum(&mut ctx, &x, rows, cols).unwrap(), want);
        }
        let mut ctx = Ctx::new(Backend::Cpu, Controls::default());
        let e = col_sum(&mut ctx, &x[1..], rows, cols).unwrap_err();
        assert!(e.to_string().contains("`col_sum`: `x`"));
    }
}
