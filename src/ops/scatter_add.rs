//! `scatter_add` (index_add, embedding backward): `out[index[i], :] += src[i, :]` for
//! `src: [n × d]`, `index: [n]` in `0..m`, `out: [m × d]` starting from zero.
//!
//! CPU implementations: `atomic_cas` (nondeterministic: rows added with float atomics from
//! rayon tasks) and `sorted_segments` (deterministic: a stable counting sort by index, then each
//! output row sums its source rows in ascending source order).

use crate::backend::{cpu, Backend};
use crate::case::{Algo, Ctx};
use anyhow::{bail, Result};
use rayon::prelude::*;

/// Implementations in fixed-choice order.
pub const ALGOS: &[Algo] = &[
    Algo {
        name: "atomic_cas",
        backend: Backend::Cpu,
        deterministic: false,
    },
    Algo {
        name: "sorted_segments",
        backend: Backend::Cpu,
        deterministic: true,
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
    super::check_len("scatter_add", "src", src.len(), n * d)?;
    if let Some((pos, &bad)) = index
        .iter()
        .enumerate()
        .find(|(_, &i)| i < 0 || i as usize >= m)
    {
        bail!("`scatter_add`: index[{pos}] = {bad} is outside 0..{m}");
    }
    let out = ctx.dispatch("scatter_add", &format!("{n}x{d}->{m}"), ALGOS, |a| {
        Ok(match a.name {
            "atomic_cas" => {
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
                cpu::atomic_into_f32(out)
            }
            "sorted_segments" => sorted_segments(src, index, m, d),
            other => unreachable!("scatter_add implementation {other}"),
        })
    })?;
    ctx.record("scatter_add", &[src.into(), index.into()], (&out).into());
    Ok(out)
}

fn sorted_segments(src: &[f32], index: &[i64], m: usize, d: usize) -> Vec<f32> {
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
