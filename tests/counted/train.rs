//! The training cases through the library and the CLI: bit-exact for 0, 1, 2 and 4 loader
//! workers, planted training bugs caught with a message saying what is wrong, and the atomic
//! kernels caught under `--deterministic off` within a bounded number of runs.
//!
//! This binary installs the counting allocator so peak and retained memory are measured; the
//! tests hold one lock so that only one of them allocates at a time (the counters are
//! process-wide).

use bitexact::cases::registry;
use bitexact::harness::{assess_case, assess_case_with, Options};
use bitexact::vary::Variation;
use bitexact::{Backend, Case, CaseReport, Controls, Verdict};
use std::process::Command;

use crate::serial;

fn controls(workers: usize, deterministic: bool) -> Controls {
    Controls {
        workers,
        deterministic,
        threads: 2,
        ..Controls::default()
    }
}

fn train_cases(planted: bool) -> Vec<Box<dyn Case>> {
    registry()
        .into_iter()
        .filter(|c| c.name().starts_with("train/") && c.planted_bug().is_some() == planted)
        .collect()
}

fn check(name: &str, c: &Controls, runs: usize) -> CaseReport {
    let case = registry().into_iter().find(|c| c.name() == name).unwrap();
    assess_case(case.as_ref(), Backend::Cpu, c, runs)
}

#[test]
fn training_cases_are_bit_exact_for_0_1_2_4_workers() {
    let _g = serial();
    let cases = train_cases(false);
    assert!(cases.len() >= 4);
    for case in &cases {
        let mut digests = Vec::new();
        for workers in [0, 1, 2, 4] {
            let r = assess_case(case.as_ref(), Backend::Cpu, &controls(workers, true), 3);
            assert_eq!(
                r.verdict(),
                Verdict::Deterministic,
                "{} with {workers} workers: {:?} {:?}",
                r.name,
                r.message,
                r.diff
            );
            assert_eq!(r.peak_bytes.len(), 3, "peak memory measured per run");
            assert!(r.peak_bytes.iter().all(|&b| b > 0));
            assert_eq!(r.memory_growth, None, "{}: {:?}", r.name, r.retained_bytes);
            assert!(r.findings.is_empty(), "{:?}", r.findings);
            digests.push(r.run_digests[0].clone());
        }
        assert!(
            digests.windows(2).all(|w| w[0] == w[1]),
            "{}: outputs depend on the worker count: {digests:?}",
            case.name()
        );
    }
}

#[test]
fn training_cases_survive_thread_and_worker_variations() {
    let _g = serial();
    let opts = Options {
        vary: vec![Variation::Threads, Variation::Workers],
        ..Options::runs(2)
    };
    for case in train_cases(false) {
        let r = assess_case_with(case.as_ref(), Backend::Cpu, &controls(0, true), &opts, None);
        assert_eq!(
            r.verdict(),
            Verdict::Deterministic,
            "{}: {:?}",
            r.name,
            r.diff
        );
    }
}

#[test]
fn resume_equals_uninterrupted_training() {
    let _g = serial();
    // train/resume_sgd outputs the resumed run; train/mlp_steps the uninterrupted 20 steps of
    // the same configuration: same tensors, same bits.
    let a = check("train/resume_sgd", &controls(2, true), 2);
    let b = check("train/mlp_steps", &controls(0, true), 2);
    assert_eq!(a.digests, b.digests);
    assert_eq!(a.verdict(), Verdict::Deterministic);
}

#[test]
fn planted_training_bugs_are_caught_with_a_message() {
    let _g = serial();
    let cases = train_cases(true);
    // 3 here; the 3 practice plants (checkpointing, micro-batch fallback) in tests/counted/practices.rs.
    assert_eq!(cases.len(), 6);
    for workers in [0, 2] {
        let c = controls(workers, true);
        let r = check("train/planted_shared_worker_seed", &c, 2);
        assert_eq!(r.verdict(), Verdict::Caught, "{r:?}");
        assert!(
            r.findings
                .iter()
                .any(|f| f.contains("loader workers 0 and 1 share one random stream")),
            "{:?}",
            r.findings
        );
        assert!(r
            .findings
            .iter()
            .any(|f| f.contains("identical augmentation noise")));

        let r = check("train/planted_resume_forgets_rng", &c, 2);
        assert_eq!(r.verdict(), Verdict::Caught, "{r:?}");
        assert!(
            r.findings[0].contains("resume is not bit-exact")
                && r.findings[0].contains("(uninterrupted vs resumed)"),
            "{:?}",
            r.findings
        );

        let r = check("train/planted_growing_loss_history", &c, 3);
        assert_eq!(r.verdict(), Verdict::Caught, "{r:?}");
        let g = r.memory_growth.as_deref().unwrap_or_default();
        assert!(g.starts_with("memory grows across runs: "), "{g}");
        assert_eq!(g.matches(" → ").count(), 2, "{g}");
        assert!(r.message.unwrap().starts_with("planted bug caught"));
    }
}

