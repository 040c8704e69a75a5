//! `.npz` archives (what `np.savez` / `np.savez_compressed` write) through the `zip` crate.
//!
//! Stored entries (`np.savez`) are parsed in place from the mapped bytes, like an `.npy`
//! (zero-copy). Deflated entries (`np.savez_compressed`) are decompressed as a stream: when
//! the data is already canonical the digest is computed chunk by chunk while inflating, so
//! memory stays bounded whatever the entry's size; otherwise the entry is inflated into memory
//! (its growth follows the bytes actually produced, never a size claimed by a header).
//! Keys drop the `.npy` suffix as numpy does; an entry that is not an `.npy` (no magic) is
//! compared as raw bytes, as numpy returns it as bytes.

use super::npy::{self, MAGIC};
use super::{Sink, View};
use crate::tensor::DType;
use anyhow::{anyhow, bail, Context, Result};
use std::io::{Cursor, Read};
use zip::{CompressionMethod, ZipArchive};

/// Hands every wanted entry of the `.npz` archive `bytes` to `sink`.
pub(crate) fn read<'a>(bytes: &'a [u8], sink: &mut dyn Sink<'a>) -> Result<()> {
    let mut zip =
        ZipArchive::new(Cursor::new(bytes)).map_err(|e| anyhow!("not a valid zip archive: {e}"))?;
    for i in 0..zip.len() {
        let entry = zip
            .by_index_raw(i)
            .map_err(|e| anyhow!("zip entry {i}: {e}"))?;
        let name = entry
            .name()
            .map_err(|e| anyhow!("zip entry {i}: {e}"))?
            .into_owned();
        if entry.is_dir() {
            continue;
        }
        let key = name.strip_suffix(".npy").unwrap_or(&name).to_string();
        if !sink.wants(&key) {
            continue;
        }
        let ctx = || format!("entry {name:?}");
        if entry.encrypted() {
            bail!("entry {name:?} is encrypted");
        }
        if entry.compression() == CompressionMethod::Stored {
            let (start, len, size) = (entry.data_start(), entry.compressed_size(), entry.size());
            drop(entry);
            if len != size {
                bail!("stored entry {name:?} has compressed size {len} but size {size}");
            }
            let data = start
                .and_then(|s| Some(s..s.checked_add(len)?))
                .and_then(|r| bytes.get(r.start as usize..r.end as usize))
                .with_context(|| format!("entry {name:?} lies beyond the end of the archive"))?;
            let view = if data.starts_with(MAGIC) {
                npy::parse(data).with_context(ctx)?
            } else {
                View::raw(data)
            };
            sink.take(Some(key), view)?;
        } else {
            drop(entry);
            let mut r = zip
                .by_index(i)
                .map_err(|e| anyhow!("entry {name:?}: {e}"))?;
            let size = r.size();
            inflate(key, size, &mut r, sink).with_context(ctx)?;
        }
    }
    Ok(())
}

/// Reads one compressed entry of declared (uncompressed) `size` from `r` (a decompressing
/// reader) into `sink`, streaming: a plain entry, a canonical array and a big-endian one are
/// hashed as they inflate, never held whole (the declared size is checked against the data).
fn inflate<'a>(key: String, size: u64, r: &mut dyn Read, sink: &mut dyn Sink<'a>) -> Result<()> {
    let mut head = read_up_to(r, 10)?;
    if !head.starts_with(MAGIC) {
        let len = usize::try_from(size).map_err(|_| anyhow!("entry size {size} too large"))?;
        let mut all = Cursor::new(head).chain(&mut *r);
        sink.stream(key, DType::U8, vec![len], len, &mut all)?;
        return end_of_entry(r);
    }
    if matches!(head.get(6), Some(2 | 3)) {
        head.extend(read_up_to(r, 2)?); // 4-byte header length
    }
    let (_, len) = npy::prefix(&head)?;
    head.extend(read_up_to(r, len as u64)?);
    let h = npy::parse_header(&head)?;
    if h.is_canonical() && h.dtype != DType::Bool {
        sink.stream(key, h.dtype, h.shape.clone(), h.data_len, r)?;
    } else if let Some(width) = h.swap_only().filter(|_| h.dtype != DType::Bool) {
        let mut swapped = Swapped::new(&mut *r, width);
        sink.stream(key, h.dtype, h.shape.clone(), h.data_len, &mut swapped)?;
    } else {
        let data = read_up_to(r, h.data_len as u64)?;
        short(data.len(), h.data_len)?;
        let v = h.view(&data)?.into_owned();
        sink.take(Some(key), v)?;
    }
    end_of_entry(r)
}

