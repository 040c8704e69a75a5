//! The MLP: `linear → ReLU → dropout → linear → softmax cross-entropy`, forward and
//! hand-written backward.
//!
//! Every reduction goes through an op ([`ops::matmul`], [`ops::col_sum`] for bias gradients,
//! [`ops::softmax`], [`ops::reduce_sum`] for the mean loss, [`ops::dropout`]), so the controls
//! pick the implementations and the same code runs on every backend that has them. Elementwise
//! steps (bias add, ReLU and its gradient, the dropout-mask product, the cross-entropy gradient,
//! transposes) have one obvious order-free implementation and are written inline.

use crate::case::Ctx;
use crate::ops;
use crate::rng::Stream;
use anyhow::{bail, Result};

/// Layer sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    /// Input features.
    pub input: usize,
    /// Hidden units.
    pub hidden: usize,
    /// Classes.
    pub classes: usize,
}

/// Parameter names, in the order of [`Mlp::params`].
pub const PARAM_NAMES: [&str; 4] = ["w1", "b1", "w2", "b2"];

impl Dims {
    /// Shapes of `w1 [input × hidden]`, `b1 [hidden]`, `w2 [hidden × classes]`, `b2 [classes]`.
    pub fn shapes(&self) -> [Vec<usize>; 4] {
        [
            vec![self.input, self.hidden],
            vec![self.hidden],
            vec![self.hidden, self.classes],
            vec![self.classes],
        ]
    }
}

/// The model: parameters `[w1, b1, w2, b2]` (row-major f32).
#[derive(Clone, Debug, PartialEq)]
pub struct Mlp {
    /// Layer sizes.
    pub dims: Dims,
    /// Parameters in [`PARAM_NAMES`] order.
    pub params: Vec<Vec<f32>>,
}

/// What the backward pass needs from the forward pass (the "graph" of one step).
#[derive(Clone, Debug)]
pub struct Cache {
    /// Input batch `[b × input]`.
    pub x: Vec<f32>,
    /// Labels.
    pub y: Vec<i64>,
    /// Pre-activation of the hidden layer `[b × hidden]`.
    pub z1: Vec<f32>,
    /// Dropout keep mask.
    pub mask: Vec<bool>,
    /// Hidden activations after dropout.
    pub d1: Vec<f32>,
    /// Softmax probabilities `[b × classes]`.
    pub probs: Vec<f32>,
    /// Dropout probability used.
    pub p: f32,
}

impl Mlp {
    /// He-initialised weights drawn from Philox streams named `train/init/w1` and
    /// `train/init/w2` under `seed`; zero biases.
    pub fn init(dims: Dims, seed: u64) -> Mlp {
        let he = |name: &str, fan_in: usize, n: usize| -> Vec<f32> {
            let s = (2.0 / fan_in as f32).sqrt();
            Stream::named(seed, name)
                .normal(n)
                .into_iter()
                .map(|v| v * s)
                .collect()
        };
        Mlp {
            dims,
            params: vec![
                he("train/init/w1", dims.input, dims.input * dims.hidden),
                vec![0.0; dims.hidden],
                he("train/init/w2", dims.hidden, dims.hidden * dims.classes),
                vec![0.0; dims.classes],
            ],
        }
    }

    /// Forward pass on a batch: the mean cross-entropy loss and the cache for [`Mlp::backward`].
    /// Dropout draws from `rng` (advanced by `b × hidden` words).
    pub fn forward(
        &self,
        ctx: &mut Ctx,
        x: &[f32],
        y: &[i64],
        p: f32,
        rng: &mut Stream,
    ) -> Result<(f32, Cache)> {
        let Dims {
            input,
            hidden,
            classes,
        } = self.dims;
        let b = y.len();
        ops::expect_len("mlp forward", "x", x.len(), b * input)?;
        if let Some((i, bad)) = y
            .iter()
            .enumerate()
            .find(|(_, &c)| c < 0 || c as usize >= classes)
        {
            bail!("mlp forward: label y[{i}] = {bad} is outside 0..{classes}");
        }
        let [w1, b1, w2, b2] = [0, 1, 2, 3].map(|i| &self.params[i]);
        let mut z1 = ops::matmul::matmul(ctx, x, w1, b, input, hidden)?;
        add_rows(&mut z1, b1);
        let a1: Vec<f32> = z1.iter().map(|&v| v.max(0.0)).collect();
        let (d1, mask) = ops::dropout::dropout(ctx, &a1, p, rng)?;
        let mut z2 = ops::matmul::matmul(ctx, &d1, w2, b, hidden, classes)?;
        add_rows(&mut z2, b2);
        let probs = ops::softmax::softmax(ctx, &z2, b, classes)?;
        let per_sample: Vec<f32> = y
            .iter()
            .enumerate()
            .map(|(i, &c)| -probs[i * classes + c as usize].max(f32::MIN_POSITIVE).ln())
            .collect();
        let loss = ops::reduce_sum::reduce_sum(ctx, &per_sample)? / b as f32;
        let cache = Cache {
            x: x.to_vec(),
            y: y.to_vec(),
            z1,
            mask,
            d1,
            probs,
            p,
        };
        Ok((loss, cache))
    }