#[test]
fn deterministic_off_is_caught_within_bounded_runs() {
    let _g = serial();
    // The atomic col_sum (bias gradients) races between the 2 pool threads; ATTEMPTS × RUNS
    // bounds the search (in practice every run differs).
    const ATTEMPTS: usize = 3;
    const RUNS: usize = 8;
    let caught = (0..ATTEMPTS).find_map(|_| {
        let r = check("train/mlp_steps", &controls(2, false), RUNS);
        (r.verdict() == Verdict::Nondeterministic).then_some(r)
    });
    let r = caught.unwrap_or_else(|| panic!("not caught in {ATTEMPTS}x{RUNS} runs"));
    assert!(r.distinct_digests >= 2);
    assert!(!r.diff.is_empty());
    assert!(
        r.algorithms["col_sum"].contains("atomic"),
        "{:?}",
        r.algorithms
    );
}

#[test]
fn localization_names_the_first_diverging_op_inside_a_training_step() {
    let _g = serial();
    // Planted divergence: the atomic kernels of `--deterministic off`. The harness re-runs
    // traced and names the first op whose output differs while its inputs matched. Bounded:
    // ATTEMPTS sets of 8 runs (in practice the first set diverges and is localized).
    const ATTEMPTS: usize = 10;
    let found = (0..ATTEMPTS).find_map(|_| {
        let case = registry()
            .into_iter()
            .find(|c| c.name() == "train/mlp_steps")
            .unwrap();
        let r = assess_case_with(
            case.as_ref(),
            Backend::Cpu,
            &controls(2, false),
            &Options::runs(8),
            None,
        );
        let nondeterministic = r.verdict() == Verdict::Nondeterministic;
        r.divergence.filter(|_| nondeterministic)
    });
    let d = found.unwrap_or_else(|| panic!("no localized divergence in {ATTEMPTS}x8 runs"));
    assert!(d.inputs_matched, "{d:?}");
    assert!(
        ["col_sum", "matmul", "scatter_add", "reduce_sum"].contains(&d.op.as_str()),
        "{d:?}"
    );
    assert!(
        d.explanation.contains("this op is nondeterministic"),
        "{d:?}"
    );
}

#[test]
fn cli_report_filter_train() {
    let _g = serial();
    let o = Command::new(env!("CARGO_BIN_EXE_bitexact"))
        .args(["report", "--filter", "train", "--workers", "2"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{text}");
    assert!(text.contains("peak mem"), "{text}");
    assert!(
        text.contains("6 deterministic") && text.contains("6 planted bugs caught"),
        "{text}"
    );
    assert!(
        text.contains("found: loader workers 0 and 1 share one random stream"),
        "{text}"
    );
    assert!(text.contains("flag: memory grows across runs"), "{text}");

    let o = Command::new(env!("CARGO_BIN_EXE_bitexact"))
        .args(["report", "--filter", "train/mlp_step", "--format", "json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let c = &v["cases"][0];
    assert_eq!(c["verdict"], "deterministic");
    assert!(c["peak_bytes"]
        .as_array()
        .unwrap()
        .iter()
        .all(|b| b.as_u64() > Some(0)));

    // `--deterministic off`: the atomic kernels are caught and the exit code is 1 (bounded
    // retries, as above).
    let caught = (0..3).any(|_| {
        let o = Command::new(env!("CARGO_BIN_EXE_bitexact"))
            .args([
                "report",
                "--filter",
                "train/mlp_steps",
                "--deterministic",
                "off",
            ])
            .args(["--runs", "8"])
            .output()
            .unwrap();
        o.status.code() == Some(1)
            && String::from_utf8_lossy(&o.stdout).contains("nondeterministic")
    });
    assert!(
        caught,
        "train/mlp_steps not caught under --deterministic off"
    );
}
