//! Explains how two tensors differ: how many elements, where first, by how much (absolute
//! and in ULPs), and how the difference spreads ([`spread`]: ULP histogram, positions).

pub mod spread;

pub use spread::Positions;

use crate::tensor::{DType, Tensor};
use serde::{Deserialize, Serialize};

/// How one output tensor differs between two runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TensorDiff {
    /// Output name.
    pub tensor: String,
    /// The two runs compared (0-based).
    pub runs: [usize; 2],
    /// Elements whose bits differ.
    pub elements_differing: usize,
    /// Elements compared.
    pub elements: usize,
    /// Coordinates of the first differing element.
    pub first_index: Vec<usize>,
    /// The two values at `first_index`, as text.
    pub first_values: [String; 2],
    /// Largest absolute difference (numeric dtypes; NaN-vs-number counts as infinite).
    pub max_abs: f64,
    /// Largest distance in units in the last place (float dtypes).
    pub max_ulp: Option<u64>,
    /// Set when the tensors cannot be compared element-wise (dtype or shape differ, or missing).
    pub note: Option<String>,
    /// Differing elements per ULP distance bucket (`spread::ulp_bucket`: index 0 holds
    /// distance 0, index `k` distances in `[2^(k-1), 2^k)`), for float dtypes with differing
    /// elements; it ends at the largest distance's bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ulp_histogram: Option<Vec<u64>>,
    /// Where the differing elements lie (tensors of one or more dimensions with differing
    /// elements compared element-wise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub positions: Option<Positions>,
}

impl TensorDiff {
    /// One line: `logits: 17/4096 elements differ, first at [0, 3] (0.1 vs 0.1000001), max |Δ| 1e-7, max 1 ULP`.
    pub fn summary(&self) -> String {
        if let Some(n) = &self.note {
            return format!("{}: {n}", self.tensor);
        }
        let ulp = self
            .max_ulp
            .map(|u| format!(", max {u} ULP"))
            .unwrap_or_default();
        format!(
            "{}: {}/{} elements differ (runs {} and {}), first at {:?} ({} vs {}), max |Δ| {:.3e}{ulp}",
            self.tensor,
            self.elements_differing,
            self.elements,
            self.runs[0],
            self.runs[1],
            self.first_index,
            self.first_values[0],
            self.first_values[1],
            self.max_abs,
        )
    }
}

/// One element's bytes `b` of `dtype` as (text, numeric value, ordered-integer key for ULP
/// distance).
fn element(dtype: DType, b: &[u8]) -> (String, f64, i128) {
    let w = b.len();
    let mut raw = [0u8; 8];
    raw[..w].copy_from_slice(b);
    let bits = u64::from_le_bytes(raw);
    // Sign-magnitude float bits mapped onto a line where adjacent floats are 1 apart.
    let ordered = |bits: u64, sign: u64| -> i128 {
        if bits & sign != 0 {
            -((bits & !sign) as i128)
        } else {
            bits as i128
        }
    };
    // Text as the narrowest type that prints the value exactly (f32 for f32 and bf16).
    let float = |v: f64, sign: u64| (format!("{v:?}"), v, ordered(bits, sign));
    let float32 = |v: f32, sign: u64| (format!("{v:?}"), v as f64, ordered(bits, sign));
    match dtype {
        DType::F32 => float32(f32::from_bits(bits as u32), 1 << 31),
        DType::F64 => float(f64::from_bits(bits), 1 << 63),
        DType::BF16 => float32(half::bf16::from_bits(bits as u16).to_f32(), 1 << 15),
        DType::F16 => float(f16_to_f64(bits as u16), 1 << 15),
        DType::F8E4M3 => float(f8_to_f64(bits as u8, 4, true), 1 << 7),
        DType::F8E5M2 => float(f8_to_f64(bits as u8, 5, false), 1 << 7),
        DType::I8 => int(bits as u8 as i8 as i128),
        DType::I16 => int(bits as u16 as i16 as i128),
        DType::I32 => int(bits as u32 as i32 as i128),
        DType::I64 => int(bits as i64 as i128),
        DType::U8 | DType::U16 | DType::U32 | DType::U64 | DType::Bool => int(bits as i128),
    }
}

