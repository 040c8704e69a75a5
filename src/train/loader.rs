//! Synthetic dataset and a data loader with N worker threads.
//!
//! * **Dataset**: `samples` points in `input` dimensions, `classes` Gaussian clusters; class
//!   centres, labels and points are pure functions of (seed, sample index) via Philox.
//! * **Shuffle**: a Fisher–Yates permutation per epoch from the stream `(derive_seed(seed,
//!   SHUFFLE), epoch)`, drawn on the calling thread.
//! * **Augmentation** per sample: Gaussian noise (σ 0.1), a flip (the feature vector reversed,
//!   probability ½) and a random crop (a circular shift by −2..=2). With [`AugmentRng::PerSample`]
//!   (the correct loader) the draws come from the stream `(derive_seed(derive_seed(seed, AUG),
//!   epoch), sample index)`, so they do not depend on which worker ran the sample or on the
//!   worker count. Each worker also owns a stream derived from `(seed, worker id)` (it times the
//!   test hook's random sleeps); [`AugmentRng::SharedWorkerSeed`] is the classic bug where every
//!   worker augments from one copied stream.
//! * **Workers**: batches are fetched in windows of `workers` batches; batch `j` of an epoch is
//!   built by worker `j % workers` on its own thread, results come back over a channel in
//!   completion order and are put back in batch order. 0 workers builds batches on the calling
//!   thread. The position (epoch, next batch) counts consumed batches only, so a checkpoint
//!   never depends on what was prefetched.
//! * **Checks**: the loader reports, by name, workers that share one random stream and samples
//!   that received identical augmentation noise (see [`Loader::take_findings`]).

use crate::rng::{derive_seed, Stream};
use anyhow::{bail, Result};
use std::collections::{HashMap, VecDeque};
use std::sync::{mpsc, Arc};

/// Tags mixed into the seed for each use.
const DATA: u64 = 0xDA7A;
const SHUFFLE: u64 = 0x5AFF;
const AUG: u64 = 0xA06;
const WORKER_STREAM: u64 = 0x3017;

/// How augmentation draws its random numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AugmentRng {
    /// Keyed by (seed, epoch, sample index): correct and worker-count invariant.
    PerSample,
    /// PLANTED BUG: every worker draws from one stream copied from the same seed, like forked
    /// loader workers that inherit one RNG state; their augmentations repeat.
    SharedWorkerSeed,
}

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

/// A batch as handed to the training step.
#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    /// `[b × dim]` augmented features.
    pub x: Vec<f32>,
    /// Labels.
    pub y: Vec<i64>,
    /// Dataset index of each row.
    pub indices: Vec<usize>,
    /// Fingerprint of each row's augmentation noise (to spot repeated random streams).
    pub noise_keys: Vec<u64>,
    /// Worker that built the batch (0 when built on the calling thread).
    pub worker: usize,
}

/// Loader settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoaderConfig {
    /// Rows per batch (the last partial batch of an epoch is dropped).
    pub batch: usize,
    /// Worker threads (0 = build batches on the calling thread).
    pub workers: usize,
    /// Where augmentation draws from.
    pub augment: AugmentRng,
    /// Test hook: each worker sleeps a random 0–2 ms before building each batch.
    pub jitter: bool,
}

/// Where the loader is: the next batch to hand out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Position {
    /// Epoch.
    pub epoch: u64,
    /// Index of the next batch within the epoch.
    pub batch: u64,
}

/// The data loader.
pub struct Loader {
    data: Arc<Dataset>,
    cfg: LoaderConfig,
    seed: u64,
    pos: Position,
    order: Vec<usize>,
    ready: VecDeque<Batch>,
    worker_streams: Vec<Stream>,
    seen_noise: HashMap<u64, (usize, usize)>,
    noise_reported: bool,
    findings: Vec<String>,
}

impl Loader {
    /// A loader at the start of epoch 0.
    pub fn new(data: Arc<Dataset>, cfg: LoaderConfig, seed: u64) -> Result<Loader> {
        if cfg.batch == 0 || cfg.batch > data.len() {
            bail!(
                "loader: batch size {} must be in 1..={} (the dataset size)",
                cfg.batch,
                data.len()
            );
        }
        let worker_streams = (0..cfg.workers.max(1))
            .map(|w| match cfg.augment {
                AugmentRng::PerSample => Stream::new(derive_seed(seed, w as u64), WORKER_STREAM),
                AugmentRng::SharedWorkerSeed => Stream::new(seed, WORKER_STREAM), // BUG (planted)
            })
            .collect();
        let mut l = Loader {
            data,
            cfg,
            seed,
            pos: Position { epoch: 0, batch: 0 },
            order: Vec::new(),
            ready: VecDeque::new(),
            worker_streams,
            seen_noise: HashMap::new(),
            noise_reported: false,
            findings: Vec::new(),
        };
        l.check_worker_streams();
        l.seek(Position { epoch: 0, batch: 0 }, None)?;
        Ok(l)
    }

