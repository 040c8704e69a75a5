//! The 128-bit fingerprint that op-trace records label tensors with (`f32[2,3]:<32 hex
//! digits>`): two lanes of a sum, modulo 2^64, of each 64-bit word of the tensor's canonical
//! bytes mixed with its position. Defined in `docs/concepts/fingerprint.md`:
//!
//! ```text
//! mix(x)  = splitmix64's finalizer
//! acc_L   = Σ_i mix(w_i ^ ((i + 1) * M_L))  mod 2^64      (w_i: the i-th little-endian u64 of
//! fp_L    = mix(acc_L ^ ((nbytes + 1) * M_L))              the bytes, zero-padded to 8)
//! ```
//!
//! It is not cryptographic: SHA-256 ([`crate::digest`]) stays the canonical digest of outputs,
//! snapshots and files. What a trace needs is equality, at memory speed, with the same value on
//! every device: a sum modulo 2^64 does not depend on the order of its terms, so any chunking,
//! thread count or GPU grid gives the same fingerprint. Here the words are summed in blocks of
//! `BLOCK` independent accumulators per lane (which LLVM turns into vector multiplies, with
//! AVX-512 where the CPU has it), and a large tensor's `PAR_BYTES` chunks on rayon's threads.

use rayon::prelude::*;
use std::fmt;

/// The lanes' odd constants: `M0` (the golden ratio's, splitmix64's increment) and `M1`.
pub const M: [u64; 2] = [0x9e37_79b9_7f4a_7c15, 0xd1b5_4a32_d192_ed03];

/// Words summed together per lane in the inner loop: independent accumulators, two AVX-512
/// registers of u64 per lane, so that the multiplies of several words are in flight at once.
/// With one register per lane (8) the sums ran at 8.9 GB/s in cache on one thread of this
/// project's 2-core AMD EPYC machine; with two, 19 GB/s; with four, no faster
/// (`cargo bench --bench fingerprint`).
const BLOCK: usize = 16;

/// Bytes per parallel chunk of a large tensor (a multiple of 8: chunks start at whole words).
pub const PAR_BYTES: usize = 1 << 20;

/// splitmix64's finalizer: a bijection of u64.
#[inline(always)]
pub fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A 128-bit fingerprint: lane 0, then lane 1.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct Fingerprint(pub [u64; 2]);

impl Fingerprint {
    /// The fingerprint of a tensor whose canonical bytes are `nbytes` long and whose lanes'
    /// sums are `acc` (see the module doc).
    pub fn finish(acc: [u64; 2], nbytes: u64) -> Fingerprint {
        let end = nbytes.wrapping_add(1);
        Fingerprint([
            mix(acc[0] ^ end.wrapping_mul(M[0])),
            mix(acc[1] ^ end.wrapping_mul(M[1])),
        ])
    }

    /// 32 lower-case hex digits: each lane as 16, big-endian.
    pub fn hex(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}{:016x}", self.0[0], self.0[1])
    }
}

/// The lanes' sums of the whole words of `words` (a multiple of 8 bytes long), the first being
/// word `first` of the tensor.
#[inline(always)]
fn sums_body(words: &[u8], first: u64) -> [u64; 2] {
    let (mut a0, mut a1) = ([0u64; BLOCK], [0u64; BLOCK]);
    let key = |j: u64, m: u64| (first + j + 1).wrapping_mul(m);
    let mut k0: [u64; BLOCK] = std::array::from_fn(|j| key(j as u64, M[0]));
    let mut k1: [u64; BLOCK] = std::array::from_fn(|j| key(j as u64, M[1]));
    let step = [
        (BLOCK as u64).wrapping_mul(M[0]),
        (BLOCK as u64).wrapping_mul(M[1]),
    ];
    let mut stripes = words.chunks_exact(STRIPE_BYTES);
    let mut block = |b: &[u8]| {
        for j in 0..BLOCK {
            let w = u64::from_le_bytes(b[8 * j..8 * j + 8].try_into().expect("8 bytes"));
            a0[j] = a0[j].wrapping_add(mix(w ^ k0[j]));
            a1[j] = a1[j].wrapping_add(mix(w ^ k1[j]));
            k0[j] = k0[j].wrapping_add(step[0]);
            k1[j] = k1[j].wrapping_add(step[1]);
        }
    };
    for stripe in &mut stripes {
        prefetch(stripe);
        stripe.chunks_exact(8 * BLOCK).for_each(&mut block);
    }
    let mut blocks = stripes.remainder().chunks_exact(8 * BLOCK);
    blocks.by_ref().for_each(&mut block);
    let rest = blocks.remainder();
    for (j, w) in rest.chunks_exact(8).enumerate() {
        let w = u64::from_le_bytes(w.try_into().expect("8 bytes"));
        a0[j] = a0[j].wrapping_add(mix(w ^ k0[j]));
        a1[j] = a1[j].wrapping_add(mix(w ^ k1[j]));
    }
    let sum = |a: [u64; BLOCK]| a.iter().fold(0u64, |s, &x| s.wrapping_add(x));
    [sum(a0), sum(a1)]
}

/// Bytes summed between two rounds of [`prefetch`].
const STRIPE_BYTES: usize = 1024;

