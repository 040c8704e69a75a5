//! A deeper MLP for the practice cases: `L` layers, every hidden one `linear → ReLU → dropout`,
//! then `linear → softmax cross-entropy`, with hand-written backward that can run three ways:
//!
//! * **stored activations**: the forward keeps every layer's input, pre-activation and dropout
//!   mask for the backward (what autograd does by default);
//! * **checkpointed** ([`Mode::Checkpointed`]): the forward keeps only each segment's input; the
//!   backward recomputes the segment's forward (like `torch.utils.checkpoint`), drawing its
//!   dropout masks from the RNG state the forward used (`preserve_rng_state`);
//! * **over a slice of rows** of a larger batch (micro-batches): gradients are accumulated into
//!   running buffers, sample by sample in ascending order over the whole batch
//!   ([`accum_outer`], [`accum_bias`]), and the loss gradient is scaled by the full batch size,
//!   so any micro-batch size gives the full batch's bits (batch invariance).
//!
//! Dropout words are addressed, not drawn in sequence: row `r` of hidden layer `l` uses the
//! Philox words starting at `rng.offset + Σ_{l'<l} batch·width(l') + r·width(l)` of the step's
//! stream, so a recompute or a micro-batch gets exactly the masks of the full forward.
//!
//! Each layer reserves its activations with [`memory::reserve`] before allocating them, so a
//! step can run under a memory budget and fail with [`memory::OutOfMemory`] instead of
//! aborting.

use crate::case::Ctx;
use crate::memory::{self, Reservation};
use crate::ops;
use crate::rng::Stream;
use crate::train::model::transpose;
use anyhow::Result;
use rayon::prelude::*;

/// The model: weights `w{l} [width(l) × width(l+1)]` and biases `b{l}`, interleaved.
#[derive(Clone, Debug, PartialEq)]
pub struct DeepMlp {
    /// Layer widths: input, hidden layers..., classes.
    pub widths: Vec<usize>,
    /// Parameters `[w0, b0, w1, b1, ...]` (row-major f32).
    pub params: Vec<Vec<f32>>,
}

/// What one layer kept for the backward pass.
#[derive(Debug)]
pub struct LayerAct {
    /// Layer index.
    pub layer: usize,
    /// Its input rows.
    pub input: Vec<f32>,
    /// Pre-activation (hidden layers only).
    pub z: Vec<f32>,
    /// Dropout keep mask (hidden layers only).
    pub mask: Vec<bool>,
    /// The reservation covering this layer's buffers.
    pub reservation: Reservation,
}

/// How a step keeps what the backward needs.
#[derive(Clone, Copy, Debug)]
pub enum Mode {
    /// Every layer's activations are stored.
    Stored,
    /// Only segment inputs are stored; each segment of `segment` layers is recomputed in the
    /// backward with dropout drawn from `recompute_rng` (correct: the step's own RNG state).
    Checkpointed {
        /// Layers per segment.
        segment: usize,
        /// The RNG state the recompute draws its dropout masks from.
        recompute_rng: Stream,
    },
}

/// One step's inputs: rows `r0..r0 + y.len()` of a batch of `batch` rows.
#[derive(Clone, Copy, Debug)]
pub struct Rows<'a> {
    /// Input rows `[rows × width(0)]`.
    pub x: &'a [f32],
    /// Labels of the rows.
    pub y: &'a [i64],
    /// Index of the first row in the batch.
    pub r0: usize,
    /// Rows in the whole batch (the loss is the batch mean).
    pub batch: usize,
    /// The step's dropout RNG state.
    pub rng: Stream,
    /// Dropout probability.
    pub p: f32,
}

