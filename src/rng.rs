//! Philox4x32-10 counter-based random streams (Salmon et al., SC'11; as in cuRAND and PyTorch CUDA).
//!
//! A stream is addressed by `(seed, stream id, offset)`; the offset counts 32-bit words. Word `w`
//! of a stream is word `w % 4` of the Philox block with counter
//! `[lo(w/4), hi(w/4), lo(stream), hi(stream)]` and key `[lo(seed), hi(seed)]`. So any value is a pure
//! function of its index, identical on CPU and GPU for any thread, grid or worker count, and the
//! state to checkpoint is `(seed, stream, offset)`.
//!
//! Derived values (the CUDA kernels in `kernels/philox.cuh` compute exactly the same bits):
//! * uniform f32 in `[0, 1)`: `(w >> 8) * 2^-24` (one word);
//! * normal f32: Box–Muller from two words `w0, w1`: `u1 = ((w0 >> 8) + 1) * 2^-24`,
//!   `u2 = (w1 >> 8) * 2^-24`, `z = sqrt(-2 ln u1) * cos(2π u2)` evaluated in f64 with `det_ln` and
//!   `det_cos_2pi`, which use only `+ - * /` and `sqrt` (correctly rounded everywhere, no FMA), then
//!   rounded to f32 — so normals are bit-identical across devices too;
//! * bernoulli(p): `uniform < p` (one word).

use rayon::prelude::*;

const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;

/// The Philox4x32 bijection with 10 rounds: counter words 0..3 and key words 0..1 to 4 output words.
pub fn philox4x32_10(ctr: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let (mut c, mut k) = (ctr, key);
    for round in 0..10 {
        if round > 0 {
            k = [k[0].wrapping_add(W0), k[1].wrapping_add(W1)];
        }
        let p0 = (M0 as u64) * (c[0] as u64);
        let p1 = (M1 as u64) * (c[2] as u64);
        let (hi0, lo0) = ((p0 >> 32) as u32, p0 as u32);
        let (hi1, lo1) = ((p1 >> 32) as u32, p1 as u32);
        c = [hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0];
    }
    c
}

/// The Philox block `block` of stream `stream` under `seed`.
pub fn block(seed: u64, stream: u64, block: u64) -> [u32; 4] {
    philox4x32_10(
        [
            block as u32,
            (block >> 32) as u32,
            stream as u32,
            (stream >> 32) as u32,
        ],
        [seed as u32, (seed >> 32) as u32],
    )
}

/// Word `index` of stream `stream` under `seed`.
pub fn word_at(seed: u64, stream: u64, index: u64) -> u32 {
    block(seed, stream, index / 4)[(index % 4) as usize]
}

/// Uniform f32 in `[0, 1)` from one word.
pub fn uniform_from_word(w: u32) -> f32 {
    (w >> 8) as f32 * (1.0 / 16_777_216.0)
}

/// Natural logarithm of `x > 0` using only IEEE basic operations (bit-reproducible on any device).
pub fn det_ln(x: f64) -> f64 {
    let bits = x.to_bits();
    let mut e = ((bits >> 52) & 0x7ff) as i64 - 1023;
    let mut m = f64::from_bits((bits & 0x000f_ffff_ffff_ffff) | 0x3ff0_0000_0000_0000);
    if m > std::f64::consts::SQRT_2 {
        m *= 0.5;
        e += 1;
    }
    // ln m = 2 atanh(s) = 2 s (1 + s²/3 + s⁴/5 + ...), |s| <= 0.1716.
    #[allow(clippy::excessive_precision)] // literals as written in kernels/philox.cuh
    const INV_ODD: [f64; 11] = [
        1.0,
        0.333_333_333_333_333_3,
        0.2,
        0.142_857_142_857_142_85,
        0.111_111_111_111_111_11,
        0.090_909_090_909_090_91,
        0.076_923_076_923_076_92,
        0.066_666_666_666_666_67,
        0.058_823_529_411_764_705,
        0.052_631_578_947_368_42,
        0.047_619_047_619_047_616,
    ];
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    let mut p = INV_ODD[10];
    for c in INV_ODD[..10].iter().rev() {
        p = p * s2 + c;
    }
    (e as f64) * std::f64::consts::LN_2 + 2.0 * s * p
}

