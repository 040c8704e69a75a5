//! PyTorch training practices as cases that prove them, on the deeper MLP of
//! [`crate::train::deep`]:
//!
//! * `train/grad_checkpoint` — one step with gradient checkpointing (segments of
//!   [`SEGMENT`] layers recomputed in the backward, dropout RNG state restored) against the
//!   same step with stored activations: gradients and updated parameters must be equal bit for
//!   bit (else a finding names the first differing tensor). Notes: the peak heap of both ways.
//! * `train/planted_checkpoint_forgets_rng` — the recompute draws fresh dropout masks.
//! * `train/oom_fallback` — a batch of [`OOM_BATCH`] rows under a budget its activations do
//!   not fit: out of memory, the failed attempt is freed, then micro-batches with gradient
//!   accumulation. The result must equal the full-batch step under a budget that fits, and the
//!   real heap peak of the recovery must stay within the budget. Notes: the figures.
//! * `train/planted_microbatch_order` — micro-batch gradients accumulated as sums of sums.
//! * `train/planted_oom_holds_memory` — the failed attempt's buffers stay alive during the
//!   fallback; caught as "peak during recovery exceeds the budget".
//!
//! The batch comes from the training loader with `ctx.controls.workers` workers (dropped
//! before anything is measured).

use crate::case::{Case, Ctx, Outputs};
use crate::diff;
use crate::memory::human;
use crate::rng::Stream;
use crate::train::deep::{DeepMlp, Mode};
use crate::train::loader::{AugmentRng, Dataset, Loader, LoaderConfig};
use crate::train::microbatch::{self, Fallback, OOM_BATCH};
use crate::train::recompute::{self, StepResult, SEGMENT, WIDTHS};
use crate::Backend;
use anyhow::{bail, Result};
use std::sync::Arc;

/// Which practice case.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Checkpoint { forget_rng: bool },
    Oom(Fallback),
}

struct Practice {
    name: &'static str,
    kind: Kind,
}

/// The practice cases on the training step.
pub fn cases() -> Vec<Box<dyn Case>> {
    let planted_order = Fallback {
        naive_accumulation: true,
        ..Fallback::default()
    };
    let planted_hold = Fallback {
        hold_failed: true,
        ..Fallback::default()
    };
    [
        (
            "train/grad_checkpoint",
            Kind::Checkpoint { forget_rng: false },
        ),
        (
            "train/planted_checkpoint_forgets_rng",
            Kind::Checkpoint { forget_rng: true },
        ),
        ("train/oom_fallback", Kind::Oom(Fallback::default())),
        ("train/planted_microbatch_order", Kind::Oom(planted_order)),
        ("train/planted_oom_holds_memory", Kind::Oom(planted_hold)),
    ]
    .into_iter()
    .map(|(name, kind)| Box::new(Practice { name, kind }) as Box<dyn Case>)
    .collect()
}

impl Case for Practice {
    fn name(&self) -> String {
        self.name.to_string()
    }
    fn backends(&self) -> Vec<Backend> {
        match self.kind {
            Kind::Checkpoint { .. } => vec![Backend::Cpu, Backend::Cuda],
            // The budget is on host heap, measured by the counting allocator.
            Kind::Oom(_) => vec![Backend::Cpu],
        }
    }
    fn ops(&self) -> Vec<&'static str> {
        vec!["matmul", "dropout", "softmax"]
    }
    fn planted_bug(&self) -> Option<&'static str> {
        match self.kind {
            Kind::Checkpoint { forget_rng: true } => Some(
                "the checkpointed backward recomputes each segment with fresh dropout masks instead of restoring the forward's RNG state",
            ),
            Kind::Oom(f) if f.naive_accumulation => Some(
                "the micro-batch fallback adds up per-micro-batch gradient sums, so the result follows the micro-batch size",
            ),
            Kind::Oom(f) if f.hold_failed => Some(
                "the failed full-batch attempt's buffers stay referenced during the micro-batch fallback",
            ),
            _ => None,
        }
    }
    fn run(&self, ctx: &mut Ctx) -> Result<Outputs> {
        match self.kind {
            Kind::Checkpoint { forget_rng } => grad_checkpoint(ctx, forget_rng),
            Kind::Oom(fallback) => oom_fallback(ctx, fallback),
        }
    }
}

/// A batch of `batch` rows from the training loader, the model, and the step's dropout RNG.
fn setup(ctx: &mut Ctx, batch: usize) -> Result<(DeepMlp, Vec<f32>, Vec<i64>, Stream)> {
    let seed = ctx.controls.seed;
    let data = Dataset::generate(seed, batch * 2, WIDTHS[0], WIDTHS[WIDTHS.len() - 1])?;
    let cfg = LoaderConfig {
        batch,
        workers: ctx.controls.workers,
        augment: AugmentRng::PerSample,
        jitter: false,
    };
    let mut loader = Loader::new(Arc::new(data), cfg, seed)?;
    let b = loader.next_batch()?;
    ctx.findings.extend(loader.take_findings());
    drop(loader);
    let model = DeepMlp::init(&WIDTHS, seed);
    Ok((model, b.x, b.y, Stream::named(seed, "train/deep/dropout")))
}

