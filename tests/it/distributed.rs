//! `bitexact run -- torchrun …`: distributed training on torch.distributed (gloo, CPU, 2
//! processes) with `examples/python/train_ddp.py`. The deterministic script passes under
//! variations; a rank that reseeds from its process id is named as the origin with rank 0 as
//! a receiver through the all-reduce, and so is a rank of an unmodified script that reseeds
//! from the clock (`tests/fixtures/programs/ddp_clock_seed.py`), even with `--vary poison`
//! filling the collectives' receive buffers differently in every run; worker-dependent
//! augmentation is blamed on the worker count; a failed rank is named; `--timeout` leaves no
//! process behind; `--vary world-size` reports the first op that depends on the world size;
//! and two jobs' kept traces are compared with `diff-trace`. Needs a Python with torch and the
//! installed bitexact package (ci/python.sh); says `SKIPPED` without.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

/// One distributed job at a time: each is an agent and two ranks with their DataLoader
/// workers, and several at once on a 2-core machine only measure the machine.
static ONE_JOB: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The launcher: the `torchrun` beside the Python that has torch and bitexact.
fn torchrun(test: &str) -> Option<String> {
    let py = common::python_with(&[
        "torch.distributed.run",
        "bitexact._native",
        "bitexact._dist",
    ]);
    let Some(py) = py else {
        common::tool_missing(
            test,
            "no Python with torch and the installed bitexact package (run ci/python.sh)",
        );
        return None;
    };
    let beside = Path::new(&py).with_file_name("torchrun");
    if beside.is_file() {
        return Some(beside.display().to_string());
    }
    common::tool_missing(test, &format!("no torchrun beside {py}"));
    None
}

fn example() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/python/train_ddp.py")
        .display()
        .to_string()
}

/// `bitexact run --format json ARGS -- TORCHRUN --standalone --nproc-per-node N SCRIPT
/// SCRIPT_ARGS`: (exit code, the case).
fn run(torchrun: &str, args: &[&str], nproc: &str, script: &[&str]) -> (i32, serde_json::Value) {
    let o = Command::new(env!("CARGO_BIN_EXE_bitexact"))
        .args(["run", "--format", "json"])
        .args(args)
        .args(["--", torchrun, "--standalone", "--nproc-per-node", nproc])
        .arg(example())
        .args(script)
        .output()
        .unwrap();
    let report = common::json(&o);
    (o.status.code().unwrap(), report["cases"][0].clone())
}

