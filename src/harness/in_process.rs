//! Cases as a [`RunSource`]: a [`Case`] run in this process (its own rayon pool, a fresh
//! [`Ctx`], panics caught, heap measured), or, per run when the settings ask for a fresh
//! process (`--vary process`), in a child started by a [`ChildRunner`] the caller supplies.

use super::source::{Collected, RunMeta, RunSource, RunStart, Runs, Started};
use super::Options;
use crate::backend::Backend;
use crate::case::{Case, Ctx};
use crate::memory;
use crate::outcome::{Failure, FailureKind};
use crate::outputs::Outputs;
use crate::trace::{first_divergence, Divergence, TraceEntry};
use crate::vary::{RunSettings, Variation};
use anyhow::{anyhow, Result};
use std::collections::{BTreeMap, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

/// One run of a case: its outputs and what the run recorded.
pub struct CaseRun {
    /// Named outputs.
    pub outputs: Outputs,
    /// Implementation chosen per op.
    pub algorithms: BTreeMap<String, String>,
    /// Op trace, when recorded.
    pub trace: Option<Vec<TraceEntry>>,
    /// Op calls the case recorded (whether or not tracing was on).
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

/// Runs one run of a case in a fresh child process (implemented by `crate::isolate`).
pub trait ChildRunner: Sync {
    /// Runs `case` once on `backend` under `settings` in a child.
    fn run_in_child(
        &self,
        case: &str,
        backend: Backend,
        settings: &RunSettings,
    ) -> Result<CaseRun, Failure>;
}

/// Calls `case.run(ctx)`, turning a panic into an error carrying its message.
pub fn call_case(case: &dyn Case, ctx: &mut Ctx) -> Result<Outputs> {
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
) -> Result<CaseRun> {
    let pool = pool(settings.controls.threads)?;
    let mut ctx = Ctx::new(backend, settings.controls.clone());
    ctx.knobs = settings.knobs.clone();
    ctx.trace = settings.trace.then(Vec::new);
    let before = memory::current();
    memory::reset_peak();
    let t = Instant::now();
    let outputs = pool.install(|| call_case(case, &mut ctx))?;
    let seconds = t.elapsed().as_secs_f64();
    let peak_bytes = before.zip(memory::peak()).map(|(b, p)| p.saturating_sub(b));
    Ok(CaseRun {
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

/// A case on one backend, as a source of runs.
pub struct CaseSource<'a> {
    /// The case.
    pub case: &'a dyn Case,
    /// The backend.
    pub backend: Backend,
    /// Starts fresh-process runs (`--vary process`), when the caller can.
    pub children: Option<&'a dyn ChildRunner>,
}

impl CaseSource<'_> {
    /// One run under `settings`, in a fresh child process when the settings ask for one.
    pub fn run(&self, settings: &RunSettings) -> Result<CaseRun, Failure> {
        if !settings.fresh_process {
            return run_in_process(self.case, self.backend, settings)
                .map_err(|e| Failure::from_error(FailureKind::Error, &e));
        }
        match self.children {
            Some(c) => c.run_in_child(&self.case.name(), self.backend, settings),
            None => Err(Failure::new(
                FailureKind::Harness,
                "the process variation needs a way to start child processes (Options::children)",
            )),
        }
    }
}

impl RunSource for CaseSource<'_> {
    fn name(&self) -> String {
        self.case.name()
    }

    fn backend(&self) -> Backend {
        self.backend
    }

    fn skip_reason(&self, opts: &Options) -> Option<String> {
        let (case, backend) = (self.case, self.backend);
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
            return Some(
                "brings its process down on purpose: runs only with --isolate".to_string(),
            );
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

    fn planted(&self) -> Option<String> {
        self.case.planted_bug().map(str::to_string)
    }

    fn in_process(&self) -> bool {
        true
    }

    fn start(&self, _index: usize, settings: &RunSettings) -> Started {
        match self.run(settings) {
            Ok(r) => {
                let meta = RunMeta {
                    seconds: r.seconds,
                    peak_bytes: r.peak_bytes,
                    algorithms: r.algorithms,
                    recorded_ops: r.recorded_ops,
                    findings: r.findings,
                    notes: r.notes,
                    program: None,
                };
                Started::ready(meta, Collected::of_outputs(r.outputs, r.trace))
            }
            Err(f) => Started::failed(RunMeta::default(), f),
        }
    }

    fn localize(
        &self,
        first: &Collected,
        other: &Collected,
        j: usize,
        metas: &[RunMeta],
        planner: &mut dyn Runs,
    ) -> Option<Divergence> {
        if let (Some(a), Some(b)) = (&first.trace, &other.trace) {
            return crate::trace::first_divergence(a, b);
        }
        // Only cases that record op traces can be localized: others cost nothing more.
        if !planner.opts().localize || metas.iter().all(|m| m.recorded_ops == 0) {
            return None;
        }
        self.localize_by_reruns(planner, j)
    }
}

/// Traced re-runs `CaseSource::localize_by_reruns` may spend to catch a difference again.
pub const LOCALIZE_RUNS: usize = 16;

impl CaseSource<'_> {
    /// Re-runs the settings of run 0 and run `j` alternately with tracing (up to
    /// [`LOCALIZE_RUNS`] runs), comparing each new trace with every earlier one of the other
    /// settings (or any earlier one when both settings are the same, i.e. no variation), and
    /// names the first diverging op of the first differing pair. A race that shows rarely gets
    /// many pairs out of few runs this way.
    fn localize_by_reruns(&self, planner: &mut dyn Runs, j: usize) -> Option<Divergence> {
        let settings = [planner.settings(0, true), planner.settings(j, true)];
        if settings[0].knobs.batch_split != settings[1].knobs.batch_split {
            return None; // different batchings make different op calls: traces do not line up
        }
        let same = settings[0] == settings[1];
        let mut traces: Vec<(usize, Vec<TraceEntry>)> = Vec::new();
        for i in 0..LOCALIZE_RUNS {
            let side = i % 2;
            let told = RunStart {
                purpose: "localize: traced re-run",
                index: i,
                of: LOCALIZE_RUNS,
            };
            let t = planner
                .one(self, &settings[side], [0, j][side], told)
                .ok()?
                .trace?;
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
}