/// An integer element as (text, value, key).
fn int(v: i128) -> (String, f64, i128) {
    (v.to_string(), v as f64, v)
}

/// IEEE binary16 to f64 (exact).
pub fn f16_to_f64(h: u16) -> f64 {
    half::f16::from_bits(h).to_f64()
}

/// An 8-bit float with `exp_bits` exponent bits (bias 2^(exp_bits-1) - 1) to f64 (exact).
/// `fn_variant`: E4M3 "FN" (no infinities; only `S.1111.111` is NaN); otherwise IEEE-style
/// (all-ones exponent is infinity or NaN).
pub fn f8_to_f64(b: u8, exp_bits: u32, fn_variant: bool) -> f64 {
    let man_bits = 7 - exp_bits;
    let sign = if b >> 7 == 1 { -1.0 } else { 1.0 };
    let exp = ((b >> man_bits) & ((1 << exp_bits) - 1)) as i32;
    let man = (b & ((1 << man_bits) - 1)) as f64;
    let bias = (1 << (exp_bits - 1)) - 1;
    let exp_max = (1 << exp_bits) - 1;
    let scale = (1u32 << man_bits) as f64;
    sign * match exp {
        0 => man / scale * 2f64.powi(1 - bias),
        e if e == exp_max && fn_variant && man == scale - 1.0 => f64::NAN,
        e if e == exp_max && !fn_variant => {
            if man == 0.0 {
                f64::INFINITY
            } else {
                f64::NAN
            }
        }
        e => (1.0 + man / scale) * 2f64.powi(e - bias),
    }
}

/// An explanation with nothing differing yet, for a tensor of `dtype` and `shape`.
fn start(name: &str, runs: [usize; 2], dtype: DType, shape: &[usize]) -> TensorDiff {
    TensorDiff {
        tensor: name.to_string(),
        runs,
        elements_differing: 0,
        elements: shape.iter().product(),
        first_index: Vec::new(),
        first_values: [String::new(), String::new()],
        max_abs: 0.0,
        max_ulp: dtype.is_float().then_some(0),
        note: None,
        ulp_histogram: None,
        positions: Positions::for_shape(shape),
    }
}

/// `d` once every element was compared: no positions when nothing differs.
fn finish(mut d: TensorDiff) -> TensorDiff {
    if d.elements_differing == 0 {
        d.positions = None;
    }
    d
}

/// The note for two tensors that cannot be compared element-wise.
fn mismatch(a: (DType, &[usize]), b: (DType, &[usize])) -> String {
    format!(
        "{} {:?} vs {} {:?}: dtype or shape differs",
        a.0, a.1, b.0, b.1
    )
}

/// Adds the elements of two aligned windows (`x`, `y`: the same elements of both tensors,
/// starting at element `offset`) to `d`; `coords` turns a flat index into coordinates.
fn accumulate(
    d: &mut TensorDiff,
    dtype: DType,
    offset: usize,
    (x, y): (&[u8], &[u8]),
    coords: &dyn Fn(usize) -> Vec<usize>,
) {
    let w = dtype.size();
    for (i, (p, q)) in x.chunks(w).zip(y.chunks(w)).enumerate() {
        if p == q {
            continue;
        }
        let (xs, xv, xo) = element(dtype, p);
        let (ys, yv, yo) = element(dtype, q);
        if d.elements_differing == 0 {
            d.first_index = coords(offset + i);
            d.first_values = [xs, ys];
        }
        d.elements_differing += 1;
        let abs = if xv.is_nan() != yv.is_nan() {
            f64::INFINITY
        } else {
            (xv - yv).abs()
        };
        if !abs.is_nan() {
            d.max_abs = d.max_abs.max(abs);
        }
        if let Some(p) = d.positions.as_mut() {
            p.add(offset + i);
        }
        if let Some(u) = d.max_ulp.as_mut() {
            let distance = (xo - yo).unsigned_abs().min(u64::MAX as u128) as u64;
            *u = (*u).max(distance);
            spread::add_ulp(d.ulp_histogram.get_or_insert_with(Vec::new), distance);
        }
    }
}