fn text(v: &serde_json::Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

#[test]
fn ddp_is_deterministic_rank_by_rank_under_variations() {
    let Some(tr) = torchrun("ddp_is_deterministic_rank_by_rank_under_variations") else {
        return;
    };
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let (code, case) = run(&tr, &["--vary", "workers,hashseed,poison"], "2", &[]);
    assert_eq!(code, 0, "{case:#}");
    let digests = case["digests"].as_object().unwrap();
    for rank in ["rank0/", "rank1/"] {
        assert!(
            digests.keys().any(|k| k.starts_with(rank)),
            "no outputs of {rank}: {case:#}"
        );
    }
}

/// Asserts that `case`'s first divergence is an op of rank 1 in DDP's dropout, received by
/// rank 0 through the backward's all-reduce; returns the explanation.
fn rank_1_dropout_is_the_origin(case: &serde_json::Value) -> String {
    let d = &case["divergence"];
    let why = text(&d["explanation"]);
    assert_eq!(d["rank"], 1, "{why}");
    assert!(!text(&d["op"]).starts_with("c10d::"), "{why}");
    assert!(
        why.contains("in module DistributedDataParallel.module.drop (forward)"),
        "{why}"
    );
    assert!(why.contains("origin: rank 1"), "{why}");
    let receivers: Vec<String> = d["receivers"]
        .as_array()
        .unwrap()
        .iter()
        .map(text)
        .collect();
    assert_eq!(
        receivers,
        vec!["rank 0 received it through c10d::allreduce_ at step 0 (backward)"],
        "{why}"
    );
    why
}

/// A collective's receive buffers are not its inputs: `DistributedDataParallel(...)` all-gathers
/// the parameters' shapes into `torch.empty` buffers, whose bytes `--vary poison` makes differ
/// in every run. Hashed as inputs they made that all-gather "already received different
/// inputs" on both ranks, hiding rank 1's dropout.
#[test]
fn a_rank_seeded_from_the_clock_is_the_origin_whatever_the_receive_buffers_held() {
    let test = "a_rank_seeded_from_the_clock_is_the_origin_whatever_the_receive_buffers_held";
    let Some(tr) = torchrun(test) else {
        return;
    };
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let script = common::fixture_program("ddp_clock_seed.py");
    let o = Command::new(env!("CARGO_BIN_EXE_bitexact"))
        .args([
            "run", "--format", "json", "--trace", "ops", "--vary", "poison", "--",
        ])
        .args([tr.as_str(), "--standalone", "--nproc-per-node", "2"])
        .arg(&script)
        .output()
        .unwrap();
    let case = common::json(&o)["cases"][0].clone();
    assert_eq!(o.status.code(), Some(1), "{case:#}");
    let why = rank_1_dropout_is_the_origin(&case);
    assert!(why.contains("rank 1, aten::"), "{why}");
    assert!(!why.contains("already received different inputs"), "{why}");
}

#[test]
fn worker_dependent_augmentation_is_blamed_on_the_worker_count() {
    let Some(tr) = torchrun("worker_dependent_augmentation_is_blamed_on_the_worker_count") else {
        return;
    };
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let (code, case) = run(
        &tr,
        &["--vary", "workers"],
        "2",
        &["--planted", "worker-augment"],
    );
    assert_eq!(code, 1, "{case:#}");
    assert_eq!(
        case["blame"]["broken_by"],
        serde_json::json!(["workers"]),
        "{case:#}"
    );
    assert_eq!(case["blame"]["reproducible_when_fixed"], true, "{case:#}");
}

#[test]
fn a_failed_rank_is_named_with_its_status_and_stderr() {
    let Some(tr) = torchrun("a_failed_rank_is_named_with_its_status_and_stderr") else {
        return;
    };
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let (code, case) = run(&tr, &[], "2", &["--fail-rank", "1"]);
    assert_eq!(code, 1, "{case:#}");
    assert_eq!(case["verdict"], "error", "{case:#}");
    let why = text(&case["message"]);
    assert!(
        why.contains("rank 1 (local_rank 1) exited with status 1"),
        "{why}"
    );
    assert!(why.contains("planted failure at step 0"), "{why}");
    // The rank's exception is named from its own lines, before them.
    assert!(
        why.contains(
            "(torchrun exited with status 1): RuntimeError: rank 1: planted failure at step 0; "
        ),
        "{why}"
    );
    assert!(!why.contains("torch/distributed/elastic"), "{why}");
}

/// Processes whose command line holds `token`.
fn processes_with(token: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(token) {
                found.push(format!("{}: {cmd}", e.file_name().to_string_lossy()));
            }
        }
    }
    found
}

#[test]
fn a_timeout_on_a_hanging_rank_leaves_no_process_behind() {
    let Some(tr) = torchrun("a_timeout_on_a_hanging_rank_leaves_no_process_behind") else {
        return;
    };
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    // A copy of the script under a unique name, to find its processes afterwards.
    let dir = tempfile::tempdir().unwrap();
    let script: PathBuf = dir.path().join("hang_ddp_7f3a.py");
    std::fs::copy(example(), &script).unwrap();
    let t0 = std::time::Instant::now();
    let o = Command::new(env!("CARGO_BIN_EXE_bitexact"))
        .args(["run", "--format", "json", "--timeout", "5", "--"])
        .args([tr.as_str(), "--standalone", "--nproc-per-node", "2"])
        .arg(&script)
        .args(["--hang-rank", "1"])
        .output()
        .unwrap();
    let case = common::json(&o)["cases"][0].clone();
    assert_eq!(o.status.code(), Some(1), "{case:#}");
    assert_eq!(case["verdict"], "error", "{case:#}");
    assert!(text(&case["message"]).contains("timed out"), "{case:#}");
    assert!(t0.elapsed().as_secs() < 60, "bitexact itself hung");
    std::thread::sleep(std::time::Duration::from_millis(500));
    let left = processes_with("hang_ddp_7f3a");
    assert!(left.is_empty(), "left behind: {left:#?}");
}

