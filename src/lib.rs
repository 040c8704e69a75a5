//! bitexact — a determinism test harness for GPU kernels and training steps.
//!
//! Every case runs at least twice under fixed seeds and switches; every output tensor is hashed
//! (SHA-256 over a canonical encoding, [`digest`]); runs are compared bit for bit and any
//! difference is explained ([`diff`]). See `README.md` ("How it works") for the whole picture.
//!
//! Data flows one way: a subject (a [`Case`], or an external program under `bitexact run`) →
//! a run source → the harness (K runs, variations, diagnoses) → digests → compare → one judge
//! → a [`Report`]. The suite is that pipeline for a selection of subjects; the CLI and
//! [`check`] call it. The public API is what a user's test needs: [`check`] and the types
//! re-exported here, the [`report`] renderers, [`snapshot`] review (accepting pending
//! snapshots from code: [`review_snapshots`]`(dir, true)`) and the [`memory`] counting
//! allocator. Every other module is internal to bitexact's binary and tests.
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

// The public API: the root re-exports below, plus these modules.
pub mod check;
pub mod memory;
pub mod outcome;
pub mod report;
pub mod snapshot;

// Internal modules: public only because bitexact's own binary, tests and benches reach in.
// Not a stable API; hidden from the docs.
/// Atomic writes (internal).
#[doc(hidden)]
pub mod atomic;
/// Backends: CPU and CUDA (internal).
#[doc(hidden)]
pub mod backend;
/// The `Case` trait and its context (re-exported at the root).
#[doc(hidden)]
pub mod case;
/// What must not outlive bitexact: run containers and temporary directories (internal).
#[doc(hidden)]
pub mod cleanup;
/// The command line, shared by the binary and the Python package (internal).
#[doc(hidden)]
pub mod cli;
/// Controls (re-exported at the root).
#[doc(hidden)]
pub mod controls;
/// The cost of determinism (internal).
#[doc(hidden)]
pub mod cost;
/// CPU vs CUDA comparison (internal).
#[doc(hidden)]
pub mod cross;
/// Element-level explanations of differences (internal).
#[doc(hidden)]
pub mod diff;
/// Canonical digests (internal; `Digest` is re-exported at the root).
#[doc(hidden)]
pub mod digest;
/// Globs over names (internal).
#[doc(hidden)]
pub mod glob;
/// The harness: run sources, K runs, diagnoses, the judge (internal).
#[doc(hidden)]
pub mod harness;
/// Child processes: the isolate protocol (internal).
#[doc(hidden)]
pub mod isolate;
/// The machine fingerprint (internal).
#[doc(hidden)]
pub mod platform;
/// Process plumbing: contained children, live groups, signals (internal).
#[doc(hidden)]
pub mod process;
/// The names bitexact and the programs it runs share: environment variables, metadata files,
/// trace levels and trace record fields.
pub mod protocol;
/// Quoting input in messages (internal).
#[doc(hidden)]
pub mod quote;
/// Philox random streams (internal).
#[doc(hidden)]
pub mod rng;
/// Run mode: external programs (internal).
#[doc(hidden)]
pub mod run;
#[cfg(test)]
mod scratch;
pub mod sha_lanes;
/// The pipeline every entry point calls (internal; `Report`, `SuiteConfig`, `Event` are
/// re-exported at the root).
#[doc(hidden)]
pub mod suite;
/// Host tensors (re-exported at the root).
#[doc(hidden)]
pub mod tensor;
/// Readers of tensor files (internal).
#[doc(hidden)]
pub mod tensor_files;
/// Op traces (internal).
#[doc(hidden)]
pub mod trace;
/// Variations between runs (internal; `Variation` is re-exported at the root).
#[doc(hidden)]
pub mod vary;

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
pub use harness::{Failure, FailureKind};
pub use outcome::{CaseReport, Judged, Report, Verdict};
pub use outputs::Outputs;
pub use report::Format;
pub use snapshot::{review as review_snapshots, Review};
pub use suite::{Event, SuiteConfig};
pub use tensor::{DType, Tensor};
pub use vary::Variation;
