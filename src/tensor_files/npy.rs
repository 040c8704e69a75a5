//! `.npy` format (versions 1.0, 2.0, 3.0), parsed here rather than with `npyz`: its header
//! reader allocates the claimed header length up front and multiplies shapes unchecked (a
//! panic in debug builds), and its data API copies. This parser only reads the header, checks
//! every size against the bytes really there, and hands out the data slice in place.

use super::View;
use crate::tensor::DType;
use anyhow::{bail, Context, Result};
use std::borrow::Cow;

/// The NPY magic string.
pub(crate) const MAGIC: &[u8] = b"\x93NUMPY";

/// What an `.npy` header says, resolved to our dtypes.
#[derive(Clone, Debug)]
pub(crate) struct Header {
    /// Element dtype after conversion (complex → its real component type).
    pub dtype: DType,
    /// Shape as the tensor will have it (complex gains a trailing dimension of 2).
    pub shape: Vec<usize>,
    /// Shape as stored (for Fortran-order transposition).
    file_shape: Vec<usize>,
    /// Stored column-major.
    fortran: bool,
    /// Stored big-endian: swap each component of this many bytes.
    big_endian: bool,
    /// Bytes of header before the data.
    pub data_offset: usize,
    /// Bytes of data the shape needs.
    pub data_len: usize,
}

impl Header {
    /// Whether the stored bytes are already canonical (little-endian, row-major).
    pub fn is_canonical(&self) -> bool {
        !self.swaps() && !self.transposes()
    }

    /// The element width to byte-swap when that is the only conversion the data needs
    /// (big-endian, row-major): it can then be streamed.
    pub fn swap_only(&self) -> Option<usize> {
        (self.swaps() && !self.transposes()).then(|| self.dtype.size())
    }

    /// Whether elements need their bytes reversed.
    fn swaps(&self) -> bool {
        self.big_endian && self.dtype.size() > 1
    }

    /// Whether column-major data needs reordering (rank 0 and 1 are the same either way).
    fn transposes(&self) -> bool {
        self.fortran && self.file_shape.len() > 1
    }

    /// The canonical bytes of `data` (exactly `data_len` long): borrowed when already
    /// canonical, else byte-swapped and/or transposed into a new buffer.
    pub fn canonical<'a>(&self, data: &'a [u8]) -> Cow<'a, [u8]> {
        if self.is_canonical() {
            return Cow::Borrowed(data);
        }
        let mut out = if self.transposes() {
            let elem = self.data_len / self.file_shape.iter().product::<usize>().max(1);
            fortran_to_c(data, &self.file_shape, elem)
        } else {
            data.to_vec()
        };
        if self.swaps() {
            out.chunks_mut(self.dtype.size()).for_each(|c| c.reverse());
        }
        Cow::Owned(out)
    }

    /// The tensor view of `data` (the bytes after the header, exactly `data_len`).
    pub fn view<'a>(&self, data: &'a [u8]) -> Result<View<'a>> {
        View::new(self.dtype, self.shape.clone(), self.canonical(data))
    }
}

/// Reads the header's fixed prefix: `(header text start, header text length)`.
pub(crate) fn prefix(bytes: &[u8]) -> Result<(usize, usize)> {
    if !bytes.starts_with(MAGIC) {
        bail!("not an .npy file (no \\x93NUMPY magic)");
    }
    if bytes.len() < 10 {
        bail!("truncated .npy header ({} bytes)", bytes.len());
    }
    let (start, len) = match bytes[6] {
        1 => (10, u16::from_le_bytes([bytes[8], bytes[9]]) as usize),
        2 | 3 if bytes.len() >= 12 => (12, u32::from_le_bytes(bytes[8..12].try_into()?) as usize),
        2 | 3 => bail!("truncated .npy header"),
        v => bail!("unsupported .npy version {v}.{}", bytes[7]),
    };
    Ok((start, len))
}

/// Parses the header of an `.npy` whose first bytes are `bytes` (the data may follow or not:
/// only the header is checked).
pub(crate) fn parse_header(bytes: &[u8]) -> Result<Header> {
    let (start, len) = prefix(bytes)?;
    let end = start
        .checked_add(len)
        .filter(|&e| e <= bytes.len())
        .with_context(|| {
            format!(
                "header length {len} exceeds the {} bytes after the prefix",
                bytes.len() - start
            )
        })?;
    let text = std::str::from_utf8(&bytes[start..end]).context(".npy header is not UTF-8")?;
    let dict = parse_dict(text)
        .with_context(|| format!("malformed .npy header {}", crate::quote::excerpt(text)))?;
    let descr = dict.descr.context(".npy header has no 'descr'")?;
    let fortran = dict.fortran.context(".npy header has no 'fortran_order'")?;
    let file_shape = dict.shape.context(".npy header has no 'shape'")?;
    let (dtype, complex, big_endian) = dtype(&descr)?;
    let mut shape = file_shape.clone();
    if complex {
        shape.push(2);
    }
    let data_len = shape
        .iter()
        .try_fold(dtype.size(), |a, &d| a.checked_mul(d))
        .with_context(|| format!("shape {file_shape:?} of {descr} overflows the address space"))?;
    Ok(Header {
        dtype,
        shape,
        file_shape,
        fortran,
        big_endian,
        data_offset: end,
        data_len,
    })
}

/// Parses a whole `.npy` held in `bytes` (e.g. memory-mapped) into a view of its data.
pub(crate) fn parse(bytes: &[u8]) -> Result<View<'_>> {
    let h = parse_header(bytes)?;
    let have = bytes.len() - h.data_offset;
    if have != h.data_len {
        bail!(
            "data is {have} bytes but shape {:?} of {} needs {}",
            h.shape,
            h.dtype,
            h.data_len
        );
    }
    h.view(&bytes[h.data_offset..])
}

