//! Ways to make a run. A [`RunSource`] makes one run under given settings and yields its
//! named digests, a lazy [`Loader`] of its tensors (for explanations), an optional op trace and
//! metadata ([`RunMeta`]: time, memory, notes, findings, how a program ended). The harness owns
//! everything else (K runs, explanation, localization, blame, the judge) once for all sources:
//! - [`super::CaseSource`]: a built-in or user case, in this process or, per run, in a fresh
//!   child (`--vary process`);
//! - `crate::program::ProgramSource`: an external program, spawned with the environment contract,
//!   its output files collected.
//!
//! Sources never make runs of their own accord: every run, the main pass's or one a source
//! needs to localize or describe, is asked of the planner ([`Runs`]).
//!
//! A new way to make runs (say, a remote runner) is one new file implementing [`RunSource`],
//! plus one line where its subject is handed to the suite (`crate::suite::Subject`).

use super::Options;
use crate::backend::Backend;
use crate::digest::Digest;
use crate::outcome::{CaseReport, Failure, Ignored, ProgramRun, StepMemory};
use crate::outputs::Outputs;
use crate::tensor::Tensor;
use crate::trace::{Divergence, TraceEntry};
use crate::vary::RunSettings;
use anyhow::{anyhow, Result};
use std::collections::BTreeMap;

/// Loads a run's tensors by output name, lazily, to explain a difference.
pub trait Loader: Send {
    /// The tensor behind output `name`.
    fn load(&self, name: &str) -> Result<Tensor>;
    /// Where output `name` lies as plain bytes in a file, and whether it is text compared by
    /// lines (a program's standard output): such outputs are explained by streaming the two
    /// files side by side instead of loading them.
    fn raw(&self, _name: &str) -> Option<(std::path::PathBuf, bool)> {
        None
    }
    /// The canonical text of output `name` when it is a value rather than a tensor (a
    /// non-tensor leaf of a `torch.save` file): such outputs are explained as two values.
    fn value(&self, _name: &str) -> Option<String> {
        None
    }
}

impl Loader for Outputs {
    fn load(&self, name: &str) -> Result<Tensor> {
        self.get(name)
            .cloned()
            .ok_or_else(|| anyhow!("{name}: no such output"))
    }
}

/// What a run left to compare.
pub struct Collected {
    /// `(name, digest)` of every output, in the source's order (name order for cases, write
    /// order for programs).
    pub digests: Vec<(String, Digest)>,
    /// Loads the outputs behind the digests.
    pub loader: Box<dyn Loader>,
    /// The op trace, when recorded.
    pub trace: Option<Vec<TraceEntry>>,
    /// Memory after each step, as a program's helper recorded it.
    pub steps: Vec<StepMemory>,
    /// A program's state records, in the order written (`--vary resume`).
    pub state: Vec<crate::outcome::program::StateRecord>,
    /// What a program reported about its platform (`.bitexact-platform.json`).
    pub platform: Option<serde_json::Value>,
    /// What a program's ignore rules left out of this run.
    pub ignored: Vec<Ignored>,
    /// The controls a program read through the helper (`None`: it recorded none).
    pub controls_read: Option<std::collections::BTreeSet<String>>,
    /// The run was stopped early, at its first divergence: the outputs it never wrote are not
    /// differences.
    pub partial: bool,
    /// What the source has to say about this run in the report (which tracer a program's
    /// Python used, when it is not bitexact's own version).
    pub notes: Vec<String>,
}

impl Collected {
    /// Outputs held in memory, in name order.
    pub fn of_outputs(outputs: Outputs, trace: Option<Vec<TraceEntry>>) -> Collected {
        let digests = crate::digest::digest_all(&outputs).into_iter().collect();
        Collected {
            digests,
            loader: Box::new(outputs),
            trace,
            steps: Vec::new(),
            state: Vec::new(),
            platform: None,
            ignored: Vec::new(),
            controls_read: None,
            partial: false,
            notes: Vec::new(),
        }
    }

    /// The run digest over the outputs (name order, so any source order gives the same).
    pub fn run_digest(&self) -> Digest {
        crate::digest::run_digest_of_pairs(&self.digests)
    }
}

