//! The pipeline every entry point calls: select → gather each subject's evidence (K runs,
//! variations, blame, localization, isolation, traces; [`crate::harness::gather`], every run
//! made by a `Planner`) → order pass → snapshots → the other device → the judge, once →
//! `Finished` → cost of determinism → [`Report`]. Subjects are cases (built-in
//! or a user's) and external programs (`bitexact run`): both go through this one path and get
//! the same events, snapshots and reports. The CLI only turns flags into a [`SuiteConfig`],
//! calls [`crate::suite::run`] and renders the report; `bitexact::check` and the integration tests call it
//! directly.
//!
//! Progress goes out as [`Event`]s (as nextest's runner does); rendering is elsewhere
//! ([`crate::report`]).

use crate::backend::Backend;
use crate::case::Case;
use crate::controls::Controls;
use crate::harness::{self, order, ChildRunner, Options, Planner, RunStart};
use crate::isolate;
use crate::outcome::CrossDevice;
use crate::outcome::{CaseReport, Report};
use crate::platform::Platform;
use crate::program::{Program, ProgramSource};
use crate::snapshot;
use crate::vary::Variation;
use anyhow::Result;
use std::path::PathBuf;

/// What the suite checks.
#[derive(Clone, Copy)]
#[non_exhaustive]
pub enum Subject<'a> {
    /// A case (built-in or a user's), on every configured backend it supports.
    Case(&'a dyn Case),
    /// An external program (`bitexact run`), on the CPU.
    Program(&'a Program),
}

impl<'a> Subject<'a> {
    /// Every case as a subject.
    pub fn cases(cases: &[&'a dyn Case]) -> Vec<Subject<'a>> {
        cases.iter().map(|c| Subject::Case(*c)).collect()
    }

    /// The name reports use.
    pub fn name(&self) -> String {
        match self {
            Subject::Case(c) => c.name(),
            Subject::Program(p) => p.name.clone(),
        }
    }

    /// The case, when it is one.
    pub fn case(&self) -> Option<&'a dyn Case> {
        match self {
            Subject::Case(c) => Some(*c),
            Subject::Program(_) => None,
        }
    }

    /// Whether it runs on `backend`.
    pub fn runs_on(&self, backend: Backend) -> bool {
        match self {
            Subject::Case(c) => c.backends().contains(&backend),
            Subject::Program(_) => backend == Backend::Cpu,
        }
    }
}

/// What to run and how: the validated settings of one suite run.
#[derive(Clone, Debug)]
pub struct SuiteConfig {
    /// Backends to run on, in order.
    pub backends: Vec<Backend>,
    /// Controls every case runs under.
    pub controls: Controls,
    /// Runs, variations, tracing, isolation and child processes.
    pub options: Options,
    /// Compare every deterministic case with its committed snapshot under this directory.
    pub snapshots: Option<PathBuf>,
    /// Compare CPU and CUDA results of every case that ran on both.
    pub cross_device: bool,
    /// Measure the cost of determinism per op (only when the deterministic switch is off).
    pub cost_of_determinism: bool,
}

impl SuiteConfig {
    /// `runs` runs on `backends` under `controls`; no variations, snapshots or extras.
    pub fn new(backends: Vec<Backend>, controls: Controls, runs: usize) -> SuiteConfig {
        SuiteConfig {
            backends,
            controls,
            options: Options::runs(runs),
            snapshots: None,
            cross_device: false,
            cost_of_determinism: false,
        }
    }
}

/// Progress of a suite run.
#[derive(Debug)]
#[non_exhaustive]
pub enum Event<'a> {
    /// A subject is about to run on a backend.
    Started {
        /// Case name.
        name: &'a str,
        /// Backend.
        backend: Backend,
    },
    /// A run of the current subject is about to be made: the main pass's, or one that blame
    /// adds (so a progress display shows every run that happens, and why).
    Run {
        /// Case name.
        name: &'a str,
        /// The run.
        run: RunStart<'a>,
    },
    /// A subject finished: its report, with its final verdict.
    Finished(&'a CaseReport),
}

/// Backends to use when none is asked for: the CPU, plus CUDA when a driver is present.
pub fn default_backends() -> Vec<Backend> {
    if Backend::Cuda.unavailable_reason().is_none() {
        vec![Backend::Cpu, Backend::Cuda]
    } else {
        vec![Backend::Cpu]
    }
}

/// The evidence about one case on one backend: from a child process with `--isolate`, else
/// gathered here (with fresh-process runs through the isolate protocol when children can be
/// started).
fn gather_in_child_or_here(
    case: &dyn Case,
    backend: Backend,
    controls: &Controls,
    opts: &Options,
    progress: &mut dyn FnMut(RunStart),
) -> CaseReport {
    let children = opts.children.as_ref().map(isolate::Children);
    let children = children.as_ref().map(|c| c as &dyn ChildRunner);
    let source = harness::CaseSource {
        case,
        backend,
        children,
    };
    match &opts.isolate {
        Some(cfg) if !opts.isolated && harness::RunSource::skip_reason(&source, opts).is_none() => {
            isolate::assess_in_child(cfg, case, backend, controls, opts)
        }
        _ => harness::gather_case(case, backend, controls, opts, children, progress),
    }
}

/// Runs `subjects` under `config` and returns the report; `on_event` sees progress.
///
/// A verdict is final when its `Finished` event is emitted: everything that can change it
/// (the snapshot comparison, the other device, the order pass) happens before, and the judge
/// is called once. The order pass must see every case run first, so under `--vary order`
/// every subject finishes after it.
pub fn run(
    subjects: &[Subject],
    config: &SuiteConfig,
    on_event: &mut dyn FnMut(Event),
) -> Result<Report> {
    let opts = &config.options;
    let controls = &config.controls;
    let deferred = opts.vary.contains(&Variation::Order);
    let mut waiting: Vec<(Subject, CaseReport)> = Vec::new();
    let mut finished = Finished {
        config,
        platform: Platform::detect(),
        done: Vec::new(),
        cross_device: Vec::new(),
    };
    for &backend in &config.backends {
        for subject in subjects.iter().filter(|s| s.runs_on(backend)) {
            let name = subject.name();
            on_event(Event::Started {
                name: &name,
                backend,
            });
            let mut progress = |run: RunStart| on_event(Event::Run { name: &name, run });
            let r = match subject {
                Subject::Case(case) => {
                    gather_in_child_or_here(*case, backend, controls, opts, &mut progress)
                }
                Subject::Program(p) => {
                    let source = ProgramSource::new(p)?;
                    harness::gather(&source, controls, opts, &mut progress)
                }
            };
            if deferred {
                waiting.push((*subject, r));
                continue;
            }
            finished.finish(*subject, r, on_event);
        }
    }
    for (subject, r) in waiting.iter_mut().rev() {
        if let Subject::Case(case) = subject {
            let name = case.name();
            let mut progress = |run: RunStart| on_event(Event::Run { name: &name, run });
            let mut planner = Planner::new(controls, opts, &mut progress);
            order::order_check(*case, r, &mut planner);
            r.passes.extend(planner.into_made());
        }
    }
    for (subject, r) in waiting {
        finished.finish(subject, r, on_event);
    }
    let mut cost = Vec::new();
    if config.cost_of_determinism && !controls.deterministic {
        let cases: Vec<&dyn Case> = subjects.iter().filter_map(Subject::case).collect();
        for &backend in &config.backends {
            if backend.unavailable_reason().is_none() {
                cost.extend(crate::cost::cost_of_determinism(
                    &cases, backend, controls, 3,
                )?);
            }
        }
    }
    let mut report = Report::new(controls.clone(), opts.runs, finished.done, cost);
    report.variations = opts.vary.clone();
    report.backends = config.backends.clone();
    report.cross_device = finished.cross_device;
    Ok(report)
}

/// The reports whose verdict is final, in the order they finished.
struct Finished<'c> {
    config: &'c SuiteConfig,
    platform: Platform,
    done: Vec<CaseReport>,
    cross_device: Vec<CrossDevice>,
}

impl Finished<'_> {
    /// Adds what only the suite knows to `r`'s evidence ([`settle`]), judges it, once, and
    /// tells `on_event` it finished.
    fn finish(&mut self, subject: Subject, r: CaseReport, on_event: &mut dyn FnMut(Event)) {
        let r = settle(subject, r, self, on_event);
        on_event(Event::Finished(&r));
        self.done.push(r);
    }
}

/// Adds what only the suite knows to `r`'s evidence, then judges it, once: its committed
/// snapshot, and for a case's CUDA report under `--backend all`, how it compares with the
/// case's CPU report (among those `finished`).
fn settle(
    subject: Subject,
    mut r: CaseReport,
    finished: &mut Finished,
    on_event: &mut dyn FnMut(Event),
) -> CaseReport {
    let config = finished.config;
    if let Some(dir) = &config.snapshots {
        snapshot::policy::check(dir, &mut r, &config.controls, &finished.platform);
    }
    let cpu = finished
        .done
        .iter()
        .find(|c| c.name == r.name && c.backend == Backend::Cpu);
    if let (Subject::Case(case), Some(cpu), true, Backend::Cuda) =
        (subject, cpu, config.cross_device, r.backend)
    {
        let name = r.name.clone();
        let mut progress = |run: RunStart| on_event(Event::Run { name: &name, run });
        let mut planner = Planner::new(&config.controls, &config.options, &mut progress);
        let c = crate::cross::compare(case, cpu, &r, &mut planner);
        r.passes.extend(planner.into_made());
        r.evidence.cross_device = crate::cross::mismatch_evidence(&c);
        finished.cross_device.push(c);
    }
    r.judge()
}
