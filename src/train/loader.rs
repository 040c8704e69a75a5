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
//!   worker count. Each worker also has a stream derived from `(seed, worker id)`, which the
//!   correct loader never augments from (the test hook's random sleeps are keyed by (worker
//!   seed, batch)); [`AugmentRng::SharedWorkerSeed`] is the classic bug where every worker
//!   augments from one copied stream.
//! * **Workers**: `workers` persistent threads, each with its own job queue. The loader keeps
//!   up to `2 × workers` batches of the current epoch in flight (batch `j` on worker
//!   `j % workers`), results come back over one channel in completion order and are handed out
//!   in batch order. 0 workers builds batches on the calling thread. The position (epoch, next
//!   batch) and the saved worker streams count handed-out batches only, so a checkpoint never
//!   depends on what was prefetched; a seek drops in-flight results by generation number.
//! * **Checks**: the loader reports, by name, workers that share one random stream and samples
//!   that received identical augmentation noise (see [`Loader::take_findings`]).

pub use super::dataset::Dataset;
use crate::rng::{derive_seed, Stream};
use anyhow::{bail, Result};
use std::collections::{BTreeMap, HashMap};
use std::sync::{mpsc, Arc};

/// Tags mixed into the seed for each use.
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

/// What a worker thread needs to build batches.
struct Shared {
    data: Arc<Dataset>,
    cfg: LoaderConfig,
    seed: u64,
}

/// A request to a worker: build batch `j` of `epoch` from `order`.
struct Job {
    generation: u64,
    epoch: u64,
    j: usize,
    order: Arc<Vec<usize>>,
    /// Stream to continue from (after a seek); `None` keeps the worker's own.
    reset: Option<Stream>,
}

/// A built batch and the worker's stream after building it.
struct Done {
    generation: u64,
    j: usize,
    batch: Batch,
    stream: Stream,
}

/// Persistent worker threads: one job queue each, one shared result queue.
struct Pool {
    jobs: Vec<mpsc::Sender<Job>>,
    results: mpsc::Receiver<Done>,
    handles: Vec<std::thread::JoinHandle<()>>,
}

impl Pool {
    fn start(shared: &Arc<Shared>, streams: &[Stream]) -> Result<Pool> {
        let (tx, results) = mpsc::channel();
        let mut jobs = Vec::new();
        let mut handles = Vec::new();
        for (w, &start) in streams.iter().enumerate() {
            let (job_tx, job_rx) = mpsc::channel::<Job>();
            let (shared, tx) = (shared.clone(), tx.clone());
            let h = std::thread::Builder::new()
                .name(format!("bitexact-loader-{w}"))
                .spawn(move || {
                    let mut stream = start;
                    for job in job_rx {
                        if let Some(s) = job.reset {
                            stream = s;
                        }
                        let batch = shared.build(job.epoch, &job.order, job.j, w, &mut stream);
                        let done = Done {
                            generation: job.generation,
                            j: job.j,
                            batch,
                            stream,
                        };
                        if tx.send(done).is_err() {
                            break;
                        }
                    }
                })
                .map_err(|e| anyhow::anyhow!("loader: cannot start worker {w}: {e}"))?;
            jobs.push(job_tx);
            handles.push(h);
        }
        Ok(Pool {
            jobs,
            results,
            handles,
        })
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.jobs.clear(); // closes the job queues: workers finish their job and exit
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

/// The data loader.
pub struct Loader {
    shared: Arc<Shared>,
    pos: Position,
    order: Arc<Vec<usize>>,
    /// Next batch index of this epoch to hand to a worker.
    issued: usize,
    /// Built batches not yet handed out, by batch index.
    ready: BTreeMap<usize, (Batch, Stream)>,
    /// Bumped by every seek: results of older jobs are dropped.
    generation: u64,
    /// Workers whose next job must reset their stream (after a seek).
    reset: Vec<bool>,
    pool: Option<Pool>,
    worker_streams: Vec<Stream>,
    seen_noise: HashMap<u64, (usize, usize)>,
    noise_reported: bool,
    findings: Vec<String>,
}

impl Loader {
    /// A loader at the start of epoch 0 (starting its worker threads).
    pub fn new(data: Arc<Dataset>, cfg: LoaderConfig, seed: u64) -> Result<Loader> {
        if cfg.batch == 0 || cfg.batch > data.len() {
            bail!(
                "loader: batch size {} must be in 1..={} (the dataset size)",
                cfg.batch,
                data.len()
            );
        }
        let worker_streams: Vec<Stream> = (0..cfg.workers.max(1))
            .map(|w| match cfg.augment {
                AugmentRng::PerSample => Stream::new(derive_seed(seed, w as u64), WORKER_STREAM),
                AugmentRng::SharedWorkerSeed => Stream::new(seed, WORKER_STREAM), // BUG (planted)
            })
            .collect();
        let shared = Arc::new(Shared { data, cfg, seed });
        let pool = if cfg.workers > 0 {
            Some(Pool::start(&shared, &worker_streams)?)
        } else {
            None
        };
        let mut l = Loader {
            shared,
            pos: Position { epoch: 0, batch: 0 },
            order: Arc::new(Vec::new()),
            issued: 0,
            ready: BTreeMap::new(),
            generation: 0,
            reset: vec![false; worker_streams.len()],
            pool,
            worker_streams,
            seen_noise: HashMap::new(),
            noise_reported: false,
            findings: Vec::new(),
        };
        l.audit_worker_streams();
        l.seek(Position { epoch: 0, batch: 0 }, None)?;
        Ok(l)
    }

    /// Batches per epoch.
    pub fn batches_per_epoch(&self) -> u64 {
        (self.shared.data.len() / self.shared.cfg.batch) as u64
    }

    /// The position of the next batch [`Loader::next_batch`] returns.
    pub fn position(&self) -> Position {
        self.pos
    }

    /// Each worker's stream as of the batches handed out so far (saved in checkpoints: the
    /// planted shared-seed loader advances them).
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
            let stateless = self.shared.cfg.augment == AugmentRng::PerSample;
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
            self.order = Arc::new(self.permutation(pos.epoch));
            self.seen_noise.clear();
        }
        self.pos = pos;
        self.issued = pos.batch as usize;
        self.ready.clear();
        self.generation += 1;
        self.reset.iter_mut().for_each(|r| *r = true);
        Ok(())
    }