    /// Batches per epoch.
    pub fn batches_per_epoch(&self) -> u64 {
        (self.data.len() / self.cfg.batch) as u64
    }

    /// The position of the next batch [`Loader::next_batch`] returns.
    pub fn position(&self) -> Position {
        self.pos
    }

    /// Each worker's stream (saved in checkpoints: the planted shared-seed loader advances them).
    pub fn worker_streams(&self) -> &[Stream] {
        &self.worker_streams
    }

    /// Moves to `pos` (dropping prefetched batches), optionally restoring worker streams.
    pub fn seek(&mut self, pos: Position, streams: Option<Vec<Stream>>) -> Result<()> {
        if pos.batch >= self.batches_per_epoch() {
            bail!(
                "loader: position batch {} is past the {} batches of an epoch",
                pos.batch,
                self.batches_per_epoch()
            );
        }
        if let Some(s) = streams {
            let stateless = self.cfg.augment == AugmentRng::PerSample;
            if s.len() != self.worker_streams.len() && !stateless {
                bail!(
                    "loader: {} worker streams saved, this loader has {} workers",
                    s.len(),
                    self.worker_streams.len()
                );
            }
            if s.len() == self.worker_streams.len() {
                self.worker_streams = s;
            }
            // Otherwise the per-sample loader's worker streams carry no state (they are derived
            // from (seed, worker id) and never advanced): resuming with another worker count is
            // fine and gives the same batches.
        }
        if self.order.is_empty() || pos.epoch != self.pos.epoch {
            self.order = self.permutation(pos.epoch);
            self.seen_noise.clear();
        }
        self.pos = pos;
        self.ready.clear();
        Ok(())
    }

