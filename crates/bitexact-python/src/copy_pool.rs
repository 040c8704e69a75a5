//! The trace writer's copy buffers ([`super::trace_writer`]): a tensor's bytes are copied on
//! the program's thread into a buffer that the writer's thread hashes and gives back, so the
//! next copy costs no allocation and no page faults.

use super::Host;
use std::sync::{Arc, Mutex};
use twox_hash::XxHash3_128;

/// Bytes of copy buffers kept for reuse, at most, and how many buffers: a reused buffer costs
/// no allocation and no page faults (a fresh large one is mapped and faulted in page by page,
/// on the program's thread).
pub(crate) const POOL_BYTES: usize = 64 << 20;
const POOL_BUFFERS: usize = 256;

/// Copy buffers the writer's thread has hashed, for the next copies.
#[derive(Default)]
pub(crate) struct Pool {
    buffers: Vec<Vec<u8>>,
    bytes: usize,
}

pub(crate) type SharedPool = Arc<Mutex<Pool>>;

/// An empty buffer for `len` bytes: the smallest pooled one large enough, or a new one.
pub(crate) fn take(pool: &SharedPool, len: usize) -> Vec<u8> {
    let mut p = pool.lock().unwrap_or_else(|e| e.into_inner());
    let best = (p.buffers.iter().enumerate())
        .filter(|(_, b)| b.capacity() >= len)
        .min_by_key(|(_, b)| b.capacity())
        .map(|(i, _)| i);
    let mut buf = match best {
        Some(i) => {
            let b = p.buffers.swap_remove(i);
            p.bytes -= b.capacity();
            b
        }
        None => Vec::with_capacity(len),
    };
    drop(p);
    buf.clear();
    buf
}

/// A buffer holding a copy of `t`'s canonical bytes (a strided view's gathered).
pub(crate) fn copy(pool: &SharedPool, t: &Host) -> Vec<u8> {
    let mut buf = take(pool, t.nbytes);
    t.values_into(&mut buf);
    buf
}

/// A buffer holding a copy of `data` as it lies (a strided view's span, see
/// [`super::trace_writer`]).
pub(crate) fn copy_raw(pool: &SharedPool, data: &[u8]) -> Vec<u8> {
    let mut buf = take(pool, data.len());
    for part in data.chunks(COPY_STEP) {
        append(&mut buf, part);
    }
    fence();
    buf
}

/// Copies of at least this many bytes are made with non-temporal stores ([`append`]).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const STREAM_BYTES: usize = 4 << 10;

/// Appends `part` to `buf`, which has room for it: with non-temporal stores on x86-64, for a
/// part of [`STREAM_BYTES`] or more, followed by a [`fence`] before `buf` is handed to another
/// thread. A pooled buffer was last read by the writer's thread, on another core: an ordinary
/// store first takes each of its cache lines back from there. Copying a 192 KiB result into
/// such a buffer ran at 9 GB/s, streamed past the caches at 26 GB/s (a one-off
/// microbenchmark of that pattern on this project's 2-core AMD EPYC machine); the writer reads
/// the copy from memory later, off the program's thread. On the nanoGPT bench
/// (`benches/op_trace.py`, three rounds alternating, 2026-11-29): `--trace modules`
/// 1.196–1.205× untraced before, 1.166–1.192× after; `--trace ops` 1.975–2.059× before,
/// 1.937–2.013× after.
fn append(buf: &mut Vec<u8>, part: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    if part.len() >= STREAM_BYTES {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
        let at = buf.len();
        assert!(
            buf.capacity() - at >= part.len(),
            "a buffer taken for these bytes"
        );
        let dst = buf.as_mut_ptr().wrapping_add(at);
        let head = ((dst as usize).wrapping_neg() & 15).min(part.len());
        let body = (part.len() - head) / 16 * 16;
        // SAFETY: `dst..dst + part.len()` is within `buf`'s capacity (asserted) and does not
        // overlap `part` (a borrowed slice); the streamed stores go to 16-byte-aligned
        // addresses (past `head`), and SSE2 is part of x86-64. The bytes are initialized
        // before the length covers them.
        unsafe {
            std::ptr::copy_nonoverlapping(part.as_ptr(), dst, head);
            for i in (head..head + body).step_by(16) {
                let v = _mm_loadu_si128(part.as_ptr().add(i).cast::<__m128i>());
                _mm_stream_si128(dst.add(i).cast::<__m128i>(), v);
            }
            let done = head + body;
            std::ptr::copy_nonoverlapping(
                part.as_ptr().add(done),
                dst.add(done),
                part.len() - done,
            );
            buf.set_len(at + part.len());
        }
        return;
    }
    buf.extend_from_slice(part);
}

