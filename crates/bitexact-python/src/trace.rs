//! [`trace_digests`]: the fingerprints of one op's host tensors for the op tracer
//! (`python/bitexact/_trace/digest.py`), one call per op, each already labelled as a trace
//! record shows it (`f32[2,3]:<32 hex digits>`: the 128-bit fingerprint of
//! [`bitexact::fingerprint`], not the canonical SHA-256), with a cache of fingerprints that is
//! checked against the bytes.
//!
//! Most tensors an op reads were hashed a moment before, as the result of the op that made
//! them (a layer's output is the next layer's input; a parameter is read by its forward, its
//! backward and the optimizer). The cache keeps, per host buffer (address, length, dtype, and
//! a strided view's shape and strides; a contiguous one in any shape), the fingerprint and an
//! XXH3-128 of the bytes it was computed from; a later request for the same buffer recomputes
//! only the XXH3-128 and reuses the fingerprint (and, above all, the result's float64 sketch)
//! when it is equal. The cache trusts the bytes, not the program's bookkeeping: a write that
//! PyTorch's version counter never sees (through `.data`, numpy sharing the memory, an
//! extension writing through a raw pointer) changes the XXH3 and the tensor is hashed again.
//! Reusing a digest for changed bytes needs an XXH3-128 collision between two states of one
//! buffer (about 2^-128 for bytes that are not built to collide).
//! The cache starts over when it holds [`CACHE_ENTRIES`] buffers.
//!
//! With `sketch`, the float tensors it marks also get a float64 sketch
//! ([`bitexact::trace::sketch`]: norm, largest magnitude, non-finite count, fixed samples),
//! computed beside the digest and cached with it, so an unchanged buffer costs no second pass.
//! The tensors an op still has to hash (its results, mostly) are hashed in parallel when there
//! are several and over [`PARALLEL_BYTES`]. The tracer's background writer
//! ([`super::trace_writer`]) shares the cache: an entry it is still hashing is unset, and a
//! lookup here treats it as a miss, except for the values it holds before an in-place op
//! ([`super::trace_hold`]), which wait for it.

use super::Host;
use bitexact::fingerprint::{self, Fingerprint};
use bitexact::trace::sketch::Sketch;
use bitexact::DType;
use pyo3::prelude::*;
use rayon::prelude::*;
use std::collections::HashMap;
use std::fmt::Write;
use std::sync::atomic::AtomicPtr;
use std::sync::{Arc, Mutex, OnceLock};
use twox_hash::XxHash3_128;

/// Hex digits of a fingerprint in a trace label.
const DIGEST_HEX: usize = 32;

/// Buffers the cache holds before it starts over (about 100 bytes each).
pub(crate) const CACHE_ENTRIES: usize = 1 << 16;

/// An op's tensors to hash are hashed in parallel (rayon) above this many bytes in all, as
/// `digests_ptr` does. Not lower: on a busy 2-core machine (the pool's threads wait to be
/// scheduled) a traced nanoGPT step took 6.5x its untraced time with 256 KiB against 5.6x
/// with every op on one thread, and three 192 KiB tensors hashed no faster in parallel.
pub(crate) const PARALLEL_BYTES: usize = bitexact::digest::CHUNK_BYTES;

/// A host buffer read as a tensor, as the cache files it: address, length, dtype and, for a
/// view that is not contiguous, a hash of its shape and strides. A contiguous tensor's
/// fingerprint and sketch depend on its bytes and dtype alone, so one entry serves every shape
/// it is read as: a linear layer's `[B*T, C]` result read next as `[B, T, C]` (a fifth of a
/// traced nanoGPT step's bytes) is a hit, not a second fingerprint. Made without allocating,
/// once per tensor of every record; a strided view itself is kept in the [`Seen`] and compared
/// on a lookup, so two views whose hashes collide are two misses, never one's digest for the
/// other.
#[derive(PartialEq, Eq, Hash, Clone, Copy)]
pub(crate) struct Key {
    ptr: usize,
    nbytes: usize,
    dtype: DType,
    view: u64,
}

