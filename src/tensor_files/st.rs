//! `.safetensors` files through the `safetensors` crate, zero-copy from the mapped bytes.

use super::{Sink, View};
use crate::tensor::DType;
use anyhow::{anyhow, bail, Context, Result};
use safetensors::{Dtype, SafeTensors};
use std::borrow::Cow;

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
    let st = SafeTensors::deserialize(bytes).map_err(|e| anyhow!("{e}"))?;
    for (name, view) in st.iter() {
        if !sink.wants(name) {
            continue;
        }
        let d = dtype(view.dtype()).with_context(|| format!("tensor {name:?}"))?;
        let v = View::new(d, view.shape().to_vec(), Cow::Borrowed(view.data()))
            .with_context(|| format!("tensor {name:?}"))?;
        sink.take(Some(name.to_string()), v)?;
    }
    Ok(())
}
