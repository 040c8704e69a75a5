//! Backends: where a case runs. `cpu` is always present; `cuda` is probed at run time.

pub mod cpu;
pub mod cuda;

use serde::{Deserialize, Serialize};
use std::fmt;

/// A device family a case can run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
#[derive(schemars::JsonSchema)]
pub enum Backend {
    /// Host CPU with a rayon thread pool.
    Cpu,
    /// NVIDIA GPU through cudarc (driver API) with kernels compiled by NVRTC.
    Cuda,
}

impl Backend {
    /// Lower-case name as used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Cpu => "cpu",
            Backend::Cuda => "cuda",
        }
    }

    /// `None` when the backend can run here, else the reason cases on it are skipped.
    pub fn unavailable_reason(self) -> Option<String> {
        match self {
            Backend::Cpu => None,
            Backend::Cuda => cuda::Gpu::get().err(),
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
