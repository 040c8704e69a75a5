//! Host-side tensors: a dtype, a shape and contiguous row-major little-endian bytes.

use anyhow::{bail, Result};
use rayon::prelude::*;

/// Element type of a [`Tensor`]. The discriminant is the dtype tag used in digests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum DType {
    /// IEEE-754 binary32.
    F32 = 1,
    /// IEEE-754 binary64.
    F64 = 2,
    /// IEEE-754 binary16.
    F16 = 3,
    /// bfloat16 (upper half of a binary32).
    BF16 = 4,
    /// Signed 32-bit integer.
    I32 = 5,
    /// Signed 64-bit integer.
    I64 = 6,
    /// Unsigned byte.
    U8 = 7,
    /// Unsigned 32-bit integer.
    U32 = 8,
    /// Boolean stored as one byte, 0 or 1.
    Bool = 9,
    /// Signed 8-bit integer.
    I8 = 10,
    /// Signed 16-bit integer.
    I16 = 11,
    /// Unsigned 16-bit integer.
    U16 = 12,
    /// Unsigned 64-bit integer.
    U64 = 13,
    /// 8-bit float, OCP FP8 E4M3 "FN" (bias 7, no infinities, NaN = `S.1111.111`), as
    /// `torch.float8_e4m3fn` and safetensors `F8_E4M3`.
    F8E4M3 = 14,
    /// 8-bit float, OCP FP8 E5M2 (bias 15, IEEE-style infinities and NaNs), as
    /// `torch.float8_e5m2` and safetensors `F8_E5M2`.
    F8E5M2 = 15,
}

impl DType {
    /// Every dtype, in tag order.
    pub const ALL: [DType; 15] = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U32,
        DType::Bool,
        DType::I8,
        DType::I16,
        DType::U16,
        DType::U64,
        DType::F8E4M3,
        DType::F8E5M2,
    ];

    /// The dtype with digest tag `tag`, if any.
    pub fn from_tag(tag: u32) -> Option<DType> {
        DType::ALL.into_iter().find(|d| *d as u32 == tag)
    }

    /// Size of one element in bytes.
    pub fn size(self) -> usize {
        match self {
            DType::F64 | DType::I64 | DType::U64 => 8,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 2,
            DType::U8 | DType::I8 | DType::Bool | DType::F8E4M3 | DType::F8E5M2 => 1,
        }
    }

    /// Whether the dtype is a floating-point type (ULP distances apply).
    pub fn is_float(self) -> bool {
        matches!(
            self,
            DType::F32 | DType::F64 | DType::F16 | DType::BF16 | DType::F8E4M3 | DType::F8E5M2
        )
    }

    /// The safetensors file format's name (`F32`, `BF16`, `F8_E4M3`, ...).
    pub fn safetensors_name(self) -> &'static str {
        match self {
            DType::F8E4M3 => "F8_E4M3",
            DType::F8E5M2 => "F8_E5M2",
            DType::F32 => "F32",
            DType::F64 => "F64",
            DType::F16 => "F16",
            DType::BF16 => "BF16",
            DType::I32 => "I32",
            DType::I64 => "I64",
            DType::U8 => "U8",
            DType::U32 => "U32",
            DType::Bool => "BOOL",
            DType::I8 => "I8",
            DType::I16 => "I16",
            DType::U16 => "U16",
            DType::U64 => "U64",
        }
    }

    /// PyTorch's name (`torch.<name>`: `float32`, `bfloat16`, `float8_e4m3fn`, ...).
    pub fn torch_name(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::U8 => "uint8",
            DType::U32 => "uint32",
            DType::Bool => "bool",
            DType::I8 => "int8",
            DType::I16 => "int16",
            DType::U16 => "uint16",
            DType::U64 => "uint64",
            DType::F8E4M3 => "float8_e4m3fn",
            DType::F8E5M2 => "float8_e5m2",
        }
    }

    /// Lower-case name as used in reports (`f32`, `bf16`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "u8",
            DType::U32 => "u32",
            DType::Bool => "bool",
            DType::I8 => "i8",
            DType::I16 => "i16",
            DType::U16 => "u16",
            DType::U64 => "u64",
            DType::F8E4M3 => "f8e4m3",
            DType::F8E5M2 => "f8e5m2",
        }
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A host-side tensor value: dtype, shape and contiguous row-major little-endian bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct Tensor {
    dtype: DType,
    shape: Vec<usize>,
    data: Vec<u8>,
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Tensor({}, {:?}, {} bytes)",
            self.dtype,
            self.shape,
            self.data.len()
        )
    }
}

