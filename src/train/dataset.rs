//! The synthetic dataset behind the training cases: `samples` points in `input` dimensions,
//! `classes` Gaussian clusters; class centres, labels and points are pure functions of
//! (seed, sample index) via Philox.

use crate::rng::{derive_seed, Stream};
use anyhow::{bail, Result};

/// Stream salt of the dataset's values.
const DATA: u64 = 0xDA7A;

/// The synthetic classification dataset.
#[derive(Clone, Debug, PartialEq)]
pub struct Dataset {
    /// Features per sample.
    pub dim: usize,
    /// Classes.
    pub classes: usize,
    /// `[samples × dim]` features.
    pub x: Vec<f32>,
    /// Labels in `0..classes`.
    pub y: Vec<i64>,
}

impl Dataset {
    /// `samples` points around `classes` random centres (σ 0.5), all drawn from `seed`.
    pub fn generate(seed: u64, samples: usize, dim: usize, classes: usize) -> Result<Dataset> {
        if samples == 0 || dim == 0 || classes == 0 {
            bail!("dataset: samples ({samples}), dim ({dim}) and classes ({classes}) must be > 0");
        }
        let s = derive_seed(seed, DATA);
        let centres = Stream::new(s, 0).normal(classes * dim);
        let mut labels = Stream::new(s, 1);
        let y: Vec<i64> = (0..samples)
            .map(|_| labels.below(classes as u32) as i64)
            .collect();
        let noise = Stream::new(s, 2).normal(samples * dim);
        let x = noise
            .chunks(dim)
            .zip(&y)
            .flat_map(|(n, &c)| {
                let ctr = &centres[c as usize * dim..(c as usize + 1) * dim];
                n.iter()
                    .zip(ctr)
                    .map(|(n, c)| c + 0.5 * n)
                    .collect::<Vec<_>>()
            })
            .collect();
        Ok(Dataset { dim, classes, x, y })
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.y.len()
    }

    /// Whether the dataset has no samples.
    pub fn is_empty(&self) -> bool {
        self.y.is_empty()
    }
}
