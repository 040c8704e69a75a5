//! [`Outputs`]: the named tensors one run of a case returns, in name order.

use crate::tensor::Tensor;
use std::collections::BTreeMap;
use std::ops::{Deref, DerefMut};

/// Named output tensors of one run, in name order. Reads like a `BTreeMap<String, Tensor>`
/// (it derefs to one) and builds in one expression:
///
/// ```
/// use bitexact::{Outputs, Tensor};
/// let out = Outputs::new()
///     .with("sum", Tensor::scalar(1.5f32))
///     .with("idx", Tensor::from_slice(&[2], &[3i64, 4]));
/// assert_eq!(out.len(), 2);
/// let same = Outputs::from([("sum", Tensor::scalar(1.5f32))]);
/// assert_eq!(same["sum"], out["sum"]);
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outputs(BTreeMap<String, Tensor>);

impl Outputs {
    /// No outputs yet.
    pub fn new() -> Outputs {
        Outputs::default()
    }

    /// Adds (or replaces) the output `name`.
    pub fn with(mut self, name: impl Into<String>, tensor: Tensor) -> Outputs {
        self.0.insert(name.into(), tensor);
        self
    }

    /// The underlying map.
    pub fn into_map(self) -> BTreeMap<String, Tensor> {
        self.0
    }
}

impl Deref for Outputs {
    type Target = BTreeMap<String, Tensor>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl DerefMut for Outputs {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl<K: Into<String>, const N: usize> From<[(K, Tensor); N]> for Outputs {
    fn from(items: [(K, Tensor); N]) -> Outputs {
        items.into_iter().collect()
    }
}

impl From<BTreeMap<String, Tensor>> for Outputs {
    fn from(map: BTreeMap<String, Tensor>) -> Outputs {
        Outputs(map)
    }
}

impl<K: Into<String>> FromIterator<(K, Tensor)> for Outputs {
    fn from_iter<I: IntoIterator<Item = (K, Tensor)>>(iter: I) -> Outputs {
        Outputs(iter.into_iter().map(|(k, t)| (k.into(), t)).collect())
    }
}

impl IntoIterator for Outputs {
    type Item = (String, Tensor);
    type IntoIter = std::collections::btree_map::IntoIter<String, Tensor>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<'a> IntoIterator for &'a Outputs {
    type Item = (&'a String, &'a Tensor);
    type IntoIter = std::collections::btree_map::Iter<'a, String, Tensor>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl std::ops::Index<&str> for Outputs {
    type Output = Tensor;
    fn index(&self, name: &str) -> &Tensor {
        &self.0[name]
    }
}
