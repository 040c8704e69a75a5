//! The training half: an MLP trained with SGD-momentum or AdamW on a synthetic dataset fed by
//! a multi-worker loader, with bit-exact checkpoint/resume.
//!
//! A `Trainer` owns the model (`model`), the optimizer (`optim`), the loader
//! (`loader`) and the dropout RNG state (a Philox `Stream` position: seed, stream,
//! offset). `Trainer::checkpoint` writes all of it to bytes (`checkpoint`) and
//! `Trainer::restore` rebuilds a fresh trainer from them, so `2N` steps equal `N` steps +
//! checkpoint + restore + `N` steps, bit for bit. All random numbers come from Philox streams
//! keyed by the run's seed: initial weights, data, shuffles, augmentations, dropout masks.

pub mod checkpoint;
pub mod dataset;
pub mod deep;
pub mod loader;
pub mod microbatch;
pub mod model;
pub mod optim;
pub mod recompute;

use crate::case::Ctx;
use crate::rng::Stream;
use crate::tensor::Tensor;
use anyhow::{bail, Result};
use loader::{AugmentRng, Batch, Dataset, Loader, LoaderConfig, Position};
use model::{Cache, Dims, Mlp, PARAM_NAMES};
use optim::{OptimConfig, OptimKind, Optimizer};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Everything that defines a training run besides the seed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TrainConfig {
    /// Layer sizes.
    pub dims: Dims,
    /// Dataset size.
    pub samples: usize,
    /// Dropout probability.
    pub dropout: f32,
    /// Optimizer.
    pub optim: OptimConfig,
    /// Loader settings.
    pub loader: LoaderConfig,
}

impl TrainConfig {
    /// The built-in cases' model: 64 inputs, 128 hidden, 10 classes, batch 32, 512 samples
    /// (16 batches per epoch), dropout 0.1, with `workers` loader workers.
    pub fn small(optim: OptimConfig, workers: usize) -> TrainConfig {
        TrainConfig {
            dims: Dims {
                input: 64,
                hidden: 128,
                classes: 10,
            },
            samples: 512,
            dropout: 0.1,
            optim,
            loader: LoaderConfig {
                batch: 32,
                workers,
                augment: AugmentRng::PerSample,
                jitter: false,
            },
        }
    }
}

/// What one training step produced.
pub struct StepOut {
    /// Mean loss of the batch (before the update).
    pub loss: f32,
    /// Gradients in [`PARAM_NAMES`] order.
    pub grads: Vec<Vec<f32>>,
    /// Forward-pass cache (the step's "graph").
    pub cache: Cache,
    /// The batch.
    pub batch: Batch,
}

/// Model, optimizer, loader and dropout RNG state.
pub struct Trainer {
    /// Configuration.
    pub config: TrainConfig,
    /// Model.
    pub model: Mlp,
    /// Optimizer and its state.
    pub opt: Optimizer,
    /// Data loader.
    pub loader: Loader,
    /// Dropout RNG position.
    pub rng: Stream,
    /// Steps taken.
    pub step: u64,
}

impl Trainer {
    /// A fresh trainer: weights, data, shuffles and dropout all drawn from `seed`.
    pub fn new(seed: u64, config: TrainConfig) -> Result<Trainer> {
        let d = config.dims;
        let data = Arc::new(Dataset::generate(seed, config.samples, d.input, d.classes)?);
        let model = Mlp::init(d, seed);
        let sizes: Vec<usize> = model.params.iter().map(Vec::len).collect();
        Ok(Trainer {
            config,
            opt: Optimizer::new(config.optim, &sizes),
            loader: Loader::new(data, config.loader, seed)?,
            rng: Stream::named(seed, "train/dropout"),
            model,
            step: 0,
        })
    }

    /// One step: next batch, forward, backward, optimizer update. Loader findings are moved
    /// into `ctx.findings`.
    pub fn train_step(&mut self, ctx: &mut Ctx) -> Result<StepOut> {
        let batch = self.loader.next_batch()?;
        ctx.findings.extend(self.loader.take_findings());
        let (loss, cache) =
            self.model
                .forward(ctx, &batch.x, &batch.y, self.config.dropout, &mut self.rng)?;
        let grads = self.model.backward(ctx, &cache)?;
        self.opt.step(&mut self.model.params, &grads)?;
        self.step += 1;
        Ok(StepOut {
            loss,
            grads,
            cache,
            batch,
        })
    }

    /// Runs `n` steps and returns their losses.
    pub fn train(&mut self, ctx: &mut Ctx, n: usize) -> Result<Vec<f32>> {
        (0..n).map(|_| Ok(self.train_step(ctx)?.loss)).collect()
    }

