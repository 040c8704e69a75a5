//! CUDA backend tests. The GPU-only tests print `skipped: <reason>` and return when there is no
//! GPU; with one they check the GPU's Philox streams against the CPU's, that every deterministic
//! kernel is bit-identical over repeated runs (and to the CPU where the math is the same), that
//! the atomic variants are caught, and the cross-device comparison. The CLI tests run everywhere.

use bitexact::backend::cuda::{ops as gpu_ops, Gpu};
use bitexact::backend::Backend;
use bitexact::harness::assess_case;
use bitexact::outcome::CrossVerdict;
use bitexact::outcome::Verdict;
use bitexact::rng::Stream;
use bitexact::suite::{self, SuiteConfig};
use bitexact::Ctx;
use bitexact::{cases, ops, Controls};

fn bits(v: Vec<f32>) -> Vec<u32> {
    v.into_iter().map(f32::to_bits).collect()
}

fn gpu_or_skip(test: &str) -> bool {
    match Gpu::get() {
        Ok(g) => {
            eprintln!("{test}: on {:?}", g.info());
            true
        }
        Err(reason) => {
            bitexact::check::skip_notice(test, &reason.to_string());
            false
        }
    }
}

fn ctx(backend: Backend, deterministic: bool) -> Ctx {
    Ctx::new(
        backend,
        Controls {
            deterministic,
            ..Controls::default()
        },
    )
}

fn inputs(seed: u64, n: usize) -> Vec<f32> {
    Stream::new(seed, 9)
        .uniform(n)
        .into_iter()
        .map(|u| 2.0 * u - 1.0)
        .collect()
}

#[test]
fn gpu_philox_stream_equals_cpu_for_any_grid_and_offset() {
    if !gpu_or_skip("gpu_philox_stream_equals_cpu_for_any_grid_and_offset") {
        return;
    }
    for seed in [0u64, 42, u64::MAX] {
        for offset in [0u64, 1, 3, 5, 1_000_003, (1 << 34) + 2] {
            for n in [1usize, 7, 1000, 70_001] {
                let mut want = vec![0u32; n];
                Stream {
                    seed,
                    stream: 17,
                    offset,
                }
                .fill_u32(&mut want);
                for blocks in [Some(1), Some(3), Some(64), None] {
                    let s = Stream {
                        seed,
                        stream: 17,
                        offset,
                    };
                    let got = gpu_ops::philox_fill(s, n, blocks).unwrap();
                    assert!(
                        got == want,
                        "seed {seed} offset {offset} n {n} blocks {blocks:?}"
                    );
                }
            }
        }
    }
}

/// `run` of op `op` gives the same bits in 6 runs on the GPU, and the CPU's bits
/// (`same_as_cpu`) or bits within 16 ULP of them.
fn repeats_and_matches_the_cpu(op: &str, run: &dyn Fn(&mut Ctx) -> Vec<u32>, same_as_cpu: bool) {
    let mut g = ctx(Backend::Cuda, true);
    let first = run(&mut g);
    for _ in 0..5 {
        assert!(run(&mut g) == first, "{op} differs between GPU runs");
    }
    let cpu = run(&mut ctx(Backend::Cpu, true));
    if same_as_cpu {
        assert!(cpu == first, "{op}: GPU bits differ from the CPU's");
    } else {
        let ulp = cpu
            .iter()
            .zip(&first)
            .map(|(&p, &q)| (p as i64 - q as i64).unsigned_abs())
            .max()
            .unwrap();
        assert!(ulp <= 16, "{op}: {ulp} ULP from the CPU");
    }
}