/// Element types that can be read from and written to tensor bytes.
pub trait Element: Copy + Send + Sync + 'static {
    /// The matching dtype.
    const DTYPE: DType;
    /// Writes the little-endian bytes of `self` into `out` (length = dtype size).
    fn write_le(self, out: &mut [u8]);
    /// Reads a value from little-endian bytes (length = dtype size).
    fn read_le(bytes: &[u8]) -> Self;
}

macro_rules! element {
    ($t:ty, $d:expr) => {
        impl Element for $t {
            const DTYPE: DType = $d;
            fn write_le(self, out: &mut [u8]) {
                out.copy_from_slice(&self.to_le_bytes());
            }
            fn read_le(bytes: &[u8]) -> Self {
                <$t>::from_le_bytes(bytes.try_into().expect("element width"))
            }
        }
    };
}
element!(f32, DType::F32);
element!(f64, DType::F64);
element!(i32, DType::I32);
element!(i64, DType::I64);
element!(u8, DType::U8);
element!(u32, DType::U32);
element!(i8, DType::I8);
element!(i16, DType::I16);
element!(u16, DType::U16);
element!(u64, DType::U64);
element!(half::f16, DType::F16);
element!(half::bf16, DType::BF16);

/// `bool` is stored as one byte, 0 or 1; reading treats any non-zero byte as `true`.
impl Element for bool {
    const DTYPE: DType = DType::Bool;
    fn write_le(self, out: &mut [u8]) {
        out[0] = self as u8;
    }
    fn read_le(bytes: &[u8]) -> Self {
        bytes[0] != 0
    }
}

/// Below this many bytes conversions run on the calling thread.
const PAR_MIN_BYTES: usize = 1 << 20;

impl Tensor {
    /// Builds a tensor from raw little-endian bytes; errors if the length does not match the shape.
    pub fn from_bytes(dtype: DType, shape: &[usize], data: Vec<u8>) -> Result<Tensor> {
        let want = shape.iter().product::<usize>() * dtype.size();
        if data.len() != want {
            bail!(
                "tensor of dtype {dtype} and shape {shape:?} needs {want} bytes, got {}",
                data.len()
            );
        }
        if dtype == DType::Bool && data.iter().any(|&b| b > 1) {
            bail!("bool tensor holds a byte other than 0 or 1");
        }
        Ok(Tensor {
            dtype,
            shape: shape.to_vec(),
            data,
        })
    }

    /// Builds a tensor from typed values; panics if `values.len()` does not match the shape.
    ///
    /// Works for every `Element`: `f32`, `f64`, `i8`..`i64`, `u8`..`u64`, `bool`, and
    /// [`half::f16`] / [`half::bf16`] (re-exported as `bitexact::half`):
    /// `Tensor::from_slice(&[3], &[true, false, true])`,
    /// `Tensor::from_slice(&[1], &[half::bf16::from_f32(1.5)])`.
    pub fn from_slice<T: Element>(shape: &[usize], values: &[T]) -> Tensor {
        let n: usize = shape.iter().product();
        assert_eq!(
            n,
            values.len(),
            "shape {shape:?} does not match {} values",
            values.len()
        );
        let w = T::DTYPE.size();
        let mut data = vec![0u8; n * w];
        let fill = |(out, v): (&mut [u8], &T)| v.write_le(out);
        if data.len() >= PAR_MIN_BYTES {
            data.par_chunks_mut(w).zip(values.par_iter()).for_each(fill);
        } else {
            data.chunks_mut(w).zip(values.iter()).for_each(fill);
        }
        Tensor {
            dtype: T::DTYPE,
            shape: shape.to_vec(),
            data,
        }
    }