/// Facts about one run besides its outputs.
#[derive(Clone, Debug, Default)]
pub struct RunMeta {
    /// Wall time of the run itself.
    pub seconds: f64,
    /// Peak heap bytes above the start (cases) or peak RSS (programs), when known.
    pub peak_bytes: Option<u64>,
    /// Implementation chosen per op.
    pub algorithms: BTreeMap<String, String>,
    /// Op calls the case recorded (0: a traced re-run could not localize anything).
    pub recorded_ops: usize,
    /// Defects the run reported.
    pub findings: Vec<String>,
    /// Figures the run reported for the report.
    pub notes: Vec<String>,
    /// How a program run ended, with the environment it got.
    pub program: Option<(ProgramRun, BTreeMap<String, String>)>,
}

/// Collects a started run's outputs (a program's files may still be hashing in the background).
pub type Pending = Box<dyn FnOnce() -> Result<Collected, Failure> + Send>;

/// A run that has happened: its facts, and its outputs to collect (or why it failed).
pub struct Started {
    /// Facts about the run.
    pub meta: RunMeta,
    /// Its outputs, or the failure that ended it.
    pub outputs: Result<Pending, Failure>,
}

impl Started {
    /// A finished run whose outputs are already collected.
    pub fn ready(meta: RunMeta, collected: Collected) -> Started {
        Started {
            meta,
            outputs: Ok(Box::new(move || Ok(collected))),
        }
    }

    /// A run that failed.
    pub fn failed(meta: RunMeta, failure: Failure) -> Started {
        Started {
            meta,
            outputs: Err(failure),
        }
    }
}

/// A run about to be made, for progress reports: its index in its pass and why the pass is
/// made (`main`, `blame: control`, `blame: threads`, ...).
#[derive(Clone, Copy, Debug)]
pub struct RunStart<'a> {
    /// Index of the run in its pass.
    pub index: usize,
    /// Runs in the pass.
    pub of: usize,
    /// Why the pass is made.
    pub purpose: &'a str,
}

/// What a source may ask of the planner ([`super::Planner`]) while it localizes or describes
/// a difference: the harness options, the settings of a main-pass run, and more runs, each
/// told to progress and counted in the report.
pub trait Runs {
    /// The harness options.
    fn opts(&self) -> &Options;
    /// The settings of run `index` of the main pass, traced when `trace` is set.
    fn settings(&self, index: usize, trace: bool) -> RunSettings;
    /// One run of `source`, as its run `index` under `settings`, told to progress as `told`
    /// (run k of n made for a purpose): its outputs collected, or why it failed.
    fn one(
        &mut self,
        source: &dyn RunSource,
        settings: &RunSettings,
        index: usize,
        told: RunStart,
    ) -> Result<Collected, Failure>;
}

/// Makes runs of one subject on one backend.
pub trait RunSource: Sync {
    /// The case name reports use.
    fn name(&self) -> String;
    /// The backend runs are made on.
    fn backend(&self) -> Backend;
    /// Why it cannot run here under `opts`, if it cannot.
    fn skip_reason(&self, _opts: &Options) -> Option<String> {
        None
    }
    /// The planted bug it carries, which the harness must catch.
    fn planted(&self) -> Option<String> {
        None
    }
    /// Whether runs happen in this process, so heap growth between runs is its own.
    fn in_process(&self) -> bool {
        false
    }
    /// Makes run `index` under `settings`.
    fn start(&self, index: usize, settings: &RunSettings) -> Started;
    /// Names the first divergence between run 0 and run `j`: from their op traces when both
    /// have one (programs also capture the op's tensors in a re-run to explain it), else by
    /// traced re-runs (cases) or the first differing output in write order (programs). Any
    /// run it needs, it asks `planner` for.
    fn localize(
        &self,
        _first: &Collected,
        _other: &Collected,
        _j: usize,
        _metas: &[RunMeta],
        _planner: &mut dyn Runs,
    ) -> Option<Divergence> {
        None
    }
    /// Adds what only this source knows to the report of its main pass (before judging); a
    /// program under `--vary world-size` asks `planner` for its world-size run here.
    fn describe(
        &self,
        _report: &mut CaseReport,
        _metas: &[RunMeta],
        _first: Option<&Collected>,
        _planner: &mut dyn Runs,
    ) {
    }
}
