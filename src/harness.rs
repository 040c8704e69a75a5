//! The harness: runs each case K times under the same controls, digests every output, compares
//! the runs bit for bit, and gives a verdict with an explanation of any difference.

use crate::backend::Backend;
use crate::case::{Case, Ctx, Outputs};
use crate::controls::Controls;
use crate::diff::{self, TensorDiff};
use crate::digest::{self, Digest};
use crate::isolate::{self, ChildConfig};
use crate::memory;
use crate::trace::{first_divergence, Divergence, TraceEntry};
use crate::vary::{Blame, RunSettings, Variation};
use anyhow::{anyhow, bail, Result};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

/// Outcome of a case on one backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Clone, Debug, Serialize, Deserialize)]
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
    /// Variations applied between the runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub variations: Vec<Variation>,
    /// Which variation breaks the case (when it diverged under variations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blame: Option<Blame>,
    /// The first op whose output differs between two differing runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub divergence: Option<Divergence>,
    /// Op trace of each run (only with `Options::trace`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub traces: Vec<Vec<TraceEntry>>,
    /// Peak heap bytes of each run above the live bytes at its start (empty when unknown: the
    /// counting allocator of [`crate::memory`] is not installed).
    #[serde(default)]
    pub peak_bytes: Vec<u64>,
    /// Heap bytes left live after each run, relative to before the first run (empty when
    /// unknown).
    #[serde(default)]
    pub retained_bytes: Vec<u64>,
    /// Set when the retained bytes grow from run to run (see [`crate::memory::growth`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_growth: Option<String>,
    /// Defects the case found inside its runs (e.g. loader workers sharing one random stream),
    /// deduplicated across runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<String>,
    /// Comparison with the committed snapshot (only when snapshots are checked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
}

/// How the harness checks a case.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Options {
    /// Runs per case (at least 2).
    pub runs: usize,
    /// Conditions varied between runs.
    pub vary: Vec<Variation>,
    /// Record an op trace in every run and keep it in the report.
    pub trace: bool,
    /// On a difference, re-run with tracing to name the first diverging op.
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

/// What one run produced.
pub struct RunResult {
    /// Named outputs.
    pub outputs: Outputs,
    /// Implementation chosen per op.
    pub algorithms: BTreeMap<String, String>,
    /// Op trace, when recorded.
    pub trace: Option<Vec<TraceEntry>>,
    /// Wall time of `Case::run`.
    pub seconds: f64,
    /// Peak heap bytes of the run above the live bytes at its start (`None`: unknown).
    pub peak_bytes: Option<u64>,
    /// Defects the case reported through [`Ctx::findings`].
    pub findings: Vec<String>,
}