/// What a buffer held when it was last hashed: the view it was read as, the XXH3-128 of its
/// bytes, their digest and, once asked for, their sketch's text (unset while the background
/// writer still hashes them, [`super::trace_writer`]).
pub(crate) struct Seen {
    shape: Box<[usize]>,
    strides: Option<Box<[usize]>>,
    check: u128,
    /// [`head`] of the bytes: whether a lookup is likely to hit ([`likely_seen`]).
    head: u128,
    pub(crate) hashed: Arc<OnceLock<Hashed>>,
}

impl Seen {
    /// What `t` holds now: bytes whose XXH3-128 is `check`, digested into `hashed`.
    pub(crate) fn new(t: &Host, check: u128, hashed: Arc<OnceLock<Hashed>>) -> Seen {
        Seen {
            shape: t.shape.as_slice().into(),
            strides: t.strides.as_deref().map(Into::into),
            check,
            head: head(t.data()),
            hashed,
        }
    }
}

/// How many of a buffer's first bytes [`head`] reads.
const HEAD_BYTES: usize = 4096;

/// The XXH3-128 of the first [`HEAD_BYTES`] of `data`: a cheap guess at whether a buffer still
/// holds what the cache saw in it, never an answer ([`seen`] checks all of its bytes).
fn head(data: &[u8]) -> u128 {
    XxHash3_128::oneshot(&data[..data.len().min(HEAD_BYTES)])
}

/// Whether `t` is likely to be found in the cache `c` (an entry at its buffer whose first
/// bytes it still holds): a result that is (a parent module's output is its last child's),
/// checked before it is copied, is then not copied at all; a buffer the allocator gave to new
/// bytes is copied at once, its check computed on the way (`copy_pool::copy_checked`).
pub(crate) fn likely_seen(c: &CacheMap, t: &Host) -> bool {
    c.get(&key(t))
        .is_some_and(|seen| seen.head == head(t.data()))
}

/// A fast hasher for the cache's keys (FxHash's mixing: keys are addresses and sizes, nobody's
/// chosen input; std's SipHash was a measurable part of a record's cost).
#[derive(Default)]
pub(crate) struct Fx(u64);

impl Fx {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl std::hash::Hasher for Fx {
    fn write(&mut self, bytes: &[u8]) {
        for part in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..part.len()].copy_from_slice(part);
            self.add(u64::from_le_bytes(word));
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// The digest cache: a buffer's key and what it held when last hashed.
pub(crate) type CacheMap = HashMap<Key, Seen, std::hash::BuildHasherDefault<Fx>>;

/// A fingerprint and, when asked for, the sketch's text (`""` for a dtype without one), shared
/// (a cache hit clones it for each record that reads the tensor).
pub(crate) type Hashed = (Fingerprint, Option<Arc<str>>);

/// The sketch text of `t` (`""` for a dtype that is not floating point).
pub(crate) fn sketch(dtype: DType, data: &[u8]) -> Arc<str> {
    Sketch::of(dtype, data).map_or(Arc::from(""), |s| s.text().into())
}

/// `t`'s fingerprint and, with `sketch`, its sketch (a strided view's elements gathered once
/// for both), on the calling thread (a large tensor's chunks in parallel). Without a sketch, a
/// strided view is fingerprinted a block of gathered elements at a time: no copy of it whole.
pub(crate) fn hash(t: &Host, sketch: bool) -> Hashed {
    if !sketch && t.strides.is_some() {
        return (t.fingerprint_strided(), None);
    }
    let values = t.values();
    let fp = fingerprint::fingerprint(&values);
    (fp, sketch.then(|| self::sketch(t.dtype, &values)))
}

/// The digest cache of this process, and the fork count it was made in
/// ([`crate::fork_safe::per_process`]).
static CACHE: AtomicPtr<(u64, Mutex<CacheMap>)> = AtomicPtr::new(std::ptr::null_mut());

/// The digest cache, locked: this process's own, so a forked child starts with an empty one.
/// The parent's is left alone there: a thread of the parent's may have held its lock at the
/// fork, and the digests its writer was still making would never be made.
pub(crate) fn cache() -> std::sync::MutexGuard<'static, CacheMap> {
    let mine = crate::fork_safe::per_process(&CACHE, || Some(Mutex::default()));
    let mine = mine.expect("a cache is always made");
    mine.lock().unwrap_or_else(|e| e.into_inner())
}

/// The buffer's key in the cache.
pub(crate) fn key(t: &Host) -> Key {
    let view = t.strides.as_ref().map_or(0, |strides| {
        let mut view = Fx::default();
        std::hash::Hash::hash(&t.shape, &mut view);
        std::hash::Hash::hash(strides, &mut view);
        std::hash::Hasher::finish(&view)
    });
    Key {
        ptr: t.ptr,
        nbytes: t.nbytes,
        dtype: t.dtype,
        view,
    }
}

/// `t`'s entry in the cache `c` when it was made from bytes whose XXH3-128 is `check` (the
/// bytes `t` holds now, when `check` was just computed from them) and read as the same view:
/// contiguous, in any shape (see [`Key`]), or the same strided view.
pub(crate) fn seen<'c>(c: &'c CacheMap, t: &Host, check: u128) -> Option<&'c Seen> {
    c.get(&key(t)).filter(|seen| {
        seen.check == check
            && seen.strides.as_deref() == t.strides.as_deref()
            && (t.strides.is_none() || *seen.shape == t.shape[..])
    })
}