/// The first output of `got` that differs from `want`, explained (`a` and `b` name the two).
pub fn first_difference(want: &Outputs, got: &Outputs, a: &str, b: &str) -> Option<String> {
    want.iter().find_map(|(name, w)| match got.get(name) {
        Some(g) if g == w => None,
        Some(g) => Some(
            diff::explain(name, [0, 1], w, g)
                .summary()
                .replace("(runs 0 and 1)", &format!("({a} vs {b})")),
        ),
        None => Some(format!("{name} missing from the {b} step")),
    })
}

fn peak_text(p: Option<u64>) -> String {
    p.map_or_else(|| "unknown (no counting allocator)".into(), human)
}

fn grad_checkpoint(ctx: &mut Ctx, forget_rng: bool) -> Result<Outputs> {
    let batch = recompute::BATCH;
    let (model, x, y, rng) = setup(ctx, batch)?;
    let stored = recompute::step(ctx, &model, (&x, &y), rng, Mode::Stored)?;
    let mode = recompute::checkpointed(&model, rng, batch, forget_rng);
    let ckpt = recompute::step(ctx, &model, (&x, &y), rng, mode)?;
    let (want, got) = (stored.outputs(&model), ckpt.outputs(&model));
    if let Some(d) = first_difference(&want, &got, "stored", "checkpointed") {
        ctx.findings.push(format!(
            "gradient checkpointing is not bit-exact: the step recomputing segments of {SEGMENT} layers differs from the stored-activation step; first differing output: {d}"
        ));
    }
    let saved = stored.peak.zip(ckpt.peak).map(|(s, c)| {
        let pct = 100.0 * (1.0 - c as f64 / s.max(1) as f64);
        format!(" ({} saved, {pct:.0} %)", human(s.saturating_sub(c)))
    });
    ctx.notes.push(format!(
        "peak heap of forward + backward over {batch} rows, {} hidden layers: stored activations {}, checkpointed (segments of {SEGMENT} layers recomputed) {}{}",
        WIDTHS.len() - 2,
        peak_text(stored.peak),
        peak_text(ckpt.peak),
        saved.unwrap_or_default()
    ));
    Ok(got)
}

fn oom_fallback(ctx: &mut Ctx, fallback: Fallback) -> Result<Outputs> {
    if fallback.hold_failed && !crate::memory::installed() {
        // Judged by the real heap peak within the run (so it also works one run per process,
        // unlike the growth check of `Case::needs_memory_counter`).
        bail!("needs the counting allocator (bitexact::memory::CountingAlloc) to measure the recovery's peak");
    }
    let (model, x, y, rng) = setup(ctx, OOM_BATCH)?;
    let need = model.step_bytes(OOM_BATCH);
    // A budget that fits the full batch (twice its reservations), and one that does not.
    let roomy =
        microbatch::budgeted_step(ctx, &model, (&x, &y), rng, 2 * need, Fallback::default())?;
    if let Some((layer, e)) = roomy.oom {
        bail!("the reference full-batch step ran out of memory at layer {layer}: {e}");
    }
    let budget = need / 2;
    let tight = microbatch::budgeted_step(ctx, &model, (&x, &y), rng, budget, fallback)?;
    let Some((layer, oom)) = tight.oom else {
        bail!(
            "the batch fit the {} budget: nothing was recovered",
            human(budget)
        );
    };
    let result = |s: &microbatch::BudgetedStep| StepResult {
        loss: s.loss,
        grads: s.grads.clone(),
        params: s.params.clone(),
        peak: s.peak,
    };
    let want = result(&roomy).outputs(&model);
    let got = result(&tight).outputs(&model);
    if let Some(d) = first_difference(&want, &got, "full batch", "micro-batch") {
        ctx.findings.push(format!(
            "the micro-batch fallback is not bit-identical to the full-batch step: first differing output: {d}"
        ));
    }
    if let Some(p) = tight.recovery_peak.filter(|&p| p > budget) {
        ctx.findings.push(format!(
            "peak during recovery exceeds the budget: {} > {} (the failed attempt had {} of activations; are they still referenced?)",
            human(p),
            human(budget),
            human(tight.failed_bytes)
        ));
    }
    ctx.notes.push(format!(
        "full batch of {OOM_BATCH} rows reserves {} of activations; budget {}: out of memory at layer {layer} ({oom}); the failed attempt had allocated {}; fell back to {} micro-batches of {} rows with gradient accumulation",
        human(need),
        human(budget),
        human(tight.failed_bytes),
        OOM_BATCH.div_ceil(tight.micro),
        tight.micro
    ));
    ctx.notes.push(format!(
        "peak heap during recovery {} (budget {}); the full-batch step under a {} budget peaked at {}",
        peak_text(tight.recovery_peak),
        human(budget),
        human(2 * need),
        peak_text(roomy.peak)
    ));
    Ok(got)
}
