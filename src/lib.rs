//! bitexact — a determinism test harness for GPU kernels and training steps.
//!
//! Every case runs at least twice under fixed seeds and switches; every output tensor is hashed
//! (SHA-256 over a canonical encoding, [`digest`]); runs are compared bit for bit and any
//! difference is explained ([`diff`]). See `README.md` and `DESIGN.md` for the whole picture.
//!
//! Data flows one way: a [`Case`] → the [`harness`] (K runs, variations, diagnoses) →
//! [`digest`] → compare / [`diff`] → one judge ([`harness::judge`]) → a [`report::Report`].
//! [`suite::run`] is that pipeline for a selection of cases; the CLI and [`check`] call it.
//!
//! ```
//! use bitexact::{Case, Ctx, Outputs, Result, Tensor};
//!
//! struct Sum;
//! impl Case for Sum {
//!     fn name(&self) -> String {
//!         "doc/sum".into()
//!     }
//!     fn run(&self, ctx: &mut Ctx) -> Result<Outputs> {
//!         let x = ctx.stream("x").uniform(100);
//!         Ok(Outputs::new().with("sum", Tensor::scalar(x.iter().sum::<f32>())))
//!     }
//! }
//! bitexact::check(&Sum).runs(3).assert_deterministic();
//! ```
#![warn(missing_docs)]

pub mod atomic;
pub mod backend;
pub mod case;
pub mod check;
pub mod controls;
pub mod cost;
pub mod cross;
pub mod diff;
pub mod digest;
pub mod harness;
pub mod isolate;
pub mod memory;
pub mod platform;
pub mod report;
pub mod rng;
pub mod snapshot;
pub mod suite;
pub mod tensor;
pub mod tensor_files;
pub mod trace;
pub mod vary;

pub mod run;

mod outputs;
mod tensor_io;

/// The built-in cases and their registry. Internal: public for bitexact's own binary, tests
/// and benches, not a stable API.
#[doc(hidden)]
pub mod cases;
/// Op families and their implementations. Internal: public for bitexact's own tests and
/// benches, not a stable API.
#[doc(hidden)]
pub mod ops;
/// The training step behind the `train/*` cases. Internal: public for bitexact's own tests,
/// not a stable API.
#[doc(hidden)]
pub mod train;

pub use anyhow::{self, Error, Result};
pub use backend::Backend;
pub use case::{Algo, Case, Ctx};
pub use check::{check, Check};
pub use controls::Controls;
pub use digest::Digest;
/// The `half` crate, for building f16 / bf16 tensors with [`Tensor::from_slice`].
pub use half;
pub use harness::{check_case, CaseReport, Verdict};
pub use outputs::Outputs;
pub use report::{Format, Report};
pub use suite::{Event, SuiteConfig};
pub use tensor::{DType, Tensor};
pub use vary::Variation;
