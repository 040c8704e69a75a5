//! The executor: runs a case K times (in this process or in fresh children), digests every
//! output, and gathers the evidence [`super::outcome::judge`] needs. On a difference it asks
//! [`super::diagnose`] to explain, localize and blame.

use super::diagnose;
use super::outcome::CaseReport;
use super::Options;
use crate::backend::Backend;
use crate::case::{Case, Ctx, Outputs};
use crate::controls::Controls;
use crate::digest::{self, Digest};
use crate::isolate;
use crate::memory;
use crate::trace::{first_divergence, TraceEntry};
use crate::vary::{RunSettings, Variation};
use anyhow::{anyhow, bail, Result};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

/// What one run produced.
pub struct RunResult {
    /// Named outputs.
    pub outputs: Outputs,
    /// Implementation chosen per op.
    pub algorithms: BTreeMap<String, String>,
    /// Op trace, when recorded.
    pub trace: Option<Vec<TraceEntry>>,
    /// Op calls the case recorded (whether or not tracing was on): 0 means a traced re-run
    /// could not localize anything.
    pub recorded_ops: usize,
    /// Wall time of `Case::run`.
    pub seconds: f64,
    /// Peak heap bytes of the run above the live bytes at its start (`None`: unknown).
    pub peak_bytes: Option<u64>,
    /// Defects the case reported through [`Ctx::findings`].
    pub findings: Vec<String>,
    /// Figures the case reported through [`Ctx::notes`].
    pub notes: Vec<String>,
}

/// One completed run: outputs, their digests, the run digest.
pub(super) struct Run {
    pub outputs: Outputs,
    pub digests: BTreeMap<String, Digest>,
    pub run_digest: Digest,
    pub trace: Option<Vec<TraceEntry>>,
}

/// Findings of all runs, one entry per kind (the text before the first `": "`): the first
/// message of each kind and how many runs reported it, so a defect whose numbers change from
/// run to run is one line, not one per run.
#[derive(Default)]
pub struct Findings(Vec<(String, String, BTreeSet<usize>)>);

impl Findings {
    fn kind(msg: &str) -> &str {
        msg.split(": ").next().unwrap_or(msg)
    }

    /// Records `msg`, reported by the run with index `run`.
    pub fn add_in(&mut self, run: usize, msg: String) {
        let kind = Findings::kind(&msg).to_string();
        match self.0.iter_mut().find(|(k, _, _)| *k == kind) {
            Some((_, _, runs)) => {
                runs.insert(run);
            }
            None => self.0.push((kind, msg, BTreeSet::from([run]))),
        }
    }

    /// One line per kind; `(reported in N of K runs; first shown)` when several runs did.
    pub fn lines(self, runs: usize) -> Vec<String> {
        self.0
            .into_iter()
            .map(|(_, msg, r)| match r.len() {
                1 => msg,
                n => format!("{msg} (reported in {n} of {runs} runs; first shown)"),
            })
            .collect()
    }
}

/// Runs `case` once in `ctx`, turning a panic into an error carrying its message.
pub fn run_once(case: &dyn Case, ctx: &mut Ctx) -> Result<Outputs> {
    match catch_unwind(AssertUnwindSafe(|| case.run(ctx))) {
        Ok(r) => r,
        Err(payload) => Err(anyhow!("panicked: {}", panic_message(payload.as_ref()))),
    }
}

/// The text of a panic payload.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_string())
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

/// Runs `case` once in this process under `settings`.
pub fn run_in_process(
    case: &dyn Case,
    backend: Backend,
    settings: &RunSettings,
) -> Result<RunResult> {
    let pool = pool(settings.controls.threads)?;
    let mut ctx = Ctx::new(backend, settings.controls.clone());
    ctx.knobs = settings.knobs.clone();
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
        recorded_ops: ctx.recorded_ops,
        seconds,
        peak_bytes,
        findings: ctx.findings,
        notes: ctx.notes,
    })
}

/// Runs once under `settings`, in a fresh child process when the settings ask for one.
pub(super) fn run_with(
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
        None => {
            bail!("the process variation needs a way to start child processes (Options::children)")
        }
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
    // The seed variation applies only to cases that declare their outputs seed-independent.
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
    let mut report = CaseReport::new(&case.name(), backend);
    report.variations = opts.vary.clone();
    report.evidence.planted = case.planted_bug().map(str::to_string);
    if let Some(reason) = skip_reason(case, backend, opts) {
        report.evidence.skipped = Some(reason);
        return report.judge();
    }
    if let Some(cfg) = opts.isolate.as_ref().filter(|_| !opts.isolated) {
        return isolate::check(cfg, report, controls, opts).judge();
    }
    let t0 = Instant::now();
    let mut first: Option<Run> = None;
    let mut differing: Option<(usize, Run)> = None;
    let mut distinct = BTreeSet::new();
    let mut recorded_ops = 0;
    let mut findings = Findings::default();
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
            Ok(o) => {
                if report.notes.is_empty() {
                    report.notes = o.notes.clone();
                }
                o
            }
            Err(e) => {
                report.seconds = t0.elapsed().as_secs_f64();
                report.evidence.error = Some(format!("run {i}: {e:#}"));
                return report.judge();
            }
        };
        recorded_ops = recorded_ops.max(out.recorded_ops);
        report.run_seconds.push(out.seconds);
        report.peak_bytes.extend(out.peak_bytes);
        for f in out.findings {
            findings.add_in(i, f);
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
    report.findings = findings.lines(report.runs);
    report.memory_growth = memory::growth(&report.retained_bytes);
    report.seconds = t0.elapsed().as_secs_f64();
    report.distinct_digests = distinct.len();
    if let (Some(first), Some((i, other))) = (&first, &differing) {
        report.diff = diagnose::explain_runs(first, 0, other, *i);
        report.divergence = match (&first.trace, &other.trace) {
            (Some(a), Some(b)) => first_divergence(a, b),
            // Localization re-runs only cases that record op traces: others cost nothing.
            _ if opts.localize && recorded_ops > 0 => {
                diagnose::localize(case, backend, controls, opts, *i)
            }
            _ => None,
        };
        if opts.blame && !opts.vary.is_empty() {
            report.blame = Some(diagnose::blame(case, backend, controls, opts));
        }
    }
    report.judge()
}
