//! What one run is made under: its controls with the variations applied ([`RunSettings`]) and
//! the per-run knobs a case or program reads ([`Knobs`]).

use super::Variation;
use crate::controls::Controls;
use serde::{Deserialize, Serialize};

/// Rows per sub-batch on odd runs of the `batch` variation (odd, so batches are ragged).
pub const BATCH_SPLIT: usize = 7;

/// The per-run settings a case reads through [`crate::case::Ctx::knobs`]: a variation that
/// needs a new one adds a field here and reads it where it acts, so adding a variation touches
/// this file and the code it changes, nothing else.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Knobs {
    /// Byte pattern fresh scratch buffers are filled with (`None` = zeros).
    pub poison: Option<u8>,
    /// Rows per sub-batch for batch-capable cases (`None` = one batch).
    pub batch_split: Option<usize>,
    /// Processes of a distributed program (`{nproc}`; `None` = `--world-size`).
    #[serde(default)]
    pub world_size: Option<usize>,
    /// A program's batch size (`{batch}`; `None`: not varied, the even runs' size).
    #[serde(default)]
    pub batch: Option<usize>,
    /// Which launch of `--vary resume`'s run this is (`None`: an ordinary run).
    #[serde(default)]
    pub resume: Option<Launch>,
}

/// The two launches of `--vary resume`'s run (`crate::program::resume`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Launch {
    /// Killed right after its Nth checkpoint; its output directory stays for the next.
    Killed,
    /// Started with the resume arguments on what the killed launch left.
    Resumed,
}

/// Everything one run is made under.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunSettings {
    /// Controls of the run (thread and worker counts may be varied).
    pub controls: Controls,
    /// What a case sees of the variations, as [`crate::case::Ctx::knobs`].
    pub knobs: Knobs,
    /// Record an op trace.
    pub trace: bool,
    /// Run in a fresh child process.
    pub fresh_process: bool,
    /// The variations applied (programs read the ones that act through their environment:
    /// `hashseed`, and `threads` exporting the thread variables).
    #[serde(default)]
    pub varied: Vec<Variation>,
}

impl RunSettings {
    /// Settings of run `run` under `base` with `vary` applied.
    pub fn for_run(base: &Controls, vary: &[Variation], run: usize, trace: bool) -> RunSettings {
        let odd = run % 2 == 1;
        let mut s = RunSettings {
            controls: base.clone(),
            knobs: Knobs::default(),
            trace,
            fresh_process: false,
            varied: vary.to_vec(),
        };
        for v in vary {
            match v {
                Variation::Threads => s.controls.threads = base.thread_pair[odd as usize],
                Variation::Workers => s.controls.workers = base.worker_pair[odd as usize],
                Variation::Poison => s.knobs.poison = Some(if odd { 0x5A } else { 0xFF }),
                Variation::Process => s.fresh_process = true,
                Variation::Batch => {
                    s.knobs.batch_split = odd.then_some(BATCH_SPLIT);
                    s.knobs.batch = Some(base.batch_pair[odd as usize]);
                }
                Variation::Seed if odd => {
                    s.controls.seed = base.seed.wrapping_add(run as u64);
                }
                Variation::Order
                | Variation::Hashseed
                | Variation::Seed
                | Variation::WorldSize
                | Variation::Resume => {}
            }
        }
        s
    }
}