/// A tensor's digest as a lookup found it: made, or still being made by the background
/// writer for a record queued before ([`super::trace_writer`]).
pub(crate) enum Found {
    /// Made (from the cache or just now).
    Made(Hashed),
    /// Being made by the writer's thread, in a record it handles before any queued later.
    Pending(Arc<OnceLock<Hashed>>),
}

/// The XXH3-128 of `t`'s bytes and, when the cache saw those bytes in this buffer, their digest
/// and sketch (`None` when it was never asked for), or the digest still being made (`wait`;
/// without it, such an entry is a miss).
fn lookup(t: &Host, wait: bool) -> (u128, Option<Found>) {
    let check = XxHash3_128::oneshot(t.data());
    let hit = seen(&cache(), t, check).and_then(|s| match s.hashed.get() {
        Some(h) => Some(Found::Made(h.clone())),
        None => wait.then(|| Found::Pending(s.hashed.clone())),
    });
    (check, hit)
}

/// The fingerprints of `tensors` (and the sketches of those `want` marks), from the cache
/// (when `use_cache`; with `wait`, one the writer's thread is still making is
/// [`Found::Pending`]) or computed: the ones to compute in parallel when there are several and
/// enough bytes ([`PARALLEL_BYTES`]); a tensor over [`fingerprint::PAR_BYTES`] is also
/// fingerprinted in parallel chunks. A cached fingerprint whose sketch is wanted and was never
/// made is recomputed whole. What is computed is filed in the cache.
pub(crate) fn digests(tensors: &[Host], use_cache: bool, want: &[bool], wait: bool) -> Vec<Found> {
    let wants = |i: usize| want.get(i).copied().unwrap_or(false);
    let looked: Vec<(u128, Option<Found>)> = if use_cache {
        tensors.iter().map(|t| lookup(t, wait)).collect()
    } else {
        tensors.iter().map(|_| (0, None)).collect()
    };
    let todo: Vec<usize> = (0..tensors.len())
        .filter(|&i| match &looked[i].1 {
            None => true,
            Some(Found::Made((_, s))) => wants(i) && s.is_none(),
            Some(Found::Pending(_)) => false,
        })
        .collect();
    let bytes: usize = todo.iter().map(|&i| tensors[i].nbytes).sum();
    let one = |i: usize| hash(&tensors[i], wants(i));
    let computed: Vec<Hashed> = if todo.len() > 1 && bytes > PARALLEL_BYTES {
        todo.par_iter().map(|&i| one(i)).collect()
    } else {
        todo.iter().map(|&i| one(i)).collect()
    };
    if use_cache && !todo.is_empty() {
        let mut c = cache();
        if c.len() + todo.len() > CACHE_ENTRIES {
            c.clear();
        }
        for (&i, (digest, sketch)) in todo.iter().zip(&computed) {
            let check = looked[i].0;
            let hashed = Arc::new(OnceLock::from((*digest, sketch.clone())));
            c.insert(key(&tensors[i]), Seen::new(&tensors[i], check, hashed));
        }
    }
    let mut computed = computed.into_iter();
    looked
        .into_iter()
        .enumerate()
        .map(|(i, (_, hit))| match hit {
            Some(Found::Made(h)) if !(wants(i) && h.1.is_none()) => Found::Made(h),
            Some(pending @ Found::Pending(_)) => pending,
            _ => Found::Made(computed.next().expect("one per miss")),
        })
        .collect()
}

