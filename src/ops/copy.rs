//! `copy`: a non-blocking host → device → host round trip (PyTorch's
//! `tensor.to(device, non_blocking=True)`), read only after an explicit synchronize.
//!
//! * CPU (`async_engine`): a [`CopyEngine`] is a stream served by one worker thread that
//!   copies queued transfers in order, in chunks of [`CHUNK`] words with a pause ([`PACE`])
//!   between chunks (as a DMA engine interleaves with the host), and signals [`Event`]s recorded after
//!   them. The "device" buffer and the host buffers are [`SharedBuf`]s the worker writes while
//!   the host may read them: reading before [`Event::synchronize`] sees a partly copied buffer.
//! * CUDA (`cuda_pinned_async`): page-locked host memory, `cuMemcpyHtoDAsync` and
//!   `cuMemcpyDtoHAsync` on the backend's stream, then a stream synchronize before the host
//!   reads ([`crate::backend::cuda::copy`]), which also times the pageable path for the report.

use crate::backend::{cuda, Backend};
use crate::case::{Ctx, Impl};
use anyhow::{anyhow, Result};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// Words per chunk the CPU copy engine copies before pausing.
pub const CHUNK: usize = 1 << 12;

/// The engine's pause after each chunk (a transfer's pace: a DMA engine shares the memory bus).
pub const PACE: std::time::Duration = std::time::Duration::from_micros(20);

/// An implementation: the round trip of `x` through the device, read after synchronizing.
pub type RoundTripFn = fn(x: &[f32]) -> Result<Vec<f32>>;

/// Implementations in fixed-choice order.
pub const IMPLS: &[Impl<RoundTripFn>] = &[
    Impl {
        name: "async_engine",
        backend: Backend::Cpu,
        deterministic: true,
        run: |x| round_trip_cpu(x, true, 0.0),
    },
    Impl {
        name: "cuda_pinned_async",
        backend: Backend::Cuda,
        deterministic: true,
        run: |x| cuda::copy::round_trip_pinned(x).map(|(y, _)| y),
    },
];

/// The round trip of `x` through the device by the implementation the controls pick,
/// recorded in the trace as `copy`.
pub fn round_trip(ctx: &mut Ctx, x: &[f32]) -> Result<Vec<f32>> {
    let shape = x.len().to_string();
    let y = ctx.dispatch("copy", &shape, IMPLS, |f| f(x))?;
    ctx.record("copy", &[x.into()], (&y).into());
    Ok(y)
}

/// A buffer the copy engine writes while the host may read it (f32 values as atomic words,
/// so a racing read is a stale value, never undefined behaviour).
#[derive(Clone, Debug)]
pub struct SharedBuf(Arc<[AtomicU32]>);

impl SharedBuf {
    /// A buffer holding `x`.
    pub fn from_f32(x: &[f32]) -> SharedBuf {
        SharedBuf(x.iter().map(|v| AtomicU32::new(v.to_bits())).collect())
    }

    /// `n` elements equal to `fill` (what fresh memory holds before the copy lands).
    pub fn filled(n: usize, fill: f32) -> SharedBuf {
        SharedBuf((0..n).map(|_| AtomicU32::new(fill.to_bits())).collect())
    }

    /// Elements.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The values now (whatever the engine has written so far).
    pub fn read(&self) -> Vec<f32> {
        self.0
            .iter()
            .map(|w| f32::from_bits(w.load(Ordering::Relaxed)))
            .collect()
    }
}

/// Signalled by the copy engine when everything queued before it has been copied.
#[derive(Clone, Debug, Default)]
pub struct Event(Arc<(Mutex<bool>, Condvar)>);

