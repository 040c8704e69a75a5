//! `train/...` cases: the training step run twice and compared bit for bit, and planted
//! training bugs the harness must catch.
//!
//! * `train/mlp_step` — one AdamW step: loss, gradients, updated parameters and the batch.
//! * `train/mlp_steps` — [`STEPS`] SGD-momentum steps (crossing an epoch boundary): the loss
//!   curve, final parameters and optimizer state. Under `--deterministic off` its bias
//!   gradients use the atomic `col_sum` (and the atomic matmul), and it is caught.
//! * `train/resume`, `train/resume_sgd` — `2N` steps versus `N` steps + checkpoint to bytes +
//!   restore into a fresh trainer + `N` steps. The outputs are the resumed run's; a resumed
//!   run that differs from the uninterrupted one is reported as a defect naming the first
//!   differing tensor.
//! * `train/planted/shared_worker_seed` — loader workers that all augment from one stream.
//! * `train/planted/resume_forgets_rng` — a restore that leaves the dropout RNG at its start.
//! * `train/planted/growing_loss_history` — keeps every step's loss with its graph in a
//!   process-global history, so memory grows across runs.
//!
//! Every case uses `ctx.controls.workers` loader workers (the shared-seed case at least 2),
//! so the same case can be checked under 0, 1, 2 and 4 workers and must give the same bits.

use crate::case::{Case, Ctx, Outputs};
use crate::diff;
use crate::tensor::Tensor;
use crate::train::model::PARAM_NAMES;
use crate::train::optim::OptimConfig;
use crate::train::{loader::AugmentRng, TrainConfig, Trainer};
use crate::Backend;
use anyhow::Result;
use std::sync::Mutex;

/// Steps of `train/mlp_steps` and the planted growing-history case.
pub const STEPS: usize = 20;
/// Steps before the checkpoint in the resume cases (`2 × RESUME_AT` in all).
pub const RESUME_AT: usize = 10;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Step,
    Steps,
    Resume { sgd: bool },
    SharedWorkerSeed,
    ResumeForgetsRng,
    GrowingLossHistory,
}

/// One training case.
struct TrainCase {
    name: &'static str,
    kind: Kind,
}

impl Case for TrainCase {
    fn name(&self) -> String {
        self.name.to_string()
    }
    fn backends(&self) -> Vec<Backend> {
        vec![Backend::Cpu, Backend::Cuda]
    }
    fn ops(&self) -> Vec<&'static str> {
        vec!["matmul", "col_sum", "dropout", "softmax", "reduce_sum"]
    }
    fn planted_bug(&self) -> Option<&'static str> {
        match self.kind {
            Kind::SharedWorkerSeed => Some(
                "every loader worker augments from one stream copied from the same seed, so augmentations repeat across workers",
            ),
            Kind::ResumeForgetsRng => Some(
                "the checkpoint restore leaves the dropout RNG state at its start instead of the saved (seed, offset)",
            ),
            Kind::GrowingLossHistory => Some(
                "the running loss is accumulated as a tensor that keeps every step's graph, in state that outlives the run",
            ),
            _ => None,
        }
    }
    fn needs_memory_counter(&self) -> bool {
        self.kind == Kind::GrowingLossHistory
    }
    fn run(&self, ctx: &mut Ctx) -> Result<Outputs> {
        let seed = ctx.controls.seed;
        let workers = ctx.controls.workers;
        match self.kind {
            Kind::Step => {
                let mut t = Trainer::new(seed, TrainConfig::small(OptimConfig::adamw(), workers))?;
                let s = t.train_step(ctx)?;
                let mut out = t.state_tensors();
                let shapes = t.config.dims.shapes();
                for (i, g) in s.grads.iter().enumerate() {
                    out.insert(
                        format!("grad/{}", PARAM_NAMES[i]),
                        Tensor::from_slice(&shapes[i], g),
                    );
                }
                out.insert("loss".into(), Tensor::scalar(s.loss));
                let (b, d) = (s.batch.y.len(), t.config.dims.input);
                out.insert("batch/x".into(), Tensor::from_slice(&[b, d], &s.batch.x));
                out.insert("batch/y".into(), Tensor::from_slice(&[b], &s.batch.y));
                Ok(out.into())
            }
            Kind::Steps => {
                let mut t = Trainer::new(seed, TrainConfig::small(OptimConfig::sgd(), workers))?;
                let losses = t.train(ctx, STEPS)?;
                Ok(with_losses(t.state_tensors(), &losses))
            }
            Kind::SharedWorkerSeed => {
                let mut cfg = TrainConfig::small(OptimConfig::sgd(), workers.max(2));
                cfg.loader.augment = AugmentRng::SharedWorkerSeed;
                let mut t = Trainer::new(seed, cfg)?;
                let losses = t.train(ctx, 4)?;
                Ok(with_losses(t.state_tensors(), &losses))
            }
            Kind::Resume { sgd } => {
                let optim = if sgd {
                    OptimConfig::sgd()
                } else {
                    OptimConfig::adamw()
                };
                resume(ctx, TrainConfig::small(optim, workers), false)
            }
            Kind::ResumeForgetsRng => {
                resume(ctx, TrainConfig::small(OptimConfig::adamw(), workers), true)
            }
            Kind::GrowingLossHistory => growing_loss_history(ctx, workers),
        }
    }
}

