//! Explains how two tensors differ: how many elements, where first, by how much (absolute
//! and in ULPs).

use crate::tensor::{DType, Tensor};
use serde::{Deserialize, Serialize};

/// How one output tensor differs between two runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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

/// Element `i` as (text, numeric value, ordered-integer key for ULP distance, float?).
fn element(t: &Tensor, i: usize) -> (String, f64, i128) {
    let w = t.dtype().size();
    let b = &t.bytes()[i * w..(i + 1) * w];
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
    match t.dtype() {
        DType::F32 => {
            let v = f32::from_bits(bits as u32);
            (format!("{v:?}"), v as f64, ordered(bits, 1 << 31))
        }
        DType::F64 => {
            let v = f64::from_bits(bits);
            (format!("{v:?}"), v, ordered(bits, 1 << 63))
        }
        DType::BF16 => {
            let v = f32::from_bits((bits as u32) << 16);
            (format!("{v:?}"), v as f64, ordered(bits, 1 << 15))
        }
        DType::F16 => {
            let v = f16_to_f64(bits as u16);
            (format!("{v:?}"), v, ordered(bits, 1 << 15))
        }
        DType::I32 => {
            let v = bits as u32 as i32;
            (v.to_string(), v as f64, v as i128)
        }
        DType::I64 => {
            let v = bits as i64;
            (v.to_string(), v as f64, v as i128)
        }
        DType::U8 | DType::U32 | DType::Bool => (bits.to_string(), bits as f64, bits as i128),
    }
}

/// IEEE binary16 to f64 (exact).
pub fn f16_to_f64(h: u16) -> f64 {
    let sign = if h >> 15 == 1 { -1.0 } else { 1.0 };
    let exp = ((h >> 10) & 0x1f) as i32;
    let frac = (h & 0x3ff) as f64;
    sign * match exp {
        0 => frac * 2f64.powi(-24),
        31 if frac == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        e => (1.0 + frac / 1024.0) * 2f64.powi(e - 15),
    }
}

/// Explains how `b` (run `runs[1]`) differs from `a` (run `runs[0]`).
pub fn explain(name: &str, runs: [usize; 2], a: &Tensor, b: &Tensor) -> TensorDiff {
    let mut d = TensorDiff {
        tensor: name.to_string(),
        runs,
        elements_differing: 0,
        elements: a.len(),
        first_index: Vec::new(),
        first_values: [String::new(), String::new()],
        max_abs: 0.0,
        max_ulp: a.dtype().is_float().then_some(0),
        note: None,
    };
    if a.dtype() != b.dtype() || a.shape() != b.shape() {
        d.note = Some(format!(
            "{} {:?} vs {} {:?}: dtype or shape differs",
            a.dtype(),
            a.shape(),
            b.dtype(),
            b.shape()
        ));
        d.max_ulp = None;
        return d;
    }
    let w = a.dtype().size();
    for (i, (x, y)) in a.bytes().chunks(w).zip(b.bytes().chunks(w)).enumerate() {
        if x == y {
            continue;
        }
        let (xs, xv, xo) = element(a, i);
        let (ys, yv, yo) = element(b, i);
        if d.elements_differing == 0 {
            d.first_index = a.coords(i);
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
        if let Some(u) = d.max_ulp.as_mut() {
            *u = (*u).max((xo - yo).unsigned_abs().min(u64::MAX as u128) as u64);
        }
    }
    d
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
