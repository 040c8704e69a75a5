//! CUDA backend: driver probe, NVRTC compilation of `kernels/*.cu`, launches (cudarc).
//!
//! Not built yet: every CUDA case is reported as skipped with the reason below.

use std::sync::Arc;

/// A CUDA device ready to launch kernels.
pub struct Gpu {
    _private: (),
}

impl Gpu {
    /// The process-wide GPU, or the reason there is none.
    pub fn get() -> Result<Arc<Gpu>, String> {
        Err("CUDA backend is not built yet".to_string())
    }
}