impl DeepMlp {
    /// He-initialised weights from the Philox streams `deep/init/w{l}` under `seed`; zero biases.
    pub fn init(widths: &[usize], seed: u64) -> DeepMlp {
        let mut params = Vec::new();
        for l in 0..widths.len() - 1 {
            let (i, o) = (widths[l], widths[l + 1]);
            let s = (2.0 / i as f32).sqrt();
            let w = Stream::named(seed, &format!("deep/init/w{l}")).normal(i * o);
            params.push(w.into_iter().map(|v| v * s).collect());
            params.push(vec![0.0; o]);
        }
        DeepMlp {
            widths: widths.to_vec(),
            params,
        }
    }

    /// Number of linear layers.
    pub fn layers(&self) -> usize {
        self.widths.len() - 1
    }

    /// Parameter names in [`DeepMlp::params`] order: `w0, b0, w1, b1, ...`.
    pub fn param_names(&self) -> Vec<String> {
        (0..self.layers())
            .flat_map(|l| [format!("w{l}"), format!("b{l}")])
            .collect()
    }

    /// Parameter shapes in [`DeepMlp::params`] order.
    pub fn shapes(&self) -> Vec<Vec<usize>> {
        (0..self.layers())
            .flat_map(|l| {
                let (i, o) = (self.widths[l], self.widths[l + 1]);
                [vec![i, o], vec![o]]
            })
            .collect()
    }

    /// Zeroed gradient buffers, one per parameter.
    pub fn zero_grads(&self) -> Vec<Vec<f32>> {
        self.params.iter().map(|p| vec![0.0; p.len()]).collect()
    }

    /// Bytes layer `l` reserves for `rows` rows: pre-activation, output (f32) and mask (bool).
    pub fn layer_bytes(&self, l: usize, rows: usize) -> u64 {
        (rows * self.widths[l + 1] * 9) as u64
    }

    /// Bytes a stored-activation step over `rows` rows reserves in all.
    pub fn step_bytes(&self, rows: usize) -> u64 {
        (0..self.layers()).map(|l| self.layer_bytes(l, rows)).sum()
    }

    /// The dropout stream of row `r0` of layer `l` in a batch of `batch` rows, from `rng`.
    fn dropout_stream(&self, rng: Stream, l: usize, r0: usize, batch: usize) -> Stream {
        let before: usize = (0..l).map(|k| batch * self.widths[k + 1]).sum();
        Stream {
            offset: rng.offset + (before + r0 * self.widths[l + 1]) as u64,
            ..rng
        }
    }

    /// Dropout words one step over `batch` rows uses.
    pub fn dropout_words(&self, batch: usize) -> u64 {
        (0..self.layers() - 1)
            .map(|l| (batch * self.widths[l + 1]) as u64)
            .sum()
    }

    /// Forward of layer `l` on `input`; returns what the backward needs and the layer's output
    /// (logits for the last layer). Reserves the layer's buffers first.
    pub fn forward_layer(
        &self,
        ctx: &mut Ctx,
        l: usize,
        input: Vec<f32>,
        rows: &Rows,
        rng: Stream,
    ) -> Result<(LayerAct, Vec<f32>)> {
        let n = rows.y.len();
        let reservation = memory::reserve(self.layer_bytes(l, n))?;
        let (i, o) = (self.widths[l], self.widths[l + 1]);
        let mut z = ops::matmul::matmul(ctx, &input, &self.params[2 * l], n, i, o)?;
        for row in z.chunks_mut(o) {
            row.iter_mut()
                .zip(&self.params[2 * l + 1])
                .for_each(|(v, b)| *v += b);
        }
        let last = l + 1 == self.layers();
        let (z, mask, out) = if last {
            (Vec::new(), Vec::new(), z)
        } else {
            let a: Vec<f32> = z.iter().map(|&v| v.max(0.0)).collect();
            let mut s = self.dropout_stream(rng, l, rows.r0, rows.batch);
            let (d, mask) = ops::dropout::dropout(ctx, &a, rows.p, &mut s)?;
            (z, mask, d)
        };
        let act = LayerAct {
            layer: l,
            input,
            z,
            mask,
            reservation,
        };
        Ok((act, out))
    }

