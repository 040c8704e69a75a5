//! Host-side tensors: a dtype, a shape and contiguous row-major little-endian bytes.

use anyhow::{bail, Result};
use rayon::prelude::*;

/// Element type of a [`Tensor`]. The discriminant is the dtype tag used in digests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
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
}

impl DType {
    /// Size of one element in bytes.
    pub fn size(self) -> usize {
        match self {
            DType::F64 | DType::I64 => 8,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::U8 | DType::Bool => 1,
        }
    }

    /// Whether the dtype is a floating-point type (ULP distances apply).
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
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

    /// A bool tensor from `bool` values.
    pub fn from_bools(shape: &[usize], values: &[bool]) -> Tensor {
        let data = values.iter().map(|&b| b as u8).collect();
        Tensor::from_bytes(DType::Bool, shape, data).expect("bool tensor shape")
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
}
