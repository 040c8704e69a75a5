//! Canonical tensor digests: SHA-256 over a versioned header and the raw bytes.
//!
//! Encoding (format version 1):
//! * header = `b"bitexact"` ‖ version `u32` LE ‖ dtype tag `u32` LE ‖ rank `u64` LE ‖ each dimension `u64` LE;
//! * if the data is at most `CHUNK_BYTES` long: `digest = SHA-256(header ‖ data)`;
//! * otherwise the data is cut into `CHUNK_BYTES` chunks (the last may be shorter), each chunk is
//!   hashed on its own (in parallel with rayon, sixteen at once where the CPU allows:
//!   `crate::sha_lanes`), and
//!   `digest = SHA-256(header ‖ b"chunked" ‖ chunk_bytes u64 LE ‖ chunk count u64 LE ‖ chunk digests…)`.
//!
//! The chunk size is fixed, so the digest never depends on the thread count; a GPU hasher must
//! combine chunk digests exactly this way. Every bit counts: -0.0 ≠ +0.0 and NaN payloads differ.
//! A run digest is SHA-256 over `(name length u64 LE ‖ name ‖ tensor digest)` in name order.

use crate::tensor::{DType, Tensor};
use rayon::prelude::*;
use sha2::{Digest as _, Sha256};
use std::collections::BTreeMap;
use std::fmt;

/// Version of the canonical encoding, part of every header.
pub const FORMAT_VERSION: u32 = 1;
/// Size of the chunks large tensors are hashed in (1 MiB).
pub const CHUNK_BYTES: usize = 1 << 20;

/// A SHA-256 digest.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    /// Lower-case hex, 64 characters.
    pub fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Parses 64 hex characters.
    pub fn from_hex(s: &str) -> Option<Digest> {
        if s.len() != 64 || !s.is_ascii() {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, b) in out.iter_mut().enumerate() {
            *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(Digest(out))
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({})", self.hex())
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.hex())
    }
}

/// The canonical header of a tensor.
pub fn header(t: &Tensor) -> Vec<u8> {
    header_parts(t.dtype(), t.shape())
}

/// The canonical header of a tensor given by its dtype and shape.
pub fn header_parts(dtype: DType, shape: &[usize]) -> Vec<u8> {
    let mut h = Vec::with_capacity(24 + 8 * shape.len());
    h.extend_from_slice(b"bitexact");
    h.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    h.extend_from_slice(&(dtype as u32).to_le_bytes());
    h.extend_from_slice(&(shape.len() as u64).to_le_bytes());
    for &d in shape {
        h.extend_from_slice(&(d as u64).to_le_bytes());
    }
    h
}

/// Digest of one tensor (parallel over chunks for large tensors).
pub fn tensor_digest(t: &Tensor) -> Digest {
    digest_parts(t.dtype(), t.shape(), t.bytes())
}

/// Digest of a tensor given as parts, without building a [`Tensor`]: `data` must be its
/// canonical bytes (row-major, little-endian, `shape` product × dtype size long), e.g. a slice
/// of a memory-mapped file. Equal to [`tensor_digest`] of the same tensor; large data is
/// hashed as [`CHUNK_BYTES`] chunks in parallel (rayon).
pub fn digest_parts(dtype: DType, shape: &[usize], data: &[u8]) -> Digest {
    if data.len() <= CHUNK_BYTES {
        let mut h = Sha256::new();
        h.update(header_parts(dtype, shape));
        h.update(data);
        return Digest(h.finalize().into());
    }
    chunk_digests_parts(
        dtype,
        shape,
        &crate::sha_lanes::chunk_digests(data, CHUNK_BYTES),
    )
}

/// [`digest_parts`] on the calling thread only: the same digest, no rayon (for a background
/// thread that must leave the program's cores alone: the op tracer's writer, which on two
/// cores took one from the traced program through rayon's pool).
pub fn digest_parts_serial(dtype: DType, shape: &[usize], data: &[u8]) -> Digest {
    if data.len() <= CHUNK_BYTES {
        return digest_parts(dtype, shape, data);
    }
    chunk_digests_parts(
        dtype,
        shape,
        &crate::sha_lanes::chunk_digests_serial(data, CHUNK_BYTES),
    )
}

/// Bytes hashed between two calls of the `release` callback of [`digest_parts_releasing`]: a
/// whole number of chunks, so windows do not change the digest.
pub const WINDOW_BYTES: usize = 64 * CHUNK_BYTES;