/// A reader that reverses the bytes of every `width`-byte element of `inner` (big-endian data
/// made little-endian as it streams).
struct Swapped<'r> {
    inner: &'r mut dyn Read,
    width: usize,
    buf: Vec<u8>,
    at: usize,
}

impl<'r> Swapped<'r> {
    fn new(inner: &'r mut dyn Read, width: usize) -> Swapped<'r> {
        Swapped {
            inner,
            width,
            buf: Vec::new(),
            at: 0,
        }
    }
}

impl Read for Swapped<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.at == self.buf.len() {
            // Whole elements only: a trailing partial element is passed on as it is (the
            // length check after the stream reports it).
            self.buf.clear();
            self.at = 0;
            (&mut *self.inner)
                .take(1 << 20)
                .read_to_end(&mut self.buf)?;
            let whole = self.buf.len() / self.width * self.width;
            self.buf[..whole]
                .chunks_mut(self.width)
                .for_each(|c| c.reverse());
        }
        let n = out.len().min(self.buf.len() - self.at);
        out[..n].copy_from_slice(&self.buf[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// Reads at most `n` bytes (fewer at the end of the stream); memory follows the bytes read.
pub(crate) fn read_up_to(r: &mut dyn Read, n: u64) -> Result<Vec<u8>> {
    let mut v = Vec::new();
    r.take(n).read_to_end(&mut v)?;
    Ok(v)
}

/// Errors when an entry's data is shorter than its header says.
pub(crate) fn short(have: usize, need: usize) -> Result<()> {
    if have < need {
        bail!("data is {have} bytes but the header needs {need}");
    }
    Ok(())
}

/// Checks that nothing follows the data (and lets the zip reader verify the CRC).
pub(crate) fn end_of_entry(r: &mut dyn Read) -> Result<()> {
    let mut one = [0u8; 1];
    if r.read(&mut one)? != 0 {
        bail!("trailing bytes after the array data");
    }
    Ok(())
}

#[cfg(test)]
mod stream_tests {
    use super::super::tests::{npy_file, npz_file};
    use super::super::{digest_bytes, FileKind, OutputFile};
    use crate::digest::digest_parts;
    use crate::tensor::DType;

    fn file(name: &str) -> OutputFile {
        OutputFile {
            name: name.into(),
            path: name.into(),
            kind: FileKind::of(name),
            len: 0,
            modified: None,
        }
    }

    /// Deflated big-endian arrays and plain entries over a chunk are streamed (byte-swapped
    /// on the fly) and digest exactly as their canonical bytes do.
    #[test]
    fn streamed_entries_digest_canonically() {
        let n = (3 << 20) / 4 + 7; // over 3 chunks, not a whole number of them
        let values: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
        let le: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let be: Vec<u8> = values.iter().flat_map(|v| v.to_be_bytes()).collect();
        let blob: Vec<u8> = (0..(5 << 20) + 3).map(|i| (i * 31) as u8).collect();
        let z = npz_file(
            &[
                ("x.npy", npy_file(">f4", false, &[n], &be)),
                ("blob", blob.clone()),
            ],
            true,
        );
        let got = digest_bytes(&file("a.npz"), &z).unwrap();
        assert_eq!(
            got,
            vec![
                (
                    "a.npz:blob".to_string(),
                    digest_parts(DType::U8, &[blob.len()], &blob)
                ),
                ("a.npz:x".to_string(), digest_parts(DType::F32, &[n], &le)),
            ]
        );
    }
}
