//! The `Case` trait (one unit of work returning named tensors), its run context, and dispatch
//! of ops to implementations under the controls.

use crate::backend::Backend;
use crate::controls::Controls;
use crate::rng::Stream;
use crate::trace::{trace_digest, TraceArg, TraceEntry};
use crate::vary::{Knobs, Variation};
use anyhow::{bail, Result};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

pub use crate::outputs::Outputs;

/// One unit of work (a kernel launch, or one or more training steps) whose outputs must be
/// bit-identical from run to run.
pub trait Case: Send + Sync {
    /// Unique name such as `kernel/reduce_sum/large` or `train/mlp_step`.
    fn name(&self) -> String;
    /// Backends the case can run on.
    fn backends(&self) -> Vec<Backend> {
        vec![Backend::Cpu, Backend::Cuda]
    }
    /// Op families the case uses (shown by `bitexact list`).
    fn ops(&self) -> Vec<&'static str> {
        Vec::new()
    }
    /// `Some(what is wrong)` for a planted bug the harness is expected to catch: a difference is
    /// then reported as `caught`, and no difference as `missed`.
    fn planted_bug(&self) -> Option<&'static str> {
        None
    }
    /// For a planted bug that only one variation can expose: that variation. Without it the
    /// case is skipped rather than reported as missed.
    fn caught_by(&self) -> Option<Variation> {
        None
    }
    /// Whether the case brings its process down on purpose (crash, hang, OOM self-tests): it
    /// then runs only in an isolated child process.
    fn needs_isolation(&self) -> bool {
        false
    }
    /// Whether the case can only be judged with heap accounting (a planted memory-growth bug):
    /// it is skipped when [`crate::memory::CountingAlloc`] is not installed.
    fn needs_memory_counter(&self) -> bool {
        false
    }
    /// Whether the outputs do not depend on the seed (e.g. evaluation in eval mode): only such
    /// cases run under the `seed` variation, which gives each odd run a different seed.
    fn seed_independent(&self) -> bool {
        false
    }
    /// Runs once under `ctx` and returns the outputs.
    fn run(&self, ctx: &mut Ctx) -> Result<Outputs>;
}

/// What one implementation of an op family is (the metadata view of an `Impl`, used by
/// `bitexact list`, the cost-of-determinism table and tests through [`crate::ops::catalog`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Algo {
    /// Implementation name, e.g. `atomic_cas`.
    pub name: &'static str,
    /// Backend it runs on.
    pub backend: Backend,
    /// Whether it gives bit-identical results from run to run.
    pub deterministic: bool,
}

/// One implementation of an op family: its name, backend and deterministic flag, and `run`, the
/// function that computes it (`F` is the op's function type, e.g. `fn(&[f32]) -> Result<f32>`).
/// Each op keeps a table of these in fixed-choice order for [`Ctx::dispatch`].
#[derive(Clone, Copy, Debug)]
pub struct Impl<F> {
    /// Implementation name, e.g. `atomic_cas` (shown in reports, traces and the cost table).
    pub name: &'static str,
    /// Backend it runs on.
    pub backend: Backend,
    /// Whether it gives bit-identical results from run to run.
    pub deterministic: bool,
    /// The function that runs it.
    pub run: F,
}

impl<F> Impl<F> {
    /// The metadata of this implementation.
    pub const fn algo(&self) -> Algo {
        Algo {
            name: self.name,
            backend: self.backend,
            deterministic: self.deterministic,
        }
    }
}

/// What a case sees while it runs: backend, controls, random streams, and op dispatch.
pub struct Ctx {
    /// Backend the case runs on.
    pub backend: Backend,
    /// Controls of this run.
    pub controls: Controls,
    /// Index of this run (0-based) among the harness's K runs.
    pub run_index: usize,
    /// Implementation chosen per op in this run (`op` → names, comma-separated if several).
    pub algorithms: BTreeMap<String, String>,
    /// Implementations forced by name per op (used to measure the cost of determinism).
    pub forced: BTreeMap<String, String>,
    /// Seconds spent inside each op's implementation in this run.
    pub op_seconds: BTreeMap<String, f64>,
    /// What the variations set for this run: the byte pattern fresh scratch buffers
    /// ([`Ctx::scratch_f32`]) are filled with (`poison`), and the sub-batch size batch-capable
    /// cases compute their rows in ([`Ctx::in_batches`], the `batch` variation).
    pub knobs: Knobs,
    /// Op trace of this run, recorded when `Some` (see [`crate::trace`]).
    pub trace: Option<Vec<TraceEntry>>,
    /// Implementation chosen by the latest dispatch.
    pub last_algorithm: &'static str,
    /// Defects found during the run (e.g. loader workers sharing one random stream), by name:
    /// they make a planted bug `caught` and any other case an `error`.
    pub findings: Vec<String>,
    /// Op calls recorded by [`Ctx::record`] in this run, traced or not.
    pub recorded_ops: usize,
    /// Figures for the report (e.g. peak heap of two ways of doing the same step), shown as
    /// `note:` lines; never digested and never part of the verdict.
    pub notes: Vec<String>,
}

