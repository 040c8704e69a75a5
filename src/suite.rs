//! The pipeline every entry point calls: select → assess each subject (K runs, variations,
//! blame, localization, isolation, traces; [`crate::harness::assess`]) → order pass →
//! snapshots → cost of determinism → cross-device → [`Report`]. Subjects are cases (built-in
//! or a user's) and external programs (`bitexact run`): both go through this one path and get
//! the same events, snapshots and reports. The CLI only turns flags into a [`SuiteConfig`],
//! calls [`run`] and renders the report; `bitexact::check` and the integration tests call it
//! directly.
//!
//! Progress goes out as [`Event`]s (as nextest's runner does); rendering is elsewhere
//! ([`crate::report`]).

use crate::backend::Backend;
use crate::case::Case;
use crate::controls::Controls;
use crate::cost::CostRow;
use crate::cross::CrossVerdict;
use crate::harness::Summary;
use crate::harness::{
    self, diagnose, CaseReport, ChildRunner, Options, RunStart, SnapshotStatus, Verdict,
};
use crate::isolate;
use crate::platform::Platform;
use crate::run::{Program, ProgramSource};
use crate::snapshot::{self, Comparison};
use crate::trace::{CaseTraces, TraceFile};
use crate::vary::Variation;
use anyhow::Result;
use serde::Serialize;
use std::path::{Path, PathBuf};

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
    /// A subject finished (its report may still change in the order pass or snapshot check).
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

/// Assesses one case on one backend: in a child process with `--isolate`, else here (with
/// fresh-process runs through the isolate protocol when children can be started).
fn assess_case(
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
        _ => harness::assess_case_with_progress(case, backend, controls, opts, children, progress),
    }
}

/// Runs `subjects` under `config` and returns the report; `on_event` sees progress.
pub fn run(
    subjects: &[Subject],
    config: &SuiteConfig,
    on_event: &mut dyn FnMut(Event),
) -> Result<Report> {
    let opts = &config.options;
    let controls = &config.controls;
    let mut reports = Vec::new();
    for &backend in &config.backends {
        for subject in subjects.iter().filter(|s| s.runs_on(backend)) {
            let r = match subject {
                Subject::Case(case) => {
                    let name = case.name();
                    on_event(Event::Started {
                        name: &name,
                        backend,
                    });
                    let mut progress = |run: RunStart| on_event(Event::Run { name: &name, run });
                    assess_case(*case, backend, controls, opts, &mut progress)
                }
                Subject::Program(p) => {
                    on_event(Event::Started {
                        name: &p.name,
                        backend,
                    });
                    let source = ProgramSource::new(p)?;
                    let mut progress = |run: RunStart| on_event(Event::Run { name: &p.name, run });
                    harness::assess_with_progress(&source, controls, opts, &mut progress)
                }
            };
            on_event(Event::Finished(&r));
            reports.push(r);
        }
    }
    let cases: Vec<&dyn Case> = subjects
        .iter()
        .filter_map(|s| match s {
            Subject::Case(c) => Some(*c),
            Subject::Program(_) => None,
        })
        .collect();
    if opts.vary.contains(&Variation::Order) {
        diagnose::order_pass(&cases, controls, &opts.vary, &mut reports);
    }
    if let Some(dir) = &config.snapshots {
        compare_snapshots(dir, &mut reports, controls);
    }
    let mut cost = Vec::new();
    if config.cost_of_determinism && !controls.deterministic {
        for &backend in &config.backends {
            if backend.unavailable_reason().is_none() {
                cost.extend(crate::cost::cost_of_determinism(
                    &cases, backend, controls, 3,
                )?);
            }
        }
    }
    let cross_device = if config.cross_device {
        crate::cross::compare(&cases, &reports, controls)
    } else {
        Vec::new()
    };
    for c in cross_device
        .iter()
        .filter(|c| c.verdict == CrossVerdict::Mismatch)
    {
        let differing: Vec<&str> = c
            .tensors
            .iter()
            .filter(|t| !t.identical)
            .map(|t| t.tensor.as_str())
            .collect();
        let why = match &c.message {
            Some(m) => m.clone(),
            None => format!("{} differ(s) between cpu and cuda", differing.join(", ")),
        };
        if let Some(r) = reports
            .iter_mut()
            .find(|r| r.name == c.case && r.backend == Backend::Cuda)
        {
            r.evidence.cross_device = Some(why);
            r.rejudge();
        }
    }
    let mut report = Report::new(controls.clone(), opts.runs, reports, cost);
    report.variations = opts.vary.clone();
    report.backends = config.backends.clone();
    report.cross_device = cross_device;
    Ok(report)
}

