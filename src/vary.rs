//! Variation injection: conditions that change between runs so that bugs two identical runs
//! miss are found (the reprotest idea applied to kernels and training steps).
//!
//! | variation | even runs | odd runs | catches |
//! |---|---|---|---|
//! | `threads` | 1 CPU thread | 4 CPU threads | work splits that follow the thread count |
//! | `workers` | 0 loader workers | 3 loader workers | loaders whose output depends on worker count |
//! | `poison`  | scratch filled with `0xFF` bytes (NaN) | scratch filled with `0x5A` bytes | reads of uninitialised memory |
//! | `process` | every run in a fresh child process | (same) | process-global state such as `HashMap` order |
//! | `batch`   | rows in one batch | rows in sub-batches of 7 | ops that are not batch-invariant |
//! | `order`   | — | — | the suite runs again in reverse order; a case whose result changes depends on what ran before it |
//!
//! Without variations, fresh scratch buffers are zero-filled, one thread count and one worker
//! count are used, and runs share the process.

use crate::controls::Controls;
use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};
use std::fmt;

/// One condition that can be varied between runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Variation {
    /// CPU thread count: 1 vs 4.
    Threads,
    /// Data-loader worker count: 0 vs 3.
    Workers,
    /// Fresh scratch buffers filled with different byte patterns per run.
    Poison,
    /// Every run in a fresh child process.
    Process,
    /// Suite order: the cases run again in reverse order.
    Order,
    /// Rows computed in sub-batches of a different size.
    Batch,
}

impl Variation {
    /// Every variation, in blame order.
    pub const ALL: [Variation; 6] = [
        Variation::Threads,
        Variation::Workers,
        Variation::Poison,
        Variation::Process,
        Variation::Order,
        Variation::Batch,
    ];

    /// Lower-case name as on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Variation::Threads => "threads",
            Variation::Workers => "workers",
            Variation::Poison => "poison",
            Variation::Process => "process",
            Variation::Order => "order",
            Variation::Batch => "batch",
        }
    }

    /// Parses `all` or a comma-separated list; an unknown name is an error naming it.
    pub fn parse_list(s: &str) -> Result<Vec<Variation>> {
        let mut out = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            if part == "all" {
                out.extend(Variation::ALL);
                continue;
            }
            match Variation::ALL.iter().find(|v| v.name() == part) {
                Some(v) => out.push(*v),
                None => bail!(
                    "unknown variation {part:?}; expected all or a list of threads, workers, poison, process, order, batch"
                ),
            }
        }
        out.sort();
        out.dedup();
        Ok(out)
    }
}

impl fmt::Display for Variation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Rows per sub-batch on odd runs of the `batch` variation (odd, so batches are ragged).
pub const BATCH_SPLIT: usize = 7;

/// Everything one run is made under.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunSettings {
    /// Controls of the run (thread and worker counts may be varied).
    pub controls: Controls,
    /// Scratch fill byte (`None` = zeros).
    pub poison: Option<u8>,
    /// Rows per sub-batch (`None` = one batch).
    pub batch_split: Option<usize>,
    /// Record an op trace.
    pub trace: bool,
    /// Run in a fresh child process.
    pub fresh_process: bool,
}

impl RunSettings {
    /// Settings of run `run` under `base` with `vary` applied.
    pub fn for_run(base: &Controls, vary: &[Variation], run: usize, trace: bool) -> RunSettings {
        let odd = run % 2 == 1;
        let mut s = RunSettings {
            controls: base.clone(),
            poison: None,
            batch_split: None,
            trace,
            fresh_process: false,
        };
        for v in vary {
            match v {
                Variation::Threads => s.controls.threads = if odd { 4 } else { 1 },
                Variation::Workers => s.controls.workers = if odd { 3 } else { 0 },
                Variation::Poison => s.poison = Some(if odd { 0x5A } else { 0xFF }),
                Variation::Process => s.fresh_process = true,
                Variation::Batch => s.batch_split = odd.then_some(BATCH_SPLIT),
                Variation::Order => {}
            }
        }
        s
    }
}

/// What automatic blame found for a diverging case.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Blame {
    /// Whether the case was bit-exact with every variation fixed (the control run).
    pub reproducible_when_fixed: bool,
    /// Variations that, added alone to the control, break the case.
    pub broken_by: Vec<Variation>,
    /// One line for reports.
    pub explanation: String,
}

impl Blame {
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
            explanation,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lists_and_rejects_unknown_names() {
        assert_eq!(
            Variation::parse_list("all").unwrap(),
            Variation::ALL.to_vec()
        );
        assert_eq!(
            Variation::parse_list("poison, threads,poison").unwrap(),
            vec![Variation::Threads, Variation::Poison]
        );
        assert!(Variation::parse_list("threads,colour")
            .unwrap_err()
            .to_string()
            .contains("\"colour\""));
    }

    #[test]
    fn runs_alternate_settings() {
        let base = Controls::default();
        let all = Variation::ALL;
        let (a, b) = (
            RunSettings::for_run(&base, &all, 0, false),
            RunSettings::for_run(&base, &all, 1, false),
        );
        assert_eq!((a.controls.threads, b.controls.threads), (1, 4));
        assert_eq!((a.controls.workers, b.controls.workers), (0, 3));
        assert_ne!(a.poison, b.poison);
        assert_eq!((a.batch_split, b.batch_split), (None, Some(BATCH_SPLIT)));
        assert!(a.fresh_process && b.fresh_process);
        let plain = RunSettings::for_run(&base, &[], 1, false);
        assert_eq!(
            (plain.poison, plain.batch_split, plain.fresh_process),
            (None, None, false)
        );
    }
}
