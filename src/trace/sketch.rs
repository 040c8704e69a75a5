//! Float64 sketches of traced tensors: what a record keeps, next to each result's exact digest,
//! to say *how much* two results differ when their digests do ([`super::noise`]).
//!
//! A sketch of a floating-point tensor of `n` elements is, computed in float64 over its
//! elements in index order (so equal bytes always give equal sketches):
//! - `norm`: the L2 norm of its finite elements;
//! - `max_abs`: the largest magnitude of its finite elements;
//! - `nonfinite`: how many elements are NaN or infinite;
//! - `samples`: the elements at [`SAMPLES`] fixed positions derived from `n` alone
//!   ([`positions`]), as exact values of the tensor's dtype.
//!
//! Its text, as a trace record stores it (field `sk`, one per result), is
//! `<norm>,<max_abs>,<nonfinite>;<s0>,<s1>,…` in Rust's exponent form (`3.4641016e0`, `NaN`,
//! `inf`, `-inf`) for an f32 (or narrower) tensor: its elements in f32's shortest round-trip
//! form (read back as exactly those f32 values) and its norm to 10 significant digits, about
//! 130 bytes. An f64 tensor's sketch has `|` for `;` and every number in f64's shortest
//! round-trip form. Integer and boolean tensors have no sketch (their differences are never rounding).

use crate::tensor::DType;
use std::fmt::Write as _;

/// How many elements a sketch samples, at most (one number for Rust and Python).
pub use crate::protocol::SKETCH_SAMPLES as SAMPLES;

/// A float64 sketch of one tensor (see the module docs).
#[derive(Clone, Debug, PartialEq)]
pub struct Sketch {
    /// L2 norm of the finite elements.
    pub norm: f64,
    /// Largest magnitude of the finite elements (0 when there is none).
    pub max_abs: f64,
    /// Elements that are NaN or infinite.
    pub nonfinite: u64,
    /// The elements at [`positions`]`(n)`, exactly.
    pub samples: Vec<f64>,
    /// Whether the elements are f32 values at most (f32, bf16, f16, fp8): their text then
    /// takes f32's shortest form (about half the bytes), which reads back to the same f32.
    pub narrow: bool,
}

/// The positions a sketch samples (one rule for Rust and Python).
pub use crate::protocol::sketch_positions as positions;

/// One element of `dtype` from its little-endian bytes, as f64 (`None` for a non-float dtype).
fn reader(dtype: DType) -> Option<fn(&[u8]) -> f64> {
    Some(match dtype {
        DType::F32 => |b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
        DType::F64 => |b| f64::from_le_bytes(b.try_into().expect("8 bytes")),
        DType::F16 => |b| half::f16::from_le_bytes([b[0], b[1]]).to_f64(),
        DType::BF16 => |b| half::bf16::from_le_bytes([b[0], b[1]]).to_f64(),
        DType::F8E4M3 => |b| crate::diff::f8_to_f64(b[0], 4, true),
        DType::F8E5M2 => |b| crate::diff::f8_to_f64(b[0], 5, false),
        _ => return None,
    })
}

/// Accumulators of [`accumulate`]: 16 independent sums, so that the vectorized loop is not held
/// up by the latency of one addition after another (8 ran the f32 sketch at 17 GB/s on this
/// project's machine, as slow as the fingerprint beside it).
const LANES: usize = 16;

/// Sum of squares and largest magnitude of the finite values of `data` (elements of `S` bytes,
/// read by `read`), and the count of others. First without looking at finiteness: element `i`
/// goes to accumulator `i % LANES`, [`LANES`] elements a block, so the loop vectorizes (the
/// order is fixed by the index). Only when that sum is not finite (a NaN or infinity, or f64 overflow)
/// again, value by value, with the same accumulators.
#[inline(always)]
fn accumulate<const S: usize>(data: &[u8], read: impl Fn([u8; S]) -> f64) -> (f64, f64, u64) {
    let at = |b: &[u8]| read(b.try_into().expect("S bytes"));
    let (mut sq, mut mx) = ([0f64; LANES], [0f64; LANES]);
    let blocks = data.chunks_exact(LANES * S);
    let tail = blocks.remainder();
    for block in blocks {
        for lane in 0..LANES {
            let v = at(&block[lane * S..(lane + 1) * S]);
            sq[lane] += v * v;
            let a = v.abs();
            mx[lane] = if a > mx[lane] { a } else { mx[lane] }; // no NaN here: see below
        }
    }
    for (lane, b) in tail.chunks_exact(S).enumerate() {
        let v = at(b);
        sq[lane] += v * v;
        mx[lane] = mx[lane].max(v.abs());
    }
    let total: f64 = sq.iter().sum();
    if total.is_finite() {
        return (total, mx.iter().fold(0f64, |a, &b| a.max(b)), 0);
    }
    let (mut sq, mut mx, mut bad) = ([0f64; LANES], [0f64; LANES], 0u64);
    for (i, b) in data.chunks_exact(S).enumerate() {
        let (v, lane) = (at(b), i % LANES);
        if v.is_finite() {
            sq[lane] += v * v;
            mx[lane] = mx[lane].max(v.abs());
        } else {
            bad += 1;
        }
    }
    (sq.iter().sum(), mx.iter().fold(0f64, |a, &b| a.max(b)), bad)
}

