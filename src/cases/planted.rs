//! Planted bugs that only a variation exposes (`planted/...`), and self-tests that crash, hang
//! or run out of memory on purpose (`selftest/...`, run only with `--isolate` and only when a
//! filter names `selftest`). Each planted case says what is wrong with it and which variation
//! catches it; without that variation it is skipped, never reported as passing.

use crate::case::{Case, Ctx, Outputs};
use crate::ops;
use crate::tensor::Tensor;
use crate::vary::Variation;
use anyhow::Result;
use rayon::prelude::*;
use std::collections::HashMap;
use std::sync::OnceLock;

/// A planted-bug case: name, description, catching variation and body.
struct Planted {
    name: &'static str,
    bug: &'static str,
    caught_by: Variation,
    run: fn(&mut Ctx) -> Result<Outputs>,
}

impl Case for Planted {
    fn name(&self) -> String {
        self.name.to_string()
    }
    fn backends(&self) -> Vec<crate::Backend> {
        vec![crate::Backend::Cpu]
    }
    fn planted_bug(&self) -> Option<&'static str> {
        Some(self.bug)
    }
    fn caught_by(&self) -> Option<Variation> {
        Some(self.caught_by)
    }
    fn run(&self, ctx: &mut Ctx) -> Result<Outputs> {
        (self.run)(ctx)
    }
}

/// A self-test that takes its process down.
struct SelfTest {
    name: &'static str,
    run: fn() -> Result<Outputs>,
}

impl Case for SelfTest {
    fn name(&self) -> String {
        self.name.to_string()
    }
    fn backends(&self) -> Vec<crate::Backend> {
        vec![crate::Backend::Cpu]
    }
    fn needs_isolation(&self) -> bool {
        true
    }
    fn run(&self, _ctx: &mut Ctx) -> Result<Outputs> {
        (self.run)()
    }
}

/// The planted-bug and self-test cases.
pub fn cases() -> Vec<Box<dyn Case>> {
    vec![
        Box::new(Planted {
            name: "planted/uninit_scratch",
            bug: "row sums accumulate into a scratch buffer that is never zeroed (reads uninitialised memory)",
            caught_by: Variation::Poison,
            run: uninit_scratch,
        }),
        Box::new(Planted {
            name: "planted/hashmap_order",
            bug: "sums a process-global HashMap in iteration order, which is random per process",
            caught_by: Variation::Process,
            run: hashmap_order,
        }),
        Box::new(Planted {
            name: "planted/thread_split_sum",
            bug: "splits a reduction into one chunk per thread, so the result follows the thread count",
            caught_by: Variation::Threads,
            run: thread_split_sum,
        }),
        Box::new(Planted {
            name: "planted/batch_variant_matmul",
            bug: "matmul `adaptive_split` splits k only for small batches, so rows differ with batch size",
            caught_by: Variation::Batch,
            run: batch_variant_matmul,
        }),
        Box::new(SelfTest { name: "selftest/abort", run: || std::process::abort() }),
        Box::new(SelfTest {
            name: "selftest/segfault",
            run: || {
                // SAFETY: none — this writes through a null pointer on purpose to test that a
                // segfaulting case is reported; it runs only in an isolated child process.
                unsafe { std::ptr::null_mut::<u64>().write_volatile(1) };
                unreachable!()
            },
        }),
        Box::new(SelfTest {
            name: "selftest/hang",
            run: || loop {
                std::thread::sleep(std::time::Duration::from_millis(50));
            },
        }),
        Box::new(SelfTest {
            name: "selftest/oom",
            run: || {
                // Simulates a machine with 256 MiB: limit this (isolated) process, then keep
                // allocating and touching 64 MiB blocks until an allocation fails.
                crate::memory::limit_address_space(256)?;
                let mut blocks: Vec<Vec<u8>> = Vec::new();
                loop {
                    blocks.push(vec![1u8; 64 << 20]);
                }
            },
        }),
    ]
}

fn uninit_scratch(ctx: &mut Ctx) -> Result<Outputs> {
    let (rows, cols) = (64, 256);
    let x = ctx.stream("planted/uninit_scratch/x").uniform(rows * cols);
    let mut sums = ctx.scratch_f32(rows); // BUG: should start from zeros
    for (s, row) in sums.iter_mut().zip(x.chunks(cols)) {
        for v in row {
            *s += v;
        }
    }
    Ok(Outputs::from([(
        "row_sums".to_string(),
        Tensor::from_slice(&[rows], &sums),
    )]))
}

fn hashmap_order(ctx: &mut Ctx) -> Result<Outputs> {
    static TABLE: OnceLock<HashMap<String, f32>> = OnceLock::new();
    let seed = ctx.controls.seed;
    let table = TABLE.get_or_init(|| {
        let vals = crate::rng::Stream::named(seed, "planted/hashmap_order").uniform(64);
        vals.iter()
            .enumerate()
            .map(|(i, v)| (format!("feature{i}"), v * 10f32.powi(i as i32 % 7 - 3)))
            .collect()
    });
    let mut total = 0.0f32;
    let mut order = Vec::new();
    for (k, v) in table {
        total += v;
        order.push(k.trim_start_matches("feature").parse::<i64>()?);
    }
    Ok(Outputs::from([
        ("total".to_string(), Tensor::scalar(total)),
        (
            "order".to_string(),
            Tensor::from_slice(&[order.len()], &order),
        ),
    ]))
}

fn thread_split_sum(ctx: &mut Ctx) -> Result<Outputs> {
    let x = ctx.stream("planted/thread_split_sum/x").uniform(1 << 16);
    let chunk = x.len().div_ceil(rayon::current_num_threads()); // BUG: split follows thread count
    let partials: Vec<f32> = x.par_chunks(chunk).map(|c| c.iter().sum::<f32>()).collect();
    Ok(Outputs::from([(
        "sum".to_string(),
        Tensor::scalar(partials.iter().sum::<f32>()),
    )]))
}

fn batch_variant_matmul(ctx: &mut Ctx) -> Result<Outputs> {
    let (m, k, n) = (96, 512, 32);
    let a = ctx.stream("planted/batch_variant_matmul/a").uniform(m * k);
    let b = ctx.stream("planted/batch_variant_matmul/b").uniform(k * n);
    ctx.forced.insert("matmul".into(), "adaptive_split".into());
    let c = ctx.in_batches(m, |ctx, r0, r1| {
        ops::matmul::matmul(ctx, &a[r0 * k..r1 * k], &b, r1 - r0, k, n)
    })?;
    Ok(Outputs::from([(
        "c".to_string(),
        Tensor::from_slice(&[m, n], &c),
    )]))
}
