//! Variation injection: conditions that change between runs so that bugs two identical runs
//! miss are found (the reprotest idea applied to kernels, training steps and programs).
//!
//! Every variation is one row of `TABLE`: its name, what even and odd runs get, what it
//! catches, and whether it applies to built-in/user cases, to programs (`bitexact run`), or
//! both. Parsing, `--help` text, error messages and reports all read that table. Without
//! variations, fresh scratch buffers are zero-filled, one thread count and one worker count
//! are used, and runs share the process.
//!
//! | variation | even runs | odd runs | catches |
//! |---|---|---|---|
//! | `threads` | 1 CPU thread | 2–4 CPU threads (the machine's cores; `threads=A,B` chooses) | work splits that follow the thread count |
//! | `workers` | 0 loader workers | 3 loader workers (`workers=A,B` chooses) | loaders whose output depends on worker count |
//! | `poison`  | scratch / fresh heap filled with `0xFF` | filled with `0x5A` | reads of uninitialised memory |
//! | `process` | every run in a fresh child process | (same) | process-global state such as `HashMap` order |
//! | `order`   | — | — | the suite runs again in reverse order; a case whose result changes depends on what ran before it |
//! | `batch`   | rows in one batch (programs: `{batch}` in the command is A, default 1) | rows in sub-batches of 7 (programs: `{batch}` is B, default 8; `batch=A,B` chooses) | ops that are not batch-invariant: a request's result depends on what it is batched with; programs only when named (not part of `all`: the command must take `{batch}`) |
//! | `hashseed` | `PYTHONHASHSEED` = run index | (same) | programs whose result follows Python's string hashing (set order) |
//! | `seed` | the base seed | base seed + run index | outputs that depend on the seed where they must not (dropout left on in eval); applied only to cases that declare [`crate::case::Case::seed_independent`], and to programs only when named (not part of `all`: a program cannot declare seed independence) |
//! | `world-size` | — | — | programs only, when named: one more run with 1 process (`{nproc}` in the command) compared with run 0 as information (see `crate::program::distributed`) |
//! | `resume` | — | — | programs only, when named: one more run killed right after a checkpoint and resumed with `--resume-with`, compared with run 0 (see `crate::program::resume`) |

use serde::{Deserialize, Serialize};
use std::fmt;

pub mod differ;
mod parse;
mod settings;
pub use differ::Varied;
pub use parse::Spec;
pub use settings::{Knobs, Launch, RunSettings, BATCH_SPLIT};

/// One condition that can be varied between runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
#[derive(schemars::JsonSchema)]
pub enum Variation {
    /// CPU thread count: `Controls::thread_pair`.
    Threads,
    /// Data-loader worker count: `Controls::worker_pair`.
    Workers,
    /// Fresh scratch buffers (programs: fresh heap memory) filled with different bytes per run.
    Poison,
    /// Every run in a fresh child process.
    Process,
    /// Suite order: the cases run again in reverse order.
    Order,
    /// Rows computed in sub-batches of a different size.
    Batch,
    /// Python's string-hash seed (`PYTHONHASHSEED`) differs per run.
    Hashseed,
    /// The seed differs on odd runs (only for seed-independent cases; programs: `BITEXACT_SEED`).
    Seed,
    /// Programs under torch.distributed: one more run with 1 process, compared with run 0 as
    /// information (`crate::program::distributed`).
    #[serde(rename = "world-size")]
    WorldSize,
    /// Programs: one more run killed right after a checkpoint and resumed from it, compared
    /// with run 0 (`crate::program::resume`).
    Resume,
}

/// What kind of case a variation applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Built-in and users' Rust cases.
    Case,
    /// External programs (`bitexact run`).
    Program,
}

/// One row of the variation table.
#[derive(Clone, Copy, Debug)]
pub struct Info {
    /// The variation.
    pub variation: Variation,
    /// Name on the command line.
    pub name: &'static str,
    /// What it changes between runs.
    pub changes: &'static str,
    /// What it catches.
    pub catches: &'static str,
    /// Applies to Rust cases.
    pub cases: bool,
    /// Applies to programs.
    pub programs: bool,
}

