//! bitexact — a determinism test harness for GPU kernels and training steps.
//!
//! Every case runs at least twice under fixed seeds and switches; every output tensor is hashed
//! (SHA-256 over a canonical encoding, [`digest`]); runs are compared bit for bit and any
//! difference is explained ([`diff`]). See `README.md` and `DESIGN.md` for the whole picture.

pub mod atomic;
pub mod backend;
pub mod case;
pub mod cases;
pub mod check;
pub mod controls;
pub mod cost;
pub mod cross;
pub mod diff;
pub mod digest;
pub mod harness;
pub mod isolate;
pub mod memory;
pub mod ops;
pub mod platform;
pub mod report;
pub mod rng;
pub mod snapshot;
pub mod tensor;
pub mod tensor_io;
pub mod trace;
pub mod train;
pub mod vary;

pub use backend::Backend;
pub use case::{Algo, Case, Ctx, Outputs};
pub use check::{check, Check};
pub use controls::Controls;
pub use digest::Digest;
pub use harness::{check_case, CaseReport, Verdict};
pub use tensor::{DType, Tensor};