#[test]
fn deterministic_kernels_repeat_bit_for_bit_and_match_the_cpu() {
    if !gpu_or_skip("deterministic_kernels_repeat_bit_for_bit_and_match_the_cpu") {
        return;
    }
    let x = inputs(1, (1 << 20) + 37);
    let (m, k, n) = (70, 300, 45);
    let (a, b) = (inputs(2, m * k), inputs(3, k * n));
    let index: Vec<i64> = Stream::new(4, 1)
        .uniform(5000)
        .into_iter()
        .map(|u| (u * 97.0) as i64)
        .collect();
    let src = inputs(5, 5000 * 6);
    let (rows, cols) = (33, 517);
    let xs = inputs(6, rows * cols);
    let (g, be) = (inputs(7, cols), inputs(8, cols));
    type Run<'a> = Box<dyn Fn(&mut Ctx) -> Vec<u32> + 'a>;
    let cases: Vec<(&str, Run<'_>, bool)> = vec![
        (
            "reduce_sum",
            Box::new(|c: &mut Ctx| vec![ops::reduce_sum::reduce_sum(c, &x).unwrap().to_bits()]),
            true,
        ),
        (
            "matmul",
            Box::new(|c: &mut Ctx| bits(ops::matmul::matmul(c, &a, &b, m, k, n).unwrap())),
            true,
        ),
        (
            "scatter_add",
            Box::new(|c: &mut Ctx| {
                bits(ops::scatter_add::scatter_add(c, &src, &index, 97, 6).unwrap())
            }),
            true,
        ),
        (
            "layer_norm",
            Box::new(|c: &mut Ctx| {
                bits(ops::layer_norm::layer_norm(c, &xs, &g, &be, rows, cols, 1e-5).unwrap())
            }),
            true,
        ),
        (
            "dropout",
            Box::new(|c: &mut Ctx| {
                let mut s = Stream::new(3, 3);
                let (y, mask) = ops::dropout::dropout(c, &xs, 0.3, &mut s).unwrap();
                bits(y)
                    .into_iter()
                    .chain(mask.into_iter().map(u32::from))
                    .collect()
            }),
            true,
        ),
        (
            "softmax",
            Box::new(|c: &mut Ctx| bits(ops::softmax::softmax(c, &xs, rows, cols).unwrap())),
            false, // expf is not correctly rounded: compared by ULP below
        ),
    ];
    for (op, run, same_as_cpu) in &cases {
        repeats_and_matches_the_cpu(op, run, *same_as_cpu);
    }
    // Every deterministic CUDA matmul (each tile configuration) gives the CPU's bits
    // (k ascending without FMA).
    let cpu_bits = cases[1].1(&mut ctx(Backend::Cpu, true));
    let matmul = ops::catalog()
        .into_iter()
        .find(|(op, _)| *op == "matmul")
        .unwrap();
    for a in matmul
        .1
        .iter()
        .filter(|a| a.backend == Backend::Cuda && a.deterministic)
    {
        let mut g = ctx(Backend::Cuda, true);
        g.forced.insert("matmul".into(), a.name.into());
        assert!(cases[1].1(&mut g) == cpu_bits, "{}", a.name);
        assert_eq!(g.algorithms["matmul"], a.name);
    }
}

/// Runs per case when checking that an atomic variant is caught (bounded: K = 30).
const K: usize = 30;

#[test]
fn atomic_variants_are_caught() {
    if !gpu_or_skip("atomic_variants_are_caught") {
        return;
    }
    let controls = Controls {
        deterministic: false,
        ..Controls::default()
    };
    // Every op with a nondeterministic CUDA implementation: its large case is caught with it.
    for (op, algos) in ops::catalog() {
        let atomic: Vec<&str> = algos
            .iter()
            .filter(|a| a.backend == Backend::Cuda && !a.deterministic)
            .map(|a| a.name)
            .collect();
        if atomic.is_empty() {
            continue;
        }
        let name = format!("kernel/{op}/large");
        let case = cases::find(&name).unwrap();
        let r = assess_case(case.as_ref(), Backend::Cuda, &controls, K);
        assert_eq!(
            r.verdict(),
            Verdict::Nondeterministic,
            "{name} with {:?} over {K} runs",
            r.algorithms
        );
        assert!(atomic
            .iter()
            .any(|a| r.algorithms[op].split(',').any(|n| n == *a)));
    }
}

#[test]
fn cross_device_comparison_of_small_cases() {
    if !gpu_or_skip("cross_device_comparison_of_small_cases") {
        return;
    }
    let selected = cases::select(Some("kernel/*/small"));
    let controls = Controls::default();
    let selected: Vec<&dyn bitexact::Case> = selected.iter().map(|c| c.as_ref()).collect();
    let mut config = SuiteConfig::new(vec![Backend::Cpu, Backend::Cuda], controls, 2);
    config.cross_device = true;
    let cmp = suite::run(&suite::Subject::cases(&selected), &config, &mut |_| {})
        .unwrap()
        .cross_device;
    assert_eq!(cmp.len(), selected.len());
    for c in &cmp {
        assert_ne!(c.verdict, CrossVerdict::Mismatch, "{c:?}");
        assert_ne!(c.verdict, CrossVerdict::Skipped, "{c:?}");
        if [
            "philox",
            "dropout",
            "matmul",
            "reduce_sum",
            "scatter_add",
            "layer_norm",
        ]
        .iter()
        .any(|op| c.case.contains(op))
        {
            assert_eq!(c.verdict, CrossVerdict::Identical, "{c:?}");
        }
    }
}

