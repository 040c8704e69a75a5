//! The cross-device comparison as a report holds it (`report --backend all`): per case, how
//! its CPU and CUDA outputs compare, tensor by tensor. [`crate::cross`] compares them.

use crate::diff::TensorDiff;
use serde::Serialize;

/// Outcome of comparing one case across devices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum CrossVerdict {
    /// Every output is bit-identical on both devices.
    Identical,
    /// Only float outputs differ (see their max ULP distance).
    FloatDifference,
    /// An output that must be identical differs, or the outputs do not line up.
    Mismatch,
    /// Not compared (no CUDA, or a run was not deterministic); the message says why.
    Skipped,
}

impl CrossVerdict {
    /// Name as printed.
    pub fn name(self) -> &'static str {
        match self {
            CrossVerdict::Identical => "identical",
            CrossVerdict::FloatDifference => "float-difference",
            CrossVerdict::Mismatch => "mismatch",
            CrossVerdict::Skipped => "skipped",
        }
    }
}

/// One output tensor compared across devices.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct CrossTensor {
    /// Output name.
    pub tensor: String,
    /// Whether this output must be bit-identical across devices (non-float dtype); known when
    /// the tensors were compared element by element (`None` when the digests already agreed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exact_required: Option<bool>,
    /// Whether it is bit-identical.
    pub identical: bool,
    /// How CUDA's value differs from the CPU's (first run of each), when it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<TensorDiff>,
}

/// One case compared across devices.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct CrossDevice {
    /// Case name.
    pub case: String,
    /// Outcome.
    pub verdict: CrossVerdict,
    /// Per output, in name order (empty when skipped).
    pub tensors: Vec<CrossTensor>,
    /// Why it was skipped, or what failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl CrossDevice {
    /// A case not compared, and why.
    pub fn skipped(case: &str, why: String) -> CrossDevice {
        CrossDevice {
            case: case.to_string(),
            verdict: CrossVerdict::Skipped,
            tensors: Vec::new(),
            message: Some(why),
        }
    }

    /// One line per differing tensor: `y: 17/4096 elements differ, max 2 ULP (must be identical)`.
    pub fn details(&self) -> Vec<String> {
        self.tensors
            .iter()
            .filter_map(|t| {
                let d = t.diff.as_ref()?;
                let what = match &d.note {
                    Some(n) => n.clone(),
                    None => format!(
                        "{}/{} elements differ, first at {:?} (cpu {} vs cuda {}), max |Δ| {:.3e}{}",
                        d.elements_differing,
                        d.elements,
                        d.first_index,
                        d.first_values[0],
                        d.first_values[1],
                        d.max_abs,
                        d.max_ulp
                            .map(|u| format!(", max {u} ULP"))
                            .unwrap_or_default()
                    ),
                };
                let must = if t.exact_required == Some(true) {
                    " (must be identical)"
                } else {
                    ""
                };
                Some(format!("{}: {what}{must}", t.tensor))
            })
            .collect()
    }
}