/// `dtype[d0,d1,...]:<DIGEST_HEX hex digits of d>`, as trace records show a tensor.
fn label(t: &Host, d: &Fingerprint) -> String {
    let mut s = String::with_capacity(16 + 4 * t.shape.len() + DIGEST_HEX);
    push_label(&mut s, t.dtype, &t.shape, d);
    s
}

/// Appends the label of a `dtype` tensor of `shape` with fingerprint `d` to `s`.
pub(crate) fn push_label(s: &mut String, dtype: DType, shape: &[usize], d: &Fingerprint) {
    s.push_str(dtype.name());
    s.push('[');
    for (i, n) in shape.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(s, "{n}");
    }
    s.push_str("]:");
    let _ = write!(s, "{d}");
}

/// The trace labels (`f32[2,3]:<32 hex digits>`) of host tensors given as
/// `(ptr, nbytes, dtype, shape)` like [`super::digests_ptr`]'s (with the element strides as a
/// fifth item for a view that is not contiguous: the bytes it spans are checked, its elements
/// hashed), in order: one call per op, with one release of the GIL. With `cache` (the
/// default), a buffer whose bytes are unchanged since this function last hashed it (same
/// address, length and dtype, contiguous or the same strided view; equal XXH3-128) reuses its
/// digest. With `sketch` (one flag per item), returns `(labels, sketches)`: the sketch text of
/// each flagged float tensor, `""` for the others. Unsafe by contract, as `digest_ptr`.
#[pyfunction]
#[pyo3(signature = (items, cache=true, sketch=None))]
pub fn trace_digests(
    py: Python<'_>,
    items: Vec<super::Item>,
    cache: bool,
    sketch: Option<Vec<bool>>,
) -> PyResult<Py<PyAny>> {
    let tensors = Host::items(items)?;
    let want = sketch.clone().unwrap_or_default();
    let (labels, sketches): (Vec<String>, Vec<String>) = crate::fork_safe::detached(py, || {
        let ds = digests(&tensors, cache, &want, false);
        (tensors.iter().zip(ds))
            .map(|(t, found)| {
                let (d, s) = match &found {
                    Found::Made(h) => h,
                    Found::Pending(h) => h.wait(), // (none: asked without waiting)
                };
                (label(t, d), s.as_deref().unwrap_or("").to_owned())
            })
            .unzip()
    });
    Ok(match sketch {
        None => labels.into_pyobject(py)?.into_any().unbind(),
        Some(_) => (labels, sketches).into_pyobject(py)?.into_any().unbind(),
    })
}

/// The trace fingerprints ([`bitexact::fingerprint`], 32 hex digits each) of host tensors
/// given as [`trace_digests`] takes them, without the cache: the op tracer's tensors that are
/// not on its fast path (a complex tensor's real view, a lazily negated one made plain), and
/// the tests. One release of the GIL; a large tensor's chunks in parallel.
#[pyfunction]
pub fn trace_fingerprints(py: Python<'_>, items: Vec<super::Item>) -> PyResult<Vec<String>> {
    let tensors = Host::items(items)?;
    Ok(crate::fork_safe::detached(py, || {
        (tensors.iter())
            .map(|t| t.fingerprint_strided().hex())
            .collect()
    }))
}