#[test]
fn device_digests_equal_cpu_digests() {
    if !gpu_or_skip("device_digests_equal_cpu_digests") {
        return;
    }
    for n in [10usize, (1 << 18) + 3, 3 << 20] {
        let t = bitexact::Tensor::from_slice(&[n], &inputs(n as u64, n));
        assert_eq!(
            gpu_ops::tensor_digest(&t).unwrap(),
            bitexact::digest::tensor_digest(&t),
            "{n} elements"
        );
    }
}

#[test]
fn device_fingerprints_equal_host_fingerprints_at_any_alignment() {
    if !gpu_or_skip("device_fingerprints_equal_host_fingerprints_at_any_alignment") {
        return;
    }
    use bitexact::backend::cuda::fingerprint::fingerprints_of;
    use bitexact::fingerprint::fingerprint;
    let n: usize = (3 << 20) + 5;
    let mut words = vec![0u32; n.div_ceil(4)];
    Stream::new(11, 4).fill_u32(&mut words);
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).take(n).collect();
    // Lengths around whole words, one block's words, and a grid of 1024 blocks and more.
    let lens = [0usize, 1, 7, 8, 9, 2047, 2048, 2049, 1 << 20, n];
    let data: Vec<&[u8]> = lens.iter().map(|&l| &bytes[..l]).collect();
    let want: Vec<_> = data.iter().map(|d| fingerprint(d)).collect();
    for skew in [0, 3, 8] {
        assert_eq!(
            fingerprints_of(&data, skew).unwrap(),
            want,
            "at byte offset {skew}"
        );
    }
    // A swap of two words changes the fingerprint on the device as on the host.
    let mut swapped = bytes[..4096].to_vec();
    let (first, rest) = swapped.split_at_mut(8);
    first.swap_with_slice(&mut rest[..8]);
    let got = fingerprints_of(&[&swapped, &bytes[..4096]], 0).unwrap();
    assert_eq!(got[0], fingerprint(&swapped));
    assert_ne!(got[0], got[1]);
}

use crate::common;

fn bitexact(args: &[&str]) -> (Option<i32>, String) {
    let o = common::bitexact(args);
    (o.status.code(), common::stdout(&o))
}

#[test]
fn cuda_cases_are_skipped_with_the_reason_or_run() {
    let args = ["report", "--backend", "cuda", "--filter", "kernel/*/small"];
    let (code, json) = bitexact(&[&args[..], &["--format", "json"]].concat());
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let cases = v["cases"].as_array().unwrap();
    let n = bitexact::ops::catalog().len(); // one small kernel case per op family
    assert_eq!(cases.len(), n);
    match Gpu::get() {
        Err(reason) => {
            assert_eq!(code, Some(0), "skipped is not a failure");
            for c in cases {
                assert_eq!(c["backend"], "cuda");
                assert_eq!(c["verdict"], "skipped", "{c}");
                assert_eq!(c["message"].as_str(), Some(reason.as_str()));
            }
            assert_eq!(v["summary"]["skipped"], n);
            assert_eq!(v["summary"]["deterministic"], 0, "never passed");
            let (_, text) = bitexact(&args);
            assert_eq!(text.matches(&reason).count(), n, "{text}");
            let summary = format!("0 deterministic, 0 nondeterministic, 0 errors, {n} skipped");
            assert!(text.contains(&summary), "{text}");
        }
        Ok(_) => {
            assert_eq!(code, Some(0), "{json}");
            assert!(cases.iter().all(|c| c["verdict"] == "deterministic"));
        }
    }
}

#[test]
fn backend_all_adds_the_cross_device_section() {
    let args = [
        "report",
        "--backend",
        "all",
        "--filter",
        "dropout/small,philox/small",
    ];
    let (code, text) = bitexact(&args);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("cross-device (cpu vs cuda):"), "{text}");
    let (_, json) = bitexact(&[&args[..], &["--format", "json"]].concat());
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let cross = v["cross_device"].as_array().unwrap();
    assert_eq!(cross.len(), 2);
    for c in cross {
        match Gpu::get() {
            Err(reason) => {
                assert_eq!(c["verdict"], "skipped");
                assert_eq!(c["message"], format!("cuda: {reason}"));
                assert!(text.contains(&format!("cuda: {reason}")));
            }
            Ok(_) => assert_eq!(c["verdict"], "identical", "{c}"),
        }
    }
}
