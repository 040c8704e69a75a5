//! The values a built-in case's op call is traced with, and their trace digest (a SHA-256
//! prefix of their little-endian bytes).

use sha2::{Digest as _, Sha256};

/// A value an op call is traced with (borrowed).
#[derive(Clone, Copy, Debug)]
pub enum TraceArg<'a> {
    /// f32 values.
    F32(&'a [f32]),
    /// i64 values (indices).
    I64(&'a [i64]),
    /// Booleans (masks).
    Bool(&'a [bool]),
    /// u32 values (random words).
    U32(&'a [u32]),
    /// One f32.
    Scalar(f32),
}

impl<'a> From<&'a [f32]> for TraceArg<'a> {
    fn from(v: &'a [f32]) -> Self {
        TraceArg::F32(v)
    }
}
impl<'a> From<&'a Vec<f32>> for TraceArg<'a> {
    fn from(v: &'a Vec<f32>) -> Self {
        TraceArg::F32(v)
    }
}
impl<'a> From<&'a [i64]> for TraceArg<'a> {
    fn from(v: &'a [i64]) -> Self {
        TraceArg::I64(v)
    }
}
impl<'a> From<&'a [bool]> for TraceArg<'a> {
    fn from(v: &'a [bool]) -> Self {
        TraceArg::Bool(v)
    }
}
impl From<f32> for TraceArg<'_> {
    fn from(v: f32) -> Self {
        TraceArg::Scalar(v)
    }
}

/// Feeds values' little-endian bytes to `h`, a bounded buffer at a time.
fn feed<T: Copy, const W: usize>(h: &mut Sha256, v: &[T], le: impl Fn(T) -> [u8; W]) {
    let mut buf = Vec::with_capacity(v.len().min(1 << 14) * W);
    for chunk in v.chunks(1 << 14) {
        buf.clear();
        chunk.iter().for_each(|&x| buf.extend_from_slice(&le(x)));
        h.update(&buf);
    }
}

/// Short hex digest (first 16 bytes of SHA-256) of a traced value.
pub fn trace_digest(v: TraceArg) -> String {
    let mut h = Sha256::new();
    match v {
        TraceArg::F32(x) => feed(&mut h, x, f32::to_le_bytes),
        TraceArg::I64(x) => feed(&mut h, x, i64::to_le_bytes),
        TraceArg::Bool(x) => feed(&mut h, x, |b| [b as u8]),
        TraceArg::U32(x) => feed(&mut h, x, u32::to_le_bytes),
        TraceArg::Scalar(x) => h.update(x.to_le_bytes()),
    }
    h.finalize()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
