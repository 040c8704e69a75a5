//! The integration tests, one binary: each module is one area of bitexact tested from outside
//! (the `bitexact` binary, the library's public API, the Python package and the programs under
//! `tests/fixtures/`). One binary links once and runs every test on the same thread pool;
//! `cargo test --test it <module>::` runs one area (e.g. `cargo test --test it resume::`).
//!
//! The structure check is its own binary (`tests/architecture.rs`): it reads the sources and
//! needs nothing built.

mod common;

/// The example user crate's library (`examples/user_crate/src/lib.rs`): its tests, compiled
/// here ([`user_examples`]), name it `user_crate::…` as they do in their own crate.
extern crate self as user_crate;
#[path = "../../examples/user_crate/src/lib.rs"]
mod user_crate_lib;
pub use user_crate_lib::weighted_total;

mod bad_input;
mod batch;
mod batch_trace;
mod blame_evidence;
mod cli;
mod compiled_kernels;
mod controls_reach;
mod cuda;
mod determinism;
mod distributed;
mod docs_reference;
mod early_stop;
mod formats;
mod hostile;
mod html_report;
mod hygiene;
mod ignore_rules;
mod kernels_host;
mod kernels_ptx;
mod memory_bounds;
mod module_records;
mod noise;
mod op_traces;
mod planner;
mod platform_records;
mod programs_in_suite;
mod protocol;
mod python_package;
mod readme;
mod resume;
mod run_mode;
mod shared_runs;
mod snapshot_files;
mod snapshots;
mod tensor_files;
mod torch_files;
mod trace_threads;
mod trace_versions;
mod tracer_env;
mod user_examples;
mod variations;
