//! Out-of-memory recovery: a step over a batch whose activations do not fit a memory budget
//! ([`memory::with_budget`]) fails with [`memory::OutOfMemory`] at the first layer whose
//! reservation is refused, frees the failed attempt's buffers, and falls back to micro-batches
//! with gradient accumulation (PyTorch: catch `torch.cuda.OutOfMemoryError`, free, retry in
//! smaller pieces).
//!
//! The fallback gives the full-batch step's bits because the gradients are accumulated into
//! one set of running buffers sample by sample in ascending order over the whole batch
//! ([`super::deep::accum_outer`]) and the loss gradient is scaled by the full batch size:
//! reductions over samples do not depend on the micro-batch size. Two PLANTED ways to get it
//! wrong: summing per-micro-batch gradient sums (different rounding), and keeping the failed
//! attempt's buffers referenced during the fallback (as a Python exception's traceback keeps
//! the frame's tensors alive), so the real heap peak of the recovery exceeds the budget.

use super::deep::{DeepMlp, LayerAct, Mode, Rows};
use super::recompute::{updated, DROPOUT};
use crate::case::Ctx;
use crate::memory::{self, OutOfMemory};
use crate::rng::Stream;
use anyhow::Result;

/// Rows per batch of the out-of-memory case.
pub const OOM_BATCH: usize = 512;

/// How the fallback behaves (both `false`: correct).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fallback {
    /// PLANTED: keep the failed attempt's buffers alive during the fallback.
    pub hold_failed: bool,
    /// PLANTED: accumulate micro-batch gradient sums instead of per-sample contributions.
    pub naive_accumulation: bool,
}

/// What a budgeted step did.
pub struct BudgetedStep {
    /// Mean loss of the batch.
    pub loss: f32,
    /// Gradients in parameter order.
    pub grads: Vec<Vec<f32>>,
    /// Parameters after one SGD-momentum update.
    pub params: Vec<Vec<f32>>,
    /// The refused reservation and the layer that asked, when the full batch did not fit.
    pub oom: Option<(usize, OutOfMemory)>,
    /// Bytes the failed attempt had allocated for its activations.
    pub failed_bytes: u64,
    /// Rows per micro-batch (the batch size when it fit).
    pub micro: usize,
    /// Peak heap of the whole step above its start (`None`: unknown).
    pub peak: Option<u64>,
    /// Peak heap during the fallback above the step's start, held buffers included.
    pub recovery_peak: Option<u64>,
}

/// Rows per micro-batch for `budget`: the batch halved until one stored-activation step
/// reserves at most a quarter of the budget (the rest is left for the backward's temporaries,
/// such as transposed weights, which are not reserved).
pub fn micro_batch(model: &DeepMlp, batch: usize, budget: u64) -> usize {
    let mut micro = batch;
    while micro > 1 && model.step_bytes(micro) > budget / 4 {
        micro = micro.div_ceil(2);
    }
    micro
}

fn act_bytes(a: &LayerAct) -> u64 {
    (4 * (a.input.len() + a.z.len()) + a.mask.len()) as u64
}

/// The failed attempt's activation buffers, taken out of `acts` and kept referenced: the
/// PLANTED `hold_failed` keeps them alive while their reservations go.
fn hold(acts: &mut [LayerAct]) -> Vec<(Vec<f32>, Vec<f32>, Vec<bool>)> {
    acts.iter_mut()
        .map(|a| {
            let z = std::mem::take(&mut a.z);
            (std::mem::take(&mut a.input), z, std::mem::take(&mut a.mask))
        })
        .collect()
}

/// The fallback: the rows of `full` in micro-batches of `micro` rows, in ascending order,
/// their gradients accumulated into `grads` and their losses summed into `loss` (per sample,
/// or, with the PLANTED `naive_accumulation`, as per-micro-batch sums).
fn accumulate(
    ctx: &mut Ctx,
    model: &DeepMlp,
    full: &Rows,
    micro: usize,
    fallback: Fallback,
    (grads, loss): (&mut [Vec<f32>], &mut f32),
) -> Result<()> {
    let (x, y, batch) = (full.x, full.y, full.y.len());
    let d = model.widths[0];
    for r0 in (0..batch).step_by(micro) {
        let r1 = (r0 + micro).min(batch);
        let rows = Rows {
            x: &x[r0 * d..r1 * d],
            y: &y[r0..r1],
            r0,
            ..*full
        };
        if fallback.naive_accumulation {
            // PLANTED: this micro-batch's gradient sum, then added to the total.
            let mut g = model.zero_grads();
            model.step_rows(ctx, &rows, Mode::Stored, &mut g, loss, &mut Vec::new())?;
            for (t, m) in grads.iter_mut().zip(&g) {
                t.iter_mut().zip(m).for_each(|(t, m)| *t += m);
            }
        } else {
            model.step_rows(ctx, &rows, Mode::Stored, grads, loss, &mut Vec::new())?;
        }
    }
    Ok(())
}

/// One step over `(x, y)` under a budget of `budget` bytes: the full batch first, and on an
/// out-of-memory error the micro-batch fallback (behaving as `fallback` says). Errors other
/// than running out of memory are returned.
pub fn budgeted_step(
    ctx: &mut Ctx,
    model: &DeepMlp,
    (x, y): (&[f32], &[i64]),
    rng: Stream,
    budget: u64,
    fallback: Fallback,
) -> Result<BudgetedStep> {
    let batch = y.len();
    let full = Rows {
        x,
        y,
        r0: 0,
        batch,
        rng,
        p: DROPOUT,
    };
    let base = memory::current();
    let mut grads = model.zero_grads();
    let mut loss = 0.0f32;
    let (r, peak) = memory::scoped_peak(|| {
        memory::with_budget(budget, || -> Result<_> {
            let mut acts = Vec::new();
            let attempt =
                model.step_rows(ctx, &full, Mode::Stored, &mut grads, &mut loss, &mut acts);
            let oom = match attempt {
                Ok(()) => return Ok((None, 0, batch, None)),
                Err(e) => match e.downcast_ref::<OutOfMemory>() {
                    Some(oom) => (acts.len(), *oom),
                    None => return Err(e),
                },
            };
            let failed_bytes: u64 = acts.iter().map(act_bytes).sum();
            // PLANTED (hold_failed): the buffers stay referenced while their reservations go.
            let held = if fallback.hold_failed {
                hold(&mut acts)
            } else {
                Vec::new()
            };
            drop(acts);
            grads.iter_mut().for_each(|g| g.fill(0.0));
            loss = 0.0;
            let micro = micro_batch(model, batch, budget);
            let start = memory::current();
            let (r, p) = memory::scoped_peak(|| {
                accumulate(ctx, model, &full, micro, fallback, (&mut grads, &mut loss))
            });
            r?;
            drop(held);
            let recovery = base
                .zip(start)
                .zip(p)
                .map(|((b, s), p)| s.saturating_sub(b) + p);
            Ok((Some(oom), failed_bytes, micro, recovery))
        })
    });
    let (oom, failed_bytes, micro, recovery_peak) = r?;
    Ok(BudgetedStep {
        loss: loss / batch as f32,
        params: updated(model, &grads)?,
        grads,
        oom,
        failed_bytes,
        micro,
        peak,
        recovery_peak,
    })
}