/// Asks for the cache lines of the stripe after `stripe` (hints: an address past the data is
/// never read). Without them, the sums of a tensor larger than the last-level cache ran at a
/// fifth of their in-cache speed here (1.9 against 9.9 GB/s), the hardware prefetcher not
/// keeping up, while XXH3 (which prefetches) read the same bytes at 24 GB/s. Issued a stripe at
/// a time, outside the loop that the compiler vectorizes.
#[inline(always)]
fn prefetch(stripe: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    for line in (0..STRIPE_BYTES).step_by(64) {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let ahead = stripe
            .as_ptr()
            .wrapping_add(STRIPE_BYTES + line)
            .cast::<i8>();
        // SAFETY: a prefetch is a hint: it never faults and reads nothing into the program.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(ahead) };
    }
}

/// [`sums_body`] compiled for AVX-512 (vector 64-bit multiplies).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,avx512vl")]
unsafe fn sums_avx512(words: &[u8], first: u64) -> [u64; 2] {
    sums_body(words, first)
}

/// [`sums_body`] compiled for AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn sums_avx2(words: &[u8], first: u64) -> [u64; 2] {
    sums_body(words, first)
}

/// The lanes' sums of `bytes`, word `first` of a tensor onwards: a last partial word is
/// zero-padded (only the tensor's last chunk has one). On this thread.
pub fn sums(bytes: &[u8], first: u64) -> [u64; 2] {
    let whole = bytes.len() & !7;
    let (words, tail) = bytes.split_at(whole);
    #[cfg(target_arch = "x86_64")]
    let mut acc = {
        static AVX512: std::sync::LazyLock<bool> = std::sync::LazyLock::new(|| {
            is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512dq")
                && is_x86_feature_detected!("avx512vl")
        });
        static AVX2: std::sync::LazyLock<bool> =
            std::sync::LazyLock::new(|| is_x86_feature_detected!("avx2"));
        if *AVX512 {
            // SAFETY: the CPU has the features `sums_avx512` is compiled for (checked above).
            unsafe { sums_avx512(words, first) }
        } else if *AVX2 {
            // SAFETY: as above, for AVX2.
            unsafe { sums_avx2(words, first) }
        } else {
            sums_body(words, first)
        }
    };
    #[cfg(not(target_arch = "x86_64"))]
    let mut acc = sums_body(words, first);
    if !tail.is_empty() {
        let mut w = [0u8; 8];
        w[..tail.len()].copy_from_slice(tail);
        let i = first + (whole / 8) as u64;
        let w = u64::from_le_bytes(w);
        for (a, m) in acc.iter_mut().zip(M) {
            *a = a.wrapping_add(mix(w ^ (i + 1).wrapping_mul(m)));
        }
    }
    acc
}

/// Adds two lanes' sums (modulo 2^64).
pub fn add(a: [u64; 2], b: [u64; 2]) -> [u64; 2] {
    [a[0].wrapping_add(b[0]), a[1].wrapping_add(b[1])]
}

/// The fingerprint of a tensor's canonical bytes `data`, on this thread.
pub fn fingerprint_serial(data: &[u8]) -> Fingerprint {
    Fingerprint::finish(sums(data, 0), data.len() as u64)
}

/// The fingerprint of a tensor's canonical bytes `data`: over [`PAR_BYTES`], its chunks on
/// rayon's threads (the same value: the sums do not depend on the order of addition).
pub fn fingerprint(data: &[u8]) -> Fingerprint {
    if data.len() <= PAR_BYTES {
        return fingerprint_serial(data);
    }
    let acc = data
        .par_chunks(PAR_BYTES)
        .enumerate()
        .map(|(k, c)| sums(c, (k * PAR_BYTES / 8) as u64))
        .reduce(|| [0, 0], add);
    Fingerprint::finish(acc, data.len() as u64)
}

/// A fingerprint computed from a tensor's canonical bytes given in pieces of any length, in
/// order (a strided view's rows, gathered a block at a time): the same value as
/// [`fingerprint_serial`] of the pieces joined.
#[derive(Default, Clone)]
pub struct Fingerprinter {
    acc: [u64; 2],
    nbytes: u64,
    pending: [u8; 8],
}

impl Fingerprinter {
    /// Adds the next bytes.
    pub fn update(&mut self, mut bytes: &[u8]) {
        let held = (self.nbytes % 8) as usize;
        if held > 0 {
            let take = bytes.len().min(8 - held);
            self.pending[held..held + take].copy_from_slice(&bytes[..take]);
            self.nbytes += take as u64;
            bytes = &bytes[take..];
            if self.nbytes.is_multiple_of(8) {
                let word = self.nbytes / 8 - 1;
                self.acc = add(self.acc, sums(&self.pending, word));
            }
        }
        let whole = bytes.len() & !7;
        if whole > 0 {
            self.acc = add(self.acc, sums(&bytes[..whole], self.nbytes / 8));
            self.nbytes += whole as u64;
        }
        let rest = &bytes[whole..];
        self.pending[..rest.len()].copy_from_slice(rest);
        self.nbytes += rest.len() as u64;
    }

    /// The fingerprint of every byte added.
    pub fn finish(&self) -> Fingerprint {
        let held = (self.nbytes % 8) as usize;
        let acc = match held {
            0 => self.acc,
            _ => add(self.acc, sums(&self.pending[..held], self.nbytes / 8)),
        };
        Fingerprint::finish(acc, self.nbytes)
    }
}

#[cfg(test)]
#[path = "fingerprint_tests.rs"]
mod tests;
