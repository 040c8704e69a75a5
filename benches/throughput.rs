//! `cargo bench`: digest throughput against single-thread sha2, small-tensor overhead, harness
//! overhead against bare runs, and the cost of determinism per op. Every number is a ratio
//! against a baseline measured in the same run. `BITEXACT_BENCH_MB` sets the large-tensor size
//! (default 1024 MiB).

use bitexact::cases::registry;
use bitexact::digest::{digest_all, tensor_digest};
use bitexact::harness::assess_case;
use bitexact::Ctx;
use bitexact::{Backend, Controls, Tensor};
use sha2::{Digest as _, Sha256};

mod common;
use common::{best, cores_and_mb};

fn main() {
    let (cores, mb) = cores_and_mb();
    let bytes = mb << 20;
    let data: Vec<u32> = (0..bytes / 4)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761))
        .collect();
    let t = Tensor::from_slice(&[data.len()], &data);
    drop(data);
    let gbs = |s: f64| bytes as f64 / s / 1e9;
    let single = best(3, || Sha256::digest(t.bytes()));
    let ours = best(3, || tensor_digest(&t));
    println!("digest of a {mb} MiB tensor on {cores} cores:");
    println!("  sha2, one thread (baseline)   {:6.2} GB/s", gbs(single));
    println!("  bitexact tensor_digest        {:6.2} GB/s", gbs(ours));
    println!(
        "  ratio to baseline {:.2}x; to cores x baseline {:.2} (target >= 0.9)",
        single / ours,
        single / ours / cores as f64
    );

    let tiny: Vec<(String, Tensor)> = (0..100_000)
        .map(|i| {
            (
                format!("t{i:06}"),
                Tensor::from_slice(&[4], &[i as f32, 1.0, 2.0, 3.0]),
            )
        })
        .collect();
    let raw = best(3, || {
        tiny.iter()
            .map(|(_, t)| Sha256::digest(t.bytes()))
            .collect::<Vec<_>>()
    });
    let ours = best(3, || digest_all(tiny.iter().map(|(n, t)| (n, t))));
    println!("100,000 tiny tensors: {:.1} ms (bare sha2 of the bytes on one thread: {:.1} ms, ratio {:.2}x)", ours * 1e3, raw * 1e3, ours / raw);

    let controls = Controls::default();
    println!("harness overhead (K=4 runs, assess_case vs bare Case::run calls):");
    for name in [
        "kernel/matmul/large",
        "kernel/softmax/large",
        "kernel/reduce_sum/small",
    ] {
        let case = registry()
            .into_iter()
            .find(|c| c.name() == name)
            .expect("case");
        let pool = bitexact::harness::pool(controls.threads).expect("pool");
        let bare = best(3, || {
            for _ in 0..4 {
                let mut ctx = Ctx::new(Backend::Cpu, controls.clone());
                pool.install(|| case.run(&mut ctx)).expect("run");
            }
        });
        let harness = best(3, || assess_case(case.as_ref(), Backend::Cpu, &controls, 4));
        println!(
            "  {name:28} bare {:8.2} ms  harness {:8.2} ms  overhead {:+.1}%",
            bare * 1e3,
            harness * 1e3,
            (harness / bare - 1.0) * 100.0
        );
    }

    println!("cost of determinism (deterministic / fastest nondeterministic):");
    let all = registry();
    let cases: Vec<&dyn bitexact::Case> = all.iter().map(|c| c.as_ref()).collect();
    for r in bitexact::cost::cost_of_determinism(&cases, Backend::Cpu, &controls, 5).expect("cost")
    {
        println!(
            "  {:12} {:>16} {:8.2} ms vs {:>16} {:8.2} ms = {:.2}x",
            r.op,
            r.deterministic.0,
            r.deterministic.1 * 1e3,
            r.nondeterministic.0,
            r.nondeterministic.1 * 1e3,
            r.ratio
        );
    }
}
