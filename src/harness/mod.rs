//! The harness: one path for every kind of subject. A `RunSource` makes runs (a case in
//! this process or a child, an external program); `gather` makes K of them under the same
//! controls, digests every output, compares the runs bit for bit, explains, localizes and
//! blames any difference: the evidence the one judge then weighs.
//!
//! - `source`: the `RunSource` trait and what a run yields;
//! - `in_process`: cases as a run source (`CaseSource`);
//! - `planner`: the one owner of every run an assessment makes (`Planner`);
//! - `executor`: a pass of K runs of any source and their evidence;
//! - `explain`: a difference explained output by output, and the first differing output;
//! - `blame`: which variation breaks a subject;
//! - `order`: the order pass (results that depend on the cases run before).
//!
//! What it finds goes into a [`CaseReport`] ([`crate::outcome`]), judged once its evidence is
//! complete.

pub mod blame;
pub mod executor;
pub mod explain;
pub mod in_process;
pub mod order;
pub mod planner;
pub mod source;

pub use executor::PassRuns;
pub use in_process::{
    call_case, panic_message, pool, run_in_process, CaseRun, CaseSource, ChildRunner,
};
pub use planner::Planner;
pub use source::{Collected, Loader, RunMeta, RunSource, RunStart, Runs, Started};

use crate::backend::Backend;
use crate::case::Case;
use crate::controls::Controls;
use crate::outcome::CaseReport;
use crate::vary::Variation;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How to start a child process that knows the case (see `crate::isolate`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Launcher {
    /// The `bitexact` binary at this path (`EXE __child`).
    Binary(PathBuf),
    /// The bitexact command line behind another program: `PROGRAM ARGS… __child` (the Python
    /// package's `python -m bitexact`).
    Command {
        /// The program to start (the Python interpreter).
        program: PathBuf,
        /// Its arguments before `__child` (`-m bitexact`).
        args: Vec<String>,
    },
    /// A libtest test binary, re-run for the one test named here.
    TestBinary {
        /// Path of the test binary.
        exe: PathBuf,
        /// Full name of the test (`module::test_name`), as libtest names its thread.
        test: String,
    },
}

/// How to start children: the launcher, a per-child time limit and an address-space limit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildConfig {
    /// How to start a child.
    pub launcher: Launcher,
    /// Kill the child (and its process group) after this long.
    pub timeout: Option<Duration>,
    /// Address-space limit of the child in MiB (`setrlimit(RLIMIT_AS)`).
    pub memory_limit_mb: Option<u64>,
}

impl ChildConfig {
    /// Children started by `launcher`, no limits.
    pub fn new(launcher: Launcher) -> ChildConfig {
        ChildConfig {
            launcher,
            timeout: None,
            memory_limit_mb: None,
        }
    }
}

/// How the harness checks a subject.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Options {
    /// Runs per subject (at least 2).
    pub runs: usize,
    /// Conditions varied between runs.
    pub vary: Vec<Variation>,
    /// Record an op trace in every run and keep it in the report.
    pub trace: bool,
    /// On a difference, re-run with tracing to name the first diverging op (only for cases
    /// that record op traces).
    pub localize: bool,
    /// On a difference under variations, find the variation(s) that break the subject.
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

/// The evidence about `source`, not yet judged, telling `progress` of every run before it is
/// made: the main pass, blame's passes, localization and capture re-runs, and any run the
/// source needs to describe itself, all through one [`Planner`]. The suite adds what only it
/// knows (snapshots, the order pass, the other device) and then judges, once.
pub fn gather(
    source: &dyn RunSource,
    controls: &Controls,
    opts: &Options,
    progress: &mut dyn FnMut(RunStart),
) -> CaseReport {
    let mut planner = Planner::new(controls, opts, progress);
    let mut report = evidence(source, &mut planner);
    report.passes = planner.into_made();
    report
}