/// Every variation, in blame order.
pub const TABLE: &[Info] = &[
    Info {
        variation: Variation::Threads,
        name: "threads",
        changes: "CPU threads 1 vs the cores (2 to 4); threads=A,B picks the counts",
        catches: "reductions split by thread count",
        cases: true,
        programs: true,
    },
    Info {
        variation: Variation::Workers,
        name: "workers",
        changes: "data-loader workers 0 vs 3; workers=A,B picks the counts",
        catches: "loaders whose output depends on the worker count",
        cases: true,
        programs: true,
    },
    Info {
        variation: Variation::Poison,
        name: "poison",
        changes:
            "fresh memory filled with 0xFF vs 0x5A (programs: MALLOC_PERTURB_, BITEXACT_POISON)",
        catches: "reads of uninitialised memory",
        cases: true,
        programs: true,
    },
    Info {
        variation: Variation::Process,
        name: "process",
        changes: "every run in a fresh process",
        catches: "process-global state such as HashMap order",
        cases: true,
        programs: false,
    },
    Info {
        variation: Variation::Order,
        name: "order",
        changes: "the suite runs again in reverse order",
        catches: "results that depend on what ran before",
        cases: true,
        programs: false,
    },
    Info {
        variation: Variation::Batch,
        name: "batch",
        changes: "rows in one batch vs sub-batches of 7 (programs: {batch} in the command is 1 vs 8; batch=A,B picks the sizes)",
        catches: "ops that are not batch-invariant",
        cases: true,
        programs: true,
    },
    Info {
        variation: Variation::Hashseed,
        name: "hashseed",
        changes: "PYTHONHASHSEED differs per run",
        catches: "results that follow Python's string hashing (set order)",
        cases: false,
        programs: true,
    },
    Info {
        variation: Variation::Seed,
        name: "seed",
        changes: "seed + run index on odd runs (cases that declare seed independence; programs: BITEXACT_SEED, only when named)",
        catches: "outputs that depend on the seed where they must not, e.g. dropout left on in eval",
        cases: true,
        programs: true,
    },
    Info {
        variation: Variation::WorldSize,
        name: "world-size",
        changes: "one more run with 1 process instead of --world-size N, through {nproc} in the command (torchrun --nproc-per-node {nproc}); reported as information unless --world-size-invariant; only when named",
        catches: "results that depend on the number of ranks (reduction order of collectives, sharding)",
        cases: false,
        programs: true,
    },
    Info {
        variation: Variation::Resume,
        name: "resume",
        changes: "one more run killed (SIGKILL) right after its Nth checkpoint (--resume-at, --checkpoint) and relaunched with --resume-with ARGS in the same $BITEXACT_OUT; only when named",
        catches: "checkpoints that forget state: RNG, optimizer, scheduler, data position, buffers",
        cases: false,
        programs: true,
    },
];

impl Variation {
    /// Every variation, in blame order.
    pub fn all() -> impl Iterator<Item = Variation> {
        TABLE.iter().map(|i| i.variation)
    }

    /// Its row of [`TABLE`].
    pub fn info(self) -> &'static Info {
        TABLE
            .iter()
            .find(|i| i.variation == self)
            .expect("every variation has a row in TABLE")
    }

    /// Lower-case name as on the command line.
    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// Whether it applies to `kind`.
    pub fn applies_to(self, kind: Kind) -> bool {
        let i = self.info();
        match kind {
            Kind::Case => i.cases,
            Kind::Program => i.programs,
        }
    }

    /// Whether blame can try it alone on a case (the order variation is a suite pass; the
    /// world size and resume are compared in runs of their own).
    pub fn blamable(self) -> bool {
        !matches!(
            self,
            Variation::Order | Variation::WorldSize | Variation::Resume
        )
    }

    /// The names that apply to `kind`, comma-separated.
    pub fn names(kind: Kind) -> String {
        let names: Vec<&str> = TABLE
            .iter()
            .filter(|i| i.variation.applies_to(kind))
            .map(|i| i.name)
            .collect();
        names.join(", ")
    }

    /// `--vary` help text for `kind`, one line per variation.
    pub fn help(kind: Kind) -> String {
        let mut s = String::from(
            "Vary conditions between runs and blame the ones that break a case: `all` or a comma-separated list of:",
        );
        for i in TABLE.iter().filter(|i| i.variation.applies_to(kind)) {
            s.push_str(&format!(
                "\n  {}: {} (catches {})",
                i.name, i.changes, i.catches
            ));
        }
        s
    }
}

impl fmt::Display for Variation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What automatic blame found for a diverging case.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct Blame {
    /// Whether the case was bit-exact with every variation fixed (the control run).
    pub reproducible_when_fixed: bool,
    /// Variations that, added alone to the control, break the case.
    pub broken_by: Vec<Variation>,
    /// Variations added alone to the control, in order (none when the control diverged).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tried: Vec<Variation>,
    /// One line for reports.
    pub explanation: String,
    /// Runs blame made beyond the listed ones (the control, then each variation alone unless it
    /// is the only one, and any pass made again after a run failed).
    #[serde(default)]
    pub runs: usize,
    /// Wall time of those runs, seconds.
    #[serde(default)]
    pub seconds: f64,
    /// For each variation in `broken_by` whose runs recorded op traces: where its runs first
    /// diverged (`aten::addmm … in module Sequential.4 (forward), train.py:40`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub first_ops: Vec<(Variation, String)>,
    /// Why each pass that diverged did, one line each (`control: run 1: <failure>`,
    /// `workers: run 1 differs from run 0 first at step_0000.safetensors:w`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<String>,
}

