//! The built-in kernel cases through the library: deterministic implementations give the same
//! bits for every thread count; the atomic implementations are caught by the harness.

use bitexact::cases::registry;
use bitexact::harness::assess_case;
use bitexact::{Backend, Controls, Verdict};

fn controls(threads: usize, deterministic: bool) -> Controls {
    Controls {
        threads,
        deterministic,
        ..Controls::default()
    }
}

#[test]
fn deterministic_kernels_are_thread_count_invariant() {
    for case in registry()
        .iter()
        .filter(|c| c.name().starts_with("kernel/"))
    {
        let mut digests = Vec::new();
        for threads in [1, 2, 8] {
            let r = assess_case(case.as_ref(), Backend::Cpu, &controls(threads, true), 2);
            assert_eq!(
                r.verdict(),
                Verdict::Deterministic,
                "{} on {threads} threads: {:?}",
                r.name,
                r.diff
            );
            digests.push(r.run_digests[0].clone());
        }
        assert!(
            digests.windows(2).all(|w| w[0] == w[1]),
            "{}: digests differ across thread counts",
            case.name()
        );
    }
}

#[test]
fn atomic_implementations_are_caught() {
    // Each atomic case is retried up to ATTEMPTS times with RUNS runs: the chance that RUNS runs
    // of a racy float reduction all interleave identically is tiny, and the loop is bounded.
    const ATTEMPTS: usize = 3;
    const RUNS: usize = 8;
    for name in [
        "kernel/reduce_sum/large",
        "kernel/matmul/large",
        "kernel/scatter_add/large",
    ] {
        let case = registry().into_iter().find(|c| c.name() == name).unwrap();
        let caught = (0..ATTEMPTS).find_map(|_| {
            let r = assess_case(case.as_ref(), Backend::Cpu, &controls(4, false), RUNS);
            (r.verdict() == Verdict::Nondeterministic).then_some(r)
        });
        let r = caught.unwrap_or_else(|| panic!("{name}: not caught in {ATTEMPTS}x{RUNS} runs"));
        assert!(r.distinct_digests >= 2);
        assert!(
            !r.diff.is_empty() && r.diff[0].elements_differing > 0,
            "{name}: {:?}",
            r.diff
        );
        assert!(
            r.algorithms.values().any(|a| a.contains("atomic")),
            "{name}: {:?}",
            r.algorithms
        );
    }
}

#[test]
fn seed_changes_outputs_and_same_seed_reproduces() {
    let case = registry()
        .into_iter()
        .find(|c| c.name() == "kernel/dropout/small")
        .unwrap();
    let a = assess_case(
        case.as_ref(),
        Backend::Cpu,
        &Controls {
            seed: 1,
            ..Controls::default()
        },
        2,
    );
    let b = assess_case(
        case.as_ref(),
        Backend::Cpu,
        &Controls {
            seed: 2,
            ..Controls::default()
        },
        2,
    );
    let a2 = assess_case(
        case.as_ref(),
        Backend::Cpu,
        &Controls {
            seed: 1,
            ..Controls::default()
        },
        2,
    );
    assert_ne!(a.run_digests[0], b.run_digests[0]);
    assert_eq!(a.run_digests[0], a2.run_digests[0]);
}

#[test]
fn benchmark_mode_records_its_choice() {
    let case = registry()
        .into_iter()
        .find(|c| c.name() == "kernel/matmul/small")
        .unwrap();
    let c = Controls {
        benchmark: true,
        ..Controls::default()
    };
    let r = assess_case(case.as_ref(), Backend::Cpu, &c, 2);
    assert_eq!(r.verdict(), Verdict::Deterministic);
    // Whichever deterministic CPU implementation timed fastest on this machine (a loaded
    // machine has picked each of them): the choice is recorded, never an atomic one.
    let (_, algos) = (bitexact::ops::catalog().into_iter())
        .find(|(op, _)| *op == "matmul")
        .unwrap();
    let allowed: Vec<&str> = (algos.iter())
        .filter(|a| a.backend == Backend::Cpu && a.deterministic)
        .map(|a| a.name)
        .collect();
    assert!(allowed.len() > 1, "{allowed:?}");
    assert!(
        allowed.contains(&r.algorithms["matmul"].as_str()),
        "{:?} not one of {allowed:?}",
        r.algorithms
    );
}