/// The trace fingerprint of `data`, a tensor's canonical bytes (32 hex digits).
#[pyfunction]
pub fn fingerprint_bytes(py: Python<'_>, data: &[u8]) -> String {
    crate::fork_safe::detached(py, || fingerprint::fingerprint(data).hex())
}

/// The sketch text (`src/trace/sketch.rs`'s format) of a `dtype` tensor from its parts, made by
/// the caller (the tracer's sketch of a device tensor, from float64 torch ops on its device):
/// the norm and largest magnitude of its finite elements, how many are not finite, and the
/// sampled elements' values. `""` for a dtype that is not floating point.
#[pyfunction]
pub fn sketch_text(
    dtype: &str,
    norm: f64,
    max_abs: f64,
    nonfinite: u64,
    samples: Vec<f64>,
) -> PyResult<String> {
    let d = (DType::ALL.into_iter().find(|d| d.name() == dtype))
        .ok_or_else(|| pyo3::exceptions::PyValueError::new_err(format!("no dtype {dtype:?}")))?;
    Ok(match d.is_float() {
        false => String::new(),
        true => Sketch {
            norm,
            max_abs,
            nonfinite,
            samples,
            narrow: d != DType::F64,
        }
        .text(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(byte: u8) -> Hashed {
        (Fingerprint([u64::from(byte); 2]), None)
    }

    #[test]
    fn an_entry_is_found_for_its_bytes_in_any_contiguous_shape_or_its_own_strided_view() {
        let data = [7u8; 24];
        let at = data.as_ptr() as usize;
        let rows = Host::new(at, 24, "f32", vec![2, 3]).unwrap();
        let cols = Host::new(at, 24, "f32", vec![3, 2]).unwrap();
        let turned = Host::with_strides(at, 24, "f32", vec![3, 2], Some(vec![1, 3])).unwrap();
        let ints = Host::new(at, 24, "i32", vec![6]).unwrap();
        assert!(key(&rows) == key(&cols) && key(&cols) != key(&turned));
        let mut c = CacheMap::default();
        let entry = |t: &Host, b| Seen::new(t, 5, Arc::new(OnceLock::from(digest(b))));
        c.insert(key(&rows), entry(&rows, 1));
        assert!(seen(&c, &rows, 5).is_some());
        assert!(seen(&c, &rows, 6).is_none(), "other bytes");
        // The same contiguous bytes in another shape: the same fingerprint and sketch.
        assert!(seen(&c, &cols, 5).is_some(), "another shape of the buffer");
        assert!(seen(&c, &ints, 5).is_none(), "another dtype");
        assert!(
            seen(&c, &turned, 5).is_none(),
            "a strided view of the buffer"
        );
        // Two views whose keys collide: the view kept in the entry tells them apart.
        c.insert(key(&rows), entry(&turned, 2));
        assert!(seen(&c, &rows, 5).is_none());
        c.insert(key(&turned), entry(&turned, 3));
        let hit = seen(&c, &turned, 5).and_then(|s| s.hashed.get().cloned());
        assert_eq!(hit.map(|h| h.0), Some(Fingerprint([3; 2])));
    }

    #[test]
    fn a_likely_hit_is_a_buffer_that_still_holds_its_first_bytes() {
        let mut data = vec![7u8; 3 * HEAD_BYTES];
        let t = Host::new(data.as_ptr() as usize, data.len(), "u8", vec![data.len()]).unwrap();
        let mut c = CacheMap::default();
        assert!(!likely_seen(&c, &t), "nothing at its buffer");
        c.insert(key(&t), Seen::new(&t, 5, Arc::new(OnceLock::new())));
        assert!(likely_seen(&c, &t));
        data[HEAD_BYTES] = 8; // past the head: still likely, and only `seen` tells
        assert!(likely_seen(&c, &t));
        data[HEAD_BYTES - 1] = 8;
        assert!(!likely_seen(&c, &t), "new first bytes");
        let other = Host::new(data.as_ptr() as usize, 8, "u8", vec![8]).unwrap();
        assert!(!likely_seen(&c, &other), "another size of the buffer");
    }
}
