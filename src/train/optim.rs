//! Optimizers: SGD with momentum (coupled weight decay, as `torch.optim.SGD`) and AdamW
//! (decoupled weight decay, as `torch.optim.AdamW`). Updates are elementwise in f32, each
//! element independent of every other, so they are deterministic on any thread count.

use anyhow::{bail, Result};

/// Which update rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OptimKind {
    /// `g += wd·p; buf = μ·buf + g; p -= lr·buf`.
    SgdMomentum,
    /// `p *= 1 - lr·wd; m = β1·m + (1-β1)·g; v = β2·v + (1-β2)·g²;
    /// p -= lr/(1-β1ᵗ) · m / (√v/√(1-β2ᵗ) + ε)`.
    AdamW,
}

impl OptimKind {
    /// Tag stored in checkpoints.
    pub fn tag(self) -> u32 {
        match self {
            OptimKind::SgdMomentum => 1,
            OptimKind::AdamW => 2,
        }
    }

    /// The kind stored under `tag`.
    pub fn from_tag(tag: u32) -> Result<OptimKind> {
        match tag {
            1 => Ok(OptimKind::SgdMomentum),
            2 => Ok(OptimKind::AdamW),
            other => bail!("unknown optimizer tag {other} (expected 1 = sgd, 2 = adamw)"),
        }
    }
}

/// Hyper-parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OptimConfig {
    /// Update rule.
    pub kind: OptimKind,
    /// Learning rate.
    pub lr: f32,
    /// Momentum (SGD) or β1 (AdamW).
    pub beta1: f32,
    /// β2 (AdamW; unused by SGD).
    pub beta2: f32,
    /// ε (AdamW; unused by SGD).
    pub eps: f32,
    /// Weight decay.
    pub weight_decay: f32,
}

impl OptimConfig {
    /// SGD, lr 0.05, momentum 0.9, weight decay 1e-4.
    pub fn sgd() -> OptimConfig {
        OptimConfig {
            kind: OptimKind::SgdMomentum,
            lr: 0.05,
            beta1: 0.9,
            beta2: 0.0,
            eps: 0.0,
            weight_decay: 1e-4,
        }
    }

    /// AdamW, lr 1e-3, betas (0.9, 0.999), ε 1e-8, weight decay 0.01.
    pub fn adamw() -> OptimConfig {
        OptimConfig {
            kind: OptimKind::AdamW,
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
        }
    }
}

/// An optimizer and its state.
#[derive(Clone, Debug, PartialEq)]
pub struct Optimizer {
    /// Hyper-parameters.
    pub config: OptimConfig,
    /// Steps taken.
    pub t: u64,
    /// Momentum buffer (SGD) or first moment (AdamW), one per parameter.
    pub m: Vec<Vec<f32>>,
    /// Second moment (AdamW), one per parameter; empty for SGD.
    pub v: Vec<Vec<f32>>,
}

impl Optimizer {
    /// Zero state for parameters of these sizes.
    pub fn new(config: OptimConfig, sizes: &[usize]) -> Optimizer {
        let zeros = || sizes.iter().map(|&n| vec![0.0f32; n]).collect();
        Optimizer {
            config,
            t: 0,
            m: zeros(),
            v: if config.kind == OptimKind::AdamW {
                zeros()
            } else {
                Vec::new()
            },
        }
    }

