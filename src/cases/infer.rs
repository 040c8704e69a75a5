//! `infer/...` cases: evaluation in eval mode (`model.eval()` + `torch.no_grad()`).
//!
//! * `infer/eval` — a model trained from a fixed seed (as a released checkpoint would be) is
//!   evaluated on a fixed held-out set with dropout off and without building anything for a
//!   backward pass: class probabilities, predictions, mean loss and accuracy. The run's seed
//!   only drives the dropout stream, which eval mode does not use, so the case declares its
//!   outputs seed-independent and the `seed` variation checks it. Notes: its peak heap next to
//!   a training step's (forward + backward) over the same rows; a finding when eval does not
//!   need less.
//! * `infer/planted_dropout_in_eval` — leaves dropout on (`model.train()` mode) with masks
//!   from the run's seed: caught under `--vary seed`, with blame naming `seed`.

use crate::case::{Case, Ctx, Outputs};
use crate::memory::{self, human};
use crate::ops;
use crate::rng::Stream;
use crate::tensor::Tensor;
use crate::train::loader::Dataset;
use crate::train::model::Mlp;
use crate::train::optim::OptimConfig;
use crate::train::{TrainConfig, Trainer};
use crate::vary::Variation;
use crate::Backend;
use anyhow::Result;

/// Seed the evaluated model was trained from (fixed: the model is an input, not the run's).
pub const TRAIN_SEED: u64 = 2024;
/// Training steps before evaluation.
pub const TRAIN_STEPS: usize = 16;
/// Held-out rows evaluated.
pub const EVAL_ROWS: usize = 256;

struct Eval {
    planted: bool,
}

/// The inference cases.
pub fn cases() -> Vec<Box<dyn Case>> {
    vec![
        Box::new(Eval { planted: false }),
        Box::new(Eval { planted: true }),
    ]
}

impl Case for Eval {
    fn name(&self) -> String {
        if self.planted {
            "infer/planted_dropout_in_eval".into()
        } else {
            "infer/eval".into()
        }
    }
    fn backends(&self) -> Vec<Backend> {
        vec![Backend::Cpu, Backend::Cuda]
    }
    fn ops(&self) -> Vec<&'static str> {
        vec!["matmul", "softmax", "reduce_sum", "dropout"]
    }
    fn planted_bug(&self) -> Option<&'static str> {
        self.planted.then_some(
            "evaluates with dropout still on (train mode), so predictions follow the seed",
        )
    }
    fn caught_by(&self) -> Option<Variation> {
        self.planted.then_some(Variation::Seed)
    }
    fn seed_independent(&self) -> bool {
        true
    }
    fn run(&self, ctx: &mut Ctx) -> Result<Outputs> {
        let cfg = TrainConfig::small(OptimConfig::adamw(), ctx.controls.workers);
        let mut t = Trainer::new(TRAIN_SEED, cfg)?;
        t.train(ctx, TRAIN_STEPS)?;
        let model = t.model.clone();
        drop(t);
        let d = cfg.dims;
        let held_out = Dataset::generate(TRAIN_SEED + 1, EVAL_ROWS, d.input, d.classes)?;
        let (x, y) = (&held_out.x, &held_out.y);

        // A training step's forward + backward over the same rows, for the memory comparison.
        let mut rng = Stream::named(TRAIN_SEED, "infer/train_step");
        let (r, train_peak) = memory::scoped_peak(|| -> Result<()> {
            let (_, cache) = model.forward(ctx, x, y, cfg.dropout, &mut rng)?;
            model.backward(ctx, &cache)?;
            Ok(())
        });
        r?;
        let dropout = self.planted.then_some(cfg.dropout);
        let (r, eval_peak) = memory::scoped_peak(|| evaluate(ctx, &model, x, y, dropout));
        let out = r?;
        if let Some((e, t)) = eval_peak.zip(train_peak).filter(|(e, t)| e >= t) {
            ctx.findings.push(format!(
                "eval needs as much heap as training: peak {} in eval, {} for a training step",
                human(e),
                human(t)
            ));
        }
        let text = |p: Option<u64>| p.map_or_else(|| "unknown".into(), human);
        ctx.notes.push(format!(
            "peak heap over {EVAL_ROWS} rows: eval (no dropout, nothing kept for backward) {}, training step (forward + backward) {}",
            text(eval_peak),
            text(train_peak)
        ));
        Ok(out)
    }
}

/// Eval-mode forward: probabilities, predictions, mean loss and accuracy. With `dropout`
/// (the PLANTED bug) hidden units are dropped with masks from the run's seed.
fn evaluate(
    ctx: &mut Ctx,
    model: &Mlp,
    x: &[f32],
    y: &[i64],
    dropout: Option<f32>,
) -> Result<Outputs> {
    let d = model.dims;
    let n = y.len();
    let [w1, b1, w2, b2] = [0, 1, 2, 3].map(|i| &model.params[i]);
    let mut h = ops::matmul::matmul(ctx, x, w1, n, d.input, d.hidden)?;
    for row in h.chunks_mut(d.hidden) {
        row.iter_mut()
            .zip(b1)
            .for_each(|(v, b)| *v = (*v + b).max(0.0));
    }
    if let Some(p) = dropout {
        let mut s = Stream::named(ctx.controls.seed, "infer/dropout");
        h = ops::dropout::dropout(ctx, &h, p, &mut s)?.0;
    }
    let mut z = ops::matmul::matmul(ctx, &h, w2, n, d.hidden, d.classes)?;
    for row in z.chunks_mut(d.classes) {
        row.iter_mut().zip(b2).for_each(|(v, b)| *v += b);
    }
    let probs = ops::softmax::softmax(ctx, &z, n, d.classes)?;
    let mut pred = Vec::with_capacity(n);
    let mut losses = Vec::with_capacity(n);
    for (row, &c) in probs.chunks(d.classes).zip(y) {
        let best = (0..d.classes).fold(0, |b, k| if row[k] > row[b] { k } else { b });
        pred.push(best as i64);
        losses.push(-row[c as usize].max(f32::MIN_POSITIVE).ln());
    }
    let loss = ops::reduce_sum::reduce_sum(ctx, &losses)? / n as f32;
    let correct = pred.iter().zip(y).filter(|(p, y)| p == y).count();
    Ok(Outputs::new()
        .with("probs", Tensor::from_slice(&[n, d.classes], &probs))
        .with("pred", Tensor::from_slice(&[n], &pred))
        .with("loss", Tensor::scalar(loss))
        .with("accuracy", Tensor::scalar(correct as f32 / n as f32)))
}