    /// A scalar (rank-0) tensor.
    pub fn scalar<T: Element>(value: T) -> Tensor {
        Tensor::from_slice(&[], &[value])
    }

    /// A bool tensor from `bool` values (the same as [`Tensor::from_slice`] with `bool`).
    pub fn from_bools(shape: &[usize], values: &[bool]) -> Tensor {
        Tensor::from_slice(shape, values)
    }

    /// Reads the elements as `T`; errors naming both dtypes if `T` is not the tensor's dtype.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        if T::DTYPE != self.dtype {
            bail!("tensor has dtype {}, read as {}", self.dtype, T::DTYPE);
        }
        let w = self.dtype.size();
        Ok(if self.data.len() >= PAR_MIN_BYTES {
            self.data.par_chunks(w).map(T::read_le).collect()
        } else {
            self.data.chunks(w).map(T::read_le).collect()
        })
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Dimensions, outermost first.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Raw little-endian bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.data
    }

    /// Converts a flat element index into coordinates (row-major).
    pub fn coords(&self, mut index: usize) -> Vec<usize> {
        let mut out = vec![0; self.shape.len()];
        for (c, &d) in out.iter_mut().zip(&self.shape).rev() {
            *c = index % d.max(1);
            index /= d.max(1);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_coords() {
        let t = Tensor::from_slice(&[2, 3], &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!(t.to_vec::<f32>().unwrap()[4], 5.0);
        assert_eq!(t.coords(4), vec![1, 1]);
        assert!(t
            .to_vec::<i32>()
            .unwrap_err()
            .to_string()
            .contains("dtype f32"));
        assert!(Tensor::from_bytes(DType::F32, &[3], vec![0; 8]).is_err());
        assert_eq!(Tensor::scalar(7i64).shape(), &[] as &[usize]);
    }

    #[test]
    fn from_slice_for_every_element_type() {
        use half::{bf16, f16};
        let b = Tensor::from_slice(&[3], &[true, false, true]);
        assert_eq!((b.dtype(), b.bytes()), (DType::Bool, &[1u8, 0, 1][..]));
        assert_eq!(b, Tensor::from_bools(&[3], &[true, false, true]));
        assert_eq!(b.to_vec::<bool>().unwrap(), vec![true, false, true]);
        let h = Tensor::from_slice(&[2], &[f16::from_f32(1.0), f16::from_f32(-2.0)]);
        assert_eq!(
            (h.dtype(), h.bytes()),
            (DType::F16, &[0x00, 0x3c, 0x00, 0xc0][..])
        );
        let g = Tensor::from_slice(&[1], &[bf16::from_f32(1.0)]);
        assert_eq!((g.dtype(), g.bytes()), (DType::BF16, &[0x80, 0x3f][..]));
        assert_eq!(g.to_vec::<bf16>().unwrap()[0].to_f32(), 1.0);
        assert_eq!(Tensor::from_slice(&[1], &[-2i8]).bytes(), &[0xfe]);
        assert_eq!(Tensor::from_slice(&[1], &[-2i16]).bytes(), &[0xfe, 0xff]);
        assert_eq!(Tensor::from_slice(&[1], &[258u16]).bytes(), &[2, 1]);
        assert_eq!(Tensor::scalar(u64::MAX).bytes(), &[0xff; 8]);
        for d in DType::ALL {
            assert_eq!(DType::from_tag(d as u32), Some(d));
        }
        assert_eq!(DType::from_tag(0), None);
    }
}