impl Blame {
    /// The same blame, with where each variation's runs first diverged (op traces), said in the
    /// explanation: `breaks when varying: threads (threads: first at aten::addmm …)`.
    pub fn with_first_ops(mut self, first_ops: Vec<(Variation, String)>) -> Blame {
        if !first_ops.is_empty() {
            let each: Vec<String> = first_ops
                .iter()
                .map(|(v, at)| format!("{}: first at {at}", v.name()))
                .collect();
            self.explanation = format!("{} ({})", self.explanation, each.join("; "));
        }
        self.first_ops = first_ops;
        self
    }

    /// The same blame, with why each diverging pass diverged. When the verdict rests on the
    /// control (not reproducible, or it failed), the control's last line is said in the
    /// explanation too.
    pub fn with_evidence(mut self, evidence: Vec<String>) -> Blame {
        let control = evidence.iter().rev().find(|e| e.starts_with("control: "));
        if let (Some(control), false) = (control, self.reproducible_when_fixed) {
            self.explanation = format!("{} ({control})", self.explanation);
        }
        self.evidence = evidence;
        self
    }

    /// A blame whose control pass failed without any two runs differing: nothing is known
    /// about determinism then, and the explanation says so instead of "nondeterministic".
    pub fn control_failed(mut self, failed: bool) -> Blame {
        if failed {
            self.explanation =
                "blame could not judge: a run of the control (everything fixed) failed".into();
        }
        self
    }

    /// The same blame, with what it cost: the passes it made (purpose, runs) and their time.
    pub fn with_cost(mut self, passes: &[(String, usize)], seconds: f64) -> Blame {
        self.runs = passes.iter().map(|(_, n)| n).sum();
        self.seconds = seconds;
        let each: Vec<String> = passes
            .iter()
            .map(|(p, n)| format!("{n} {}", p.trim_start_matches("blame: ")))
            .collect();
        self.explanation = format!(
            "{} (blame made {} more runs: {}; {:.1}s)",
            self.explanation,
            self.runs,
            each.join(", "),
            seconds
        );
        self
    }

    /// Builds the explanation from the findings.
    pub fn new(reproducible_when_fixed: bool, broken_by: Vec<Variation>) -> Blame {
        let names: Vec<&str> = broken_by.iter().map(|v| v.name()).collect();
        let explanation = if !reproducible_when_fixed {
            "not reproducible even with everything fixed: the case itself is nondeterministic"
                .to_string()
        } else if names.is_empty() {
            "bit-exact under each variation alone: only a combination of variations breaks it"
                .to_string()
        } else {
            format!("breaks when varying: {}", names.join(", "))
        };
        Blame {
            reproducible_when_fixed,
            broken_by,
            tried: Vec::new(),
            explanation,
            runs: 0,
            seconds: 0.0,
            first_ops: Vec::new(),
            evidence: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controls::Controls;

    #[test]
    fn runs_alternate_settings() {
        let base = Controls::default();
        let all: Vec<Variation> = Variation::all().collect();
        let (a, b) = (
            RunSettings::for_run(&base, &all, 0, false),
            RunSettings::for_run(&base, &all, 1, false),
        );
        assert_eq!(
            [a.controls.threads, b.controls.threads],
            crate::controls::default_thread_pair()
        );
        assert_eq!((a.controls.workers, b.controls.workers), (0, 3));
        let mut chosen = base.clone();
        chosen.thread_pair = [3, 5];
        let odd = RunSettings::for_run(&chosen, &[Variation::Threads], 1, false);
        assert_eq!(odd.controls.threads, 5);
        assert_ne!(a.knobs.poison, b.knobs.poison);
        assert_eq!(
            (a.knobs.batch_split, b.knobs.batch_split),
            (None, Some(BATCH_SPLIT))
        );
        assert_eq!(
            (a.controls.seed, b.controls.seed),
            (base.seed, base.seed + 1)
        );
        assert_eq!(
            Variation::parse_list("seed", Kind::Program).unwrap(),
            vec![Variation::Seed]
        );
        assert!(a.fresh_process && b.fresh_process);
        let plain = RunSettings::for_run(&base, &[], 1, false);
        assert_eq!(
            (
                plain.knobs.poison,
                plain.knobs.batch_split,
                plain.fresh_process
            ),
            (None, None, false)
        );
    }
}
