//! [`trace_digests`]: the digests of one op's host tensors for the op tracer
//! (`python/bitexact/_trace_digest.py`), one call per op, each already labelled as a trace
//! record shows it (`f32[2,3]:<first 32 hex digits>`), with a cache of digests that is checked
//! against the bytes.
//!
//! Most tensors an op reads were hashed a moment before, as the result of the op that made
//! them (a layer's output is the next layer's input; a parameter is read by its forward, its
//! backward and the optimizer). The cache keeps, per host buffer (address, length, dtype,
//! shape), the canonical digest and an XXH3-128 of the bytes it was computed from; a later
//! request for the same buffer recomputes only the XXH3-128 (an order of magnitude cheaper than
//! SHA-256) and reuses the digest when it is equal. The cache trusts the bytes, not the
//! program's bookkeeping: a write that PyTorch's version counter never sees (through `.data`,
//! numpy sharing the memory, an extension writing through a raw pointer) changes the XXH3 and
//! the tensor is hashed again. Reusing a digest for changed bytes needs an XXH3-128 collision
//! between two states of one buffer (about 2^-128 for bytes that are not built to collide).
//! The cache starts over when it holds [`CACHE_ENTRIES`] buffers.

use super::Host;
use crate::digest::{self, Digest};
use crate::tensor::DType;
use pyo3::prelude::*;
use std::collections::HashMap;
use std::fmt::Write;
use std::sync::{LazyLock, Mutex};
use xxhash_rust::xxh3::xxh3_128;

/// Hex digits of a digest that a trace record keeps.
const DIGEST_HEX: usize = 32;

/// Buffers the cache holds before it starts over (about 100 bytes each).
const CACHE_ENTRIES: usize = 1 << 16;

/// A host buffer read as a tensor.
#[derive(PartialEq, Eq, Hash)]
struct Key {
    ptr: usize,
    nbytes: usize,
    dtype: DType,
    shape: Vec<usize>,
}

/// What a buffer held when it was last hashed: the XXH3-128 of its bytes and their digest.
struct Seen {
    check: u128,
    digest: Digest,
}

static CACHE: LazyLock<Mutex<HashMap<Key, Seen>>> = LazyLock::new(Default::default);

fn cache() -> std::sync::MutexGuard<'static, HashMap<Key, Seen>> {
    CACHE.lock().unwrap_or_else(|e| e.into_inner())
}

/// The digest of `t`, from the cache when its bytes are unchanged since it was last hashed.
fn cached_digest(t: &Host) -> Digest {
    let data = t.data();
    let check = xxh3_128(data);
    let key = Key {
        ptr: t.ptr,
        nbytes: t.nbytes,
        dtype: t.dtype,
        shape: t.shape.clone(),
    };
    if let Some(seen) = cache().get(&key) {
        if seen.check == check {
            return seen.digest;
        }
    }
    let d = digest::digest_parts(t.dtype, &t.shape, data);
    let mut c = cache();
    if c.len() >= CACHE_ENTRIES {
        c.clear();
    }
    c.insert(key, Seen { check, digest: d });
    d
}

/// `dtype[d0,d1,...]:<first DIGEST_HEX hex digits of d>`, as trace records show a tensor.
fn label(t: &Host, d: &Digest) -> String {
    let mut s = String::with_capacity(16 + 4 * t.shape.len() + DIGEST_HEX);
    s.push_str(t.dtype.name());
    s.push('[');
    for (i, n) in t.shape.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(s, "{n}");
    }
    s.push_str("]:");
    for b in &d.0[..DIGEST_HEX / 2] {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// The trace labels (`f32[2,3]:<32 hex digits>`) of host tensors given as
/// `(ptr, nbytes, dtype, shape)` like [`super::digests_ptr`]'s, in order: one call per op,
/// with one release of the GIL. With `cache` (the default), a buffer whose bytes are unchanged
/// since this function last hashed it (same address, length, dtype and shape; equal XXH3-128)
/// reuses its digest. Unsafe by contract, as `digest_ptr`.
#[pyfunction]
#[pyo3(signature = (items, cache=true))]
pub fn trace_digests(
    py: Python<'_>,
    items: Vec<(usize, usize, String, Vec<usize>)>,
    cache: bool,
) -> PyResult<Vec<String>> {
    let tensors = Host::all(items)?;
    Ok(super::hash_all(py, &tensors, |t| {
        let d = if cache { cached_digest(t) } else { t.digest() };
        label(t, &d)
    }))
}
