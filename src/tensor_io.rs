//! A small binary container for a run's outputs plus a JSON metadata string, used to bring
//! results back from child processes (`--vary process`, `--isolate`).
//!
//! Layout: `b"BXOUT1\n"`, metadata length `u64` LE, metadata (UTF-8 JSON), tensor count `u64`,
//! then per tensor: name length `u64`, name, dtype tag `u32`, rank `u64`, dims `u64` each,
//! byte length `u64`, bytes. All little-endian.
//!
//! Decoding trusts no length field: every count is checked against the bytes actually left
//! before anything is allocated, ranks are at most [`MAX_RANK`], element counts are computed
//! with overflow checks, and duplicate names or trailing bytes are errors.

use crate::outputs::Outputs;
use crate::tensor::{DType, Tensor};
use anyhow::{bail, Context, Result};

const MAGIC: &[u8] = b"BXOUT1\n";
/// Highest tensor rank a decoded file may hold.
pub const MAX_RANK: usize = 32;
/// Fewest bytes one tensor record takes (empty name, rank 0, no data).
const MIN_RECORD: u64 = 8 + 4 + 8 + 8;

/// Encodes metadata and outputs.
pub fn encode(meta: &str, outputs: &Outputs) -> Vec<u8> {
    let mut o = MAGIC.to_vec();
    let put = |o: &mut Vec<u8>, v: u64| o.extend_from_slice(&v.to_le_bytes());
    put(&mut o, meta.len() as u64);
    o.extend_from_slice(meta.as_bytes());
    put(&mut o, outputs.len() as u64);
    for (name, t) in outputs {
        put(&mut o, name.len() as u64);
        o.extend_from_slice(name.as_bytes());
        o.extend_from_slice(&(t.dtype() as u32).to_le_bytes());
        put(&mut o, t.shape().len() as u64);
        t.shape().iter().for_each(|&d| put(&mut o, d as u64));
        put(&mut o, t.bytes().len() as u64);
        o.extend_from_slice(t.bytes());
    }
    o
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if self.0.len() < n {
            bail!("outputs file truncated while reading {what}");
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8, what)?.try_into().expect("8 bytes"),
        ))
    }
    fn len(&mut self, what: &str) -> Result<usize> {
        let n = self.u64(what)?;
        if n > self.0.len() as u64 {
            bail!(
                "outputs file truncated: {what} of {n} exceeds the {} bytes left",
                self.0.len()
            );
        }
        Ok(n as usize)
    }
}

fn dtype(tag: u32) -> Result<DType> {
    DType::from_tag(tag).with_context(|| format!("outputs file: unknown dtype tag {tag}"))
}