/// Explains how `b` (run `runs[1]`) differs from `a` (run `runs[0]`).
pub fn explain(name: &str, runs: [usize; 2], a: &Tensor, b: &Tensor) -> TensorDiff {
    let mut d = start(name, runs, a.dtype(), a.shape());
    if a.dtype() != b.dtype() || a.shape() != b.shape() {
        d.note = Some(mismatch((a.dtype(), a.shape()), (b.dtype(), b.shape())));
        d.max_ulp = None;
        d.positions = None;
        return d;
    }
    accumulate(&mut d, a.dtype(), 0, (a.bytes(), b.bytes()), &|i| {
        a.coords(i)
    });
    finish(d)
}

/// Bytes read at a time by [`explain_readers`].
pub const STREAM_WINDOW: usize = 8 << 20;

/// [`explain`] for two one-dimensional byte outputs of `len` bytes each read from `a` and `b`
/// side by side in [`STREAM_WINDOW`] windows, so explaining outputs of any size holds two
/// windows in memory, not two copies (raw files, standard output).
pub fn explain_readers(
    name: &str,
    runs: [usize; 2],
    (a, len_a): (&mut dyn std::io::Read, u64),
    (b, len_b): (&mut dyn std::io::Read, u64),
) -> std::io::Result<TensorDiff> {
    let mut d = start(name, runs, DType::U8, &[len_a as usize]);
    if len_a != len_b {
        d.note = Some(mismatch(
            (DType::U8, &[len_a as usize]),
            (DType::U8, &[len_b as usize]),
        ));
        d.max_ulp = None;
        d.positions = None;
        return Ok(d);
    }
    let (mut x, mut y) = (vec![0u8; STREAM_WINDOW], vec![0u8; STREAM_WINDOW]);
    let mut offset = 0usize;
    while (offset as u64) < len_a {
        let n = STREAM_WINDOW.min((len_a - offset as u64) as usize);
        a.read_exact(&mut x[..n])?;
        b.read_exact(&mut y[..n])?;
        accumulate(&mut d, DType::U8, offset, (&x[..n], &y[..n]), &|i| vec![i]);
        offset += n;
    }
    Ok(finish(d))
}

/// A diff entry for an output present in one run and missing in the other.
pub fn missing(name: &str, runs: [usize; 2], present_in_first: bool) -> TensorDiff {
    let mut d = explain(name, runs, &Tensor::scalar(0u8), &Tensor::scalar(0u8));
    let (has, lacks) = if present_in_first {
        (runs[0], runs[1])
    } else {
        (runs[1], runs[0])
    };
    d.note = Some(format!("present in run {has}, missing in run {lacks}"));
    d
}