    /// Defects found so far (duplicate worker streams, repeated augmentation noise), drained.
    pub fn take_findings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.findings)
    }

    fn permutation(&self, epoch: u64) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.shared.data.len()).collect();
        let mut s = Stream::new(derive_seed(self.shared.seed, SHUFFLE), epoch);
        for i in (1..order.len()).rev() {
            let j = s.below(i as u32 + 1) as usize;
            order.swap(i, j);
        }
        order
    }

    fn audit_worker_streams(&mut self) {
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
        let j = self.pos.batch as usize;
        let (batch, stream) = match self.pool.is_some() {
            false => {
                let mut s = self.worker_streams[0];
                let b = self.shared.build(self.pos.epoch, &self.order, j, 0, &mut s);
                (b, s)
            }
            true => self.wait_for_workers(j)?,
        };
        self.worker_streams[batch.worker] = stream;
        self.note_noise(&batch);
        self.pos.batch += 1;
        if self.pos.batch == self.batches_per_epoch() {
            let next = Position {
                epoch: self.pos.epoch + 1,
                batch: 0,
            };
            self.order = Arc::new(self.permutation(next.epoch));
            self.seen_noise.clear();
            self.pos = next;
            self.issued = 0;
        }
        Ok(batch)
    }

    /// Keeps up to `2 × workers` batches of this epoch in flight (batch `j` on worker
    /// `j % workers`, each worker's queue in batch order) and waits for batch `j`.
    fn wait_for_workers(&mut self, j: usize) -> Result<(Batch, Stream)> {
        let workers = self.shared.cfg.workers;
        let ahead = (j + 2 * workers).min(self.batches_per_epoch() as usize);
        let pool = self.pool.as_ref().expect("workers > 0");
        while self.issued < ahead {
            let w = self.issued % workers;
            let reset = std::mem::take(&mut self.reset[w]).then_some(self.worker_streams[w]);
            let job = Job {
                generation: self.generation,
                epoch: self.pos.epoch,
                j: self.issued,
                order: self.order.clone(),
                reset,
            };
            if pool.jobs[w].send(job).is_err() {
                bail!("loader: worker {w} has stopped");
            }
            self.issued += 1;
        }
        while !self.ready.contains_key(&j) {
            let done = pool
                .results
                .recv()
                .map_err(|_| anyhow::anyhow!("loader: every worker has stopped"))?;
            if done.generation == self.generation {
                self.ready.insert(done.j, (done.batch, done.stream));
            }
        }
        Ok(self.ready.remove(&j).expect("just checked"))
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
}

impl Shared {
    /// Builds batch `j` of `epoch` (rows `order[j·b..(j+1)·b]`) on worker `w`, whose stream
    /// is `ws`.
    fn build(&self, epoch: u64, order: &[usize], j: usize, w: usize, ws: &mut Stream) -> Batch {
        if self.cfg.jitter {
            let mut own = Stream::new(derive_seed(self.seed, w as u64), j as u64);
            let us = own.below(2000) as u64;
            std::thread::sleep(std::time::Duration::from_micros(us));
        }
        let d = self.data.dim;
        let bsz = self.cfg.batch;
        let indices: Vec<usize> = order[j * bsz..(j + 1) * bsz].to_vec();
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
#[path = "loader_tests.rs"]
mod tests;