/// Maps a numpy type string (`<f4`, `|b1`, `>c16`, ...) to (dtype, complex?, big-endian?).
fn dtype(descr: &str) -> Result<(DType, bool, bool)> {
    let (order, rest) = match descr.as_bytes().first() {
        Some(b'<' | b'>' | b'|' | b'=') => descr.split_at(1),
        _ => ("=", descr),
    };
    let big = order == ">";
    let d = match rest {
        "b1" | "?" => (DType::Bool, false),
        "i1" => (DType::I8, false),
        "u1" => (DType::U8, false),
        "i2" => (DType::I16, false),
        "u2" => (DType::U16, false),
        "i4" => (DType::I32, false),
        "u4" => (DType::U32, false),
        "i8" => (DType::I64, false),
        "u8" => (DType::U64, false),
        "f2" | "e" => (DType::F16, false),
        "f4" => (DType::F32, false),
        "f8" => (DType::F64, false),
        // complex as its real view (torch.view_as_real): real, imaginary in a trailing dim.
        "c8" => (DType::F32, true),
        "c16" => (DType::F64, true),
        _ => bail!("unsupported dtype {}", crate::quote::excerpt(descr)),
    };
    Ok((d.0, d.1, big))
}

/// Row-major copy of column-major `data` with `shape` (elements of `elem` bytes).
fn fortran_to_c(data: &[u8], shape: &[usize], elem: usize) -> Vec<u8> {
    let n: usize = shape.iter().product();
    let mut out = Vec::with_capacity(n * elem);
    let mut f_strides = vec![elem; shape.len()];
    for k in 1..shape.len() {
        f_strides[k] = f_strides[k - 1] * shape[k - 1];
    }
    let mut coords = vec![0usize; shape.len()];
    let mut off = 0usize;
    for _ in 0..n {
        out.extend_from_slice(&data[off..off + elem]);
        for k in (0..shape.len()).rev() {
            coords[k] += 1;
            off += f_strides[k];
            if coords[k] < shape[k] {
                break;
            }
            off -= f_strides[k] * shape[k];
            coords[k] = 0;
        }
    }
    out
}

#[derive(Default)]
struct Dict {
    descr: Option<String>,
    fortran: Option<bool>,
    shape: Option<Vec<usize>>,
}

/// Parses numpy's header dict literal: `{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }`.
fn parse_dict(text: &str) -> Result<Dict> {
    let mut p = Parser(text.as_bytes());
    let mut d = Dict::default();
    p.expect(b'{')?;
    loop {
        p.ws();
        if p.eat(b'}') {
            break;
        }
        let key = p.string()?;
        p.ws();
        p.expect(b':')?;
        p.ws();
        match key.as_str() {
            "descr" if p.peek() == Some(b'[') => bail!("unsupported dtype: structured array"),
            "descr" => d.descr = Some(p.string()?),
            "fortran_order" => d.fortran = Some(p.boolean()?),
            "shape" => d.shape = Some(p.tuple()?),
            k => bail!("unexpected key {k:?}"),
        }
        p.ws();
        if !p.eat(b',') {
            p.ws();
            p.expect(b'}')?;
            break;
        }
    }
    p.ws();
    if !p.0.is_empty() {
        bail!("trailing characters after the dict");
    }
    Ok(d)
}

struct Parser<'a>(&'a [u8]);

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.0.first().copied()
    }
    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.0 = &self.0[1..];
        }
    }
    fn eat(&mut self, c: u8) -> bool {
        let hit = self.peek() == Some(c);
        if hit {
            self.0 = &self.0[1..];
        }
        hit
    }
    fn expect(&mut self, c: u8) -> Result<()> {
        if !self.eat(c) {
            bail!("expected {:?}", c as char);
        }
        Ok(())
    }
    fn string(&mut self) -> Result<String> {
        let q = match self.peek() {
            Some(q @ (b'\'' | b'"')) => q,
            _ => bail!("expected a string"),
        };
        let body = &self.0[1..];
        let end = body
            .iter()
            .position(|&c| c == q)
            .context("unterminated string")?;
        self.0 = &body[end + 1..];
        Ok(String::from_utf8_lossy(&body[..end]).into_owned())
    }
    fn boolean(&mut self) -> Result<bool> {
        for (word, v) in [(&b"True"[..], true), (&b"False"[..], false)] {
            if self.0.starts_with(word) {
                self.0 = &self.0[word.len()..];
                return Ok(v);
            }
        }
        bail!("expected True or False")
    }
    fn tuple(&mut self) -> Result<Vec<usize>> {
        let close = match self.peek() {
            Some(b'(') => b')',
            Some(b'[') => b']',
            _ => bail!("shape is not a tuple"),
        };
        self.0 = &self.0[1..];
        let mut dims = Vec::new();
        loop {
            self.ws();
            if self.eat(close) {
                return Ok(dims);
            }
            let digits = self.0.iter().take_while(|c| c.is_ascii_digit()).count();
            if digits == 0 {
                bail!("shape holds a non-integer");
            }
            let text = std::str::from_utf8(&self.0[..digits])?;
            dims.push(
                text.parse::<usize>().with_context(|| {
                    format!("dimension {} too large", crate::quote::excerpt(text))
                })?,
            );
            self.0 = &self.0[digits..];
            self.eat(b'L'); // Python 2 long literal
            self.ws();
            if !self.eat(b',') {
                self.ws();
                self.expect(close)?;
                return Ok(dims);
            }
        }
    }
}
