//! Gradient checkpointing (`torch.utils.checkpoint`) on the [`DeepMlp`]: one training step
//! with stored activations versus one that stores only segment inputs and recomputes each
//! segment in the backward. The recompute restores the dropout RNG state of the forward pass
//! (PyTorch's `preserve_rng_state=True`): the Philox stream is addressed by
//! `(seed, stream, offset)`, so restoring is handing the recompute the step's starting
//! position. Both ways must give the same gradients and updated parameters bit for bit, and
//! the checkpointed way must need less heap.

use super::deep::{DeepMlp, Mode, Rows};
use super::optim::{OptimConfig, Optimizer};
use crate::case::{Ctx, Outputs};
use crate::memory;
use crate::rng::Stream;
use crate::tensor::Tensor;
use anyhow::Result;

/// Layer widths of the practice cases' deeper model: 64 inputs, 4 hidden layers of 256, 10
/// classes.
pub const WIDTHS: [usize; 6] = [64, 256, 256, 256, 256, 10];
/// Rows per batch of the checkpointing case.
pub const BATCH: usize = 256;
/// Layers per checkpointed segment.
pub const SEGMENT: usize = 2;
/// Dropout probability of every hidden layer.
pub const DROPOUT: f32 = 0.1;

/// What one step produced.
pub struct StepResult {
    /// Mean loss of the batch.
    pub loss: f32,
    /// Gradients in parameter order.
    pub grads: Vec<Vec<f32>>,
    /// Parameters after one SGD-momentum update.
    pub params: Vec<Vec<f32>>,
    /// Peak heap of the forward and backward above their start (`None`: unknown).
    pub peak: Option<u64>,
}

impl StepResult {
    /// `loss`, `grad/<p>` and `param/<p>` tensors of `model`'s parameters.
    pub fn outputs(&self, model: &DeepMlp) -> Outputs {
        let mut out = Outputs::new().with("loss", Tensor::scalar(self.loss));
        for ((name, shape), (g, p)) in model
            .param_names()
            .iter()
            .zip(model.shapes())
            .zip(self.grads.iter().zip(&self.params))
        {
            out.insert(format!("grad/{name}"), Tensor::from_slice(&shape, g));
            out.insert(format!("param/{name}"), Tensor::from_slice(&shape, p));
        }
        out
    }
}

/// Applies one SGD-momentum update with `grads` to a copy of `model`'s parameters.
pub fn updated(model: &DeepMlp, grads: &[Vec<f32>]) -> Result<Vec<Vec<f32>>> {
    let sizes: Vec<usize> = model.params.iter().map(Vec::len).collect();
    let mut params = model.params.clone();
    Optimizer::new(OptimConfig::sgd(), &sizes).step(&mut params, grads)?;
    Ok(params)
}

/// One step over the batch `(x, y)` with dropout from `rng`, keeping activations as `mode`
/// says; its peak heap is measured around forward and backward.
pub fn step(
    ctx: &mut Ctx,
    model: &DeepMlp,
    (x, y): (&[f32], &[i64]),
    rng: Stream,
    mode: Mode,
) -> Result<StepResult> {
    let rows = Rows {
        x,
        y,
        r0: 0,
        batch: y.len(),
        rng,
        p: DROPOUT,
    };
    let mut grads = model.zero_grads();
    let mut loss = 0.0f32;
    let (r, peak) = memory::scoped_peak(|| {
        model.step_rows(ctx, &rows, mode, &mut grads, &mut loss, &mut Vec::new())
    });
    r?;
    Ok(StepResult {
        loss: loss / y.len() as f32,
        params: updated(model, &grads)?,
        grads,
        peak,
    })
}

/// The checkpointed mode of a step starting at `rng`: the recompute draws from `rng` itself
/// (correct), or with `forget_rng` (the PLANTED bug) from the stream's position after the
/// forward, so it draws fresh dropout masks.
pub fn checkpointed(model: &DeepMlp, rng: Stream, batch: usize, forget_rng: bool) -> Mode {
    let recompute_rng = if forget_rng {
        Stream {
            offset: rng.offset + model.dropout_words(batch),
            ..rng
        }
    } else {
        rng
    };
    Mode::Checkpointed {
        segment: SEGMENT,
        recompute_rng,
    }
}
