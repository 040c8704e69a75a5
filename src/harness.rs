//! The harness: runs each case K times under the same controls, digests every output, compares
//! the runs bit for bit, and gives a verdict with an explanation of any difference.

use crate::backend::Backend;
use crate::case::{Case, Ctx, Outputs};
use crate::controls::Controls;
use crate::diff::{self, TensorDiff};
use crate::digest::{self, Digest};
use anyhow::{anyhow, Result};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

/// Outcome of a case on one backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Every run gave bit-identical outputs.
    Deterministic,
    /// Runs differed.
    Nondeterministic,
    /// Runs agreed but differ from the committed snapshot.
    SnapshotMismatch,
    /// The case failed (error or panic) in some run.
    Error,
    /// The case could not run here (e.g. no CUDA driver).
    Skipped,
    /// A planted bug whose difference the harness found, as it should.
    Caught,
    /// A planted bug the harness did not find.
    Missed,
}

impl Verdict {
    /// Name as printed (`deterministic`, `snapshot-mismatch`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Deterministic => "deterministic",
            Verdict::Nondeterministic => "nondeterministic",
            Verdict::SnapshotMismatch => "snapshot-mismatch",
            Verdict::Error => "error",
            Verdict::Skipped => "skipped",
            Verdict::Caught => "caught",
            Verdict::Missed => "missed",
        }
    }

    /// Whether this verdict makes the report fail (exit 1).
    pub fn is_failure(self) -> bool {
        matches!(
            self,
            Verdict::Nondeterministic
                | Verdict::SnapshotMismatch
                | Verdict::Error
                | Verdict::Missed
        )
    }
}

/// The result of running one case on one backend K times.
#[derive(Clone, Debug, Serialize)]
pub struct CaseReport {
    /// Case name.
    pub name: String,
    /// Backend it ran on.
    pub backend: Backend,
    /// Verdict.
    pub verdict: Verdict,
    /// Runs completed.
    pub runs: usize,
    /// Distinct run digests among the completed runs.
    pub distinct_digests: usize,
    /// Run digest of each completed run (hex).
    pub run_digests: Vec<String>,
    /// Tensor digests of the first run (hex), by output name.
    pub digests: BTreeMap<String, String>,
    /// How the first differing run differs from run 0, per differing tensor.
    pub diff: Vec<TensorDiff>,
    /// Implementation chosen per op (first run).
    pub algorithms: BTreeMap<String, String>,
    /// Wall time of all runs, digests included.
    pub seconds: f64,
    /// Wall time of each run's `Case::run`.
    pub run_seconds: Vec<f64>,
    /// Error, skip reason, planted-bug description or snapshot explanation.
    pub message: Option<String>,
}

/// One completed run: outputs, their digests, the run digest.
struct Run {
    outputs: Outputs,
    digests: BTreeMap<String, Digest>,
    run_digest: Digest,
}

/// Runs `case` once in `ctx`, turning a panic into an error carrying its message.
pub fn run_once(case: &dyn Case, ctx: &mut Ctx) -> Result<Outputs> {
    match catch_unwind(AssertUnwindSafe(|| case.run(ctx))) {
        Ok(r) => r,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic payload".to_string());
            Err(anyhow!("panicked: {msg}"))
        }
    }
}

/// The rayon pool of `threads` threads every case runs in (built once per size, then reused).
pub fn pool(threads: usize) -> Result<Arc<rayon::ThreadPool>> {
    static POOLS: OnceLock<Mutex<HashMap<usize, Arc<rayon::ThreadPool>>>> = OnceLock::new();
    let mut pools = POOLS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(p) = pools.get(&threads) {
        return Ok(p.clone());
    }
    let p = rayon::ThreadPoolBuilder::new()
        .num_threads(threads.max(1))
        .thread_name(|i| format!("bitexact-{i}"))
        .build()
        .map_err(|e| anyhow!("cannot start a pool of {threads} threads: {e}"))?;
    Ok(pools.entry(threads).or_insert(Arc::new(p)).clone())
}

