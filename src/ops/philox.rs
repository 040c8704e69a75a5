//! `philox`: `n` words of a Philox4x32-10 stream from its current offset (see [`crate::rng`]).
//! `counter` fills them on the CPU, `cuda_counter` with `kernels/philox.cu`; both are pure
//! functions of the word index, so they are identical for any thread count or grid size and
//! across devices.

use crate::backend::{cuda, Backend};
use crate::case::{Ctx, Impl};
use crate::rng::Stream;
use crate::trace::TraceArg;
use anyhow::Result;

/// An implementation: the `n` words of a stream from its offset (the stream is not advanced).
pub type WordsFn = fn(start: Stream, n: usize) -> Result<Vec<u32>>;

/// Implementations in fixed-choice order.
pub const IMPLS: &[Impl<WordsFn>] = &[
    Impl {
        name: "counter",
        backend: Backend::Cpu,
        deterministic: true,
        run: counter,
    },
    Impl {
        name: "cuda_counter",
        backend: Backend::Cuda,
        deterministic: true,
        run: |start, n| cuda::ops::philox_fill(start, n, None),
    },
];

/// The next `n` words of `stream` (advanced by `n`).
pub fn random_words(ctx: &mut Ctx, stream: &mut Stream, n: usize) -> Result<Vec<u32>> {
    let start = *stream;
    stream.offset += n as u64;
    let w = ctx.dispatch("philox", &n.to_string(), IMPLS, |f| f(start, n))?;
    // Traced with the stream address (seed, stream, offset; bits as i64) as its input.
    let address = [start.seed, start.stream, start.offset].map(|v| v as i64);
    ctx.record("philox", &[TraceArg::I64(&address)], TraceArg::U32(&w));
    Ok(w)
}

/// The words on the CPU, Philox block by block.
fn counter(start: Stream, n: usize) -> Result<Vec<u32>> {
    let mut s = start;
    let mut w = vec![0u32; n];
    s.fill_u32(&mut w);
    Ok(w)
}
