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
    buf.extend_from_slice(data);
    buf
}

/// Bytes copied, then hashed while still in the L1 cache, at a time by [`copy_checked`].
const COPY_STEP: usize = 16 << 10;

/// A copy of `data` and the XXH3-128 of its bytes (equal to `XxHash3_128::oneshot(data)`),
/// in one pass over `data`: for a result, which is almost always new bytes, this reads it once
/// where the check, then the copy, read it twice.
pub(crate) fn copy_checked(pool: &SharedPool, data: &[u8]) -> (Vec<u8>, u128) {
    let mut buf = take(pool, data.len());
    let mut h = XxHash3_128::new();
    for part in data.chunks(COPY_STEP) {
        let at = buf.len();
        buf.extend_from_slice(part);
        h.write(&buf[at..]);
    }
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
            len in prop_oneof![0usize..300, 0usize..3 * COPY_STEP],
            seed in any::<u64>(),
        ) {
            let data: Vec<u8> = (0..len as u64)
                .map(|i| (i.wrapping_add(seed).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8)
                .collect();
            let pool = SharedPool::default();
            let (buf, check) = copy_checked(&pool, &data);
            prop_assert_eq!(&buf, &data);
            prop_assert_eq!(check, XxHash3_128::oneshot(&data));
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