    /// Backward pass: gradients of the mean loss for `[w1, b1, w2, b2]`.
    pub fn backward(&self, ctx: &mut Ctx, c: &Cache) -> Result<Vec<Vec<f32>>> {
        let Dims {
            input,
            hidden,
            classes,
        } = self.dims;
        let b = c.y.len();
        let mut dz2 = c.probs.clone();
        for (i, &y) in c.y.iter().enumerate() {
            dz2[i * classes + y as usize] -= 1.0;
        }
        dz2.iter_mut().for_each(|v| *v /= b as f32);
        let dw2 = ops::matmul::matmul(ctx, &transpose(&c.d1, b, hidden), &dz2, hidden, b, classes)?;
        let db2 = bias_grad(ctx, &dz2, b, classes)?;
        let w2t = transpose(&self.params[2], hidden, classes);
        let dd1 = ops::matmul::matmul(ctx, &dz2, &w2t, b, classes, hidden)?;
        let scale = 1.0 / (1.0 - c.p);
        let dz1: Vec<f32> = dd1
            .iter()
            .zip(&c.mask)
            .zip(&c.z1)
            .map(|((&g, &keep), &z)| if keep && z > 0.0 { g * scale } else { 0.0 })
            .collect();
        let dw1 = ops::matmul::matmul(ctx, &transpose(&c.x, b, input), &dz1, input, b, hidden)?;
        let db1 = bias_grad(ctx, &dz1, b, hidden)?;
        Ok(vec![dw1, db1, dw2, db2])
    }
}

/// Bias gradient: the column sums of `dz` (`rows × cols`) by [`ops::col_sum`].
fn bias_grad(ctx: &mut Ctx, dz: &[f32], rows: usize, cols: usize) -> Result<Vec<f32>> {
    ops::col_sum::col_sum(ctx, dz, rows, cols)
}

/// Adds `bias` to every row of `x`.
fn add_rows(x: &mut [f32], bias: &[f32]) {
    for row in x.chunks_mut(bias.len().max(1)) {
        row.iter_mut().zip(bias).for_each(|(v, b)| *v += b);
    }
}

/// Transpose of a row-major `[rows × cols]` buffer.
pub fn transpose(x: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut t = vec![0.0f32; x.len()];
    for r in 0..rows {
        for c in 0..cols {
            t[c * rows + r] = x[r * cols + c];
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Backend;
    use crate::controls::Controls;

    fn tiny() -> (Mlp, Vec<f32>, Vec<i64>) {
        let dims = Dims {
            input: 5,
            hidden: 7,
            classes: 3,
        };
        let mut m = Mlp::init(dims, 3);
        // Non-zero biases so their gradients are exercised away from the init point.
        m.params[1] = Stream::named(9, "b1").normal(7);
        m.params[3] = Stream::named(9, "b2").normal(3);
        let x = Stream::named(9, "x").normal(4 * 5);
        (m, x, vec![0, 2, 1, 2])
    }

    /// Central finite differences of the loss (in f64 over an f32 model) against the
    /// hand-written backward, with the same dropout mask in every evaluation.
    #[test]
    fn backward_matches_finite_differences() {
        let (m, x, y) = tiny();
        let mut ctx = Ctx::new(Backend::Cpu, Controls::default());
        let rng = Stream::named(1, "drop");
        let loss_of = |m: &Mlp, ctx: &mut Ctx| {
            let mut r = rng;
            m.forward(ctx, &x, &y, 0.25, &mut r).unwrap().0 as f64
        };
        let mut r = rng;
        let (_, cache) = m.forward(&mut ctx, &x, &y, 0.25, &mut r).unwrap();
        assert!(
            cache.mask.iter().any(|k| !k),
            "the test should drop something"
        );
        let grads = m.backward(&mut ctx, &cache).unwrap();
        let eps = 1e-2f32;
        for (pi, g) in grads.iter().enumerate() {
            for (j, &gj) in g.iter().enumerate() {
                let mut plus = m.clone();
                plus.params[pi][j] += eps;
                let mut minus = m.clone();
                minus.params[pi][j] -= eps;
                let fd =
                    (loss_of(&plus, &mut ctx) - loss_of(&minus, &mut ctx)) / (2.0 * eps as f64);
                assert!(
                    (fd - gj as f64).abs() <= 2e-3 + 2e-2 * fd.abs(),
                    "{}[{j}]: backward {gj}, finite difference {fd}",
                    PARAM_NAMES[pi]
                );
            }
        }
    }

    #[test]
    fn bad_labels_and_shapes_are_named() {
        let (m, x, _) = tiny();
        let mut ctx = Ctx::new(Backend::Cpu, Controls::default());
        let mut r = Stream::named(1, "drop");
        let e = m
            .forward(&mut ctx, &x, &[0, 1, 5, 0], 0.0, &mut r)
            .unwrap_err();
        assert!(e.to_string().contains("y[2] = 5"), "{e}");
        let e = m
            .forward(&mut ctx, &x[1..], &[0, 1, 2, 0], 0.0, &mut r)
            .unwrap_err();
        assert!(e.to_string().contains("`x`"), "{e}");
    }
}
