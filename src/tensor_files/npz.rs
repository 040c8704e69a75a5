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
            inflate(key, &mut r, sink).with_context(ctx)?;
        }
    }
    Ok(())
}

/// Reads one compressed entry from `r` (a decompressing reader) into `sink`.
fn inflate<'a>(key: String, r: &mut dyn Read, sink: &mut dyn Sink<'a>) -> Result<()> {
    let mut head = read_up_to(r, 10)?;
    if !head.starts_with(MAGIC) {
        head.extend(read_up_to(r, u64::MAX)?);
        return sink.take(Some(key), View::raw(&head).into_owned());
    }
    if matches!(head.get(6), Some(2 | 3)) {
        head.extend(read_up_to(r, 2)?); // 4-byte header length
    }
    let (_, len) = npy::prefix(&head)?;
    head.extend(read_up_to(r, len as u64)?);
    let h = npy::parse_header(&head)?;
    if h.is_canonical() && h.dtype != DType::Bool {
        sink.stream(key, h.dtype, h.shape.clone(), h.data_len, r)?;
    } else {
        let data = read_up_to(r, h.data_len as u64)?;
        short(data.len(), h.data_len)?;
        let v = h.view(&data)?.into_owned();
        sink.take(Some(key), v)?;
    }
    end_of_entry(r)
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