/// Two differing values (non-tensor leaves of a `torch.save` file, as canonical text):
/// `config.out_dir: 'a' vs 'b'`, each side cut to [`crate::quote::MAX_QUOTE`] bytes. Where
/// both show the same (a trace's `<ops>`, which shows how many records it holds; a value cut
/// short), the note says their contents differ beyond it.
pub fn values(name: &str, runs: [usize; 2], a: &str, b: &str) -> TensorDiff {
    let mut d = explain(name, runs, &Tensor::scalar(0u8), &Tensor::scalar(1u8));
    let cut = crate::quote::cut;
    d.first_values = [cut(a), cut(b)];
    let [i, j] = runs;
    d.note = Some(match d.first_values[0] == d.first_values[1] {
        true => format!(
            "{} in both runs, with different contents (run {i} vs run {j})",
            cut(a)
        ),
        false => format!("{} vs {} (run {i} vs run {j})", cut(a), cut(b)),
    });
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two values that show the same (a trace's record count) differ in their contents.
    #[test]
    fn values_that_show_the_same_are_said_to_differ_beyond_it() {
        let d = values("lr", [0, 1], "0.1", "0.2");
        assert_eq!(d.summary(), "lr: 0.1 vs 0.2 (run 0 vs run 1)");
        let d = values("<ops>", [0, 2], "2 op calls", "2 op calls");
        let both = "<ops>: 2 op calls in both runs, with different contents (run 0 vs run 2)";
        assert_eq!(d.summary(), both);
    }

    #[test]
    fn counts_first_index_abs_and_ulps() {
        let a = Tensor::from_slice(&[2, 3], &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let b = Tensor::from_slice(
            &[2, 3],
            &[
                1.0f32,
                2.0,
                3.0,
                f32::from_bits(4.0f32.to_bits() + 3),
                5.0,
                6.5,
            ],
        );
        let d = explain("y", [0, 1], &a, &b);
        assert_eq!(d.elements_differing, 2);
        assert_eq!(d.first_index, vec![1, 0]);
        assert_eq!(d.max_abs, 0.5);
        assert_eq!(d.max_ulp, Some(1 << 20)); // 6.0 and 6.5 are 2^20 steps of 2^-21 apart
        assert!(d.summary().contains("2/6 elements differ"));
    }

    #[test]
    fn histogram_and_positions_of_the_differing_elements() {
        let a = Tensor::from_slice(&[2, 2], &[1.0f32, 2.0, 3.0, 4.0]);
        let up = |v: f32, n: u32| f32::from_bits(v.to_bits() + n);
        let b = Tensor::from_slice(&[2, 2], &[up(1.0, 1), 2.0, up(3.0, 5), -0.0f32]);
        let d = explain("y", [0, 1], &a, &b);
        // 1 ULP (bucket 1), 5 ULP (bucket 3), 4.0 vs -0.0 (bucket 31: 0x40800000 apart).
        let h = d.ulp_histogram.clone().unwrap();
        assert_eq!((h.len(), h[1], h[3], h[31]), (32, 1, 1, 1));
        assert_eq!(h.iter().sum::<u64>(), 3);
        let p = d.positions.clone().unwrap();
        assert_eq!(
            (p.view, p.grid, p.counts),
            ([2, 2], [2, 2], vec![1, 0, 1, 1])
        );
        let same = explain("y", [0, 1], &a, &a);
        assert_eq!((same.ulp_histogram, same.positions), (None, None));
        // Integers have positions but no ULP histogram; a byte stream is one row.
        let i = explain(
            "i",
            [0, 1],
            &Tensor::from_slice(&[3], &[1i32, 2, 3]),
            &Tensor::from_slice(&[3], &[1i32, 2, 4]),
        );
        assert_eq!(
            (i.ulp_histogram, i.positions.unwrap().counts),
            (None, vec![0, 0, 1])
        );
        let (x, y) = (vec![0u8; 1000], [vec![0u8; 999], vec![1]].concat());
        let r = explain_readers("f", [0, 1], (&mut &x[..], 1000), (&mut &y[..], 1000)).unwrap();
        let p = r.positions.unwrap();
        assert_eq!(
            (p.grid, p.counts[spread::STRIP - 1]),
            ([1, spread::STRIP], 1)
        );
    }

    #[test]
    fn signed_zero_and_neighbours_across_zero() {
        let a = Tensor::from_slice(&[2], &[0.0f32, f32::from_bits(1)]);
        let b = Tensor::from_slice(&[2], &[-0.0f32, -f32::from_bits(1)]);
        let d = explain("z", [0, 1], &a, &b);
        assert_eq!(d.elements_differing, 2);
        assert_eq!(d.max_ulp, Some(2)); // +0 and -0 are 0 ULP apart; ±min subnormal are 2.
    }

    #[test]
    fn shape_mismatch_is_noted() {
        let a = Tensor::from_slice(&[2], &[1i32, 2]);
        let b = Tensor::from_slice(&[1, 2], &[1i32, 2]);
        assert!(explain("t", [0, 1], &a, &b).note.unwrap().contains("shape"));
        assert_eq!(f16_to_f64(0x3c00), 1.0);
        assert_eq!(f16_to_f64(0xc000), -2.0);
    }

    #[test]
    fn every_dtype_is_explained() {
        use half::{bf16, f16};
        let pairs = [
            (
                Tensor::from_slice(&[2], &[1i8, -3]),
                Tensor::from_slice(&[2], &[1i8, 4]),
                7.0,
            ),
            (
                Tensor::from_slice(&[1], &[-5i16]),
                Tensor::from_slice(&[1], &[5i16]),
                10.0,
            ),
            (
                Tensor::from_slice(&[1], &[9u16]),
                Tensor::from_slice(&[1], &[1u16]),
                8.0,
            ),
            (
                Tensor::from_slice(&[1], &[u64::MAX]),
                Tensor::from_slice(&[1], &[0u64]),
                1.8446744073709552e19,
            ),
            (
                Tensor::from_slice(&[1], &[true]),
                Tensor::from_slice(&[1], &[false]),
                1.0,
            ),
            (
                Tensor::from_slice(&[1], &[f16::from_f32(1.0)]),
                Tensor::from_slice(&[1], &[f16::from_f32(1.5)]),
                0.5,
            ),
            (
                Tensor::from_slice(&[1], &[bf16::from_f32(-1.0)]),
                Tensor::from_slice(&[1], &[bf16::from_f32(1.0)]),
                2.0,
            ),
        ];
        for (a, b, abs) in pairs {
            let d = explain("t", [0, 1], &a, &b);
            assert_eq!(d.elements_differing, 1, "{}", a.dtype());
            assert_eq!(d.max_abs, abs, "{}", a.dtype());
            assert_eq!(d.max_ulp.is_some(), a.dtype().is_float());
        }
        // f16 1.0 → 1.5 is 512 steps of 2^-10; bf16 −1 → +1 crosses zero: 2 × 0x3f80 steps.
        let one = |v: f32| Tensor::from_slice(&[1], &[f16::from_f32(v)]);
        assert_eq!(
            explain("h", [0, 1], &one(1.0), &one(1.5)).max_ulp,
            Some(512)
        );
        // f8: E4M3 0x38 = 1.0, 0x39 = 1.125; E5M2 0x3c = 1.0, 0x7c = inf, 0x7f NaN.
        let f8 = |d, b: u8| Tensor::from_bytes(d, &[1], vec![b]).unwrap();
        let d = explain(
            "f",
            [0, 1],
            &f8(DType::F8E4M3, 0x38),
            &f8(DType::F8E4M3, 0x39),
        );
        assert_eq!((d.max_abs, d.max_ulp), (0.125, Some(1)));
        assert_eq!(d.first_values, ["1.0".to_string(), "1.125".to_string()]);
        assert!(f8_to_f64(0x7f, 4, true).is_nan());
        assert_eq!(f8_to_f64(0x7e, 4, true), 448.0);
        assert_eq!(f8_to_f64(0x01, 4, true), 2f64.powi(-9));
        assert_eq!(f8_to_f64(0x3c, 5, false), 1.0);
        assert_eq!(f8_to_f64(0x7c, 5, false), f64::INFINITY);
        assert!(f8_to_f64(0x7f, 5, false).is_nan());
        assert_eq!(f8_to_f64(0xfb, 5, false), -57344.0);
    }
}
