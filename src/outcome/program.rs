//! Run mode's facts about a program case (`bitexact run`): what ran, the environment it got,
//! how each run ended, and its per-step memory. Carried by [`super::CaseReport::program`].

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Run mode (`bitexact run`): what ran and how each run ended.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct ProgramInfo {
    /// Always `run`: this case is an external program.
    pub kind: String,
    /// Program and arguments.
    pub command: Vec<String>,
    /// Variables bitexact set for run 0 (`BITEXACT_OUT` is a fresh directory per run).
    pub env: BTreeMap<String, String>,
    /// Variables whose value differed between runs (under variations), with each run's value.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub varied: BTreeMap<String, Vec<String>>,
    /// Each run of the main pass.
    pub runs: Vec<ProgramRun>,
    /// Memory after each step as the helper's `step()` recorded it in run 0.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub step_memory: Vec<StepMemory>,
    /// What the program reported in `.bitexact-platform.json` (run 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<serde_json::Value>,
    /// What the ignore rules left out or masked in run 0.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignored: Vec<Ignored>,
    /// The controls the program read through the helper in run 0 (`bitexact.controls()`,
    /// `workers()`, `dataloader_kwargs()`, `seed_everything()`); `None` when it recorded none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controls_read: Option<Vec<String>>,
    /// Varied controls that reach a program only if it reads them (`workers`, `seed`) and that
    /// it was not seen to read: their variation may not have changed anything.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unread_controls: Vec<String>,
    /// The project file the settings came from, if one was used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
    /// bitexact's own peak resident set size over the whole check (mapped output files
    /// included), bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub harness_peak_rss_bytes: Option<u64>,
    /// What `--vary world-size` found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world_size: Option<WorldSize>,
    /// What `--vary resume` found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<ResumeCheck>,
    /// Run 0's floating-point outputs sketched (when compared with snapshots): output name →
    /// `dtype[shape]|<sketch>` ([`crate::trace::sketch`]), stored with the snapshot.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sketches: BTreeMap<String, String>,
}

/// `--vary world-size`: run 0 (`--world-size N` processes) against one run with 1 process,
/// compared on what both have (rank 0's outputs and trace, shared outputs).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct WorldSize {
    /// The world sizes compared: run 0's, then the extra run's (1).
    pub sizes: [usize; 2],
    /// Whether the outputs both runs wrote differ (`None`: the 1-process run failed).
    pub depends: Option<bool>,
    /// Outputs both runs wrote that differ, in run 0's order (at most 8 named).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub differing: Vec<String>,
    /// Outputs compared (written by both runs).
    pub compared: usize,
    /// Outputs only the larger world size wrote (other ranks' files).
    pub only_larger: usize,
    /// With op traces: the first op that differs (rank 0's stream).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_op: Option<String>,
    /// One line for reports.
    pub summary: String,
}

/// How one run of a program ended.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct ProgramRun {
    /// Run index.
    pub index: usize,
    /// Exit status, when it exited.
    pub exit_status: Option<i32>,
    /// Signal that killed it, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// Wall time.
    pub seconds: f64,
    /// Peak resident set size, bytes.
    pub peak_rss_bytes: Option<u64>,
    /// Set when bitexact stopped the run at its first divergence from run 0 (when, and which
    /// output), before it ended by itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_early: Option<String>,
}

/// Memory after one training step, as the Python helper's `step()` records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StepMemory {
    /// Step index.
    pub step: u64,
    /// Resident set size after the step, bytes.
    pub rss_bytes: u64,
}

/// What one ignore rule of run mode left out (outputs) or masked (standard output lines).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct Ignored {
    /// The rule as given (`output GLOB` or `stdout REGEX`).
    pub rule: String,
    /// Outputs it left out.
    pub outputs: usize,
    /// Standard output lines it masked.
    pub lines: u64,
}

/// `--vary resume`: one more run, killed (SIGKILL) right after a checkpoint and resumed in the
/// same output directory, compared with the uninterrupted run 0 (see `crate::program::resume`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct ResumeCheck {
    /// The checkpoint the killed launch was killed after: its path under `$BITEXACT_OUT` (a
    /// directory ends in `/`).
    pub checkpoint: String,
    /// The optimizer steps taken before it (from the state record; `None` without one): the
    /// resumed launch's first step has this number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
    /// Seconds into the killed launch when the checkpoint completed.
    pub at_seconds: f64,
    /// `--resume-with`'s words.
    pub resumed_with: Vec<String>,
    /// Outputs compared.
    pub compared: usize,
    /// Outputs that differ from run 0's, in run 0's order (at most 8 named).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub differing: Vec<String>,
    /// The pieces of state that differ at the first step after the checkpoint
    /// (`torch's CPU generator (not restored: …)`, `StepLR: last_epoch 0 vs 6 uninterrupted`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub state: Vec<String>,
    /// One line for reports.
    pub summary: String,
}

/// One line of a program's state record (`.bitexact-state-rank<R>.jsonl`): the state a
/// bit-exact resume needs, as digests, before one optimizer step.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateRecord {
    /// The optimizer step (0 = a fresh run's first).
    pub step: u64,
    /// The rank that recorded it.
    #[serde(default)]
    pub rank: u64,
    /// A full record (every piece), or a light one without the per-tensor pieces
    /// (parameters, buffers, per-parameter optimizer state, gradients): a step that follows
    /// no checkpoint. Absent: full.
    #[serde(default = "full")]
    pub heavy: bool,
    /// What was recorded.
    #[serde(default)]
    pub pieces: Vec<StatePiece>,
}

fn full() -> bool {
    true
}

/// One piece of a [`StateRecord`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatePiece {
    /// How the report names it (`torch's CPU generator`, `StepLR: last_epoch`).
    pub name: String,
    /// `generator`, `optimizer`, `scheduler`, `scaler`, `parameter`, `buffer`, `data`, `other`.
    #[serde(default)]
    pub kind: String,
    /// Its digest (hex).
    pub digest: String,
    /// Its value, when small enough to print.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// How to save and restore it, when the recorder knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}
