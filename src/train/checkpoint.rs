//! Checkpoints as bytes: everything a resumed run needs to continue bit for bit.
//!
//! Layout (all integers little-endian):
//! ```text
//! magic  b"BXCKPT\r\n"        8 bytes
//! version u32 (= 1)
//! body   length u64, then the body bytes
//! sha256 of the body          32 bytes
//! ```
//! The body is a sequence of fields in a fixed order: the step counter; the model dims;
//! dataset size, batch size and dropout probability; the optimizer (kind tag, lr, β1, β2, ε, weight decay, t, then each moment buffer); the
//! parameters; the dropout RNG state (seed, stream, offset); the loader position (epoch,
//! batch) and its worker streams. Vectors are a u64 count followed by the values. A short
//! input names the field it was reading; a changed byte fails the checksum.
//!
//! A checksum only proves the bytes are the ones written, not that they make sense: every
//! restored counter is range-checked ([`Reader::counter`]: steps and epochs at most
//! [`MAX_COUNTER`], stream offsets at most [`MAX_STREAM_OFFSET`]) so a resumed run can never
//! overflow, and errors name the field.

use crate::rng::Stream;
use anyhow::{bail, Result};
use sha2::{Digest, Sha256};

/// Leading bytes of every checkpoint.
pub const MAGIC: &[u8; 8] = b"BXCKPT\r\n";
/// Format version written by this build.
pub const VERSION: u32 = 1;

/// Largest step, optimizer step, epoch or batch counter a checkpoint may hold (2^48): another
/// 2^48 steps after it cannot overflow a `u64`.
pub const MAX_COUNTER: u64 = 1 << 48;
/// Largest Philox stream offset (in 32-bit words) a checkpoint may hold (2^62): far beyond any
/// real run, and leaves 3 · 2^62 words before the offset could overflow.
pub const MAX_STREAM_OFFSET: u64 = 1 << 62;
/// Most loader worker streams a checkpoint may hold.
pub const MAX_WORKER_STREAMS: u64 = 1024;

/// Appends fields to a checkpoint body.
#[derive(Default)]
pub struct Writer {
    body: Vec<u8>,
}

impl Writer {
    /// A u32.
    pub fn u32(&mut self, v: u32) {
        self.body.extend(v.to_le_bytes());
    }
    /// A u64.
    pub fn u64(&mut self, v: u64) {
        self.body.extend(v.to_le_bytes());
    }
    /// An f32 (bit pattern).
    pub fn f32(&mut self, v: f32) {
        self.u32(v.to_bits());
    }
    /// A counted f32 vector.
    pub fn f32s(&mut self, v: &[f32]) {
        self.u64(v.len() as u64);
        for x in v {
            self.f32(*x);
        }
    }
    /// A stream position.
    pub fn stream(&mut self, s: &Stream) {
        self.u64(s.seed);
        self.u64(s.stream);
        self.u64(s.offset);
    }
    /// The finished checkpoint: header, body, checksum.
    pub fn finish(self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.body.len() + 52);
        out.extend(MAGIC);
        out.extend(VERSION.to_le_bytes());
        out.extend((self.body.len() as u64).to_le_bytes());
        out.extend(&self.body);
        out.extend(Sha256::digest(&self.body));
        out
    }
}