/// Orders the non-temporal stores of [`append`] before whatever this thread does next (the
/// buffer queued for the writer's thread).
fn fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE is part of x86-64; a store fence has no other effect.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
}

/// Bytes copied, then hashed while still in the L1 cache, at a time by [`copy_checked`] (and
/// copied at a time by [`copy_raw`]).
const COPY_STEP: usize = 16 << 10;

/// A copy of `data` and the XXH3-128 of its bytes (equal to `XxHash3_128::oneshot(data)`),
/// in one pass over `data`: for a result, which is almost always new bytes, this reads it once
/// where the check, then the copy, read it twice.
pub(crate) fn copy_checked(pool: &SharedPool, data: &[u8]) -> (Vec<u8>, u128) {
    let mut buf = take(pool, data.len());
    let mut h = XxHash3_128::new();
    for part in data.chunks(COPY_STEP) {
        append(&mut buf, part);
        // The source's bytes, in the L1 cache (just read for the copy; the copy, streamed, is
        // not): the same bytes unless another thread writes the tensor meanwhile, a race
        // whose record is the program's own nondeterminism either way.
        h.write(part);
    }
    fence();
    (buf, h.finish_128())
}

/// Keeps `buf` for reuse unless the pool is full.
pub(crate) fn recycle(pool: &SharedPool, buf: Vec<u8>) {
    let mut p = pool.lock().unwrap_or_else(|e| e.into_inner());
    if p.buffers.len() < POOL_BUFFERS && p.bytes + buf.capacity() <= POOL_BYTES {
        p.bytes += buf.capacity();
        p.buffers.push(buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn a_checked_copy_is_the_bytes_and_their_oneshot_xxh3(
            len in prop_oneof![0usize..300, 0usize..3 * COPY_STEP, STREAM_BYTES..STREAM_BYTES + 64],
            seed in any::<u64>(),
        ) {
            let data: Vec<u8> = (0..len as u64)
                .map(|i| (i.wrapping_add(seed).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8)
                .collect();
            let pool = SharedPool::default();
            let (buf, check) = copy_checked(&pool, &data);
            prop_assert_eq!(&buf, &data);
            prop_assert_eq!(check, XxHash3_128::oneshot(&data));
            prop_assert_eq!(&copy_raw(&pool, &data), &data);
            // streamed after an unaligned start, from an unaligned source
            let (lead, from) = ((seed % 16) as usize, (seed / 16 % 16) as usize);
            let mut out = vec![7u8; lead];
            out.reserve(len);
            append(&mut out, &data[from.min(len)..]);
            prop_assert_eq!(&out[..lead], &vec![7u8; lead][..]);
            prop_assert_eq!(&out[lead..], &data[from.min(len)..]);
            recycle(&pool, buf);
            let half = Host::new(data.as_ptr() as usize, len / 2, "u8", vec![len / 2]).unwrap();
            let again = copy(&pool, &half);
            prop_assert_eq!(&again[..], &data[..len / 2]);
        }
    }

    #[test]
    fn buffers_are_reused_smallest_first_and_the_pool_is_bounded() {
        let pool = SharedPool::default();
        let (small, big) = (Vec::with_capacity(100), Vec::with_capacity(10_000));
        let (small_at, big_at) = (small.as_ptr(), big.as_ptr());
        recycle(&pool, big);
        recycle(&pool, small);
        let (a, b) = (take(&pool, 50), take(&pool, 5_000));
        assert_eq!((a.as_ptr(), b.as_ptr()), (small_at, big_at));
        for _ in 0..POOL_BUFFERS + 10 {
            recycle(&pool, Vec::with_capacity(1));
        }
        let p = pool.lock().unwrap();
        assert!(p.buffers.len() <= POOL_BUFFERS && p.bytes <= POOL_BYTES);
    }
}
