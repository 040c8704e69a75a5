//! `philox`: `n` words of a Philox4x32-10 stream from its current offset (see [`crate::rng`]).
//! `counter` fills them on the CPU, `cuda_counter` with `kernels/philox.cu`; both are pure
//! functions of the word index, so they are identical for any thread count or grid size and
//! across devices.

use crate::backend::{cuda, Backend};
use crate::case::{Algo, Ctx};
use crate::rng::Stream;
use crate::trace::TraceArg;
use anyhow::Result;

/// Implementations in fixed-choice order.
pub const ALGOS: &[Algo] = &[
    Algo {
        name: "counter",
        backend: Backend::Cpu,
        deterministic: true,
    },
    Algo {
        name: "cuda_counter",
        backend: Backend::Cuda,
        deterministic: true,
    },
];

/// The next `n` words of `stream` (advanced by `n`).
pub fn random_words(ctx: &mut Ctx, stream: &mut Stream, n: usize) -> Result<Vec<u32>> {
    let start = *stream;
    stream.offset += n as u64;
    let w = ctx.dispatch("philox", &n.to_string(), ALGOS, |a| {
        Ok(match a.name {
            "counter" => {
                let mut s = start;
                let mut w = vec![0u32; n];
                s.fill_u32(&mut w);
                w
            }
            "cuda_counter" => cuda::ops::philox_fill(start, n, None)?,
            other => unreachable!("philox implementation {other}"),
        })
    })?;
    // Traced with the stream address (seed, stream, offset; bits as i64) as its input.
    let address = [start.seed, start.stream, start.offset].map(|v| v as i64);
    ctx.record("philox", &[TraceArg::I64(&address)], TraceArg::U32(&w));
    Ok(w)
}
