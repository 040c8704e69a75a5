//! `.safetensors` files, zero-copy from the mapped bytes. The header is parsed here, entry by
//! entry, into one small record per tensor, and checked exactly as the `safetensors` crate
//! checks it (its error messages included): the crate's own parse buffers the whole header
//! as generic JSON values first (`#[serde(flatten)]`), about ten times the header's size (a
//! 7 MB header of 100 000 tensors cost 74 MB, twice over when a difference is explained).

use super::{Sink, View};
use crate::tensor::DType;
use anyhow::{anyhow, bail, Context, Result};
use safetensors::tensor::TensorInfo;
use safetensors::{Dtype, SafeTensorError};
use serde::de::{Deserializer, MapAccess, Visitor};
use std::borrow::Cow;
use std::collections::HashMap;

/// Maps a safetensors dtype onto ours; sub-byte floats, `F8_E8M0`, the FNUZ fp8 variants and
/// `C64` have no `DType` and are errors.
fn dtype(d: Dtype) -> Result<DType> {
    Ok(match d {
        Dtype::BOOL => DType::Bool,
        Dtype::U8 => DType::U8,
        Dtype::I8 => DType::I8,
        Dtype::I16 => DType::I16,
        Dtype::U16 => DType::U16,
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        Dtype::I32 => DType::I32,
        Dtype::U32 => DType::U32,
        Dtype::F32 => DType::F32,
        Dtype::F64 => DType::F64,
        Dtype::I64 => DType::I64,
        Dtype::U64 => DType::U64,
        Dtype::F8_E4M3 => DType::F8E4M3,
        Dtype::F8_E5M2 => DType::F8E5M2,
        other => bail!("unsupported dtype {other:?}"),
    })
}

/// Largest header the `safetensors` crate accepts.
const MAX_HEADER_SIZE: u64 = 100_000_000;

/// The tensors of a header, in the order of their data.
struct Header(Vec<(String, TensorInfo)>);

impl<'de> serde::Deserialize<'de> for Header {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Header, D::Error> {
        d.deserialize_map(Entries)
    }
}

/// Visits a header's entries one at a time (no generic JSON values are built).
struct Entries;

impl<'de> Visitor<'de> for Entries {
    type Value = Header;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a safetensors header (a JSON object)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Header, A::Error> {
        let mut tensors = Vec::new();
        while let Some(name) = map.next_key::<String>()? {
            if name == "__metadata__" {
                // As in the crate: a map of strings to strings, not an output.
                map.next_value::<Option<HashMap<String, String>>>()?;
                continue;
            }
            tensors.push((name, map.next_value::<TensorInfo>()?));
        }
        Ok(Header(tensors))
    }
}

/// The tensors of the safetensors file `bytes` (checked as the crate checks them), in the order
/// of their data, and where their data starts.
fn header(bytes: &[u8], n: u64) -> Result<(Vec<(String, TensorInfo)>, usize)> {
    if n > MAX_HEADER_SIZE {
        bail!("{}", SafeTensorError::HeaderTooLarge);
    }
    let start = 8 + n as usize;
    let text = std::str::from_utf8(&bytes[8..start])
        .map_err(|e| anyhow!("{}", SafeTensorError::InvalidHeader(e)))?;
    let mut tensors = serde_json::from_str::<Header>(text)
        .map_err(|e| anyhow!("{}", SafeTensorError::InvalidHeaderDeserialization(e)))?
        .0;
    tensors.sort_by_key(|(_, t)| t.data_offsets);
    // A name given twice is an error (the crate would keep the last one only).
    let mut names: Vec<&str> = tensors.iter().map(|(n, _)| n.as_str()).collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        bail!("{}", SafeTensorError::InvalidOffset(w[0].to_string()));
    }
    drop(names);
    let mut end = 0;
    for (name, t) in &tensors {
        let (s, e) = t.data_offsets;
        if s != end || e < s {
            bail!("{}", SafeTensorError::InvalidOffset(name.clone()));
        }
        end = e;
        let bits = t
            .shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .and_then(|n| n.checked_mul(t.dtype.bitsize()));
        let Some(bits) = bits else {
            bail!("{}", SafeTensorError::ValidationOverflow);
        };
        if bits % 8 != 0 {
            bail!("{}", SafeTensorError::MisalignedSlice);
        }
        if e - s != bits / 8 {
            bail!("{}", SafeTensorError::TensorInvalidInfo);
        }
    }
    if Some(bytes.len()) != end.checked_add(start) {
        bail!("{}", SafeTensorError::MetadataIncompleteBuffer);
    }
    Ok((tensors, start))
}

/// Hands every wanted tensor of the safetensors file `bytes` to `sink`, borrowed in place.
pub(crate) fn read<'a>(bytes: &'a [u8], sink: &mut dyn Sink<'a>) -> Result<()> {
    let Some(len) = bytes.get(..8) else {
        bail!(
            "file is {} bytes, too short for the 8-byte header length",
            bytes.len()
        );
    };
    let n = u64::from_le_bytes(len.try_into()?);
    if n > bytes.len() as u64 - 8 {
        bail!("header length {n} exceeds file size {}", bytes.len());
    }
    let (tensors, start) = header(bytes, n)?;
    for (name, t) in tensors {
        if !sink.wants(&name) {
            continue;
        }
        let d = dtype(t.dtype).with_context(|| format!("tensor {name:?}"))?;
        let data = &bytes[start + t.data_offsets.0..start + t.data_offsets.1];
        let v = View::new(d, t.shape, Cow::Borrowed(data))
            .with_context(|| format!("tensor {name:?}"))?;
        sink.take(Some(name), v)?;
    }
    Ok(())
}