/// Decodes what [`encode`] wrote; errors name what is malformed.
pub fn decode(bytes: &[u8]) -> Result<(String, Outputs)> {
    let mut r = Reader(bytes);
    if r.take(MAGIC.len(), "magic")? != MAGIC {
        bail!("not a bitexact outputs file (bad magic)");
    }
    let n = r.len("metadata length")?;
    let meta =
        String::from_utf8(r.take(n, "metadata")?.to_vec()).context("metadata is not UTF-8")?;
    let count = r.u64("tensor count")?;
    if count > r.0.len() as u64 / MIN_RECORD {
        bail!(
            "outputs file: tensor count {count} cannot fit in the {} bytes left",
            r.0.len()
        );
    }
    let mut outputs = Outputs::new();
    for _ in 0..count {
        let n = r.len("name length")?;
        let name =
            String::from_utf8(r.take(n, "name")?.to_vec()).context("tensor name is not UTF-8")?;
        let dt = dtype(u32::from_le_bytes(
            r.take(4, "dtype")?.try_into().expect("4 bytes"),
        ))?;
        let rank = r.u64("rank")?;
        if rank > MAX_RANK as u64 {
            bail!("outputs file: tensor {name:?} has rank {rank} (at most {MAX_RANK})");
        }
        let shape = (0..rank)
            .map(|_| {
                r.u64("dimension")
                    .map(|d| usize::try_from(d).unwrap_or(usize::MAX))
            })
            .collect::<Result<Vec<_>>>()?;
        let n = r.len("data length")?;
        let want = shape
            .iter()
            .try_fold(dt.size(), |a, &d| a.checked_mul(d))
            .filter(|&w| w == n);
        if want.is_none() {
            bail!("outputs file: tensor {name:?} of dtype {dt} and shape {shape:?} cannot hold {n} data bytes");
        }
        let t = Tensor::from_bytes(dt, &shape, r.take(n, "data")?.to_vec())
            .with_context(|| format!("tensor {name}"))?;
        if outputs.insert(name.clone(), t).is_some() {
            bail!("outputs file: tensor {name:?} appears twice");
        }
    }
    if !r.0.is_empty() {
        bail!("outputs file: {} trailing bytes", r.0.len());
    }
    Ok((meta, outputs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_truncation() {
        let mut o = Outputs::new();
        o.insert(
            "a".into(),
            Tensor::from_slice(&[2, 2], &[1.0f32, -0.0, f32::NAN, 4.0]),
        );
        o.insert("m".into(), Tensor::from_bools(&[3], &[true, false, true]));
        let bytes = encode("{\"x\":1}", &o);
        let (meta, back) = decode(&bytes).unwrap();
        assert_eq!(meta, "{\"x\":1}");
        assert_eq!(back, o);
        let err = decode(&bytes[..bytes.len() - 3]).unwrap_err();
        assert!(format!("{err:#}").contains("truncated"), "{err:#}");
        assert!(decode(b"nope").is_err());
    }

    fn sample() -> Vec<u8> {
        let mut o = Outputs::new();
        o.insert("w".into(), Tensor::from_slice(&[2, 3], &[1.5f32; 6]));
        o.insert("i".into(), Tensor::from_slice(&[4], &[7i64, -1, 0, 3]));
        o.insert("b".into(), Tensor::from_bools(&[2], &[true, false]));
        encode("{\"algorithms\":{}}", &o)
    }

    #[test]
    fn hostile_length_fields_are_errors_without_allocating() {
        let err = |b: &[u8]| format!("{:#}", decode(b).unwrap_err());
        let mut b = MAGIC.to_vec();
        b.extend(0u64.to_le_bytes());
        b.extend(u64::MAX.to_le_bytes());
        assert!(err(&b).contains("tensor count"), "{}", err(&b));
        // One tensor: empty name, f32, rank 2 with dims 2^40 x 2^40 (product overflows).
        let mut b = MAGIC.to_vec();
        for v in [0u64, 1, 0] {
            b.extend(v.to_le_bytes());
        }
        b.extend(0u32.to_le_bytes());
        for v in [2u64, 1 << 40, 1 << 40, 0] {
            b.extend(v.to_le_bytes());
        }
        let dt = DType::ALL[0];
        b[7 + 24..7 + 28].copy_from_slice(&(dt as u32).to_le_bytes());
        assert!(err(&b).contains("cannot hold 0 data bytes"), "{}", err(&b));
        let mut trailing = sample();
        trailing.extend(b"x");
        assert!(err(&trailing).contains("1 trailing bytes"));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(1024))]
        #[test]
        fn random_bytes_are_errors(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            proptest::prop_assert!(decode(&b).is_err());
            let mut framed = MAGIC.to_vec();
            framed.extend(&b);
            let _ = decode(&framed);
        }

        #[test]
        fn truncations_are_errors(n in 0..1000usize) {
            let b = sample();
            proptest::prop_assert!(decode(&b[..n % b.len()]).is_err());
        }

        #[test]
        fn bit_flips_never_panic(at in 0..1000usize, bit in 0..8u8) {
            let mut b = sample();
            let i = at % b.len();
            b[i] ^= 1 << bit;
            let _ = decode(&b);
        }
    }
}