    /// The complete state as checkpoint bytes (see [`checkpoint`] for the layout).
    pub fn checkpoint(&self) -> Vec<u8> {
        let mut w = checkpoint::Writer::default();
        w.u64(self.step);
        let d = self.config.dims;
        for v in [d.input, d.hidden, d.classes] {
            w.u64(v as u64);
        }
        w.u64(self.config.samples as u64);
        w.u64(self.config.loader.batch as u64);
        w.f32(self.config.dropout);
        let c = self.opt.config;
        w.u32(c.kind.tag());
        for v in [c.lr, c.beta1, c.beta2, c.eps, c.weight_decay] {
            w.f32(v);
        }
        w.u64(self.opt.t);
        for buf in self.opt.m.iter().chain(&self.opt.v) {
            w.f32s(buf);
        }
        for p in &self.model.params {
            w.f32s(p);
        }
        w.stream(&self.rng);
        let pos = self.loader.position();
        w.u64(pos.epoch);
        w.u64(pos.batch);
        let ws = self.loader.worker_streams();
        w.u64(ws.len() as u64);
        for s in ws {
            w.stream(s);
        }
        w.finish()
    }

    /// A fresh trainer (new model, optimizer, loader) loaded from `bytes`. The configuration
    /// must match the one the checkpoint was written with. With `forget_rng` (the PLANTED
    /// resume bug) the dropout RNG state is left at its fresh start instead of being restored.
    pub fn restore(
        seed: u64,
        config: TrainConfig,
        bytes: &[u8],
        forget_rng: bool,
    ) -> Result<Trainer> {
        let mut t = Trainer::new(seed, config)?;
        let mut r = checkpoint::Reader::open(bytes)?;
        t.step = r.counter("step", checkpoint::MAX_COUNTER)?;
        let d = config.dims;
        let dims = [r.u64("dims")?, r.u64("dims")?, r.u64("dims")?];
        if dims != [d.input as u64, d.hidden as u64, d.classes as u64] {
            bail!(
                "checkpoint: model dims {dims:?}, this model is [{}, {}, {}]",
                d.input,
                d.hidden,
                d.classes
            );
        }
        let data = (r.u64("samples")?, r.u64("batch size")?, r.f32("dropout")?);
        let want = (
            config.samples as u64,
            config.loader.batch as u64,
            config.dropout,
        );
        if data != want {
            bail!("checkpoint: (samples, batch size, dropout) = {data:?}, this run has {want:?}");
        }
        let kind = OptimKind::from_tag(r.u32("optimizer kind")?)?;
        let mut hp = [0f32; 5];
        for v in &mut hp {
            *v = r.f32("optimizer hyper-parameters")?;
        }
        let saved = OptimConfig {
            kind,
            lr: hp[0],
            beta1: hp[1],
            beta2: hp[2],
            eps: hp[3],
            weight_decay: hp[4],
        };
        if saved != config.optim {
            bail!(
                "checkpoint: optimizer {saved:?} differs from this run's {:?}",
                config.optim
            );
        }
        t.opt.t = r.counter("optimizer step", checkpoint::MAX_COUNTER)?;
        let sizes: Vec<usize> = t.model.params.iter().map(Vec::len).collect();
        for (i, &n) in sizes.iter().enumerate() {
            t.opt.m[i] = r.f32s(&format!("optimizer m[{}]", PARAM_NAMES[i]), n)?;
        }
        for i in 0..t.opt.v.len() {
            t.opt.v[i] = r.f32s(&format!("optimizer v[{}]", PARAM_NAMES[i]), sizes[i])?;
        }
        for (i, &n) in sizes.iter().enumerate() {
            t.model.params[i] = r.f32s(&format!("parameter {}", PARAM_NAMES[i]), n)?;
        }
        let rng = r.stream("dropout rng")?;
        if !forget_rng {
            t.rng = rng;
        }
        let pos = Position {
            epoch: r.counter("loader epoch", checkpoint::MAX_COUNTER)?,
            batch: r.counter("loader batch", checkpoint::MAX_COUNTER)?,
        };
        let n = r.counter("loader worker count", checkpoint::MAX_WORKER_STREAMS)?;
        let streams = (0..n)
            .map(|_| r.stream("loader worker stream"))
            .collect::<Result<Vec<_>>>()?;
        r.finish()?;
        t.loader
            .seek(pos, Some(streams))
            .map_err(|e| anyhow::anyhow!("checkpoint: loader position: {e:#}"))?;
        Ok(t)
    }