/// Reads fields back from a verified checkpoint body.
pub struct Reader<'a> {
    body: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// Checks magic, version, length and checksum, and returns a reader over the body.
    pub fn open(bytes: &'a [u8]) -> Result<Reader<'a>> {
        if bytes.len() < 20 {
            bail!(
                "checkpoint: truncated: {} bytes, the header alone needs 20",
                bytes.len()
            );
        }
        if &bytes[..8] != MAGIC {
            bail!(
                "checkpoint: bad magic {:02x?}: not a bitexact checkpoint",
                &bytes[..8]
            );
        }
        let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
        if version != VERSION {
            bail!("checkpoint: unsupported version {version} (this build reads {VERSION})");
        }
        let len = u64::from_le_bytes(bytes[12..20].try_into().expect("8 bytes"));
        let want = 20u64.saturating_add(len).saturating_add(32);
        if bytes.len() as u64 != want {
            bail!("checkpoint: {}", length_mismatch(bytes, len, want));
        }
        let body = &bytes[20..20 + len as usize];
        if Sha256::digest(body).as_slice() != &bytes[20 + len as usize..] {
            bail!("checkpoint: checksum mismatch: the body is corrupt");
        }
        Ok(Reader { body, pos: 0 })
    }

    /// Bytes of the body not read yet.
    pub fn remaining(&self) -> usize {
        self.body.len() - self.pos
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if self.body.len() - self.pos < n {
            bail!(
                "checkpoint: truncated body while reading {what} at byte {}",
                self.pos
            );
        }
        let s = &self.body[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    /// A u32 named `what` (for errors).
    pub fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4, what)?.try_into()?))
    }
    /// A u64.
    pub fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8, what)?.try_into()?))
    }
    /// An f32.
    pub fn f32(&mut self, what: &str) -> Result<f32> {
        Ok(f32::from_bits(self.u32(what)?))
    }
    /// A counted f32 vector that must hold `want` values.
    pub fn f32s(&mut self, what: &str, want: usize) -> Result<Vec<f32>> {
        let n = self.u64(what)?;
        if n != want as u64 {
            bail!("checkpoint: {what} has {n} values, this model needs {want}");
        }
        let raw = self.take(want * 4, what)?;
        Ok(raw
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect())
    }
    /// A u64 counter that must be at most `max`; the error names the field and the range.
    pub fn counter(&mut self, what: &str, max: u64) -> Result<u64> {
        let v = self.u64(what)?;
        if v > max {
            bail!("checkpoint: {what} = {v} is out of range (at most {max}): corrupt or not written by bitexact");
        }
        Ok(v)
    }
    /// A stream position; the offset must be at most [`MAX_STREAM_OFFSET`].
    pub fn stream(&mut self, what: &str) -> Result<Stream> {
        Ok(Stream {
            seed: self.u64(what)?,
            stream: self.u64(what)?,
            offset: self.counter(&format!("{what} offset"), MAX_STREAM_OFFSET)?,
        })
    }
    /// Fails unless every body byte was read.
    pub fn finish(self) -> Result<()> {
        if self.pos != self.body.len() {
            bail!(
                "checkpoint: {} unread body bytes (written by a different model?)",
                self.body.len() - self.pos
            );
        }
        Ok(())
    }
}

