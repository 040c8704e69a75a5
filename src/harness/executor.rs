//! The executor: K runs of any [`RunSource`] under the same controls (with the variations
//! applied per run), their digests, and the evidence the judge needs. It knows nothing of
//! cases or programs: the source makes each run.
//!
//! Pipelined: run `i`'s outputs are collected (a program's files hashed in the background)
//! while run `i + 1` is made, one collection at a time, so memory stays bounded by one run's
//! outputs whatever K is. The pass stops at the first run that fails.

use super::source::{Collected, RunMeta, RunSource, RunStart};
use crate::controls::Controls;
use crate::digest::Digest;
use crate::memory;
use crate::outcome::Failure;
use crate::vary::{RunSettings, Variation};
use std::collections::BTreeSet;
use std::time::Instant;

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

/// What K runs of a source gave.
pub struct Pass {
    /// Facts about every run made (failed ones included), in order.
    pub metas: Vec<RunMeta>,
    /// Run digest of each collected run.
    pub run_digests: Vec<Digest>,
    /// Run 0's outputs.
    pub first: Option<Collected>,
    /// The first run whose run digest differs from run 0's, with its index.
    pub differing: Option<(usize, Collected)>,
    /// The failure that ended the pass, if one did.
    pub failure: Option<Failure>,
    /// Heap bytes left live after each run, relative to before the first (in-process sources
    /// with the counting allocator only).
    pub retained: Vec<u64>,
    /// Findings of all runs, deduplicated.
    pub findings: Vec<String>,
    /// The op trace of every collected run that recorded one.
    pub traces: Vec<Vec<crate::trace::TraceEntry>>,
    /// Wall time of the pass.
    pub seconds: f64,
}

impl Pass {
    /// Distinct run digests among the collected runs.
    pub fn distinct(&self) -> usize {
        self.run_digests.iter().collect::<BTreeSet<_>>().len()
    }

    /// Whether the runs differed or one failed (for blame).
    pub fn diverged(&self) -> bool {
        self.distinct() > 1 || self.failure.is_some()
    }

    /// Whether a run failed before any two runs differed: the failure, not a difference, is
    /// what the pass found.
    pub fn failed_before_differing(&self) -> bool {
        self.failure.is_some() && self.distinct() < 2
    }
}

/// The runs of a pass: how many (at least 2 are made), and whether they are traced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PassRuns {
    /// How many runs.
    pub count: usize,
    /// Whether each records an op trace.
    pub traced: bool,
}

/// Makes the `runs` of a pass of `source` under `controls` with `vary` applied; `progress`
/// hears of each run before it is made.
pub fn pass(
    source: &dyn RunSource,
    controls: &Controls,
    vary: &[Variation],
    runs: PassRuns,
    purpose: &str,
    progress: &mut dyn FnMut(RunStart),
) -> Pass {
    let t0 = Instant::now();
    let mut p = Pass {
        metas: Vec::new(),
        run_digests: Vec::new(),
        first: None,
        differing: None,
        failure: None,
        retained: Vec::new(),
        findings: Vec::new(),
        traces: Vec::new(),
        seconds: 0.0,
    };
    let mut findings = Findings::default();
    let base = source.in_process().then(memory::current).flatten();
    let retained = |p: &mut Pass| {
        if let Some((b, now)) = base.zip(memory::current()) {
            p.retained.push(now.saturating_sub(b));
        }
    };
    let mut collecting: Option<(usize, super::source::Pending)> = None;
    let count = runs.count.max(2);
    for i in 0..count {
        if i > 0 {
            retained(&mut p);
        }
        let settings = RunSettings::for_run(controls, vary, i, runs.traced);
        progress(RunStart {
            index: i,
            of: count,
            purpose,
        });
        let started = source.start(i, &settings);
        for f in started.meta.findings.iter().cloned() {
            findings.add_in(i, f);
        }
        p.metas.push(started.meta);
        if let Some((j, job)) = collecting.take() {
            accept(&mut p, j, job());
        }
        match started.outputs {
            Ok(job) if p.failure.is_none() => collecting = Some((i, job)),
            Ok(_) => {}
            Err(f) => p.failure = p.failure.take().or(Some(f.in_run(i))),
        }
        if p.failure.is_some() {
            break;
        }
    }
    if let Some((j, job)) = collecting.take() {
        accept(&mut p, j, job());
    }
    if p.failure.is_none() {
        retained(&mut p);
    }
    p.findings = findings.lines(p.metas.len());
    p.seconds = t0.elapsed().as_secs_f64();
    p
}

/// Takes run `i`'s collected outputs into the pass.
fn accept(p: &mut Pass, i: usize, collected: Result<Collected, Failure>) {
    let c = match collected {
        Ok(c) => c,
        Err(f) => {
            p.failure = p.failure.take().or(Some(f.in_run(i)));
            return;
        }
    };
    let d = c.run_digest();
    p.run_digests.push(d);
    p.traces.extend(c.trace.clone());
    match &p.first {
        None => p.first = Some(c),
        Some(f) if p.differing.is_none() && f.run_digest() != d => p.differing = Some((i, c)),
        _ => {}
    }
}