    /// Parameters and optimizer state as named tensors (`param/w1`, `opt/m/w1`, ...).
    pub fn state_tensors(&self) -> BTreeMap<String, Tensor> {
        let shapes = self.config.dims.shapes();
        let mut out = BTreeMap::new();
        for (i, name) in PARAM_NAMES.iter().enumerate() {
            let shape = &shapes[i];
            out.insert(
                format!("param/{name}"),
                Tensor::from_slice(shape, &self.model.params[i]),
            );
            out.insert(
                format!("opt/m/{name}"),
                Tensor::from_slice(shape, &self.opt.m[i]),
            );
            if let Some(v) = self.opt.v.get(i) {
                out.insert(format!("opt/v/{name}"), Tensor::from_slice(shape, v));
            }
        }
        out.insert("opt/t".into(), Tensor::scalar(self.opt.t as i64));
        out.insert(
            "rng/dropout_offset".into(),
            Tensor::scalar(self.rng.offset as i64),
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Backend;
    use crate::controls::Controls;

    fn tiny(optim: OptimConfig) -> TrainConfig {
        let mut c = TrainConfig::small(optim, 2);
        c.dims = Dims {
            input: 8,
            hidden: 16,
            classes: 3,
        };
        c.samples = 40;
        c.loader.batch = 8;
        c
    }

    #[test]
    fn resume_is_bit_exact_and_loss_decreases() {
        for optim in [OptimConfig::sgd(), OptimConfig::adamw()] {
            let cfg = tiny(optim);
            let mut ctx = Ctx::new(Backend::Cpu, Controls::default());
            let mut full = Trainer::new(5, cfg).unwrap();
            let losses = full.train(&mut ctx, 12).unwrap();
            let mut half = Trainer::new(5, cfg).unwrap();
            let first = half.train(&mut ctx, 6).unwrap();
            let bytes = half.checkpoint();
            drop(half);
            let mut resumed = Trainer::restore(5, cfg, &bytes, false).unwrap();
            let second = resumed.train(&mut ctx, 6).unwrap();
            assert_eq!([first, second].concat(), losses);
            assert_eq!(resumed.state_tensors(), full.state_tensors());
            assert_eq!(resumed.checkpoint(), full.checkpoint());
            // The planted bug: forgetting the RNG state changes the dropout masks.
            let mut forgot = Trainer::restore(5, cfg, &bytes, true).unwrap();
            forgot.train(&mut ctx, 6).unwrap();
            assert_ne!(forgot.state_tensors(), full.state_tensors());
        }
        let mut ctx = Ctx::new(Backend::Cpu, Controls::default());
        let mut t = Trainer::new(1, tiny(OptimConfig::sgd())).unwrap();
        let l = t.train(&mut ctx, 40).unwrap();
        let mean = |s: &[f32]| s.iter().sum::<f32>() / s.len() as f32;
        assert!(
            mean(&l[30..]) < mean(&l[..5]),
            "loss does not decrease: {l:?}"
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(8))]
        /// Any split point and any worker counts before and after the checkpoint give the
        /// uninterrupted run's bits.
        #[test]
        fn resume_anywhere_with_any_workers(
            total in 1usize..9,
            cut in 0usize..9,
            w0 in 0usize..5,
            w1 in 0usize..5,
            seed in 0u64..1000,
        ) {
            let cut = cut.min(total);
            let mut ctx = Ctx::new(Backend::Cpu, Controls::default());
            let mut cfg = tiny(OptimConfig::adamw());
            let mut full = Trainer::new(seed, cfg).unwrap();
            let want = full.train(&mut ctx, total).unwrap();
            cfg.loader.workers = w0;
            let mut a = Trainer::new(seed, cfg).unwrap();
            let mut got = a.train(&mut ctx, cut).unwrap();
            cfg.loader.workers = w1;
            let mut b = Trainer::restore(seed, cfg, &a.checkpoint(), false).unwrap();
            got.extend(b.train(&mut ctx, total - cut).unwrap());
            proptest::prop_assert_eq!(got, want);
            proptest::prop_assert_eq!(b.state_tensors(), full.state_tensors());
        }
    }

    #[test]
    fn trained_weights_do_not_depend_on_workers_or_their_timing() {
        let run = |workers: usize, jitter: bool| {
            let mut cfg = tiny(OptimConfig::sgd());
            cfg.loader.workers = workers;
            cfg.loader.jitter = jitter;
            let mut ctx = Ctx::new(Backend::Cpu, Controls::default());
            let mut t = Trainer::new(11, cfg).unwrap();
            let losses = t.train(&mut ctx, 7).unwrap();
            assert!(ctx.findings.is_empty(), "{:?}", ctx.findings);
            (losses, t.state_tensors())
        };
        let want = run(0, false);
        for workers in [1, 2, 4] {
            assert!(
                run(workers, true) == want,
                "{workers} workers with random sleeps"
            );
        }
    }

    #[test]
    fn restore_rejects_a_different_model() {
        let cfg = tiny(OptimConfig::sgd());
        let bytes = Trainer::new(5, cfg).unwrap().checkpoint();
        let mut other = cfg;
        other.dims.hidden = 17;
        let e = Trainer::restore(5, other, &bytes, false).err().unwrap();
        assert!(e.to_string().contains("model dims"), "{e}");
        let e = Trainer::restore(5, tiny(OptimConfig::adamw()), &bytes, false)
            .err()
            .unwrap();
        assert!(e.to_string().contains("optimizer"), "{e}");
        let mut other = cfg;
        other.loader.batch = 4;
        let e = Trainer::restore(5, other, &bytes, false).err().unwrap();
        assert!(e.to_string().contains("batch size"), "{e}");
        let e = Trainer::restore(5, cfg, &bytes[..bytes.len() / 2], false)
            .err()
            .unwrap();
        assert!(e.to_string().contains("truncated"), "{e}");
    }
}
