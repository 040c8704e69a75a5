//! The pipeline every entry point calls: select → run (K runs, variations, blame,
//! localization, isolation, traces) → order pass → snapshots → cost of determinism →
//! cross-device → [`Report`]. The CLI only turns flags into a [`SuiteConfig`], calls [`run`]
//! and renders the report; `bitexact::check` and the integration tests call it directly.
//!
//! Progress goes out as [`Event`]s (as nextest's runner does); rendering is elsewhere
//! ([`crate::report`]).

use crate::backend::Backend;
use crate::case::Case;
use crate::controls::Controls;
use crate::harness::{check_case_with, diagnose, CaseReport, Options, SnapshotStatus, Verdict};
use crate::platform::Platform;
use crate::report::Report;
use crate::snapshot::{self, Comparison};
use crate::vary::Variation;
use anyhow::Result;
use std::path::{Path, PathBuf};

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
pub enum Event<'a> {
    /// A case is about to run on a backend.
    Started {
        /// Case name.
        name: &'a str,
        /// Backend.
        backend: Backend,
    },
    /// A case finished (its report may still change in the order pass or snapshot check).
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

/// Runs `cases` under `config` and returns the report; `on_event` sees progress.
pub fn run(
    cases: &[&dyn Case],
    config: &SuiteConfig,
    on_event: &mut dyn FnMut(Event),
) -> Result<Report> {
    let opts = &config.options;
    let controls = &config.controls;
    let mut reports = Vec::new();
    for &backend in &config.backends {
        for case in cases.iter().filter(|c| c.backends().contains(&backend)) {
            let name = case.name();
            on_event(Event::Started {
                name: &name,
                backend,
            });
            let r = check_case_with(*case, backend, controls, opts);
            on_event(Event::Finished(&r));
            reports.push(r);
        }
    }
    if opts.vary.contains(&Variation::Order) {
        diagnose::order_pass(cases, controls, &opts.vary, &mut reports);
    }
    if let Some(dir) = &config.snapshots {
        check_snapshots(dir, &mut reports, controls);
    }
    let mut cost = Vec::new();
    if config.cost_of_determinism && !controls.deterministic {
        for &backend in &config.backends {
            if backend.unavailable_reason().is_none() {
                cost.extend(crate::cost::cost_of_determinism(backend, controls, 3)?);
            }
        }
    }
    let mut report = Report::new(controls.clone(), opts.runs, reports, cost);
    report.variations = opts.vary.clone();
    report.backends = config.backends.clone();
    if config.cross_device {
        report.cross_device = crate::cross::compare(cases, &report.cases, controls);
    }
    Ok(report)
}

/// Compares every deterministic report with its committed snapshot under `dir`, records the
/// status and its explanation as evidence, and re-judges the report.
pub fn check_snapshots(dir: &Path, reports: &mut [CaseReport], controls: &Controls) {
    let platform = Platform::detect();
    for r in reports
        .iter_mut()
        .filter(|r| r.verdict == Verdict::Deterministic)
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
        r.evidence.snapshot = Some(status);
        r.snapshot = Some(text);
        r.rejudge();
    }
}