#[test]
fn vary_world_size_names_the_first_op_that_depends_on_it() {
    let Some(tr) = torchrun("vary_world_size_names_the_first_op_that_depends_on_it") else {
        return;
    };
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let (code, case) = run(
        &tr,
        &["--vary", "world-size", "--trace", "ops"],
        "{nproc}",
        &[],
    );
    // Information, not a verdict: the script is deterministic at each world size.
    assert_eq!(code, 0, "{case:#}");
    let w = &case["program"]["world_size"];
    assert_eq!(w["sizes"], serde_json::json!([2, 1]), "{case:#}");
    assert_eq!(w["depends"], true, "{case:#}");
    assert!(w["only_larger"].as_u64().unwrap() > 0, "{w:#}");
    let op = text(&w["first_op"]);
    assert!(op.contains("rank 0, aten::"), "{op}");
    // Asked to be invariant, the same dependence fails the check.
    let (code, case) = run(
        &tr,
        &["--vary", "world-size", "--world-size-invariant"],
        "{nproc}",
        &[],
    );
    assert_eq!(code, 1, "{case:#}");
    assert!(
        text(&case["message"]).contains("--world-size-invariant"),
        "{case:#}"
    );
}

/// Two launches of a deterministic job (runs 0 and 1 of one `bitexact run --keep`) have
/// identical traces under `diff-trace`; a job whose rank 1 seeds itself per launch is
/// nondeterministic with rank 1's dropout as the origin and rank 0 a receiver, in the report
/// and in `diff-trace` against the deterministic job.
#[test]
fn a_rank_seeded_per_launch_is_the_origin_and_rank_0_a_receiver() {
    let Some(tr) = torchrun("a_rank_seeded_per_launch_is_the_origin_and_rank_0_a_receiver") else {
        return;
    };
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let job = |name: &str, script: &[&str]| {
        let keep = dir.path().join(name);
        let (code, case) = run(
            &tr,
            &["--trace", "ops", "--keep", keep.to_str().unwrap()],
            "2",
            script,
        );
        (code, case, keep)
    };
    let (code_a, case_a, kept) = job("a", &[]);
    assert_eq!(code_a, 0, "{case_a:#}");
    let (a, b) = (kept.join("run-0"), kept.join("run-1"));
    for rank in 0..2 {
        let f = a.join(format!("rank{rank}/.bitexact-trace-rank{rank}.jsonl"));
        assert!(f.is_file(), "{} missing", f.display());
    }
    let same = common::bitexact(&["diff-trace", a.to_str().unwrap(), b.to_str().unwrap()]);
    assert_eq!(same.status.code(), Some(0), "{}", common::stdout(&same));
    assert!(common::stdout(&same).contains("identical op traces"));
    let (code_c, case_c, c) = job("c", &["--planted", "rank-seed"]);
    assert_eq!(code_c, 1, "{case_c:#}");
    let why = rank_1_dropout_is_the_origin(&case_c);
    assert!(why.contains("rank 1, aten::bernoulli_"), "{why}");
    let c = c.join("run-0");
    let differ = common::bitexact(&["diff-trace", a.to_str().unwrap(), c.to_str().unwrap()]);
    let out = common::stdout(&differ);
    assert_eq!(differ.status.code(), Some(1), "{out}");
    assert!(out.contains("origin: rank 1"), "{out}");
    assert!(
        out.contains("rank 0 received it through c10d::allreduce_"),
        "{out}"
    );
}