/// [`accumulate`] of f32 elements: compiled for AVX2 too, and that copy is taken where the CPU
/// has it (twice the lanes; the same operations in the same order, so the same bits).
fn accumulate_f32(data: &[u8]) -> (f64, f64, u64) {
    fn plain(data: &[u8]) -> (f64, f64, u64) {
        accumulate(data, |b: [u8; 4]| f32::from_le_bytes(b) as f64)
    }
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2")]
        fn avx2(data: &[u8]) -> (f64, f64, u64) {
            accumulate(data, |b: [u8; 4]| f32::from_le_bytes(b) as f64)
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU was just seen to have AVX2.
            return unsafe { avx2(data) };
        }
    }
    plain(data)
}

impl Sketch {
    /// The sketch of a tensor of `dtype` held in `data` (little-endian, contiguous); `None`
    /// for a dtype that is not floating point.
    pub fn of(dtype: DType, data: &[u8]) -> Option<Sketch> {
        let read = reader(dtype)?;
        let size = dtype.size();
        let n = data.len() / size;
        let (sq, max_abs, nonfinite) = match dtype {
            DType::F32 => accumulate_f32(data),
            DType::F64 => accumulate(data, f64::from_le_bytes),
            DType::F16 => accumulate(data, |b: [u8; 2]| half::f16::from_le_bytes(b).to_f64()),
            DType::BF16 => accumulate(data, |b: [u8; 2]| half::bf16::from_le_bytes(b).to_f64()),
            DType::F8E4M3 | DType::F8E5M2 => accumulate(data, |b: [u8; 1]| read(&b)),
            _ => return None,
        };
        let samples = positions(n)
            .map(|p| read(&data[p * size..(p + 1) * size]))
            .collect();
        Some(Sketch {
            norm: sq.sqrt(),
            max_abs,
            nonfinite,
            samples,
            narrow: dtype != DType::F64,
        })
    }