impl Event {
    /// Whether the work before it has completed.
    pub fn query(&self) -> bool {
        *self.0 .0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until the work before it has completed (after which its writes are visible).
    pub fn synchronize(&self) {
        let (done, cv) = &*self.0;
        let mut d = done.lock().unwrap_or_else(|e| e.into_inner());
        while !*d {
            d = cv.wait(d).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn signal(&self) {
        let (done, cv) = &*self.0;
        *done.lock().unwrap_or_else(|e| e.into_inner()) = true;
        cv.notify_all();
    }
}

enum Job {
    Copy(SharedBuf, SharedBuf),
    Signal(Event),
}

/// A copy stream on the CPU backend: one worker thread serving transfers in queue order.
pub struct CopyEngine {
    tx: Option<mpsc::Sender<Job>>,
    worker: Option<JoinHandle<()>>,
}

impl CopyEngine {
    /// Starts the engine's worker.
    pub fn new() -> Result<CopyEngine> {
        let (tx, rx) = mpsc::channel::<Job>();
        let worker = std::thread::Builder::new()
            .name("bitexact-copy".into())
            .spawn(move || {
                for job in rx {
                    match job {
                        Job::Copy(src, dst) => {
                            for (s, d) in src.0.chunks(CHUNK).zip(dst.0.chunks(CHUNK)) {
                                for (s, d) in s.iter().zip(d) {
                                    d.store(s.load(Ordering::Relaxed), Ordering::Relaxed);
                                }
                                std::thread::sleep(PACE);
                            }
                        }
                        Job::Signal(e) => e.signal(),
                    }
                }
            })
            .map_err(|e| anyhow!("cannot start the copy engine: {e}"))?;
        Ok(CopyEngine {
            tx: Some(tx),
            worker: Some(worker),
        })
    }

    fn send(&self, job: Job) -> Result<()> {
        self.tx
            .as_ref()
            .and_then(|tx| tx.send(job).ok())
            .ok_or_else(|| anyhow!("the copy engine has stopped"))
    }

    /// Queues a copy of `src` into `dst` (as many elements as both have) and returns at once.
    pub fn copy_async(&self, src: &SharedBuf, dst: &SharedBuf) -> Result<()> {
        self.send(Job::Copy(src.clone(), dst.clone()))
    }

    /// An event signalled when everything queued so far has been copied.
    pub fn record_event(&self) -> Result<Event> {
        let e = Event::default();
        self.send(Job::Signal(e.clone()))?;
        Ok(e)
    }

    /// Waits until everything queued so far has been copied.
    pub fn synchronize(&self) -> Result<()> {
        self.record_event()?.synchronize();
        Ok(())
    }
}

impl Drop for CopyEngine {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

/// Host → device → host on the CPU copy engine. The destination starts as `fill`. With
/// `sync` the host synchronizes the stream before reading (correct); without it (the PLANTED
/// bug) it waits only for the event recorded after the upload, then reads the destination
/// (last chunk first) while the download is still being copied, and sees whatever has landed.
pub fn round_trip_cpu(x: &[f32], sync: bool, fill: f32) -> Result<Vec<f32>> {
    let engine = CopyEngine::new()?;
    let host = SharedBuf::from_f32(x);
    let device = SharedBuf::filled(x.len(), fill);
    let back = SharedBuf::filled(x.len(), fill);
    engine.copy_async(&host, &device)?;
    let uploaded = engine.record_event()?;
    engine.copy_async(&device, &back)?;
    if sync {
        engine.synchronize()?;
        return Ok(back.read());
    }
    uploaded.synchronize();
    // The host consumes the destination chunk by chunk from the end (as a backward pass walks
    // layers in reverse), at the engine's pace, while the engine fills it from the start:
    // where the two meet depends on scheduling, so each run reads a different mix.
    let mut out = vec![0.0f32; x.len()];
    let starts: Vec<usize> = (0..x.len()).step_by(CHUNK).collect();
    for &k in starts.iter().rev() {
        let end = (k + CHUNK).min(x.len());
        for (o, w) in out[k..end].iter_mut().zip(&back.0[k..end]) {
            *o = f32::from_bits(w.load(Ordering::Relaxed));
        }
        std::thread::sleep(PACE);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synchronized_round_trip_is_exact_and_events_complete() {
        let x: Vec<f32> = (0..3 * CHUNK + 5).map(|i| i as f32 * 0.5 - 7.0).collect();
        assert_eq!(round_trip_cpu(&x, true, f32::NAN).unwrap(), x);
        let engine = CopyEngine::new().unwrap();
        let (a, b) = (SharedBuf::from_f32(&x), SharedBuf::filled(x.len(), 0.0));
        engine.copy_async(&a, &b).unwrap();
        let e = engine.record_event().unwrap();
        e.synchronize();
        assert!(e.query());
        assert_eq!(b.read(), x);
    }
}