/// [`digest_parts`] in windows of [`WINDOW_BYTES`], calling `release` with each window once it
/// is hashed: for data mapped from a file, the caller drops the window's pages from this
/// process (`madvise(MADV_DONTNEED)`), so hashing a file of any size keeps resident memory
/// bounded by a window (a 50 GB sparse file must not map 16 GB into bitexact's RSS).
pub fn digest_parts_releasing(
    dtype: DType,
    shape: &[usize],
    data: &[u8],
    release: &dyn Fn(&[u8]),
) -> Digest {
    if data.len() <= WINDOW_BYTES {
        let d = digest_parts(dtype, shape, data);
        release(data);
        return d;
    }
    let mut chunks: Vec<[u8; 32]> = Vec::with_capacity(data.len().div_ceil(CHUNK_BYTES));
    for window in data.chunks(WINDOW_BYTES) {
        chunks.extend(crate::sha_lanes::chunk_digests(window, CHUNK_BYTES));
        release(window);
    }
    chunk_digests_parts(dtype, shape, &chunks)
}

/// Digest of a tensor larger than [`CHUNK_BYTES`] from the SHA-256 of each of its
/// [`CHUNK_BYTES`] chunks, in order (computed anywhere, e.g. on a GPU).
pub fn from_chunk_digests(t: &Tensor, chunks: &[[u8; 32]]) -> Digest {
    chunk_digests_parts(t.dtype(), t.shape(), chunks)
}

/// [`from_chunk_digests`] for a tensor given by its dtype and shape (e.g. hashed while
/// streaming it in).
pub fn chunk_digests_parts(dtype: DType, shape: &[usize], chunks: &[[u8; 32]]) -> Digest {
    let mut h = Sha256::new();
    h.update(header_parts(dtype, shape));
    h.update(b"chunked");
    h.update((CHUNK_BYTES as u64).to_le_bytes());
    h.update((chunks.len() as u64).to_le_bytes());
    for c in chunks {
        h.update(c);
    }
    Digest(h.finalize().into())
}

/// Digests of many tensors; small ones are spread over threads, large ones chunked.
pub fn digest_all<'a, I>(tensors: I) -> BTreeMap<String, Digest>
where
    I: IntoIterator<Item = (&'a String, &'a Tensor)>,
{
    let items: Vec<_> = tensors.into_iter().collect();
    items
        .par_iter()
        .map(|(n, t)| ((*n).clone(), tensor_digest(t)))
        .collect()
}

/// Digest of a whole run: SHA-256 over `(name length, name, digest)` in name order.
pub fn run_digest(digests: &BTreeMap<String, Digest>) -> Digest {
    run_digest_of(digests.iter())
}

/// [`run_digest`] of `(name, digest)` pairs in any order (a name given twice counts once, with
/// its last digest, as when they are collected into a map); sorts references, never copies a
/// name.
pub fn run_digest_of_pairs(pairs: &[(String, Digest)]) -> Digest {
    let mut sorted: Vec<&(String, Digest)> = pairs.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let last = |i: &usize| sorted.get(i + 1).is_none_or(|next| next.0 != sorted[*i].0);
    run_digest_of(
        (0..sorted.len())
            .filter(last)
            .map(|i| (&sorted[i].0, &sorted[i].1)),
    )
}