/// Runs `case` on `backend` `runs` times (at least 2) under `controls` and judges the result.
pub fn check_case(
    case: &dyn Case,
    backend: Backend,
    controls: &Controls,
    runs: usize,
) -> CaseReport {
    let mut report = CaseReport {
        name: case.name(),
        backend,
        verdict: Verdict::Skipped,
        runs: 0,
        distinct_digests: 0,
        run_digests: Vec::new(),
        digests: BTreeMap::new(),
        diff: Vec::new(),
        algorithms: BTreeMap::new(),
        seconds: 0.0,
        run_seconds: Vec::new(),
        message: None,
    };
    if !case.backends().contains(&backend) {
        report.message = Some(format!("case does not support {backend}"));
        return report;
    }
    if let Some(reason) = backend.unavailable_reason() {
        report.message = Some(reason);
        return report;
    }
    let pool = match pool(controls.threads) {
        Ok(p) => p,
        Err(e) => return errored(report, e.to_string()),
    };
    let t0 = Instant::now();
    let mut first: Option<Run> = None;
    let mut differing: Option<(usize, Run)> = None;
    let mut distinct = BTreeSet::new();
    for i in 0..runs.max(2) {
        let mut ctx = Ctx::new(backend, controls.clone());
        ctx.run_index = i;
        let t = Instant::now();
        let out = pool.install(|| run_once(case, &mut ctx));
        report.run_seconds.push(t.elapsed().as_secs_f64());
        let outputs = match out {
            Ok(o) => o,
            Err(e) => {
                report.seconds = t0.elapsed().as_secs_f64();
                return errored(report, format!("run {i}: {e:#}"));
            }
        };
        let digests = pool.install(|| digest::digest_all(&outputs));
        let run = Run {
            run_digest: digest::run_digest(&digests),
            digests,
            outputs,
        };
        report.runs += 1;
        report.run_digests.push(run.run_digest.hex());
        distinct.insert(run.run_digest);
        match &first {
            None => {
                report.algorithms = ctx.algorithms;
                report.digests = run
                    .digests
                    .iter()
                    .map(|(k, d)| (k.clone(), d.hex()))
                    .collect();
                first = Some(run);
            }
            Some(f) if differing.is_none() && f.run_digest != run.run_digest => {
                differing = Some((i, run))
            }
            _ => {}
        }
    }
    report.seconds = t0.elapsed().as_secs_f64();
    report.distinct_digests = distinct.len();
    let first = first.expect("at least one run");
    report.verdict = match &differing {
        None => Verdict::Deterministic,
        Some((i, other)) => {
            report.diff = explain_runs(&first, 0, other, *i);
            Verdict::Nondeterministic
        }
    };
    if let Some(bug) = case.planted_bug() {
        let caught = report.verdict == Verdict::Nondeterministic;
        report.verdict = if caught {
            Verdict::Caught
        } else {
            Verdict::Missed
        };
        report.message = Some(if caught {
            format!("planted bug caught: {bug}")
        } else {
            format!("planted bug NOT caught over {} runs: {bug}", report.runs)
        });
    }
    report
}

fn errored(mut report: CaseReport, message: String) -> CaseReport {
    report.verdict = Verdict::Error;
    report.message = Some(message);
    report
}

/// Explains, tensor by tensor, how run `j` differs from run `i`.
fn explain_runs(a: &Run, i: usize, b: &Run, j: usize) -> Vec<TensorDiff> {
    let names: BTreeSet<&String> = a.digests.keys().chain(b.digests.keys()).collect();
    names
        .into_iter()
        .filter_map(|n| match (a.outputs.get(n), b.outputs.get(n)) {
            (Some(x), Some(y)) if a.digests[n] != b.digests[n] => {
                Some(diff::explain(n, [i, j], x, y))
            }
            (Some(_), None) => Some(diff::missing(n, [i, j], true)),
            (None, Some(_)) => Some(diff::missing(n, [i, j], false)),
            _ => None,
        })
        .collect()
}

/// Totals per verdict.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Cases judged deterministic (planted bugs caught count here too).
    pub deterministic: usize,
    /// Cases judged nondeterministic, snapshot mismatches, or planted bugs missed.
    pub nondeterministic: usize,
    /// Cases that errored.
    pub errors: usize,
    /// Cases skipped.
    pub skipped: usize,
}

impl Summary {
    /// Counts the verdicts of `reports`.
    pub fn of(reports: &[CaseReport]) -> Summary {
        let mut s = Summary::default();
        for r in reports {
            match r.verdict {
                Verdict::Deterministic | Verdict::Caught => s.deterministic += 1,
                Verdict::Nondeterministic | Verdict::SnapshotMismatch | Verdict::Missed => {
                    s.nondeterministic += 1
                }
                Verdict::Error => s.errors += 1,
                Verdict::Skipped => s.skipped += 1,
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::Tensor;
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

    #[test]
    fn panics_become_errors() {
        let r = check_case(&Panics, Backend::Cpu, &Controls::default(), 2);
        assert_eq!(r.verdict, Verdict::Error);
        assert!(r.message.unwrap().contains("boom"));
    }
}
