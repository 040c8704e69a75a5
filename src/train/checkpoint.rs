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

use crate::rng::Stream;
use anyhow::{bail, Result};
use sha2::{Digest, Sha256};

/// Leading bytes of every checkpoint.
pub const MAGIC: &[u8; 8] = b"BXCKPT\r\n";
/// Format version written by this build.
pub const VERSION: u32 = 1;

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
        if (bytes.len() as u64) < want {
            bail!(
                "checkpoint: truncated: {} bytes, header says {want}",
                bytes.len()
            );
        }
        if (bytes.len() as u64) > want {
            bail!(
                "checkpoint: {} trailing bytes after the checksum",
                bytes.len() as u64 - want
            );
        }
        let body = &bytes[20..20 + len as usize];
        if Sha256::digest(body).as_slice() != &bytes[20 + len as usize..] {
            bail!("checkpoint: checksum mismatch: the body is corrupt");
        }
        Ok(Reader { body, pos: 0 })
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
    /// A stream position.
    pub fn stream(&mut self, what: &str) -> Result<Stream> {
        Ok(Stream {
            seed: self.u64(what)?,
            stream: self.u64(what)?,
            offset: self.u64(what)?,
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
}