/// SHA-256 over `(name length, name, digest)` of `digests`, in the order given.
fn run_digest_of<'a>(digests: impl Iterator<Item = (&'a String, &'a Digest)>) -> Digest {
    let mut h = Sha256::new();
    for (name, d) in digests {
        h.update((name.len() as u64).to_le_bytes());
        h.update(name.as_bytes());
        h.update(d.0);
    }
    Digest(h.finalize().into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_give_the_same_digest_and_release_each_window() {
        let data: Vec<u8> = (0..WINDOW_BYTES * 2 + 12345)
            .map(|i| (i * 7) as u8)
            .collect();
        let released = std::sync::Mutex::new(Vec::new());
        let d = digest_parts_releasing(DType::U8, &[data.len()], &data, &|w: &[u8]| {
            released.lock().unwrap().push(w.len())
        });
        assert_eq!(d, digest_parts(DType::U8, &[data.len()], &data));
        assert_eq!(
            *released.lock().unwrap(),
            vec![WINDOW_BYTES, WINDOW_BYTES, 12345]
        );
    }
    use proptest::prelude::*;

    #[test]
    fn existing_digests_are_unchanged() {
        // Pinned before `digest_parts` existed: committed snapshots depend on these.
        let t = Tensor::from_slice(&[2, 2], &[1.0f32, -0.0, 2.5, f32::NAN]);
        assert_eq!(
            tensor_digest(&t).hex(),
            "a6c523cd2da05053d6d4755924885a644e755823758ff33531f980346039317e"
        );
        let n = CHUNK_BYTES / 2 + 7;
        let big: Vec<u8> = (0..n).flat_map(|i| (i as u16).to_le_bytes()).collect();
        let t = Tensor::from_bytes(DType::F16, &[n], big).unwrap();
        assert_eq!(
            tensor_digest(&t).hex(),
            "4f8970c8c5e2acc6c0c70ddca6a010ec24b8677b380b684653300672f4567879"
        );
        assert_eq!(
            digest_parts(t.dtype(), t.shape(), t.bytes()),
            tensor_digest(&t)
        );
    }

    #[test]
    fn known_answer_sha256() {
        // FIPS 180-2 "abc" vector, through sha2, as the base of the encoding.
        let d: [u8; 32] = Sha256::digest(b"abc").into();
        assert_eq!(
            Digest(d).hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn small_tensor_is_sha256_of_header_and_bytes() {
        let t = Tensor::from_slice(&[2], &[1.0f32, -0.0]);
        let mut enc = b"bitexact".to_vec();
        enc.extend_from_slice(&1u32.to_le_bytes());
        enc.extend_from_slice(&1u32.to_le_bytes());
        enc.extend_from_slice(&1u64.to_le_bytes());
        enc.extend_from_slice(&2u64.to_le_bytes());
        enc.extend_from_slice(&1.0f32.to_le_bytes());
        enc.extend_from_slice(&(-0.0f32).to_le_bytes());
        assert_eq!(tensor_digest(&t).0, <[u8; 32]>::from(Sha256::digest(&enc)));
        assert_ne!(
            tensor_digest(&t),
            tensor_digest(&Tensor::from_slice(&[2], &[1.0f32, 0.0]))
        );
    }

    #[test]
    fn chunked_digest_independent_of_thread_count() {
        let n = 3 * CHUNK_BYTES / 4 + 12345; // several chunks plus a ragged tail
        let vals: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
        let t = Tensor::from_slice(&[n], &vals);
        let mut seen = Vec::new();
        for threads in [1, 2, 8] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            seen.push(pool.install(|| tensor_digest(&t)));
        }
        assert!(seen.windows(2).all(|w| w[0] == w[1]), "{seen:?}");
        // And it equals the documented encoding computed by hand on one thread.
        let mut h = Sha256::new();
        h.update(header(&t));
        h.update(b"chunked");
        h.update((CHUNK_BYTES as u64).to_le_bytes());
        let chunks: Vec<_> = t.bytes().chunks(CHUNK_BYTES).collect();
        h.update((chunks.len() as u64).to_le_bytes());
        for c in chunks {
            h.update(Sha256::digest(c));
        }
        assert_eq!(seen[0].0, <[u8; 32]>::from(h.finalize()));
    }

    #[test]
    fn run_digest_of_pairs_in_any_order_is_that_of_their_map() {
        let d = |b: u8| Digest([b; 32]);
        let pairs = vec![
            ("step_10".to_string(), d(1)),
            ("b".to_string(), d(2)),
            ("step_2".to_string(), d(3)),
            ("b".to_string(), d(4)),
        ];
        let map: BTreeMap<String, Digest> = pairs.iter().cloned().collect();
        assert_eq!(run_digest_of_pairs(&pairs), run_digest(&map));
        assert_ne!(run_digest_of_pairs(&pairs[..3]), run_digest(&map));
    }

    #[test]
    fn hex_round_trip() {
        let d = tensor_digest(&Tensor::scalar(1u8));
        assert_eq!(Digest::from_hex(&d.hex()), Some(d));
        assert_eq!(Digest::from_hex("zz"), None);
    }

    proptest! {
        #[test]
        fn any_single_bit_flip_changes_digest(
            vals in proptest::collection::vec(any::<u32>(), 1..300),
            pick in any::<prop::sample::Index>(),
            bit in 0u32..32,
        ) {
            let t = Tensor::from_slice(&[vals.len()], &vals);
            let mut flipped = vals.clone();
            let i = pick.index(vals.len());
            flipped[i] ^= 1 << bit;
            let u = Tensor::from_slice(&[vals.len()], &flipped);
            prop_assert_ne!(tensor_digest(&t), tensor_digest(&u));
        }

        #[test]
        fn dtype_or_shape_change_changes_digest(vals in proptest::collection::vec(any::<u32>(), 2..64)) {
            let n = vals.len();
            let t = Tensor::from_slice(&[n], &vals);
            let as_f32 = Tensor::from_bytes(DType::F32, &[n], t.bytes().to_vec()).unwrap();
            let as_i32 = Tensor::from_bytes(DType::I32, &[n], t.bytes().to_vec()).unwrap();
            let reshaped = Tensor::from_bytes(DType::U32, &[1, n], t.bytes().to_vec()).unwrap();
            let d = tensor_digest(&t);
            prop_assert_ne!(d, tensor_digest(&as_f32));
            prop_assert_ne!(d, tensor_digest(&as_i32));
            prop_assert_ne!(d, tensor_digest(&reshaped));
            if n % 2 == 0 {
                let halves = Tensor::from_bytes(DType::U32, &[2, n / 2], t.bytes().to_vec()).unwrap();
                prop_assert_ne!(tensor_digest(&reshaped), tensor_digest(&halves));
            }
        }
    }
}
