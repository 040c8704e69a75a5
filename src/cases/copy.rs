//! `copy/...` cases: the non-blocking transfer practice (`tensor.to(device, non_blocking=True)`
//! is only safe to read after a synchronize).
//!
//! * `copy/non_blocking` — a host → device → host round trip queued asynchronously
//!   ([`crate::ops::copy`]) and read after an explicit synchronize: it must return the source
//!   bit for bit (else a finding). On CUDA it uses pinned memory and the notes show pinned
//!   versus pageable transfer time.
//! * `copy/planted_read_before_sync` — reads the destination as soon as the copies are
//!   queued: it sees a partly copied buffer (the rest still holds what fresh memory held), so
//!   the runs differ and localization names the `copy` op; the case also counts the stale
//!   elements itself and reports them.

use crate::case::{Case, Ctx, Outputs};
use crate::ops::copy;
use crate::rng::Stream;
use crate::tensor::Tensor;
use crate::Backend;
use anyhow::Result;

/// Elements copied (1 MiB of f32).
pub const ELEMENTS: usize = 1 << 18;

struct CopyCase {
    planted: bool,
}

/// The copy cases.
pub fn cases() -> Vec<Box<dyn Case>> {
    vec![
        Box::new(CopyCase { planted: false }),
        Box::new(CopyCase { planted: true }),
    ]
}

impl Case for CopyCase {
    fn name(&self) -> String {
        if self.planted {
            "copy/planted_read_before_sync".into()
        } else {
            "copy/non_blocking".into()
        }
    }
    fn backends(&self) -> Vec<Backend> {
        if self.planted {
            vec![Backend::Cpu]
        } else {
            vec![Backend::Cpu, Backend::Cuda]
        }
    }
    fn ops(&self) -> Vec<&'static str> {
        vec!["copy"]
    }
    fn planted_bug(&self) -> Option<&'static str> {
        self.planted.then_some(
            "reads the destination of a non-blocking device-to-host copy before synchronizing",
        )
    }
    fn run(&self, ctx: &mut Ctx) -> Result<Outputs> {
        let x = Stream::named(ctx.controls.seed, "copy/source").normal(ELEMENTS);
        let y = if self.planted {
            // What fresh memory holds: zeros, or the poison pattern under `--vary poison`.
            let fill = ctx.scratch_f32(1)[0];
            let y = copy::round_trip_cpu(&x, false, fill)?;
            ctx.last_algorithm = "async_engine (read before synchronize)";
            ctx.record("copy", &[x.as_slice().into()], (&y).into());
            y
        } else {
            copy::round_trip(ctx, &x)?
        };
        let stale: Vec<usize> = (0..x.len())
            .filter(|&i| x[i].to_bits() != y[i].to_bits())
            .collect();
        if let Some(first) = stale.first() {
            ctx.findings.push(format!(
                "copy: the round trip read back {} of {} elements that do not hold the copied values (first at [{first}]): the destination was read before the copy completed",
                stale.len(),
                x.len()
            ));
        }
        if ctx.backend == Backend::Cuda {
            let (_, pinned) = crate::backend::cuda::copy::round_trip_pinned(&x)?;
            let (_, pageable) = crate::backend::cuda::copy::round_trip_pageable(&x)?;
            ctx.notes.push(format!(
                "host → device → host of {} MiB: pinned {:.3} ms, pageable {:.3} ms ({:.1}× faster pinned)",
                (ELEMENTS * 4) >> 20,
                pinned * 1e3,
                pageable * 1e3,
                pageable / pinned.max(1e-12)
            ));
        }
        Ok(Outputs::new().with("round_trip", Tensor::from_slice(&[ELEMENTS], &y)))
    }
}
