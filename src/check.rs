//! The library API for users' own tests: a few lines per case.
//!
//! ```no_run
//! use bitexact::{Case, Ctx, Outputs, Tensor};
//!
//! struct MyCase;
//! impl Case for MyCase {
//!     fn name(&self) -> String {
//!         "my_crate/my_kernel".into()
//!     }
//!     fn backends(&self) -> Vec<bitexact::Backend> {
//!         vec![bitexact::Backend::Cpu]
//!     }
//!     fn run(&self, ctx: &mut Ctx) -> anyhow::Result<Outputs> {
//!         let x = ctx.stream("x").uniform(1000);
//!         let s: f32 = x.iter().sum();
//!         Ok(Outputs::from([("sum".to_string(), Tensor::scalar(s))]))
//!     }
//! }
//!
//! #[test]
//! fn my_kernel_is_deterministic() {
//!     bitexact::check(&MyCase).runs(3).assert_deterministic();
//! }
//!
//! #[test]
//! fn my_kernel_matches_its_snapshot() {
//!     bitexact::check(&MyCase).assert_snapshot();
//! }
//! ```
//!
//! Defaults: 2 runs on the CPU under [`Controls::from_env`] (seed 0, deterministic on,
//! benchmark off, overridable with `BITEXACT_*`). Snapshots go to `snapshots/` in the crate
//! being tested (`$CARGO_MANIFEST_DIR/snapshots`, else `./snapshots`), laid out as described in
//! [`crate::snapshot`]; review new or changed ones with `cargo insta review`. insta's
//! environment switches apply (`INSTA_UPDATE`, `INSTA_FORCE_PASS`, `CI`); its `insta.yaml`
//! configuration file is looked up in bitexact's own workspace, not the caller's, because the
//! assertion is made inside bitexact.

use crate::backend::Backend;
use crate::case::Case;
use crate::controls::Controls;
use crate::harness::{check_case, CaseReport, Verdict};
use std::path::PathBuf;

/// Checks `case`: configure with the builder methods, then [`Check::assert_deterministic`],
/// [`Check::assert_snapshot`] or [`Check::report`].
pub fn check(case: &dyn Case) -> Check<'_> {
    Check {
        case,
        runs: 2,
        controls: None,
        backend: Backend::Cpu,
        snapshots: None,
    }
}

/// A configured check of one case (see [`check`]).
pub struct Check<'a> {
    case: &'a dyn Case,
    runs: usize,
    controls: Option<Controls>,
    backend: Backend,
    snapshots: Option<PathBuf>,
}

impl Check<'_> {
    /// Runs per check (at least 2; default 2).
    pub fn runs(mut self, runs: usize) -> Self {
        self.runs = runs.max(2);
        self
    }

    /// Runs under these controls instead of the defaults.
    pub fn controls(mut self, controls: Controls) -> Self {
        self.controls = Some(controls);
        self
    }

    /// Runs with this base seed.
    pub fn seed(mut self, seed: u64) -> Self {
        let mut c = self.current_controls();
        c.seed = seed;
        self.controls = Some(c);
        self
    }

    /// Runs on this backend (default CPU). A backend not available here gives `skipped`.
    pub fn backend(mut self, backend: Backend) -> Self {
        self.backend = backend;
        self
    }

    /// Keeps snapshots under this directory instead of `$CARGO_MANIFEST_DIR/snapshots`.
    pub fn snapshot_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.snapshots = Some(dir.into());
        self
    }

    fn current_controls(&self) -> Controls {
        self.controls.clone().unwrap_or_else(|| {
            Controls::from_env().unwrap_or_else(|e| panic!("bitexact controls: {e:#}"))
        })
    }

    /// The snapshot directory this check uses.
    pub fn snapshots(&self) -> PathBuf {
        self.snapshots.clone().unwrap_or_else(|| {
            std::env::var_os("CARGO_MANIFEST_DIR")
                .map(PathBuf::from)
                .unwrap_or_default()
                .join("snapshots")
        })
    }

    /// Runs the case K times and returns the harness's report, whatever the verdict.
    pub fn report(&self) -> CaseReport {
        check_case(self.case, self.backend, &self.current_controls(), self.runs)
    }

    /// Runs the case K times and panics unless every run gave bit-identical outputs; the panic
    /// message names the case and explains each differing tensor. A case that cannot run on
    /// the backend here (`skipped`) passes, with a note on standard error.
    pub fn assert_deterministic(&self) -> CaseReport {
        let r = self.report();
        assert_ok(&r);
        r
    }

    /// Asserts determinism, then that the digests match the committed snapshot of this case,
    /// controls and platform class. A new or changed snapshot is written as pending
    /// `.snap.new` (not in CI) and the panic message says which tensors changed and what
    /// differs in the platform fingerprint.
    pub fn assert_snapshot(&self) -> CaseReport {
        let r = self.assert_deterministic();
        if r.verdict == Verdict::Deterministic {
            crate::snapshot::assert_matches(&self.snapshots(), &r, &self.current_controls());
        }
        r
    }
}

/// Panics with the report's explanation unless it is deterministic (or skipped).
fn assert_ok(r: &CaseReport) {
    match r.verdict {
        Verdict::Deterministic => {}
        Verdict::Skipped => eprintln!(
            "bitexact: {} skipped on {}: {}",
            r.name,
            r.backend,
            r.message.as_deref().unwrap_or("")
        ),
        v => {
            let mut msg = format!(
                "{} on {} is {} over {} runs ({} distinct digests)",
                r.name,
                r.backend,
                v.name(),
                r.runs,
                r.distinct_digests
            );
            for d in &r.diff {
                msg.push_str("\n  ");
                msg.push_str(&d.summary());
            }
            if let Some(m) = &r.message {
                msg.push_str("\n  ");
                msg.push_str(m);
            }
            if let Some(d) = &r.divergence {
                msg.push_str("\n  localized: ");
                msg.push_str(&d.explanation);
            }
            panic!("{msg}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::case::{Ctx, Outputs};
    use crate::tensor::Tensor;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Drifts(AtomicUsize);
    impl Case for Drifts {
        fn name(&self) -> String {
            "test/drifts".into()
        }
        fn run(&self, _ctx: &mut Ctx) -> anyhow::Result<Outputs> {
            let n = self.0.fetch_add(1, Ordering::SeqCst) as f32;
            Ok(Outputs::from([(
                "w".to_string(),
                Tensor::from_slice(&[2], &[1.0f32, n]),
            )]))
        }
    }

    #[test]
    fn failure_message_explains_the_difference() {
        let err = std::panic::catch_unwind(|| {
            check(&Drifts(AtomicUsize::new(0)))
                .runs(3)
                .seed(5)
                .assert_deterministic();
        })
        .unwrap_err();
        let msg = err.downcast_ref::<String>().unwrap();
        assert!(
            msg.contains("test/drifts on cpu is nondeterministic over 3 runs"),
            "{msg}"
        );
        assert!(msg.contains("w: 1/2 elements differ"), "{msg}");
    }
}
