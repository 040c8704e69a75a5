//! A record of the op tracer's background writer ([`super::trace_writer`]): its tensors'
//! slots, where each digest comes from, and how the writer's thread finishes it ([`finish`]:
//! hashes its copies and fills in its labels and sketches).

use super::copy_pool::{recycle, take, SharedPool};
use super::strided;
use super::trace::{self, Found, Hashed};
use super::Host;
use bitexact::fingerprint::fingerprint_serial;
use bitexact::DType;
use pyo3::prelude::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// Whether a view with strides is copied as all the bytes it spans (one `memcpy`, the writer's
/// thread gathering its elements) rather than gathered on the program's thread: when it spans
/// at most twice its own bytes (a transpose, a permutation; not a narrow slice of a large
/// tensor). Gathering a transposed weight element by element on the program's thread was 1.5%
/// of a traced nanoGPT step.
pub(crate) fn raw_copy(t: &Host) -> bool {
    t.strides.is_some() && t.data().len() <= 2 * t.nbytes
}

/// Where a tensor's digest comes from.
pub(crate) enum Source {
    /// Known when the record was made (a cache hit, or hashed on the caller's thread).
    Ready(Hashed),
    /// A copy of the bytes, hashed on the writer's thread, which also fills the cache entry;
    /// with strides, the copy is of all the bytes a view spans ([`raw_copy`]), and the writer
    /// gathers its elements first.
    Hash(Vec<u8>, Option<Vec<usize>>, Arc<OnceLock<Hashed>>),
    /// The digest of a copy an earlier record (or this one) queued: the writer's thread handles
    /// records in order, so it is known when this record's turn comes.
    Wait(Arc<OnceLock<Hashed>>),
}

/// One tensor of a record.
pub(crate) struct Slot {
    pub(crate) dtype: DType,
    pub(crate) shape: Vec<usize>,
    pub(crate) source: Source,
}

impl Slot {
    /// The slot of host tensor `t` whose digest was `found` ([`super::trace::digests`]).
    pub(crate) fn found(t: Host, found: Found) -> Slot {
        Slot {
            dtype: t.dtype,
            shape: t.shape,
            source: match found {
                Found::Made(h) => Source::Ready(h),
                Found::Pending(h) => Source::Wait(h),
            },
        }
    }
}

/// A record: its line with a NUL for each slot's label (and a byte 1 for its sketches), and
/// each result's sketch.
pub(crate) struct Record {
    pub(crate) line: String,
    pub(crate) slots: Vec<Slot>,
    pub(crate) sketches: Vec<Shown>,
}

/// A result's sketch as the caller gives it: the index of its slot (a negative one: no
/// sketch), or its text (a device tensor's, made by the caller).
#[derive(FromPyObject, Debug)]
pub(crate) enum Shown {
    Slot(i64),
    Text(String),
}

impl Shown {
    /// The slot whose sketch this is, if any.
    pub(crate) fn slot(&self) -> Option<usize> {
        match self {
            Shown::Slot(k) => usize::try_from(*k).ok(),
            Shown::Text(_) => None,
        }
    }
}

/// Hashes the copies of `rec` (with their sketches when `sketch`), fills in its labels and
/// sketches and returns the line.
pub(crate) fn finish(rec: Record, queued: &AtomicUsize, pool: &SharedPool, sketch: bool) -> String {
    // On this thread only: rayon here would take the program's cores (the writer is there to
    // use a free one); on 2 cores it tripled the traced nanoGPT step's context switches.
    let mut done = 0;
    for s in &rec.slots {
        let Source::Hash(raw, strides, hashed) = &s.source else {
            continue;
        };
        let gathered = strides.as_ref().map(|st| {
            let mut out = take(pool, s.shape.iter().product::<usize>() * s.dtype.size());
            strided::gather_into(&mut out, raw, s.dtype.size(), &s.shape, st);
            out
        });
        let bytes = gathered.as_deref().unwrap_or(raw);
        let fp = fingerprint_serial(bytes);
        let _ = hashed.set((fp, sketch.then(|| trace::sketch(s.dtype, bytes))));
        if let Some(out) = gathered {
            recycle(pool, out);
        }
        done += raw.len();
    }
    let line = fill(&rec);
    for s in rec.slots {
        if let Source::Hash(buf, _, _) = s.source {
            recycle(pool, buf);
        }
    }
    queued.fetch_sub(done, Ordering::Relaxed);
    line
}

/// The line of `rec`, its labels and sketches filled in, once every slot's digest is known or
/// being made (a copy's, by [`finish`]; waited for).
pub(crate) fn fill(rec: &Record) -> String {
    let hashed: Vec<&Hashed> = (rec.slots.iter())
        .map(|s| match &s.source {
            Source::Ready(h) => h,
            Source::Hash(_, _, h) | Source::Wait(h) => h.wait(),
        })
        .collect();
    let mut line = String::with_capacity(rec.line.len() + 64 * rec.slots.len());
    let (mut next, mut start) = (0, 0);
    for (at, b) in rec.line.bytes().enumerate() {
        if b > 1 {
            continue;
        }
        line.push_str(&rec.line[start..at]); // bytes 0 and 1 are ASCII: char boundaries
        start = at + 1;
        if b == 0 {
            let s = &rec.slots[next];
            trace::push_label(&mut line, s.dtype, &s.shape, &hashed[next].0);
            next += 1;
        } else {
            push_sketches(&mut line, &rec.sketches, &hashed);
        }
    }
    line.push_str(&rec.line[start..]);
    line
}

/// `,"sk":["<sketch>",…]` of the results (`""` for one without a sketch), as
/// `python/bitexact/_trace/record.py` writes it; nothing when no result has one.
fn push_sketches(line: &mut String, sketches: &[Shown], hashed: &[&Hashed]) {
    fn text<'a>(k: &'a Shown, hashed: &[&'a Hashed]) -> &'a str {
        match k {
            Shown::Text(t) => t.as_str(),
            Shown::Slot(_) => (k.slot().and_then(|i| hashed[i].1.as_deref())).unwrap_or(""),
        }
    }
    let text = |k| text(k, hashed);
    if sketches.iter().all(|k| text(k).is_empty()) {
        return;
    }
    line.push_str(",\"sk\":[");
    for (j, k) in sketches.iter().enumerate() {
        if j > 0 {
            line.push(',');
        }
        line.push('"');
        line.push_str(text(k)); // digits, `e.-,|;`, NaN and inf only (checked): no escapes
        line.push('"');
    }
    line.push(']');
}
