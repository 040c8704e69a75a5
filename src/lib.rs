//! bitexact — a determinism test harness for GPU kernels and training steps.
//!
//! Every case runs at least twice under fixed seeds and switches; every output tensor is hashed
//! (SHA-256 over a canonical encoding, [`digest`]); runs are compared bit for bit and any
//! difference is explained ([`TensorDiff`]). See `docs/architecture.md` for the whole picture.
//!
//! Data flows one way: a subject (a [`Case`], or an external program under `bitexact run`) →
//! a run source → the harness (K runs, variations, diagnoses) → digests → compare → one judge
//! → a [`Report`]. The suite is that pipeline for a selection of subjects; the CLI and
//! [`check`](fn@check) call it. The public API is what a user's test needs:
//! [`check`](fn@check) and the types re-exported here, the report model ([`outcome`]) and its
//! renderers ([`report`]), [`snapshot`] review (accepting pending snapshots from code:
//! [`review_snapshots`](fn@review_snapshots)`(dir, true)`), the [`memory`] counting allocator,
//! and the pieces a report is made of ([`digest`], [`trace`], [`vary`], [`platform`],
//! [`cross`], [`cost`], [`rng`], [`protocol`], and the [`suite`] that drives them). The eight
//! hidden modules are bitexact's own binary's, bindings' and tests' way in, not a stable API;
//! the rest is private. `docs/architecture.md` describes the house.
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
/// The cost of determinism per op (`report --cost-of-determinism`).
pub mod cost;
/// CPU vs CUDA comparison of one case's outputs (`report --backend all`).
pub mod cross;
/// Canonical digests: SHA-256 over a canonical encoding of a tensor, and a run's digest.
pub mod digest;
/// The 128-bit fingerprint that op-trace records label tensors with (not cryptographic).
pub mod fingerprint;
pub mod memory;
pub mod outcome;
/// The machine fingerprint a report and a snapshot record.
pub mod platform;
/// The names bitexact and the programs it runs share: environment variables, metadata files,
/// trace levels and trace record fields.
pub mod protocol;
pub mod report;
/// Philox random streams: the seeded inputs a case draws ([`Ctx::stream`]).
pub mod rng;
pub mod snapshot;
/// The pipeline every entry point calls: subjects in, events out, a [`Report`] back.
pub mod suite;
/// Op traces: records, trace files and the first diverging op between two runs.
pub mod trace;
/// Variations between runs, and blame.
pub mod vary;

// Internal modules: public only because bitexact's own binary, Python bindings, tests and
// benches reach in. Not a stable API; hidden from the docs.
/// Backends: CPU and CUDA (internal).
#[doc(hidden)]
pub mod backend;
/// The built-in cases and their registry (internal).
#[doc(hidden)]
pub mod cases;
/// The command line, shared by the binary and the Python bindings (internal).
#[doc(hidden)]
pub mod cli;
/// The harness: run sources, the planner, K runs, diagnoses (internal).
#[doc(hidden)]
pub mod harness;
/// Op families and their implementations (internal).
#[doc(hidden)]
pub mod ops;
/// Program mode (`bitexact run`): external programs, run K times and compared (internal).
#[doc(hidden)]
pub mod program;
/// Readers of tensor files (internal).
#[doc(hidden)]
pub mod tensor_files;
/// The training step behind the `train/*` cases (internal).
#[doc(hidden)]
pub mod train;

// Internal to the crate.
mod atomic;
mod case;
mod cleanup;
mod controls;
mod diff;
mod glob;
mod isolate;
mod outputs;
mod process;
mod quote;
#[cfg(test)]
mod scratch;
mod sha_lanes;
mod tensor;
mod tensor_io;

pub use anyhow::{self, Error, Result};
pub use backend::Backend;
pub use case::{Algo, Case, Ctx};
pub use check::{check, Check};
pub use controls::Controls;
/// Explains how two tensors differ, as every report does (the pytest plugin's in-process check).
pub use diff::explain as explain_diff;
pub use diff::{Positions, TensorDiff};
pub use digest::Digest;
/// The `half` crate, for building f16 / bf16 tensors with [`Tensor::from_slice`].
pub use half;
pub use outcome::{CaseReport, Failure, FailureKind, Judged, Report, Verdict};
pub use outputs::Outputs;
pub use report::Format;
pub use snapshot::{review as review_snapshots, Review};
pub use suite::{Event, SuiteConfig};
pub use tensor::{DType, Tensor};
pub use vary::Variation;