    /// The record's text of the sketch (see the module docs): for a [`narrow`](Self::narrow)
    /// sketch, the elements (largest magnitude, samples) in f32's shortest form and the norm
    /// to 10 significant digits; else every number in f64's shortest form.
    pub fn text(&self) -> String {
        let mut s = String::with_capacity(160);
        let put = |v: f64, s: &mut String| match self.narrow {
            true => write!(s, "{:e}", v as f32),
            false => write!(s, "{v:e}"),
        };
        let _ = match self.narrow {
            true => write!(s, "{:.9e},", self.norm),
            false => write!(s, "{:e},", self.norm),
        };
        let _ = put(self.max_abs, &mut s);
        let _ = write!(
            s,
            ",{}{}",
            self.nonfinite,
            if self.narrow { ';' } else { '|' }
        );
        for (i, &v) in self.samples.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            let _ = put(v, &mut s);
        }
        s
    }

    /// Parses [`Sketch::text`]; `None` for anything else (a record's sketch that cannot be
    /// read is treated as absent, never as a difference).
    pub fn parse(text: &str) -> Option<Sketch> {
        let narrow = !text.contains('|');
        let (head, tail) = text.split_once(if narrow { ';' } else { '|' })?;
        // A narrow sketch's elements read as the f32 values they were written from.
        let value = |v: &str| -> Option<f64> {
            match narrow {
                true => v.parse::<f32>().ok().map(f64::from),
                false => v.parse().ok(),
            }
        };
        let mut head = head.split(',');
        let norm = head.next()?.parse().ok()?;
        let max_abs = value(head.next()?)?;
        let nonfinite = head.next()?.parse().ok()?;
        if head.next().is_some() {
            return None;
        }
        let samples = match tail {
            "" => Vec::new(),
            t => t.split(',').map(value).collect::<Option<Vec<f64>>>()?,
        };
        if samples.len() > SAMPLES {
            return None;
        }
        Some(Sketch {
            norm,
            max_abs,
            nonfinite,
            samples,
            narrow,
        })
    }

    /// The relative difference of two sketches of tensors of one shape: the largest of the
    /// norms' relative difference, the largest magnitudes' and each sample's difference over
    /// the larger of the two largest magnitudes (the scale of the tensor: rounding noise in an
    /// element is relative to the magnitudes summed into it, not to the element itself). 0 for
    /// equal sketches; infinite when the non-finite counts or the sample counts differ, or a
    /// sample is non-finite on one side only.
    pub fn relative_difference(&self, other: &Sketch) -> f64 {
        if self.nonfinite != other.nonfinite || self.samples.len() != other.samples.len() {
            return f64::INFINITY;
        }
        let rel = |x: f64, y: f64, scale: f64| -> f64 {
            if x == y || (x.is_nan() && y.is_nan()) {
                0.0
            } else if !x.is_finite() || !y.is_finite() || scale == 0.0 {
                f64::INFINITY
            } else {
                (x - y).abs() / scale
            }
        };
        let scale = self.max_abs.max(other.max_abs);
        let mut d = rel(self.norm, other.norm, self.norm.max(other.norm));
        d = d.max(rel(self.max_abs, other.max_abs, scale));
        for (&x, &y) in self.samples.iter().zip(&other.samples) {
            d = d.max(rel(x, y, scale));
        }
        d
    }

    /// The largest distance in units in the last place of `dtype` between the two sketches'
    /// samples (`None` for a non-float dtype or different sample counts).
    pub fn max_ulp(&self, other: &Sketch, dtype: DType) -> Option<u64> {
        if self.samples.len() != other.samples.len() {
            return None;
        }
        let key = |v: f64| -> Option<i128> {
            let (bits, sign) = match dtype {
                DType::F32 => ((v as f32).to_bits() as u64, 1u64 << 31),
                DType::F64 => (v.to_bits(), 1 << 63),
                DType::F16 => (half::f16::from_f64(v).to_bits() as u64, 1 << 15),
                DType::BF16 => (half::bf16::from_f64(v).to_bits() as u64, 1 << 15),
                _ => return None,
            };
            Some(match bits & sign {
                0 => bits as i128,
                _ => -((bits & !sign) as i128),
            })
        };
        let mut most = 0u64;
        for (&x, &y) in self.samples.iter().zip(&other.samples) {
            let d = key(x)?.abs_diff(key(y)?);
            most = most.max(u64::try_from(d).unwrap_or(u64::MAX));
        }
        Some(most)
    }
}

/// Machine epsilon of a floating-point dtype (the gap above 1.0); `None` for other dtypes.
pub fn epsilon(dtype: DType) -> Option<f64> {
    Some(match dtype {
        DType::F64 => f64::EPSILON,
        DType::F32 => f32::EPSILON as f64,
        DType::F16 => 2f64.powi(-10),
        DType::BF16 => 2f64.powi(-7),
        DType::F8E4M3 => 2f64.powi(-3),
        DType::F8E5M2 => 2f64.powi(-2),
        _ => return None,
    })
}

/// The dtype a trace label names (`f32[2,3]:…` → f32).
pub fn dtype_of_label(label: &str) -> Option<DType> {
    let name = label.split('[').next()?;
    DType::ALL.into_iter().find(|d| d.name() == name)
}

