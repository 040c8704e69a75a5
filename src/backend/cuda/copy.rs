//! Non-blocking host ↔ device copies for [`crate::ops::copy`]: page-locked (pinned) host
//! buffers, `cuMemcpyHtoDAsync` and `cuMemcpyDtoHAsync` queued on the backend's stream (through
//! cudarc's `memcpy_htod` / `memcpy_dtoh`), and a stream synchronize before the host reads the
//! result. The pageable path (plain `Vec`s) is timed the same way for the report.

use super::gpu;
use anyhow::{anyhow, Result};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::DriverError;

/// Host → device → host of `x` through pinned buffers on the stream, read after a
/// synchronize; returns the values and the device time of both copies (CUDA events).
pub fn round_trip_pinned(x: &[f32]) -> Result<(Vec<f32>, f64)> {
    let g = gpu()?;
    let err = |what: &'static str| move |e: DriverError| anyhow!("pinned copy ({what}): {e:?}");
    g.ctx.bind_to_thread().map_err(err("bind"))?;
    // SAFETY: both pinned buffers are fully written (the source from `x`, the destination by
    // the device-to-host copy) before they are read.
    let (mut src, mut dst) = unsafe {
        (
            g.ctx
                .alloc_pinned_with_flags::<f32>(x.len(), 0)
                .map_err(err("alloc"))?,
            g.ctx
                .alloc_pinned_with_flags::<f32>(x.len(), 0)
                .map_err(err("alloc"))?,
        )
    };
    src.as_mut_slice().map_err(err("fill"))?.copy_from_slice(x);
    let mut dev = g.zeros::<f32>(x.len())?;
    let s = g.stream();
    let flags = Some(CUevent_flags::CU_EVENT_DEFAULT);
    let start = s.record_event(flags).map_err(err("event"))?;
    s.memcpy_htod(&src, &mut dev).map_err(err("htod"))?;
    s.memcpy_dtoh(&dev, &mut dst).map_err(err("dtoh"))?;
    let end = s.record_event(flags).map_err(err("event"))?;
    s.synchronize().map_err(err("synchronize"))?;
    let ms = start.elapsed_ms(&end).map_err(err("timing"))?;
    let out = dst.as_slice().map_err(err("read"))?.to_vec();
    Ok((out, ms as f64 / 1e3))
}

/// The same round trip through pageable host memory (`Vec`s); returns the values and the
/// device time of both copies.
pub fn round_trip_pageable(x: &[f32]) -> Result<(Vec<f32>, f64)> {
    let g = gpu()?;
    let err = |what: &'static str| move |e: DriverError| anyhow!("pageable copy ({what}): {e:?}");
    let mut dev = g.zeros::<f32>(x.len())?;
    let mut out = vec![0.0f32; x.len()];
    let s = g.stream();
    let flags = Some(CUevent_flags::CU_EVENT_DEFAULT);
    let start = s.record_event(flags).map_err(err("event"))?;
    s.memcpy_htod(x, &mut dev).map_err(err("htod"))?;
    s.memcpy_dtoh(&dev, &mut out).map_err(err("dtoh"))?;
    let end = s.record_event(flags).map_err(err("event"))?;
    s.synchronize().map_err(err("synchronize"))?;
    let ms = start.elapsed_ms(&end).map_err(err("timing"))?;
    Ok((out, ms as f64 / 1e3))
}
