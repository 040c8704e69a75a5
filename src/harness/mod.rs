//! The harness: runs each case K times under the same controls, digests every output, compares
//! the runs bit for bit, and gives a verdict with an explanation of any difference.
//!
//! - [`executor`]: the K runs (in this process, or each in a fresh child) and their evidence;
//! - [`diagnose`]: explanation, localization, blame and the order pass;
//! - [`outcome`]: [`CaseReport`], its [`Evidence`], and [`judge`], the one place verdicts are
//!   assigned.

pub mod diagnose;
pub mod executor;
pub mod outcome;
pub mod program;

pub use executor::{
    check_case, check_case_with, panic_message, pool, run_in_process, run_once, RunResult,
};
pub use outcome::{judge, CaseReport, Evidence, SnapshotStatus, Summary, Verdict};
pub use program::{ProgramInfo, ProgramRun, StepMemory};

use crate::isolate::ChildConfig;
use crate::vary::Variation;
use serde::{Deserialize, Serialize};

/// How the harness checks a case.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Options {
    /// Runs per case (at least 2).
    pub runs: usize,
    /// Conditions varied between runs.
    pub vary: Vec<Variation>,
    /// Record an op trace in every run and keep it in the report.
    pub trace: bool,
    /// On a difference, re-run with tracing to name the first diverging op (only for cases
    /// that record op traces).
    pub localize: bool,
    /// On a difference under variations, find the variation(s) that break the case.
    pub blame: bool,
    /// How to start child processes (needed by the `process` variation).
    pub children: Option<ChildConfig>,
    /// Run the whole case in a child process (`--isolate`).
    pub isolate: Option<ChildConfig>,
    /// Set inside that child: the case is already isolated.
    #[serde(default)]
    pub isolated: bool,
}

impl Options {
    /// `runs` runs, no variations, localization and blame on, no child processes.
    pub fn runs(runs: usize) -> Options {
        Options {
            runs,
            vary: Vec::new(),
            trace: false,
            localize: true,
            blame: true,
            children: None,
            isolate: None,
            isolated: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Backend;
    use crate::case::{Case, Ctx, Outputs};
    use crate::controls::Controls;
    use crate::tensor::Tensor;
    use anyhow::Result;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Counter(AtomicUsize, bool);
    impl Case for Counter {
        fn name(&self) -> String {
            "test/counter".into()
        }
        fn run(&self, _ctx: &mut Ctx) -> Result<Outputs> {
            let n = self.0.fetch_add(1, Ordering::SeqCst);
            let v = if self.1 { n as f32 } else { 1.0 };
            Ok(Outputs::from([(
                "x".to_string(),
                Tensor::from_slice(&[2], &[0.5f32, v]),
            )]))
        }
    }

    #[test]
    fn an_untraced_nondeterministic_case_costs_no_extra_runs() {
        let case = Counter(AtomicUsize::new(0), true);
        let r = check_case(&case, Backend::Cpu, &Controls::default(), 2);
        assert_eq!(r.verdict, Verdict::Nondeterministic);
        assert_eq!(case.0.load(Ordering::SeqCst), 2, "no localization re-runs");
        assert!(r.divergence.is_none());
    }

    struct Panics;
    impl Case for Panics {
        fn name(&self) -> String {
            "test/panics".into()
        }
        fn run(&self, _ctx: &mut Ctx) -> Result<Outputs> {
            panic!("boom")
        }
    }

    #[test]
    fn verdicts_and_diffs() {
        let c = Controls::default();
        let same = check_case(&Counter(AtomicUsize::new(0), false), Backend::Cpu, &c, 3);
        assert_eq!(
            (same.verdict, same.runs, same.distinct_digests),
            (Verdict::Deterministic, 3, 1)
        );
        let diff = check_case(&Counter(AtomicUsize::new(0), true), Backend::Cpu, &c, 4);
        assert_eq!(
            (diff.verdict, diff.distinct_digests),
            (Verdict::Nondeterministic, 4)
        );
        assert_eq!(diff.diff.len(), 1);
        assert_eq!(diff.diff[0].first_index, vec![1]);
        assert_eq!(diff.diff[0].runs, [0, 1]);
    }

    struct Finds;
    impl Case for Finds {
        fn name(&self) -> String {
            "test/finds".into()
        }
        fn run(&self, ctx: &mut Ctx) -> Result<Outputs> {
            ctx.findings.push("workers 0 and 1 share one stream".into());
            Ok(Outputs::from([("x".to_string(), Tensor::scalar(1.0f32))]))
        }
    }

    #[test]
    fn findings_make_a_case_fail_and_are_deduplicated() {
        let r = check_case(&Finds, Backend::Cpu, &Controls::default(), 3);
        assert_eq!(r.verdict, Verdict::Error);
        assert_eq!(
            r.findings,
            vec![
                "workers 0 and 1 share one stream (reported in 3 of 3 runs; first shown)"
                    .to_string()
            ]
        );
        assert!(r.message.unwrap().contains("defect found inside the runs"));
        // Without the counting allocator memory is unknown: no numbers, no growth flag.
        assert!(r.peak_bytes.is_empty() && r.retained_bytes.is_empty());
        assert_eq!(r.memory_growth, None);
    }

    #[test]
    fn panics_become_errors() {
        let r = check_case(&Panics, Backend::Cpu, &Controls::default(), 2);
        assert_eq!(r.verdict, Verdict::Error);
        assert!(r.message.unwrap().contains("boom"));
    }
}