/// The shape a trace label names (`f32[2,3]:…` → `[2, 3]`; `None` when it cannot be read).
pub fn shape_of_label(label: &str) -> Option<Vec<usize>> {
    let inside = label.split_once('[')?.1.split_once(']')?.0;
    if inside.is_empty() {
        return Some(Vec::new());
    }
    inside.split(',').map(|d| d.trim().parse().ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32_bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    /// Whether `b` (read back from text) holds `a`'s elements exactly and its norm to 1e-9.
    fn read_back(a: &Sketch, b: &Sketch) -> bool {
        let f = |v: &[f64]| v.iter().map(|&x| x.to_bits()).collect::<Vec<_>>();
        f(&a.samples) == f(&b.samples)
            && a.max_abs == b.max_abs
            && a.nonfinite == b.nonfinite
            && a.narrow == b.narrow
            && (a.norm - b.norm).abs() <= 1e-9 * a.norm
    }

    #[test]
    fn a_sketch_keeps_norm_magnitude_nonfinite_and_fixed_samples() {
        let v: Vec<f32> = (0..100).map(|i| i as f32 - 50.0).collect();
        let s = Sketch::of(DType::F32, &f32_bytes(&v)).unwrap();
        let norm: f64 = v.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
        assert_eq!((s.norm, s.max_abs, s.nonfinite), (norm, 50.0, 0));
        assert_eq!(
            positions(100).collect::<Vec<_>>(),
            [6, 18, 31, 43, 56, 68, 81, 93]
        );
        assert_eq!(s.samples[0], -44.0);
        assert!(
            read_back(&s, &Sketch::parse(&s.text()).unwrap()),
            "{}",
            s.text()
        );
        let wide = Sketch {
            narrow: false,
            ..s.clone()
        };
        assert_eq!(Sketch::parse(&wide.text()), Some(wide));
        // Small tensors are sampled whole; NaNs counted and left out of the norm.
        let t = Sketch::of(DType::F32, &f32_bytes(&[f32::NAN, 3.0, -4.0])).unwrap();
        assert_eq!((t.norm, t.max_abs, t.nonfinite), (5.0, 4.0, 1));
        assert!(t.samples[0].is_nan());
        let back = Sketch::parse(&t.text()).unwrap();
        assert!(back.samples[0].is_nan() && back.samples[1..] == [3.0, -4.0]);
        assert_eq!(Sketch::of(DType::I64, &[0; 16]), None);
        let h = Sketch::of(DType::BF16, &half::bf16::from_f32(1.5).to_le_bytes()).unwrap();
        assert_eq!(h.samples, [1.5]);
    }

    #[test]
    fn differences_are_relative_to_the_tensor_scale_and_in_ulps() {
        let a = Sketch::of(DType::F32, &f32_bytes(&[1.0, 2.0, 4.0])).unwrap();
        let next = f32::from_bits(2f32.to_bits() + 1);
        let b = Sketch::of(DType::F32, &f32_bytes(&[1.0, next, 4.0])).unwrap();
        assert_eq!(a.relative_difference(&a), 0.0);
        let d = a.relative_difference(&b);
        assert!(d > 0.0 && d <= (next as f64 - 2.0) / 4.0 + 1e-18, "{d}");
        assert_eq!(a.max_ulp(&b, DType::F32), Some(1));
        let neg = Sketch::of(DType::F32, &f32_bytes(&[-0.0, 2.0, 4.0])).unwrap();
        let pos = Sketch::of(DType::F32, &f32_bytes(&[0.0, 2.0, 4.0])).unwrap();
        assert_eq!(neg.max_ulp(&pos, DType::F32), Some(0));
        let nan = Sketch::of(DType::F32, &f32_bytes(&[f32::NAN, 2.0, 4.0])).unwrap();
        assert_eq!(a.relative_difference(&nan), f64::INFINITY);
    }

    #[test]
    fn labels_name_their_dtype_and_shape() {
        assert_eq!(dtype_of_label("bf16[2,3]:ab"), Some(DType::BF16));
        assert_eq!(shape_of_label("f32[2,3]:ab"), Some(vec![2, 3]));
        assert_eq!(shape_of_label("f32[]:ab"), Some(vec![]));
        assert_eq!(shape_of_label("f32[x]:ab"), None);
        assert_eq!(epsilon(DType::F32), Some(f32::EPSILON as f64));
        assert_eq!(epsilon(DType::I32), None);
    }

    proptest::proptest! {
        #[test]
        fn parsing_never_panics_and_round_trips(text in "[-0-9e.,|;NaInf]{0,80}",
                                                v in proptest::collection::vec(-1e30f32..1e30, 0..40)) {
            let _ = Sketch::parse(&text);
            let s = Sketch::of(DType::F32, &f32_bytes(&v)).unwrap();
            proptest::prop_assert!(read_back(&s, &Sketch::parse(&s.text()).unwrap()));
        }

        /// The vectorized accumulation gives exactly the plain loop's bits: element `i` into
        /// accumulator `i % LANES`, finite elements only, NaNs and infinities counted.
        #[test]
        fn the_fast_accumulation_is_the_plain_one(
            v in proptest::collection::vec(
                proptest::prop_oneof![8 => -1e30f32..1e30, 1 => proptest::num::f32::ANY], 0..100)) {
            let (mut sq, mut mx, mut bad) = ([0f64; LANES], [0f64; LANES], 0u64);
            for (i, &x) in v.iter().enumerate() {
                let x = x as f64;
                if x.is_finite() {
                    sq[i % LANES] += x * x;
                    mx[i % LANES] = mx[i % LANES].max(x.abs());
                } else {
                    bad += 1;
                }
            }
            let s = Sketch::of(DType::F32, &f32_bytes(&v)).unwrap();
            let norm = sq.iter().sum::<f64>().sqrt();
            proptest::prop_assert_eq!(s.norm.to_bits(), norm.to_bits());
            proptest::prop_assert_eq!(s.max_abs, mx.iter().fold(0f64, |a, &b| a.max(b)));
            proptest::prop_assert_eq!(s.nonfinite, bad);
        }
    }
}