/// `cos(2π u)` for `u` in `[0, 1)` using only IEEE basic operations (bit-reproducible on any device).
pub fn det_cos_2pi(u: f64) -> f64 {
    let t = u * 4.0;
    let k = (t + 0.5).floor();
    let r = (t - k) * std::f64::consts::FRAC_PI_2; // |r| <= π/4
    let r2 = r * r;
    // Taylor coefficients 1/n! with alternating signs, Horner in r².
    #[allow(clippy::excessive_precision)]
    const COS: [f64; 9] = [
        1.0,
        -0.5,
        0.041_666_666_666_666_664,
        -0.001_388_888_888_888_889,
        2.480_158_730_158_730_2e-5,
        -2.755_731_922_398_589e-7,
        2.087_675_698_786_81e-9,
        -1.147_074_559_772_972_5e-11,
        4.779_477_332_387_385e-14,
    ];
    #[allow(clippy::excessive_precision)]
    const SIN: [f64; 9] = [
        1.0,
        -0.166_666_666_666_666_66,
        0.008_333_333_333_333_333,
        -0.000_198_412_698_412_698_4,
        2.755_731_922_398_589e-6,
        -2.505_210_838_544_172e-8,
        1.605_904_383_682_161_3e-10,
        -7.647_163_731_819_816e-13,
        2.811_457_254_345_520_6e-15,
    ];
    let horner = |c: &[f64; 9]| c.iter().rev().fold(0.0, |acc, &ci| acc * r2 + ci);
    match (k as i64) & 3 {
        0 => horner(&COS),
        1 => -(r * horner(&SIN)),
        2 => -horner(&COS),
        _ => r * horner(&SIN),
    }
}

/// Standard normal f32 from two words (Box–Muller, cosine branch).
pub fn normal_from_words(w0: u32, w1: u32) -> f32 {
    let u1 = ((w0 >> 8) as f64 + 1.0) * (1.0 / 16_777_216.0);
    let u2 = (w1 >> 8) as f64 * (1.0 / 16_777_216.0);
    ((-2.0 * det_ln(u1)).sqrt() * det_cos_2pi(u2)) as f32
}