/// What is wrong when the file is not `want` bytes long as its length field `len` says: a
/// corrupt length field (the rest of the file is a complete, intact checkpoint), trailing bytes,
/// or a truncated file.
fn length_mismatch(bytes: &[u8], len: u64, want: u64) -> String {
    let have = bytes.len() as u64;
    if have >= 52 {
        let (body, sum) = bytes[20..].split_at(bytes.len() - 52);
        if Sha256::digest(body).as_slice() == sum {
            return format!(
                "corrupt length field: it says a {len}-byte body, but the file holds a complete \
                 {}-byte body whose checksum matches",
                body.len()
            );
        }
    }
    if have > want {
        format!("{} trailing bytes after the checksum", have - want)
    } else {
        format!(
            "truncated or corrupt length field: {have} bytes, the length field ({len}-byte body) \
             says {want}"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let mut w = Writer::default();
        w.u64(7);
        w.f32s(&[1.0, -0.0, f32::NAN]);
        w.stream(&Stream::new(1, 2));
        w.finish()
    }

    #[test]
    fn round_trip_is_bit_exact() {
        let bytes = sample();
        let mut r = Reader::open(&bytes).unwrap();
        assert_eq!(r.u64("step").unwrap(), 7);
        let v = r.f32s("v", 3).unwrap();
        assert_eq!(v[1].to_bits(), (-0.0f32).to_bits());
        assert!(v[2].is_nan());
        assert_eq!(r.stream("rng").unwrap(), Stream::new(1, 2));
        r.finish().unwrap();
    }

    #[test]
    fn bad_input_gets_a_clear_error() {
        let bytes = sample();
        let err = |b: &[u8]| {
            Reader::open(b)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        assert!(err(&bytes[..10]).contains("truncated"));
        assert!(err(&bytes[..bytes.len() - 1]).contains("truncated"));
        // A full-length file whose length field alone is wrong is not "truncated".
        let mut bad = bytes.clone();
        bad[12] ^= 0x40;
        let e = err(&bad);
        assert!(
            e.contains("corrupt length field") && !e.contains("truncated"),
            "{e}"
        );
        let mut long = bytes.clone();
        long.push(0);
        assert!(err(&long).contains("1 trailing bytes"), "{}", err(&long));
        let mut bad = bytes.clone();
        bad[0] = b'X';
        assert!(err(&bad).contains("bad magic"));
        let mut bad = bytes.clone();
        bad[8] = 9;
        assert!(err(&bad).contains("unsupported version 9"));
        let mut bad = bytes.clone();
        bad[25] ^= 1;
        assert!(err(&bad).contains("checksum mismatch"));
        let mut r = Reader::open(&bytes).unwrap();
        r.u64("step").unwrap();
        let e = r.f32s("params w1", 4).unwrap_err();
        assert!(e.to_string().contains("params w1 has 3 values"), "{e}");
    }

    mod restore {
        //! The whole restore path (`Trainer::restore`) on hostile bytes: errors, never panics,
        //! and a restore that succeeds can keep training without overflowing.
        use super::super::*;
        use crate::backend::Backend;
        use crate::case::Ctx;
        use crate::controls::Controls;
        use crate::train::optim::OptimConfig;
        use crate::train::{TrainConfig, Trainer};
        use proptest::prelude::*;
        use std::sync::OnceLock;

        fn config() -> TrainConfig {
            TrainConfig::small(OptimConfig::adamw(), 0)
        }

        fn ctx() -> Ctx {
            Ctx::new(Backend::Cpu, Controls::default())
        }

        /// A valid checkpoint after 3 steps.
        fn valid() -> &'static [u8] {
            static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
            BYTES.get_or_init(|| {
                let mut t = Trainer::new(5, config()).unwrap();
                t.train(&mut ctx(), 3).unwrap();
                t.checkpoint()
            })
        }

        /// `bytes` with the checksum recomputed over its body, so the parser is what is tested.
        fn resealed(mut bytes: Vec<u8>) -> Vec<u8> {
            let n = bytes.len();
            let sum = Sha256::digest(&bytes[20..n - 32]);
            bytes[n - 32..].copy_from_slice(&sum);
            bytes
        }

        /// Restores and, when that succeeds, trains two more steps (which must not panic).
        fn restore_then_train(bytes: &[u8]) -> Result<()> {
            let mut t = Trainer::restore(5, config(), bytes, false)?;
            t.train(&mut ctx(), 2)?;
            Ok(())
        }

        /// Sets the u64 at body offset `at` and reseals.
        fn with_u64(at: usize, v: u64) -> Vec<u8> {
            let mut b = valid().to_vec();
            b[20 + at..28 + at].copy_from_slice(&v.to_le_bytes());
            resealed(b)
        }

        #[test]
        fn out_of_range_fields_are_rejected_by_name() {
            restore_then_train(valid()).unwrap();
            let err = |b: &[u8]| format!("{:#}", restore_then_train(b).unwrap_err());
            let e = err(&with_u64(0, u64::MAX));
            assert!(
                e.contains("step = 18446744073709551615 is out of range"),
                "{e}"
            );
            // The tail: rng (seed, stream, offset), epoch, batch, worker count, worker streams.
            let streams = Trainer::new(5, config())
                .unwrap()
                .loader
                .worker_streams()
                .len();
            let body = valid().len() - 52 - 24 * streams;
            let e = err(&with_u64(body + 16, u64::MAX));
            assert!(e.contains("loader worker stream offset"), "{e}");
            let e = err(&with_u64(body - 8, u64::MAX));
            assert!(e.contains("loader worker count"), "{e}");
            let e = err(&with_u64(body - 16, 1 << 40));
            assert!(e.contains("loader position") && e.contains("batch"), "{e}");
            let e = err(&with_u64(body - 24, u64::MAX));
            assert!(e.contains("loader epoch = 18446744073709551615"), "{e}");
            let e = err(&with_u64(body - 32, u64::MAX - 3));
            assert!(e.contains("dropout rng offset"), "{e}");
        }

        fn flip_at() -> impl Strategy<Value = usize> {
            let body = valid().len() - 52;
            prop_oneof![0..160usize, body - 160..body, 0..body]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]
            #[test]
            fn random_bytes_are_an_error(b in proptest::collection::vec(any::<u8>(), 0..400)) {
                prop_assert!(restore_then_train(&b).is_err());
                let mut framed = MAGIC.to_vec();
                framed.extend(VERSION.to_le_bytes());
                framed.extend((b.len() as u64).to_le_bytes());
                framed.extend(&b);
                framed.extend(Sha256::digest(&b));
                prop_assert!(restore_then_train(&framed).is_err());
            }

            #[test]
            fn truncations_are_an_error(n in 0..10_000usize) {
                let b = valid();
                prop_assert!(restore_then_train(&b[..n.min(b.len() - 1)]).is_err());
                // At least one body byte goes: cutting none leaves the valid checkpoint.
                let gone = n.clamp(1, b.len() - 52);
                let cut = resealed(b[..b.len() - 32 - gone].iter().copied()
                    .chain([0; 32]).collect());
                let mut cut = cut;
                let body = (cut.len() - 52) as u64;
                cut[12..20].copy_from_slice(&body.to_le_bytes());
                prop_assert!(restore_then_train(&resealed(cut)).is_err());
            }

            #[test]
            fn bit_flips_never_panic(at in flip_at(), bit in 0..8u8) {
                let mut b = valid().to_vec();
                b[20 + at] ^= 1 << bit;
                let _ = restore_then_train(&resealed(b));
            }

            #[test]
            fn header_bit_flips_are_an_error(at in 0..20usize, bit in 0..8u8) {
                let mut b = valid().to_vec();
                b[at] ^= 1 << bit;
                prop_assert!(restore_then_train(&b).is_err());
            }
        }
    }
}