/// The training cases.
pub fn cases() -> Vec<Box<dyn Case>> {
    [
        ("train/mlp_step", Kind::Step),
        ("train/mlp_steps", Kind::Steps),
        ("train/resume", Kind::Resume { sgd: false }),
        ("train/resume_sgd", Kind::Resume { sgd: true }),
        ("train/planted_shared_worker_seed", Kind::SharedWorkerSeed),
        ("train/planted_resume_forgets_rng", Kind::ResumeForgetsRng),
        (
            "train/planted_growing_loss_history",
            Kind::GrowingLossHistory,
        ),
    ]
    .into_iter()
    .map(|(name, kind)| Box::new(TrainCase { name, kind }) as Box<dyn Case>)
    .collect()
}

fn with_losses(out: impl Into<Outputs>, losses: &[f32]) -> Outputs {
    let mut out = out.into();
    out.insert("losses".into(), Tensor::from_slice(&[losses.len()], losses));
    out
}

/// `2N` uninterrupted steps versus `N` + checkpoint + restore + `N`; returns the resumed
/// run's outputs and records a finding naming the first tensor that differs.
fn resume(ctx: &mut Ctx, cfg: TrainConfig, forget_rng: bool) -> Result<Outputs> {
    let seed = ctx.controls.seed;
    let mut full = Trainer::new(seed, cfg)?;
    let full_losses = full.train(ctx, 2 * RESUME_AT)?;
    let want = with_losses(full.state_tensors(), &full_losses);
    drop(full);

    let mut first = Trainer::new(seed, cfg)?;
    let mut losses = first.train(ctx, RESUME_AT)?;
    let bytes = first.checkpoint();
    drop(first);
    let mut resumed = Trainer::restore(seed, cfg, &bytes, forget_rng)?;
    losses.extend(resumed.train(ctx, RESUME_AT)?);
    let got = with_losses(resumed.state_tensors(), &losses);

    if let Some((name, a, b)) = want
        .iter()
        .find_map(|(k, a)| (got.get(k) != Some(a)).then(|| (k, a, got.get(k))))
    {
        let detail = match b {
            Some(b) => diff::explain(name, [0, 1], a, b)
                .summary()
                .replace("(runs 0 and 1)", "(uninterrupted vs resumed)"),
            None => format!("{name} missing after resume"),
        };
        ctx.findings.push(format!(
            "resume is not bit-exact: {RESUME_AT} steps + checkpoint to bytes + restore + {RESUME_AT} steps differs from {} uninterrupted steps; first differing output: {detail}",
            2 * RESUME_AT
        ));
    }
    Ok(got)
}

/// Loss history kept across runs (the planted bug's process-global state).
static HISTORY: Mutex<Vec<Vec<f32>>> = Mutex::new(Vec::new());

fn growing_loss_history(ctx: &mut Ctx, workers: usize) -> Result<Outputs> {
    let mut t = Trainer::new(
        ctx.controls.seed,
        TrainConfig::small(OptimConfig::sgd(), workers),
    )?;
    let mut losses = Vec::new();
    for _ in 0..STEPS {
        let s = t.train_step(ctx)?;
        losses.push(s.loss);
        // BUG (planted): `total_loss += loss` on a tensor that keeps the step's graph alive:
        // the inputs, activations and weights it saved for backward are never freed.
        let c = s.cache;
        let graph: Vec<f32> = [c.x, c.z1, c.d1, c.probs, t.model.params[0].clone()]
            .concat()
            .into_iter()
            .chain(std::iter::once(s.loss))
            .collect();
        HISTORY
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(graph);
    }
    Ok(with_losses(t.state_tensors(), &losses))
}