/// Mixes a base seed and a worker (or any sub-task) id into a new seed: SplitMix64 of
/// `base ^ (id + 1) * 0x9E3779B97F4A7C15`. Distinct ids give distinct, well-spread seeds, so
/// workers never share a stream.
pub fn derive_seed(base: u64, id: u64) -> u64 {
    let mut z = base ^ id.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Stream id for a name: FNV-1a 64 of its UTF-8 bytes (stable across versions and machines).
pub fn stream_id(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// Words per parallel task when filling large buffers.
const PAR_WORDS: usize = 1 << 16;

/// A position in a Philox stream: `(seed, stream, offset)`, offset in 32-bit words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Stream {
    /// Key of the generator.
    pub seed: u64,
    /// Stream (subsequence) id.
    pub stream: u64,
    /// Next word to be read.
    pub offset: u64,
}

impl Stream {
    /// The start of stream `stream` under `seed`.
    pub fn new(seed: u64, stream: u64) -> Stream {
        Stream {
            seed,
            stream,
            offset: 0,
        }
    }

    /// The start of the stream named `name` (see [`stream_id`]).
    pub fn named(seed: u64, name: &str) -> Stream {
        Stream::new(seed, stream_id(name))
    }

    /// Fills `out` with the next words and advances the offset by `out.len()`.
    pub fn fill_u32(&mut self, out: &mut [u32]) {
        let (seed, stream, start) = (self.seed, self.stream, self.offset);
        let fill = |(i, chunk): (usize, &mut [u32])| {
            fill_words(seed, stream, start + (i * PAR_WORDS) as u64, chunk)
        };
        if out.len() > PAR_WORDS {
            out.par_chunks_mut(PAR_WORDS).enumerate().for_each(fill);
        } else {
            fill((0, out));
        }
        self.offset += out.len() as u64;
    }

    /// The next word.
    pub fn next_u32(&mut self) -> u32 {
        let w = word_at(self.seed, self.stream, self.offset);
        self.offset += 1;
        w
    }

    /// A value in `0..n` (by 64-bit multiply-shift of one word; `n` must be > 0).
    pub fn below(&mut self, n: u32) -> u32 {
        ((self.next_u32() as u64 * n as u64) >> 32) as u32
    }

    /// `n` uniform f32 values in `[0, 1)`; one word each.
    pub fn uniform(&mut self, n: usize) -> Vec<f32> {
        let mut w = vec![0u32; n];
        self.fill_u32(&mut w);
        w.into_iter().map(uniform_from_word).collect()
    }

    /// `n` standard normal f32 values; two words each.
    pub fn normal(&mut self, n: usize) -> Vec<f32> {
        let mut w = vec![0u32; 2 * n];
        self.fill_u32(&mut w);
        let map = |p: &[u32]| normal_from_words(p[0], p[1]);
        if n > PAR_WORDS {
            w.par_chunks(2).map(map).collect()
        } else {
            w.chunks(2).map(map).collect()
        }
    }

    /// `n` bernoulli draws, true with probability `p`; one word each.
    pub fn bernoulli(&mut self, p: f32, n: usize) -> Vec<bool> {
        self.uniform(n).into_iter().map(|u| u < p).collect()
    }
}

fn fill_words(seed: u64, stream: u64, start: u64, out: &mut [u32]) {
    let mut idx = start;
    let mut i = 0;
    while i < out.len() {
        let b = block(seed, stream, idx / 4);
        let lane = (idx % 4) as usize;
        let take = (4 - lane).min(out.len() - i);
        out[i..i + take].copy_from_slice(&b[lane..lane + take]);
        i += take;
        idx += take as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn random123_known_answers() {
        assert_eq!(
            philox4x32_10([0; 4], [0; 2]),
            [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]
        );
        assert_eq!(
            philox4x32_10([u32::MAX; 4], [u32::MAX; 2]),
            [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]
        );
        assert_eq!(
            philox4x32_10(
                [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344],
                [0xa4093822, 0x299f31d0]
            ),
            [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]
        );
    }

    #[test]
    fn det_math_is_accurate() {
        for i in 1..2000 {
            let x = i as f64 / 2000.0;
            assert!((det_ln(x) - x.ln()).abs() < 1e-14, "ln {x}");
            assert!(
                (det_cos_2pi(x) - (2.0 * std::f64::consts::PI * x).cos()).abs() < 1e-14,
                "cos {x}"
            );
        }
        assert_eq!(det_ln(1.0), 0.0);
    }

    #[test]
    fn distributions_look_right() {
        let mut s = Stream::named(42, "test");
        let u = s.uniform(100_000);
        let mean = u.iter().map(|&x| x as f64).sum::<f64>() / u.len() as f64;
        assert!((mean - 0.5).abs() < 0.01 && u.iter().all(|&x| (0.0..1.0).contains(&x)));
        let z = s.normal(100_000);
        let m = z.iter().map(|&x| x as f64).sum::<f64>() / z.len() as f64;
        let v = z.iter().map(|&x| (x as f64 - m).powi(2)).sum::<f64>() / z.len() as f64;
        assert!(m.abs() < 0.02 && (v - 1.0).abs() < 0.03, "mean {m} var {v}");
        let b = s.bernoulli(0.25, 100_000);
        let frac = b.iter().filter(|&&x| x).count() as f64 / b.len() as f64;
        assert!((frac - 0.25).abs() < 0.01);
    }

    #[test]
    fn derived_seeds_differ() {
        let seeds: std::collections::HashSet<u64> = (0..1000).map(|w| derive_seed(7, w)).collect();
        assert_eq!(seeds.len(), 1000);
        assert_ne!(derive_seed(7, 0), derive_seed(8, 0));
    }

    proptest! {
        #[test]
        fn pieces_equal_one_go(seed: u64, stream: u64, start in 0u64..1_000_000, cuts in proptest::collection::vec(0usize..300, 0..6)) {
            let total: usize = cuts.iter().sum::<usize>() + 7;
            let mut whole = vec![0u32; total];
            Stream { seed, stream, offset: start }.fill_u32(&mut whole);
            let mut s = Stream { seed, stream, offset: start };
            let mut pieces = Vec::new();
            for &c in cuts.iter().chain([7usize].iter()) {
                let mut part = vec![0u32; c];
                s.fill_u32(&mut part);
                pieces.extend(part);
            }
            prop_assert_eq!(&pieces, &whole);
            prop_assert_eq!(s.offset, start + total as u64);
            for (i, &w) in whole.iter().enumerate() {
                prop_assert_eq!(w, word_at(seed, stream, start + i as u64));
            }
        }

        #[test]
        fn large_parallel_fill_matches_pointwise(seed: u64, start in 0u64..10) {
            let mut big = vec![0u32; 3 * PAR_WORDS + 5];
            Stream { seed, stream: 1, offset: start }.fill_u32(&mut big);
            for i in [0, PAR_WORDS - 1, PAR_WORDS, 2 * PAR_WORDS + 3, big.len() - 1] {
                prop_assert_eq!(big[i], word_at(seed, 1, start + i as u64));
            }
        }
    }
}
