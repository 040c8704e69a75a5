//! [`Held`]: the digests of tensors an op is about to write in place, taken for the background
//! writer ([`super::trace_writer::TraceWriter::hold`]) before the op runs, and handed to the
//! op's record when it is written.
//!
//! An in-place op's record lists the tensor it writes among its inputs as it was before the op
//! (`python/bitexact/_trace/writes.py`). When the op just before wrote that tensor (an
//! optimizer's `exp_avg_sq.mul_(b2).addcmul_(g, g)`), the digest of its bytes is still being
//! made by the writer's thread, and [`super::trace::trace_digests`], which treats such a cache
//! entry as a miss, would fingerprint the tensor a second time on the program's thread. Held,
//! it waits for that digest instead (its bytes checked, as any cache hit's, by an XXH3-128):
//! the record that makes it was queued before, and the writer handles records in order. A
//! tensor the cache has not seen is fingerprinted now, as `trace_digests` does (in parallel
//! when large), and filed in the cache; nothing is copied, so a held value costs no memory
//! while its op runs (or raised).

use super::trace;
use super::trace_record::{fill, Record, Slot};
use super::Host;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::collections::VecDeque;
use std::sync::Mutex;

/// Tensors' digests taken before an op, in order: the op's record lists the object once per
/// tensor among its `items` (`TraceWriter.write`), and each occurrence takes the next one.
#[pyclass(module = "bitexact._native", frozen)]
pub struct Held {
    slots: Mutex<VecDeque<Slot>>,
}

impl Held {
    /// The digests of `tensors` as they are now (see the module doc); with `use_cache` off,
    /// each fingerprinted now.
    pub(crate) fn of(tensors: Vec<Host>, use_cache: bool) -> Held {
        let found = trace::digests(&tensors, use_cache, &[], true);
        let slots = (tensors.into_iter().zip(found))
            .map(|(t, found)| Slot::found(t, found))
            .collect();
        Held {
            slots: Mutex::new(slots),
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
    /// The next tensor's label (`dtype[shape]:fingerprint`), taken: for a record whose tensors
    /// the program's thread hashes, so that its inputs are labels rather than holes
    /// (`bitexact._trace.plain.in_place`); the writer's own filling of a hole.
    fn label(&self) -> PyResult<String> {
        let rec = Record {
            line: "\0".into(),
            slots: vec![self.take()?],
            sketches: Vec::new(),
        };
        Ok(fill(&rec))
    }

    /// How many tensors' digests are still held (not yet taken by a record).
    fn __len__(&self) -> usize {
        self.slots.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}