/// The evidence about `source` (not yet judged): K runs, explanation, localization, blame and
/// what the source adds, every run made by `planner`.
fn evidence(source: &dyn RunSource, planner: &mut Planner) -> CaseReport {
    let opts = planner.opts;
    let t0 = Instant::now();
    let mut report = CaseReport::new(&source.name(), source.backend());
    report.variations = opts.vary.clone();
    report.evidence.planted = source.planted();
    if let Some(reason) = source.skip_reason(opts) {
        report.evidence.skipped = Some(reason);
        return report;
    }
    let runs = PassRuns {
        count: opts.runs,
        traced: opts.trace,
    };
    let p = planner.pass(source, &opts.vary, runs, "main");
    report.runs = p.run_digests.len();
    report.run_digests = p.run_digests.iter().map(|d| d.hex()).collect();
    report.distinct_digests = p.distinct();
    report.run_seconds = p.metas.iter().map(|m| m.seconds).collect();
    report.peak_bytes = p.metas.iter().filter_map(|m| m.peak_bytes).collect();
    if let Some(m) = p.metas.first() {
        report.notes = m.notes.clone();
        report.algorithms = m.algorithms.clone();
    }
    report.findings = p.findings.clone();
    report.memory_growth = crate::memory::growth(&p.retained);
    report.retained_bytes = p.retained.clone();
    report.traces = p.traces.clone();
    match (&p.failure, &p.first, &p.differing) {
        (Some(f), _, _) => report.evidence.failure = Some(f.clone()),
        (None, Some(first), Some((j, other))) => {
            report.diff = explain::explain(first, 0, other, *j);
            let varied = crate::vary::differ::between(
                (&planner.settings(0, false), 0),
                (&planner.settings(*j, false), *j),
            );
            report.divergence = source
                .localize(first, other, *j, &p.metas, planner)
                .map(|d| d.under(varied));
            if opts.blame && !opts.vary.is_empty() {
                report.blame = Some(blame::blame(source, planner, &p));
            }
        }
        _ => {}
    }
    // After the explanation, which may load outputs: the two never hold memory at once.
    if let Some(first) = &p.first {
        report.digests = first
            .digests
            .iter()
            .map(|(k, d)| (k.clone(), d.hex()))
            .collect();
    }
    source.describe(&mut report, &p.metas, p.first.as_ref(), planner);
    report.seconds = t0.elapsed().as_secs_f64();
    report
}

/// Assesses `case` on `backend` under `opts`; fresh-process runs go through `children`.
/// The seed variation applies only to cases that declare their outputs seed-independent.
pub fn assess_case_with(
    case: &dyn Case,
    backend: Backend,
    controls: &Controls,
    opts: &Options,
    children: Option<&dyn ChildRunner>,
) -> CaseReport {
    gather_case(case, backend, controls, opts, children, &mut |_| {}).judge()
}

/// The evidence about `case` on `backend` ([`gather`]), not yet judged, telling `progress` of
/// every run before it is made. The seed variation applies only to cases that declare their
/// outputs seed-independent.
pub fn gather_case(
    case: &dyn Case,
    backend: Backend,
    controls: &Controls,
    opts: &Options,
    children: Option<&dyn ChildRunner>,
    progress: &mut dyn FnMut(RunStart),
) -> CaseReport {
    let per_case;
    let opts = if !case.seed_independent() && opts.vary.contains(&Variation::Seed) {
        per_case = Options {
            vary: opts
                .vary
                .iter()
                .copied()
                .filter(|v| *v != Variation::Seed)
                .collect(),
            ..opts.clone()
        };
        &per_case
    } else {
        opts
    };
    let source = CaseSource {
        case,
        backend,
        children,
    };
    gather(&source, controls, opts, progress)
}

/// Assesses `case` on `backend` with `runs` runs (at least 2) under `controls`.
pub fn assess_case(
    case: &dyn Case,
    backend: Backend,
    controls: &Controls,
    runs: usize,
) -> CaseReport {
    assess_case_with(case, backend, controls, &Options::runs(runs), None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Backend;
    use crate::case::{Case, Ctx, Outputs};
    use crate::controls::Controls;
    use crate::outcome::Verdict;
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
        let r = assess_case(&case, Backend::Cpu, &Controls::default(), 2);
        assert_eq!(r.verdict(), Verdict::Nondeterministic);
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
        let same = assess_case(&Counter(AtomicUsize::new(0), false), Backend::Cpu, &c, 3);
        assert_eq!(
            (same.verdict(), same.runs, same.distinct_digests),
            (Verdict::Deterministic, 3, 1)
        );
        let diff = assess_case(&Counter(AtomicUsize::new(0), true), Backend::Cpu, &c, 4);
        assert_eq!(
            (diff.verdict(), diff.distinct_digests),
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
        let r = assess_case(&Finds, Backend::Cpu, &Controls::default(), 3);
        assert_eq!(r.verdict(), Verdict::Error);
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
        let r = assess_case(&Panics, Backend::Cpu, &Controls::default(), 2);
        assert_eq!(r.verdict(), Verdict::Error);
        assert!(r.message.unwrap().contains("boom"));
    }
}
