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
//! the cache has not seen is copied for the writer's thread to hash. Such a copy is filed in
//! the cache when the op's record is queued, not before: a record queued in between (a
//! module's children, under `--trace modules`) could otherwise wait for a digest that only a
//! later record makes, and the writer, which handles records in order, would wait forever.
//! Filed late, the entry is still true (the digest of the bytes its XXH3-128 names), and a
//! later read of unchanged bytes (a parameter's, by its gradient's record) is a hit.

use super::copy_pool::{copy, copy_raw, recycle, SharedPool};
use super::trace::{self, CacheMap, Key, Seen};
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
    slots: Mutex<VecDeque<Taken>>,
    queued: Arc<AtomicUsize>,
    pool: SharedPool,
}

/// A tensor's value as held: its slot and, for one hashed after the hold, the cache entry to
/// file when its record is queued.
pub(crate) type Taken = (Slot, Option<(Key, Seen)>);

impl Held {
    /// Values taken into `slots`, whose copies count in the writer's `queued` bytes.
    pub(crate) fn new(slots: VecDeque<Taken>, queued: Arc<AtomicUsize>, pool: SharedPool) -> Held {
        Held {
            slots: Mutex::new(slots),
            queued,
            pool,
        }
    }

    /// The next tensor's slot and cache entry, for the record being written.
    pub(crate) fn take(&self) -> PyResult<Taken> {
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
        for (s, _) in slots {
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
/// fingerprint made now; with `use_cache`, a miss's entry, to file when the record is queued
/// (see the module doc).
pub(crate) fn slot(
    host: Host,
    c: &CacheMap,
    use_cache: bool,
    (queued, limit, pool): (&AtomicUsize, usize, &SharedPool),
) -> Taken {
    let t = &host;
    let check = use_cache.then(|| XxHash3_128::oneshot(t.data()));
    let hit = check
        .and_then(|check| trace::seen(c, t, check))
        .map(|seen| match seen.hashed.get() {
            Some(h) => Source::Ready(h.clone()),
            None => Source::Wait(seen.hashed.clone()),
        });
    let (source, entry) = match hit {
        Some(source) => (source, None),
        None => {
            let (source, hashed) = copied(t, queued, limit, pool);
            let entry = check.map(|check| (trace::key(t), Seen::new(t, check, hashed)));
            (source, entry)
        }
    };
    let slot = Slot {
        dtype: host.dtype,
        shape: host.shape,
        source,
    };
    (slot, entry)
}

/// `t`'s bytes copied for the writer's thread to hash (counted in `queued`), or, past `limit`
/// queued bytes, its fingerprint made now; and where its digest will be.
fn copied(
    t: &Host,
    queued: &AtomicUsize,
    limit: usize,
    pool: &SharedPool,
) -> (Source, Arc<OnceLock<trace::Hashed>>) {
    let raw = raw_copy(t);
    let copied = if raw { t.data().len() } else { t.nbytes };
    if queued.load(Ordering::Relaxed) + copied > limit {
        let h = trace::hash(t, false);
        return (Source::Ready(h.clone()), Arc::new(OnceLock::from(h)));
    }
    queued.fetch_add(copied, Ordering::Relaxed);
    let bytes = match raw {
        true => copy_raw(pool, t.data()),
        false => copy(pool, t),
    };
    let strides = t.strides.clone().filter(|_| raw);
    let hashed = Arc::new(OnceLock::new());
    (Source::Hash(bytes, strides, hashed.clone()), hashed)
}