/// One completed run: outputs, their digests, the run digest.
struct Run {
    outputs: Outputs,
    digests: BTreeMap<String, Digest>,
    run_digest: Digest,
    trace: Option<Vec<TraceEntry>>,
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

/// A report with nothing run yet (verdict `skipped`).
pub fn empty_report(name: &str, backend: Backend) -> CaseReport {
    CaseReport {
        name: name.to_string(),
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
        variations: Vec::new(),
        blame: None,
        divergence: None,
        traces: Vec::new(),
        peak_bytes: Vec::new(),
        retained_bytes: Vec::new(),
        memory_growth: None,
        findings: Vec::new(),
        snapshot: None,
    }
}

/// Runs `case` once in this process under `settings`.
pub fn run_in_process(
    case: &dyn Case,
    backend: Backend,
    settings: &RunSettings,
) -> Result<RunResult> {
    let pool = pool(settings.controls.threads)?;
    let mut ctx = Ctx::new(backend, settings.controls.clone());
    ctx.poison = settings.poison;
    ctx.batch_split = settings.batch_split;
    ctx.trace = settings.trace.then(Vec::new);
    let before = memory::current();
    memory::reset_peak();
    let t = Instant::now();
    let outputs = pool.install(|| run_once(case, &mut ctx))?;
    let seconds = t.elapsed().as_secs_f64();
    let peak_bytes = before.zip(memory::peak()).map(|(b, p)| p.saturating_sub(b));
    Ok(RunResult {
        outputs,
        algorithms: ctx.algorithms,
        trace: ctx.trace,
        seconds,
        peak_bytes,
        findings: ctx.findings,
    })
}

/// Runs once under `settings`, in a fresh child process when the settings ask for one.
fn run_with(
    case: &dyn Case,
    backend: Backend,
    settings: &RunSettings,
    opts: &Options,
) -> Result<RunResult> {
    if !settings.fresh_process {
        return run_in_process(case, backend, settings);
    }
    match &opts.children {
        Some(cfg) => isolate::run_once(cfg, &case.name(), backend, settings),
        None => bail!(
            "the process variation needs the bitexact binary to start children (Options::children)"
        ),
    }
}

/// Runs `case` on `backend` `runs` times (at least 2) under `controls` and judges the result.
pub fn check_case(
    case: &dyn Case,
    backend: Backend,
    controls: &Controls,
    runs: usize,
) -> CaseReport {
    check_case_with(case, backend, controls, &Options::runs(runs))
}

/// Why `case` cannot run on `backend` with `opts`, if it cannot.
fn skip_reason(case: &dyn Case, backend: Backend, opts: &Options) -> Option<String> {
    if !case.backends().contains(&backend) {
        return Some(format!("case does not support {backend}"));
    }
    if let Some(v) = case.caught_by() {
        if !opts.vary.contains(&v) {
            return Some(format!(
                "planted bug that only the {v} variation can catch (use --vary {v})"
            ));
        }
    }
    if case.needs_isolation() && opts.isolate.is_none() {
        return Some("brings its process down on purpose: runs only with --isolate".to_string());
    }
    if case.needs_memory_counter() && !memory::installed() {
        return Some(
            "needs the counting allocator (bitexact::memory::CountingAlloc) to measure memory"
                .to_string(),
        );
    }
    if case.needs_memory_counter() && opts.vary.contains(&Variation::Process) {
        return Some(
            "memory growth across runs cannot show when every run is a fresh process (--vary process)"
                .to_string(),
        );
    }
    backend.unavailable_reason()
}

/// Runs `case` under `opts` (variations, tracing, isolation) and judges the result.
pub fn check_case_with(
    case: &dyn Case,
    backend: Backend,
    controls: &Controls,
    opts: &Options,
) -> CaseReport {
    let mut report = empty_report(&case.name(), backend);
    report.variations = opts.vary.clone();
    if let Some(reason) = skip_reason(case, backend, opts) {
        report.message = Some(reason);
        return report;
    }
    if let Some(cfg) = opts.isolate.as_ref().filter(|_| !opts.isolated) {
        return isolate::check(cfg, &report.name, backend, controls, opts);
    }
    let t0 = Instant::now();
    let mut first: Option<Run> = None;
    let mut differing: Option<(usize, Run)> = None;
    let mut distinct = BTreeSet::new();
    let base = memory::current();
    let retained = |report: &mut CaseReport| {
        if let Some((b, now)) = base.zip(memory::current()) {
            report.retained_bytes.push(now.saturating_sub(b));
        }
    };
    for i in 0..opts.runs.max(2) {
        if i > 0 {
            retained(&mut report);
        }
        let settings = RunSettings::for_run(controls, &opts.vary, i, opts.trace);
        let out = match run_with(case, backend, &settings, opts) {
            Ok(o) => o,
            Err(e) => {
                report.seconds = t0.elapsed().as_secs_f64();
                return errored(report, format!("run {i}: {e:#}"));
            }
        };
        report.run_seconds.push(out.seconds);
        report.peak_bytes.extend(out.peak_bytes);
        for f in out.findings {
            if !report.findings.contains(&f) {
                report.findings.push(f);
            }
        }
        let digests = digest::digest_all(&out.outputs);
        let run = Run {
            run_digest: digest::run_digest(&digests),
            digests,
            outputs: out.outputs,
            trace: out.trace,
        };
        report.runs += 1;
        report.run_digests.push(run.run_digest.hex());
        distinct.insert(run.run_digest);
        if let Some(t) = &run.trace {
            report.traces.push(t.clone());
        }
        match &first {
            None => {
                report.algorithms = out.algorithms;
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
    retained(&mut report);
    report.memory_growth = memory::growth(&report.retained_bytes);
    report.seconds = t0.elapsed().as_secs_f64();
    report.distinct_digests = distinct.len();
    let first = first.expect("at least one run");
    report.verdict = match &differing {
        None => Verdict::Deterministic,
        Some((i, other)) => {
            report.diff = explain_runs(&first, 0, other, *i);
            report.divergence = match (&first.trace, &other.trace) {
                (Some(a), Some(b)) => first_divergence(a, b),
                _ if opts.localize => localize(case, backend, controls, opts, *i),
                _ => None,
            };
            if opts.blame && !opts.vary.is_empty() {
                report.blame = Some(blame(case, backend, controls, opts));
            }
            Verdict::Nondeterministic
        }
    };
    if let Some(bug) = case.planted_bug() {
        let caught = report.verdict == Verdict::Nondeterministic
            || !report.findings.is_empty()
            || report.memory_growth.is_some();
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
    } else if !report.findings.is_empty() && report.verdict == Verdict::Deterministic {
        report.verdict = Verdict::Error;
        report.message = Some(format!(
            "defect found inside the runs: {}",
            report.findings.join("; ")
        ));
    }
    report
}

/// Re-runs the settings of run 0 and run `j` alternately with tracing (up to
/// [`LOCALIZE_RUNS`] runs), comparing each new trace with every earlier one of the other
/// settings (or any earlier one when both settings are the same, i.e. no variation), and names
/// the first diverging op of the first differing pair. A race that shows rarely gets many
/// pairs out of few runs this way.
fn localize(
    case: &dyn Case,
    backend: Backend,
    controls: &Controls,
    opts: &Options,
    j: usize,
) -> Option<Divergence> {
    let settings = [
        RunSettings::for_run(controls, &opts.vary, 0, true),
        RunSettings::for_run(controls, &opts.vary, j, true),
    ];
    if settings[0].batch_split != settings[1].batch_split {
        return None; // different batchings make different op calls: traces do not line up
    }
    let same = settings[0] == settings[1];
    let mut traces: Vec<(usize, Vec<TraceEntry>)> = Vec::new();
    for i in 0..LOCALIZE_RUNS {
        let side = i % 2;
        let t = run_with(case, backend, &settings[side], opts).ok()?.trace?;
        for (other, earlier) in &traces {
            if same || *other != side {
                if let Some(d) = first_divergence(earlier, &t) {
                    return Some(d);
                }
            }
        }
        traces.push((side, t));
    }
    None
}

/// Traced re-runs [`localize`] may spend to catch a difference again.
const LOCALIZE_RUNS: usize = 16;

/// The control (everything fixed), then each variation alone.
fn blame(case: &dyn Case, backend: Backend, controls: &Controls, opts: &Options) -> Blame {
    let quiet = |vary: Vec<Variation>| Options {
        vary,
        trace: false,
        localize: false,
        blame: false,
        ..opts.clone()
    };
    let diverges = |vary: Vec<Variation>| {
        let r = check_case_with(case, backend, controls, &quiet(vary));
        r.distinct_digests > 1
    };
    if diverges(Vec::new()) {
        return Blame::new(false, Vec::new());
    }
    let broken = opts
        .vary
        .iter()
        .copied()
        .filter(|&v| v != Variation::Order && diverges(vec![v]))
        .collect();
    Blame::new(true, broken)
}

/// Checks every case on every backend (in registry order), calling `on_case` after each;
/// with the `order` variation every case that was deterministic then runs once more, in
/// reverse suite order, and a case whose result changed is marked as order-dependent.
pub fn check_suite(
    cases: &[Box<dyn Case>],
    backends: &[Backend],
    controls: &Controls,
    opts: &Options,
    mut on_case: impl FnMut(&CaseReport),
) -> Vec<CaseReport> {
    let mut reports = Vec::new();
    for &backend in backends {
        for case in cases.iter().filter(|c| c.backends().contains(&backend)) {
            let r = check_case_with(case.as_ref(), backend, controls, opts);
            on_case(&r);
            reports.push(r);
        }
    }
    if opts.vary.contains(&Variation::Order) {
        order_pass(cases, controls, &opts.vary, &mut reports);
    }
    reports
}

/// Runs the cases that ran once more, in reverse order, in this process under the settings of
/// their first run, and marks those whose outputs now differ from that first run.
fn order_pass(
    cases: &[Box<dyn Case>],
    controls: &Controls,
    vary: &[Variation],
    reports: &mut [CaseReport],
) {
    let mut settings = RunSettings::for_run(controls, vary, 0, false);
    settings.fresh_process = false;
    for r in reports.iter_mut().rev() {
        if r.verdict != Verdict::Deterministic && r.verdict != Verdict::Missed {
            continue;
        }
        let Some(case) = cases.iter().find(|c| c.name() == r.name) else {
            continue;
        };
        let Ok(out) = run_in_process(case.as_ref(), r.backend, &settings) else {
            continue;
        };
        let now: BTreeMap<String, String> = digest::digest_all(&out.outputs)
            .into_iter()
            .map(|(k, d)| (k, d.hex()))
            .collect();
        if now == r.digests {
            continue;
        }
        let names: BTreeSet<&String> = now.keys().chain(r.digests.keys()).collect();
        let differing: Vec<&str> = names
            .into_iter()
            .filter(|n| now.get(*n) != r.digests.get(*n))
            .map(|n| n.as_str())
            .collect();
        r.blame = Some(Blame::new(true, vec![Variation::Order]));
        let planted = case.planted_bug();
        r.verdict = if planted.is_some() {
            Verdict::Caught
        } else {
            Verdict::Nondeterministic
        };
        r.message = Some(format!(
            "result depends on case order: {} differ(s) when the suite runs again in reverse order{}",
            differing.join(", "),
            planted.map(|b| format!(" (planted bug caught: {b})")).unwrap_or_default()
        ));
    }
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
    /// Cases judged deterministic.
    pub deterministic: usize,
    /// Planted bugs the harness caught, as it should.
    pub caught: usize,
    /// Cases judged nondeterministic, or planted bugs missed.
    pub nondeterministic: usize,
    /// Cases whose runs agreed but differ from their committed snapshot.
    pub snapshot_mismatches: usize,
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
                Verdict::Deterministic => s.deterministic += 1,
                Verdict::Caught => s.caught += 1,
                Verdict::Nondeterministic | Verdict::Missed => s.nondeterministic += 1,
                Verdict::SnapshotMismatch => s.snapshot_mismatches += 1,
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
            vec!["workers 0 and 1 share one stream".to_string()]
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
