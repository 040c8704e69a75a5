//! The cost of determinism as a report holds it: one row per op and backend, measured by
//! [`crate::cost`].

use crate::backend::Backend;
use serde::Serialize;

/// One op's cost of determinism on one backend.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct CostRow {
    /// Op family.
    pub op: String,
    /// Backend measured.
    pub backend: Backend,
    /// Fastest deterministic implementation and its best time in seconds.
    pub deterministic: (String, f64),
    /// Fastest nondeterministic implementation and its best time in seconds.
    pub nondeterministic: (String, f64),
    /// `deterministic time / nondeterministic time`.
    pub ratio: f64,
}