    /// Applies one update to `params` with `grads` (same shapes).
    pub fn step(&mut self, params: &mut [Vec<f32>], grads: &[Vec<f32>]) -> Result<()> {
        if params.len() != grads.len() || params.len() != self.m.len() {
            bail!(
                "optimizer: {} parameters, {} gradients, state for {}",
                params.len(),
                grads.len(),
                self.m.len()
            );
        }
        self.t += 1;
        let c = self.config;
        for (i, (p, g)) in params.iter_mut().zip(grads).enumerate() {
            if p.len() != g.len() || p.len() != self.m[i].len() {
                bail!(
                    "optimizer: parameter {i} has {} values, gradient {}, state {}",
                    p.len(),
                    g.len(),
                    self.m[i].len()
                );
            }
            match c.kind {
                OptimKind::SgdMomentum => {
                    for ((p, &g), buf) in p.iter_mut().zip(g).zip(&mut self.m[i]) {
                        let g = g + c.weight_decay * *p;
                        *buf = c.beta1 * *buf + g;
                        *p -= c.lr * *buf;
                    }
                }
                OptimKind::AdamW => {
                    let t = self.t.min(i32::MAX as u64) as i32;
                    let bc1 = 1.0 - c.beta1.powi(t);
                    let bc2_sqrt = (1.0 - c.beta2.powi(t)).sqrt();
                    let step = c.lr / bc1;
                    let v = &mut self.v[i];
                    for (((p, &g), m), v) in p.iter_mut().zip(g).zip(&mut self.m[i]).zip(v) {
                        *p *= 1.0 - c.lr * c.weight_decay;
                        *m = c.beta1 * *m + (1.0 - c.beta1) * g;
                        *v = c.beta2 * *v + (1.0 - c.beta2) * g * g;
                        *p -= step * *m / (v.sqrt() / bc2_sqrt + c.eps);
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f32, b: f32) -> bool {
        (a - b).abs() <= 1e-6
    }

    #[test]
    fn sgd_momentum_matches_hand_computed_values() {
        let c = OptimConfig {
            lr: 0.1,
            weight_decay: 0.01,
            ..OptimConfig::sgd()
        };
        let mut o = Optimizer::new(c, &[1]);
        let mut p = vec![vec![1.0f32]];
        o.step(&mut p, &[vec![0.5]]).unwrap();
        // g = 0.5 + 0.01·1 = 0.51; buf = 0.51; p = 1 − 0.051
        assert!(close(p[0][0], 0.949), "{}", p[0][0]);
        o.step(&mut p, &[vec![0.5]]).unwrap();
        // g = 0.5 + 0.01·0.949 = 0.50949; buf = 0.9·0.51 + g = 0.96849; p = 0.949 − 0.096849
        assert!(close(p[0][0], 0.852151), "{}", p[0][0]);
        assert_eq!(o.t, 2);
    }

    #[test]
    fn adamw_matches_hand_computed_values() {
        let c = OptimConfig {
            lr: 0.1,
            weight_decay: 0.01,
            ..OptimConfig::adamw()
        };
        let mut o = Optimizer::new(c, &[2]);
        let mut p = vec![vec![1.0f32, -2.0]];
        o.step(&mut p, &[vec![0.5, -4.0]]).unwrap();
        // First step: m̂ = g, v̂ = g², so p = p·(1 − lr·wd) − lr·sign(g).
        assert!(close(p[0][0], 0.999 - 0.1), "{}", p[0][0]);
        assert!(close(p[0][1], -1.998 + 0.1), "{}", p[0][1]);
        // Second step with g = 0.25: m = 0.09·0.5... computed in f64 below.
        o.step(&mut p, &[vec![0.25, -4.0]]).unwrap();
        let (m, v) = (0.9 * 0.05 + 0.1 * 0.25, 0.999 * 0.00025 + 0.001 * 0.0625);
        let (mh, vh) = (m / (1.0 - 0.81), v / (1.0 - 0.999f64 * 0.999));
        let want = 0.899f64 * 0.999 - 0.1 * mh / (vh.sqrt() + 1e-8);
        assert!(
            (p[0][0] as f64 - want).abs() < 1e-6,
            "{} vs {want}",
            p[0][0]
        );
        assert_eq!((o.m[0].len(), o.v[0].len()), (2, 2));
    }

    #[test]
    fn shape_mismatch_is_an_error() {
        let mut o = Optimizer::new(OptimConfig::sgd(), &[2]);
        let e = o.step(&mut [vec![0.0; 3]], &[vec![0.0; 3]]).unwrap_err();
        assert!(e.to_string().contains("parameter 0 has 3 values"), "{e}");
        assert!(OptimKind::from_tag(9).is_err());
    }
}