/// Compares every deterministic report with its committed snapshot under `dir`, records the
/// status and its explanation as evidence, and re-judges the report. A program's missing or
/// changed snapshot is written as a pending `.snap.new` (never in CI); cases' snapshots are
/// written by `bitexact snapshot update`.
pub fn compare_snapshots(dir: &Path, reports: &mut [CaseReport], controls: &Controls) {
    let platform = Platform::detect();
    for r in reports
        .iter_mut()
        .filter(|r| r.verdict() == Verdict::Deterministic)
    {
        let (status, text) = match snapshot::compare(dir, r, controls, &platform) {
            Ok(Comparison::Match) => (SnapshotStatus::Matched, snapshot::MATCHES.to_string()),
            Ok(Comparison::Missing(p)) => (
                SnapshotStatus::Missing,
                match r.program {
                    Some(_) => format!("no committed snapshot at {}", p.display()),
                    None => format!(
                        "no committed snapshot at {} (`bitexact snapshot update` writes it)",
                        p.display()
                    ),
                },
            ),
            Ok(Comparison::Mismatch(e)) => (SnapshotStatus::Mismatch, e),
            Err(e) => (SnapshotStatus::Unreadable, format!("{e:#}")),
        };
        let text = match (status, &r.program) {
            (SnapshotStatus::Missing | SnapshotStatus::Mismatch, Some(_)) => {
                match snapshot::Snapshot::of(r, controls, &platform) {
                    Ok(new) => format!(
                        "{text}; {}",
                        snapshot::write_pending(dir, r, &new, controls)
                    ),
                    Err(_) => text,
                }
            }
            _ => text,
        };
        r.evidence.snapshot = Some(status);
        r.snapshot = Some(text);
        r.rejudge();
    }
}

/// Version of the JSON report format. Fields are only ever added within a version.
pub const REPORT_VERSION: u32 = 1;

/// Everything a report run found.
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct Report {
    /// Report format version.
    pub version: u32,
    /// Controls the cases ran under.
    pub controls: Controls,
    /// Runs per case.
    pub runs: usize,
    /// Variations applied between runs.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub variations: Vec<Variation>,
    /// Backends the suite ran on.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub backends: Vec<Backend>,
    /// Where it ran.
    pub platform: Platform,
    /// One entry per case and backend.
    pub cases: Vec<CaseReport>,
    /// Cost of determinism per op (measured with `--deterministic off`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cost: Vec<CostRow>,
    /// Totals per verdict.
    pub summary: Summary,
    /// CPU-vs-CUDA comparison per case (`--backend all`; see [`crate::cross`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cross_device: Vec<crate::cross::CrossDevice>,
}

impl Report {
    /// Builds a report and its summary.
    pub fn new(
        controls: Controls,
        runs: usize,
        cases: Vec<CaseReport>,
        cost: Vec<CostRow>,
    ) -> Report {
        let summary = Summary::of(&cases);
        Report {
            version: REPORT_VERSION,
            controls,
            runs,
            variations: Vec::new(),
            backends: Vec::new(),
            platform: Platform::detect(),
            cases,
            cost,
            summary,
            cross_device: Vec::new(),
        }
    }

    /// Process exit code: 0 when every case that ran passed (deterministic, a caught planted
    /// bug, skipped), 1 otherwise. Verdicts come from the one judge, which also weighs the
    /// cross-device comparison.
    pub fn exit_code(&self) -> i32 {
        if self.cases.iter().any(|c| c.verdict().is_failure()) {
            1
        } else {
            0
        }
    }

    /// The op traces the report holds (cases traced with `Options::trace`), as a trace file
    /// (`--trace FILE`).
    pub fn traces(&self) -> anyhow::Result<TraceFile> {
        Ok(TraceFile {
            version: 1,
            platform: serde_json::to_value(&self.platform)?,
            cases: self
                .cases
                .iter()
                .filter(|r| !r.traces.is_empty())
                .map(|r| CaseTraces {
                    name: r.name.clone(),
                    backend: r.backend.name().into(),
                    runs: r.traces.clone(),
                })
                .collect(),
        })
    }

    /// Whether nothing ran because every case was skipped (e.g. `--backend cuda` without a
    /// GPU). The exit code is still 0; reports say so in their summary.
    pub fn nothing_ran(&self) -> bool {
        !self.cases.is_empty() && self.summary.ran() == 0
    }
}
