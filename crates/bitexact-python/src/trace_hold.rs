//! [`Held`]: the values of tensors an op is about to write in place, taken for the background
//! writer ([`super::trace_writer::TraceWriter::hold`]) before the op runs, and handed to the
//! op's record when it is written.
//!
//! An in-place op's record lists the tensor it writes among its inputs as it was before the op
//! (`python/bitexact/_trace/writes.py`). Hashing those bytes on the program's thread, as
//! [`super::trace::trace_digests`] does, costs a fingerprint each time the tensor was written
//! by the op just before (an optimizer's `exp_avg_sq.mul_(b2).addcmul_(g, g)`): that op's cache
//! entry is still being hashed by the writer, so the lookup misses. Held, such a tensor waits
//! for that entry instead (its bytes are checked, as any cache hit's, by an XXH3-128), and one
//! the cache has not seen is copied for the writer's thread to hash. A copy is never filed in
//! the cache: a record queued before this one could then wait for a digest that only a later
//! record makes, and the writer, which handles records in order, would wait forever.

use super::copy_pool::{copy, copy_raw, recycle, SharedPool};
use super::trace::{self, CacheMap};
use super::trace_record::{raw_copy, Slot, Source};
use super::Host;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use twox_hash::XxHash3_128;

/// Tensors' values taken before an op, in order: the op's record lists the object once per
/// tensor among its `items` (`TraceWriter.write`), and each occurrence takes the next one. An
/// object dropped before its record is written (the op raised) gives its copies back.
#[pyclass(module = "bitexact._native", frozen)]
pub struct Held {
    slots: Mutex<VecDeque<Slot>>,
    queued: Arc<AtomicUsize>,
    pool: SharedPool,
}

impl Held {
    /// Values taken into `slots`, whose copies count in the writer's `queued` bytes.
    pub(crate) fn new(slots: VecDeque<Slot>, queued: Arc<AtomicUsize>, pool: SharedPool) -> Held {
        Held {
            slots: Mutex::new(slots),
            queued,
            pool,
        }
    }

    /// The next tensor's slot, for the record being written.
    pub(crate) fn take(&self) -> PyResult<Slot> {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots.pop_front().ok_or_else(|| {
            PyValueError::new_err("a record names held values more times than were held")
        })
    }
}

#[pymethods]
impl Held {
    /// How many tensors' values are still held (not yet taken by a record).
    fn __len__(&self) -> usize {
        self.slots.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

impl Drop for Held {
    /// Gives back the copies no record took: their bytes leave the writer's count.
    fn drop(&mut self) {
        let slots = std::mem::take(self.slots.get_mut().unwrap_or_else(|e| e.into_inner()));
        for s in slots {
            if let Source::Hash(buf, _, _) = s.source {
                self.queued.fetch_sub(buf.len(), Ordering::Relaxed);
                recycle(&self.pool, buf);
            }
        }
    }
}

/// The slot of `host` as it is now: the digest of the cache entry `c` has for its bytes
/// (ready, or one the writer is still making: waited for), else (`use_cache` off, or a miss) a
/// copy for the writer's thread, counted in `queued`, or, past `limit` queued bytes, its
/// fingerprint made now. Never filed in the cache (see the module doc).
pub(crate) fn slot(
    host: Host,
    c: &CacheMap,
    use_cache: bool,
    (queued, limit, pool): (&AtomicUsize, usize, &SharedPool),
) -> Slot {
    let t = &host;
    let hit = use_cache
        .then(|| trace::seen(c, t, XxHash3_128::oneshot(t.data())))
        .flatten()
        .map(|seen| match seen.hashed.get() {
            Some(h) => Source::Ready(h.clone()),
            None => Source::Wait(seen.hashed.clone()),
        });
    let source = hit.unwrap_or_else(|| {
        let raw = raw_copy(t);
        let copied = if raw { t.data().len() } else { t.nbytes };
        if queued.load(Ordering::Relaxed) + copied > limit {
            return Source::Ready(trace::hash(t, false));
        }
        queued.fetch_add(copied, Ordering::Relaxed);
        let bytes = match raw {
            true => copy_raw(pool, t.data()),
            false => copy(pool, t),
        };
        let strides = t.strides.clone().filter(|_| raw);
        Source::Hash(bytes, strides, Arc::new(OnceLock::new()))
    });
    Slot {
        dtype: host.dtype,
        shape: host.shape,
        source,
    }
}