    /// Backward of one layer: accumulates its weight and bias gradients into `grads` and
    /// returns the gradient of its input (empty for layer 0).
    pub fn backward_layer(
        &self,
        ctx: &mut Ctx,
        act: &LayerAct,
        dout: Vec<f32>,
        p: f32,
        grads: &mut [Vec<f32>],
    ) -> Result<Vec<f32>> {
        let l = act.layer;
        let (i, o) = (self.widths[l], self.widths[l + 1]);
        let n = dout.len() / o;
        let dz = if act.mask.is_empty() {
            dout
        } else {
            let scale = 1.0 / (1.0 - p);
            dout.iter()
                .zip(&act.mask)
                .zip(&act.z)
                .map(|((&g, &keep), &z)| if keep && z > 0.0 { g * scale } else { 0.0 })
                .collect()
        };
        accum_outer(ctx, &mut grads[2 * l], &act.input, &dz, (n, i, o));
        accum_bias(ctx, &mut grads[2 * l + 1], &dz, o);
        if l == 0 {
            return Ok(Vec::new());
        }
        let wt = transpose(&self.params[2 * l], i, o);
        ops::matmul::matmul(ctx, &dz, &wt, n, o, i)
    }

    /// Forward and backward over `rows`: accumulates gradients into `grads` and the rows'
    /// per-sample losses (ascending) into `loss_sum`. With [`Mode::Stored`] the activations
    /// are pushed to `acts` as they are made, so when a reservation fails (an
    /// [`memory::OutOfMemory`] error) the caller holds the failed attempt's buffers and decides
    /// when they are freed.
    pub fn step_rows(
        &self,
        ctx: &mut Ctx,
        rows: &Rows,
        mode: Mode,
        grads: &mut [Vec<f32>],
        loss_sum: &mut f32,
        acts: &mut Vec<LayerAct>,
    ) -> Result<()> {
        let mut h = rows.x.to_vec();
        let mut seg_inputs: Vec<(usize, Vec<f32>)> = Vec::new();
        for l in 0..self.layers() {
            if let Mode::Checkpointed { segment, .. } = mode {
                if l % segment.max(1) == 0 {
                    seg_inputs.push((l, h.clone()));
                }
            }
            let (act, out) = self.forward_layer(ctx, l, h, rows, rows.rng)?;
            if let Mode::Stored = mode {
                acts.push(act);
            }
            h = out;
        }
        let mut dout = self.loss_grad(ctx, &h, rows, loss_sum)?;
        drop(h);
        match mode {
            Mode::Stored => {
                while let Some(act) = acts.pop() {
                    dout = self.backward_layer(ctx, &act, dout, rows.p, grads)?;
                }
            }
            Mode::Checkpointed {
                segment,
                recompute_rng,
            } => {
                while let Some((first, input)) = seg_inputs.pop() {
                    let end = (first + segment.max(1)).min(self.layers());
                    let mut seg = Vec::new();
                    let mut h = input;
                    for l in first..end {
                        let (act, out) = self.forward_layer(ctx, l, h, rows, recompute_rng)?;
                        seg.push(act);
                        h = out;
                    }
                    drop(h);
                    while let Some(act) = seg.pop() {
                        dout = self.backward_layer(ctx, &act, dout, rows.p, grads)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Softmax cross-entropy over the logits of `rows`: adds each row's loss to `loss_sum` in
    /// ascending order and returns the gradient of the batch-mean loss for the logits.
    fn loss_grad(
        &self,
        ctx: &mut Ctx,
        logits: &[f32],
        rows: &Rows,
        loss_sum: &mut f32,
    ) -> Result<Vec<f32>> {
        let c = *self.widths.last().expect("widths");
        let n = rows.y.len();
        let mut d = ops::softmax::softmax(ctx, logits, n, c)?;
        for (i, &y) in rows.y.iter().enumerate() {
            let k = usize::try_from(y).ok().filter(|&k| k < c);
            let k = k.ok_or_else(|| anyhow::anyhow!("label y[{i}] = {y} is outside 0..{c}"))?;
            *loss_sum += -d[i * c + k].max(f32::MIN_POSITIVE).ln();
            d[i * c + k] -= 1.0;
        }
        d.iter_mut().for_each(|v| *v /= rows.batch as f32);
        Ok(d)
    }
}

/// `g[m×n] += Σ_r a[r]ᵀ · d[r]` over `rows` rows in ascending order, each element of `g`
/// accumulated sample by sample (rows of `g` in parallel): the same bits whether the rows come
/// in one call or in several consecutive ones. Recorded in the trace as `grad_accumulate`.
pub fn accum_outer(
    ctx: &mut Ctx,
    g: &mut [f32],
    a: &[f32],
    d: &[f32],
    (rows, m, n): (usize, usize, usize),
) {
    g.par_chunks_mut(n.max(1)).enumerate().for_each(|(p, gp)| {
        for r in 0..rows {
            let av = a[r * m + p];
            gp.iter_mut()
                .zip(&d[r * n..(r + 1) * n])
                .for_each(|(g, &dv)| *g += av * dv);
        }
    });
    ctx.record("grad_accumulate", &[a.into(), d.into()], (&*g).into());
}

/// `g[n] += Σ_r d[r]` over the rows of `d` in ascending order (a bias gradient).
pub fn accum_bias(ctx: &mut Ctx, g: &mut [f32], d: &[f32], n: usize) {
    for row in d.chunks(n.max(1)) {
        g.iter_mut().zip(row).for_each(|(g, &v)| *g += v);
    }
    ctx.record("grad_accumulate", &[d.into()], (&*g).into());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Backend;
    use crate::controls::Controls;

    fn setup() -> (DeepMlp, Vec<f32>, Vec<i64>) {
        let m = DeepMlp::init(&[6, 9, 8, 7, 3], 4);
        let x = Stream::named(2, "x").normal(10 * 6);
        let y = (0..10).map(|i| i % 3).collect();
        (m, x, y)
    }

    fn run(m: &DeepMlp, x: &[f32], y: &[i64], micro: usize, mode: Mode) -> (Vec<Vec<f32>>, f32) {
        let mut ctx = Ctx::new(Backend::Cpu, Controls::default());
        let (mut g, mut loss) = (m.zero_grads(), 0.0);
        let (d, rng) = (m.widths[0], Stream::named(1, "drop"));
        for r0 in (0..y.len()).step_by(micro) {
            let r1 = (r0 + micro).min(y.len());
            let rows = Rows {
                x: &x[r0 * d..r1 * d],
                y: &y[r0..r1],
                r0,
                batch: y.len(),
                rng,
                p: 0.3,
            };
            m.step_rows(&mut ctx, &rows, mode, &mut g, &mut loss, &mut Vec::new())
                .unwrap();
        }
        (g, loss)
    }

    #[test]
    fn checkpointing_and_micro_batches_give_the_stored_full_batch_bits() {
        let (m, x, y) = setup();
        let want = run(&m, &x, &y, 10, Mode::Stored);
        assert!(want.0.iter().flatten().any(|&v| v != 0.0));
        for micro in [1, 3, 4, 10] {
            assert_eq!(run(&m, &x, &y, micro, Mode::Stored), want, "micro {micro}");
        }
        let recompute_rng = Stream::named(1, "drop");
        for segment in [1, 2, 3] {
            let mode = Mode::Checkpointed {
                segment,
                recompute_rng,
            };
            assert_eq!(run(&m, &x, &y, 10, mode), want, "segment {segment}");
        }
        let forgot = Mode::Checkpointed {
            segment: 2,
            recompute_rng: Stream {
                offset: m.dropout_words(10),
                ..Stream::named(1, "drop")
            },
        };
        assert_ne!(run(&m, &x, &y, 10, forgot).0, want.0);
    }
}