/// Autotune key: op, backend, shape, deterministic switch.
type TuneKey = (String, Backend, String, bool);

/// Autotune cache shared by the process, like cuDNN's: key → implementation.
fn autotune_cache() -> &'static Mutex<HashMap<TuneKey, &'static str>> {
    static CACHE: OnceLock<Mutex<HashMap<TuneKey, &'static str>>> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// Seconds an implementation took: the CUDA-event time of the kernels it launched when it ran
/// on the GPU, else the wall time since `t0`.
fn op_time(t0: Instant) -> f64 {
    let wall = t0.elapsed().as_secs_f64();
    crate::backend::cuda::take_device_seconds().unwrap_or(wall)
}

impl Ctx {
    /// A context for `backend` under `controls`, as run 0.
    pub fn new(backend: Backend, controls: Controls) -> Ctx {
        Ctx {
            backend,
            controls,
            run_index: 0,
            algorithms: BTreeMap::new(),
            forced: BTreeMap::new(),
            op_seconds: BTreeMap::new(),
            knobs: Knobs::default(),
            trace: None,
            last_algorithm: "",
            findings: Vec::new(),
            recorded_ops: 0,
            notes: Vec::new(),
        }
    }

    /// A fresh f32 buffer whose contents callers must not rely on: zeros normally, the poison
    /// pattern under the `poison` variation (like uninitialised device memory). A kernel that
    /// reads before it writes gives different results under different patterns.
    pub fn scratch_f32(&self, n: usize) -> Vec<f32> {
        let byte = self.knobs.poison.unwrap_or(0);
        vec![f32::from_bits(u32::from_ne_bytes([byte; 4])); n]
    }

    /// Computes `rows` rows with `f(ctx, start, end)` in one call, or in sub-batches when
    /// [`Ctx::knobs`] is set, and concatenates the results in row order.
    pub fn in_batches(
        &mut self,
        rows: usize,
        mut f: impl FnMut(&mut Ctx, usize, usize) -> Result<Vec<f32>>,
    ) -> Result<Vec<f32>> {
        let step = self.knobs.batch_split.unwrap_or(rows).max(1);
        let mut out = Vec::new();
        let mut r = 0;
        while r < rows {
            let end = (r + step).min(rows);
            out.extend(f(self, r, end)?);
            r = end;
        }
        Ok(out)
    }

    /// Records an op call in the trace (when tracing): digests of its inputs and output and the
    /// implementation the latest dispatch chose.
    pub fn record(&mut self, op: &str, inputs: &[TraceArg], output: TraceArg) {
        self.recorded_ops += 1;
        if let Some(trace) = self.trace.as_mut() {
            trace.push(TraceEntry {
                call: trace.len(),
                op: op.to_string(),
                algorithm: self.last_algorithm.to_string(),
                inputs: inputs.iter().map(|v| trace_digest(*v)).collect(),
                output: trace_digest(output),
                ..Default::default()
            });
        }
    }

    /// The random stream named `name` under the run's seed.
    pub fn stream(&self, name: &str) -> Stream {
        Stream::named(self.controls.seed, name)
    }

    /// Picks an implementation of `op` for this backend from `impls` and calls `call` with its
    /// function (`call` supplies the op's arguments, e.g. `|f| f(x)`).
    ///
    /// * forced by name (see [`Ctx::forced`]) → that one (an error if it is nondeterministic
    ///   while the deterministic switch is on);
    /// * deterministic on → only deterministic candidates, else an error naming op and backend;
    /// * benchmark on → every candidate is timed once per `(op, backend, shape)` in this process
    ///   (CUDA candidates by CUDA events, others by wall time),
    ///   the fastest is kept and reused (like `cudnn.benchmark`);
    /// * benchmark off → the first candidate in `impls` order (the documented fixed choice).
    ///
    /// The choice is recorded in [`Ctx::algorithms`].
    pub fn dispatch<F, T>(
        &mut self,
        op: &str,
        shape: &str,
        impls: &[Impl<F>],
        mut call: impl FnMut(&F) -> Result<T>,
    ) -> Result<T> {
        let backend = self.backend;
        let det = self.controls.deterministic;
        let mut candidates: Vec<&Impl<F>> = impls.iter().filter(|a| a.backend == backend).collect();
        if candidates.is_empty() {
            bail!("`{op}` has no implementation on {backend}");
        }
        if let Some(want) = self.forced.get(op) {
            candidates.retain(|a| a.name == want);
            match candidates.first() {
                None => bail!("`{op}` on {backend} has no implementation named `{want}`"),
                Some(a) if det && !a.deterministic => bail!(
                    "`{op}` implementation `{want}` on {backend} is nondeterministic and the deterministic switch is on"
                ),
                _ => {}
            }
        } else if det {
            candidates.retain(|a| a.deterministic);
            if candidates.is_empty() {
                bail!("`{op}` on {backend} has no deterministic implementation");
            }
        }
        let key = (op.to_string(), backend, shape.to_string(), det);
        let cached = if self.controls.benchmark && candidates.len() > 1 {
            autotune_cache().lock().unwrap().get(&key).copied()
        } else {
            Some(candidates[0].name)
        };
        let (chosen, out) = match cached {
            Some(name) => {
                let a = *candidates
                    .iter()
                    .find(|a| a.name == name)
                    .expect("cached candidate");
                let t0 = Instant::now();
                crate::backend::cuda::take_device_seconds();
                let out = call(&a.run)?;
                *self.op_seconds.entry(op.to_string()).or_default() += op_time(t0);
                (a.name, out)
            }
            None => {
                let mut best: Option<(f64, &'static str, T)> = None;
                for a in &candidates {
                    let t0 = Instant::now();
                    crate::backend::cuda::take_device_seconds();
                    let out = call(&a.run)?;
                    let dt = op_time(t0);
                    if best.as_ref().is_none_or(|b| dt < b.0) {
                        best = Some((dt, a.name, out));
                    }
                }
                let (dt, name, out) = best.expect("at least one candidate");
                *self.op_seconds.entry(op.to_string()).or_default() += dt;
                autotune_cache().lock().unwrap().insert(key, name);
                (name, out)
            }
        };
        self.last_algorithm = chosen;
        let entry = self.algorithms.entry(op.to_string()).or_default();
        if !entry.split(',').any(|n| n == chosen) {
            if !entry.is_empty() {
                entry.push(',');
            }
            entry.push_str(chosen);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Test implementations whose function is their own name.
    const IMPLS: &[Impl<&str>] = &[
        Impl {
            name: "fast",
            backend: Backend::Cpu,
            deterministic: false,
            run: "fast",
        },
        Impl {
            name: "exact",
            backend: Backend::Cpu,
            deterministic: true,
            run: "exact",
        },
        Impl {
            name: "gpu_only",
            backend: Backend::Cuda,
            deterministic: false,
            run: "gpu_only",
        },
    ];

    fn ctx(det: bool, bench: bool, backend: Backend) -> Ctx {
        let c = Controls {
            deterministic: det,
            benchmark: bench,
            ..Controls::default()
        };
        Ctx::new(backend, c)
    }

    #[test]
    fn deterministic_switch_picks_deterministic_or_errors() {
        let mut c = ctx(true, false, Backend::Cpu);
        assert_eq!(c.dispatch("op", "s", IMPLS, |f| Ok(*f)).unwrap(), "exact");
        assert_eq!(c.algorithms["op"], "exact");
        let mut g = ctx(true, false, Backend::Cuda);
        let e = g
            .dispatch("scatter_add", "s", IMPLS, |f| Ok(*f))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "`scatter_add` on cuda has no deterministic implementation"
        );
    }

    #[test]
    fn fixed_choice_without_benchmark() {
        let mut c = ctx(false, false, Backend::Cpu);
        assert_eq!(c.dispatch("op", "s", IMPLS, |f| Ok(*f)).unwrap(), "fast");
    }

    #[test]
    fn benchmark_keeps_fastest_and_caches_it() {
        let mut c = ctx(false, true, Backend::Cpu);
        let slow_first = |f: &&'static str| {
            if *f == "fast" {
                std::thread::sleep(std::time::Duration::from_millis(30));
            }
            Ok(*f)
        };
        assert_eq!(
            c.dispatch("bench_op", "shape1", IMPLS, slow_first).unwrap(),
            "exact"
        );
        let mut calls = 0;
        let again = c.dispatch("bench_op", "shape1", IMPLS, |f| {
            calls += 1;
            Ok(*f)
        });
        assert_eq!((again.unwrap(), calls), ("exact", 1));
    }

    #[test]
    fn forcing_respects_the_switch() {
        let mut c = ctx(true, false, Backend::Cpu);
        c.forced.insert("op".into(), "fast".into());
        assert!(c
            .dispatch("op", "s", IMPLS, |f| Ok(*f))
            .unwrap_err()
            .to_string()
            .contains("nondeterministic"));
        let mut c = ctx(false, false, Backend::Cpu);
        c.forced.insert("op".into(), "exact".into());
        assert_eq!(c.dispatch("op", "s", IMPLS, |f| Ok(*f)).unwrap(), "exact");
    }
}