    /// Defects found so far (duplicate worker streams, repeated augmentation noise), drained.
    pub fn take_findings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.findings)
    }

    fn permutation(&self, epoch: u64) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.data.len()).collect();
        let mut s = Stream::new(derive_seed(self.seed, SHUFFLE), epoch);
        for i in (1..order.len()).rev() {
            let j = s.below(i as u32 + 1) as usize;
            order.swap(i, j);
        }
        order
    }

    fn check_worker_streams(&mut self) {
        let s = &self.worker_streams;
        for a in 0..s.len() {
            if let Some(b) = (a + 1..s.len()).find(|&b| s[b] == s[a]) {
                self.findings.push(format!(
                    "loader workers {a} and {b} share one random stream (seed {:#x}, stream {:#x}): their augmentations repeat; derive each worker's seed from (seed, worker id)",
                    s[a].seed, s[a].stream
                ));
                return;
            }
        }
    }

    /// The next batch, in order whatever the workers' timing; epochs roll over.
    pub fn next_batch(&mut self) -> Result<Batch> {
        if self.ready.is_empty() {
            self.fetch_window()?;
        }
        let batch = self
            .ready
            .pop_front()
            .expect("window fetched at least one batch");
        self.note_noise(&batch);
        self.pos.batch += 1;
        if self.pos.batch == self.batches_per_epoch() {
            let next = Position {
                epoch: self.pos.epoch + 1,
                batch: 0,
            };
            self.order = self.permutation(next.epoch);
            self.seen_noise.clear();
            self.pos = next;
        }
        Ok(batch)
    }

    fn note_noise(&mut self, b: &Batch) {
        for (&key, &idx) in b.noise_keys.iter().zip(&b.indices) {
            match self.seen_noise.insert(key, (idx, b.worker)) {
                Some((other, w)) if other != idx && !self.noise_reported => {
                    self.noise_reported = true;
                    self.findings.push(format!(
                        "samples {other} and {idx} (loader workers {w} and {}) got identical augmentation noise in epoch {}: the workers draw from one random stream",
                        b.worker, self.pos.epoch
                    ));
                }
                _ => {}
            }
        }
    }

    /// Builds the next up-to-`workers` batches of this epoch (one per worker) and queues them
    /// in batch order.
    fn fetch_window(&mut self) -> Result<()> {
        let first = self.pos.batch as usize;
        let end = (first + self.cfg.workers.max(1)).min(self.batches_per_epoch() as usize);
        let epoch = self.pos.epoch;
        let mut slots: Vec<Option<Batch>> = vec![None; end - first];
        if self.cfg.workers == 0 {
            let mut s = self.worker_streams[0];
            slots[0] = Some(self.build(epoch, first, 0, &mut s));
            self.worker_streams[0] = s;
        } else {
            let (tx, rx) = mpsc::channel();
            let this = &*self;
            std::thread::scope(|scope| {
                for j in first..end {
                    let w = j % this.cfg.workers;
                    let mut stream = this.worker_streams[w];
                    let tx = tx.clone();
                    scope.spawn(move || {
                        let b = this.build(epoch, j, w, &mut stream);
                        let _ = tx.send((j, w, b, stream));
                    });
                }
            });
            drop(tx);
            for (j, w, b, stream) in rx {
                self.worker_streams[w] = stream;
                slots[j - first] = Some(b);
            }
        }
        for (k, s) in slots.into_iter().enumerate() {
            match s {
                Some(b) => self.ready.push_back(b),
                None => bail!("loader: worker for batch {} returned nothing", first + k),
            }
        }
        Ok(())
    }

    /// Builds batch `j` of `epoch` on worker `w`, whose stream is `ws`.
    fn build(&self, epoch: u64, j: usize, w: usize, ws: &mut Stream) -> Batch {
        if self.cfg.jitter {
            let mut own = Stream::new(derive_seed(self.seed, w as u64 + 1000), j as u64);
            let us = own.below(2000) as u64;
            std::thread::sleep(std::time::Duration::from_micros(us));
        }
        let d = self.data.dim;
        let bsz = self.cfg.batch;
        let indices: Vec<usize> = self.order[j * bsz..(j + 1) * bsz].to_vec();
        let aug_seed = derive_seed(derive_seed(self.seed, AUG), epoch);
        let mut x = Vec::with_capacity(bsz * d);
        let mut noise_keys = Vec::with_capacity(bsz);
        for &i in &indices {
            let mut s = match self.cfg.augment {
                AugmentRng::PerSample => Stream::new(aug_seed, i as u64),
                AugmentRng::SharedWorkerSeed => *ws,
            };
            let noise = s.normal(d);
            let flip = s.next_u32() & 1 == 1;
            let shift = s.below(5) as usize; // 0..=4 → a shift of −2..=2
            if self.cfg.augment == AugmentRng::SharedWorkerSeed {
                *ws = s;
            }
            noise_keys.push(noise.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, v| {
                (h ^ v.to_bits() as u64).wrapping_mul(0x100_0000_01b3)
            }));
            let src = &self.data.x[i * d..(i + 1) * d];
            let mut row: Vec<f32> = (0..d)
                .map(|k| {
                    let k = (k + d + shift - 2) % d;
                    src[k]
                })
                .collect();
            if flip {
                row.reverse();
            }
            x.extend(row.iter().zip(&noise).map(|(v, n)| v + 0.1 * n));
        }
        Batch {
            y: indices.iter().map(|&i| self.data.y[i]).collect(),
            x,
            indices,
            noise_keys,
            worker: if self.cfg.workers == 0 { 0 } else { w },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loader(workers: usize, augment: AugmentRng, jitter: bool) -> Loader {
        let data = Arc::new(Dataset::generate(7, 96, 8, 3).unwrap());
        let cfg = LoaderConfig {
            batch: 16,
            workers,
            augment,
            jitter,
        };
        Loader::new(data, cfg, 7).unwrap()
    }

    fn strip(b: Batch) -> (Vec<f32>, Vec<i64>, Vec<usize>) {
        (b.x, b.y, b.indices)
    }

    #[test]
    fn batches_identical_for_any_worker_count_and_timing() {
        // 15 batches = 2.5 epochs of 6, with random sleeps in the workers.
        let take =
            |mut l: Loader| -> Vec<_> { (0..15).map(|_| strip(l.next_batch().unwrap())).collect() };
        let want = take(loader(0, AugmentRng::PerSample, false));
        for w in [1, 2, 4] {
            let mut l = loader(w, AugmentRng::PerSample, true);
            assert_eq!(
                take(loader(w, AugmentRng::PerSample, true)),
                want,
                "{w} workers"
            );
            l.next_batch().unwrap();
            assert!(l.take_findings().is_empty());
        }
        // Epochs are shuffled differently and every sample appears once per epoch.
        let mut seen: Vec<usize> = want[..6].iter().flat_map(|b| b.2.clone()).collect();
        seen.sort();
        assert_eq!(seen, (0..96).collect::<Vec<_>>());
        assert_ne!(want[0].2, want[6].2);
    }

    #[test]
    fn seek_reproduces_the_rest_of_the_stream() {
        let mut a = loader(2, AugmentRng::PerSample, false);
        let all: Vec<_> = (0..9).map(|_| strip(a.next_batch().unwrap())).collect();
        let mut b = loader(4, AugmentRng::PerSample, false);
        b.next_batch().unwrap(); // prefetches 4, consumes 1
        b.seek(Position { epoch: 1, batch: 1 }, None).unwrap();
        assert_eq!(strip(b.next_batch().unwrap()), all[7]);
        let e = b.seek(Position { epoch: 0, batch: 6 }, None).unwrap_err();
        assert!(e.to_string().contains("past the 6 batches"), "{e}");
    }

    #[test]
    fn shared_worker_seed_is_reported_by_name() {
        let mut l = loader(2, AugmentRng::SharedWorkerSeed, false);
        for _ in 0..2 {
            l.next_batch().unwrap();
        }
        let f = l.take_findings();
        assert!(
            f[0].contains("workers 0 and 1 share one random stream"),
            "{f:?}"
        );
        assert!(f[1].contains("identical augmentation noise"), "{f:?}");
    }
}
