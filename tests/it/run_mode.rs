//! `bitexact run -- CMD`: any program as a case, end to end through the binary. Shell
//! programs cover the contract (errors, timeouts, stdout, snapshots, malformed files); the
//! Python examples cover real training scripts when a Python with numpy (and torch) is found:
//! `$BITEXACT_PYTHON`, the CI venv (`~/.cache/bitexact/python-path`, written by
//! `ci/python.sh`), or `python3`. Without one those tests say `SKIPPED` and why.

use crate::common;
use common::{bitexact, json, python_with, stdout};
use std::path::Path;
use std::time::{Duration, Instant};

/// Live processes whose command line contains `marker`.
fn processes_named(marker: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
        .filter(|c| String::from_utf8_lossy(c).contains(marker))
        .count()
}

fn skip(test: &str, why: &str) {
    common::tool_missing(test, why);
}

fn example(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/python")
        .join(name)
        .display()
        .to_string()
}

fn run(args: &[&str]) -> (Option<i32>, String, String) {
    let mut all = vec!["run"];
    all.extend(args);
    let o = bitexact(&all);
    (
        o.status.code(),
        stdout(&o),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn run_json(args: &[&str]) -> (Option<i32>, serde_json::Value) {
    let mut all = vec!["run", "--format", "json"];
    all.extend(args);
    let o = bitexact(&all);
    (o.status.code(), json(&o))
}

#[test]
fn nothing_to_compare_is_an_error_that_says_how_to_write_outputs() {
    let (code, out, _) = run(&["--", "sh", "-c", "true"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("wrote nothing to compare"), "{out}");
    assert!(
        out.contains("BITEXACT_OUT") && out.contains("--stdout"),
        "{out}"
    );
}

#[test]
fn a_failing_program_is_an_error_with_status_and_stderr_tail() {
    let (code, out, _) = run(&[
        "--",
        "sh",
        "-c",
        "echo first >&2; echo boom happened >&2; exit 3",
    ]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("exited with status 3"), "{out}");
    assert!(out.contains("boom happened"), "{out}");
}

#[test]
fn a_program_that_cannot_start_exits_2_naming_it() {
    let (code, _, err) = run(&["--", "/nonexistent/trainer"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("/nonexistent/trainer"), "{err}");
    let (code, _, err) = run(&["--", "no-such-command-bitexact"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("no-such-command-bitexact"), "{err}");
}

#[test]
fn a_timeout_kills_the_whole_process_group() {
    let marker = format!("bitexact-timeout-{}", std::process::id());
    let t0 = Instant::now();
    let script = format!("sleep 30 & exec -a {marker} sleep 31");
    let (code, out, _) = run(&["--timeout", "1", "--", "bash", "-c", &script]);
    assert!(t0.elapsed() < Duration::from_secs(20));
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("timed out after"), "{out}");
    std::thread::sleep(Duration::from_millis(300));
    let left = processes_named(&marker);
    assert_eq!(left, 0, "a process of the killed group survived");
}

#[test]
fn stdout_is_compared_and_the_first_differing_line_shown() {
    let (code, out, _) = run(&["--stdout", "--", "sh", "-c", "echo same; echo $$"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("stdout: 1/2 lines differ; first differing line 2"),
        "{out}"
    );
    let (code, out, _) = run(&["--stdout", "--runs", "3", "--", "sh", "-c", "echo same"]);
    assert_eq!(code, Some(0), "{out}");
}

#[test]
fn a_malformed_tensor_file_is_an_error_naming_it() {
    let (code, out, _) = run(&[
        "--",
        "sh",
        "-c",
        "printf 'not numpy' > \"$BITEXACT_OUT/w.npy\"",
    ]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("w.npy"), "{out}");
}

#[test]
fn json_entries_of_kind_run_carry_command_status_time_and_rss() {
    let (code, v) = run_json(&[
        "--name",
        "run/raw",
        "--",
        "sh",
        "-c",
        "printf 'abc' > \"$BITEXACT_OUT/a.bin\"; mkdir -p \"$BITEXACT_OUT/sub\"; printf 'x' > \"$BITEXACT_OUT/sub/b.txt\"",
    ]);
    assert_eq!(code, Some(0), "{v:#}");
    let c = &v["cases"][0];
    assert_eq!(c["name"], "run/raw");
    assert_eq!(c["verdict"], "deterministic");
    let p = &c["program"];
    assert_eq!(p["kind"], "run");
    assert_eq!(p["command"][0], "sh");
    assert_eq!(p["env"]["PYTHONHASHSEED"], "0");
    assert_eq!(p["env"]["CUBLAS_WORKSPACE_CONFIG"], ":4096:8");
    for r in p["runs"].as_array().unwrap() {
        assert_eq!(r["exit_status"], 0);
        assert!(r["seconds"].as_f64().unwrap() > 0.0);
        assert!(r["peak_rss_bytes"].as_u64().unwrap() > 0);
    }
    let names: Vec<&String> = c["digests"].as_object().unwrap().keys().collect();
    assert_eq!(names, ["a.bin", "sub/b.txt"]);
}

#[test]
fn variations_set_the_environment_they_promise() {
    let script = "env | grep -E '^(PYTHONHASHSEED|OMP_NUM_THREADS|BITEXACT_WORKERS|MALLOC_PERTURB_|BITEXACT_POISON|BITEXACT_THREADS)=' | sort > \"$BITEXACT_OUT/env.txt\"";
    let (code, v) = run_json(&["--vary", "all", "--", "sh", "-c", script]);
    assert_eq!(code, Some(1), "the environment differs per run: {v:#}");
    let c = &v["cases"][0];
    let varied = c["program"]["varied"].as_object().unwrap();
    for k in [
        "PYTHONHASHSEED",
        "OMP_NUM_THREADS",
        "BITEXACT_WORKERS",
        "MALLOC_PERTURB_",
    ] {
        assert!(varied.contains_key(k), "{k} not varied: {c:#}");
    }
    let broken: Vec<&str> = c["blame"]["broken_by"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_str().unwrap())
        .collect();
    assert_eq!(
        broken,
        ["threads", "workers", "poison", "hashseed"],
        "{c:#}"
    );
    // Without poison, MALLOC_PERTURB_ is left as the user's environment has it.
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_bitexact"))
        .args(["run", "--format", "json", "--", "sh", "-c"])
        .arg("echo \"$MALLOC_PERTURB_\" > \"$BITEXACT_OUT/p.txt\"")
        .env("MALLOC_PERTURB_", "77")
        .output()
        .unwrap();
    let v = json(&o);
    assert!(v["cases"][0]["program"]["env"]
        .get("MALLOC_PERTURB_")
        .is_none());
}

#[test]
fn snapshots_round_trip_with_a_pending_file_outside_ci() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let d = dir.to_str().unwrap();
    let prog = |v: &str| format!("printf '{v}' > \"$BITEXACT_OUT/out.bin\"");
    let runit = |v: &str, ci: bool| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_bitexact"));
        cmd.args([
            "run",
            "--snapshots",
            d,
            "--name",
            "run/snap",
            "--",
            "sh",
            "-c",
            &prog(v),
        ]);
        if ci {
            cmd.env("CI", "true");
        } else {
            cmd.env_remove("CI");
        }
        let o = cmd.output().unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        )
    };
    let (code, out) = runit("one", false);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("snapshot missing") && out.contains("pending snapshot written"),
        "{out}"
    );
    // Accepting is a developer's step, refused in CI: run it as outside CI.
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_bitexact"))
        .args(["snapshot", "review", "--accept", "--snapshots", d])
        .env_remove("CI")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let (code, out) = runit("one", true);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("snapshot: matched"), "{out}");
    let (code, out) = runit("two", true);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("snapshot-mismatch") && out.contains("tensor `out.bin`"),
        "{out}"
    );
    assert!(
        out.contains("CI is set: no pending snapshot written"),
        "{out}"
    );
    let pending: Vec<_> = bitexact::snapshot::pending(&dir);
    assert!(pending.is_empty(), "nothing written in CI: {pending:?}");
}

#[test]
fn step_memory_growth_is_flagged_with_figures() {
    let Some(py) = python_with(&[]) else {
        return skip("step_memory_growth_is_flagged_with_figures", "no python3");
    };
    let helper = Path::new(env!("CARGO_MANIFEST_DIR")).join("python");
    let script = format!(
        "import sys; sys.path.insert(0, {helper:?})\nimport bitexact\nhistory = []\nfor i in range(8):\n    history.append(b'x' * (8 << 20))\n    bitexact.step(i, loss=[float(i)])\n",
        helper = helper.display().to_string()
    );
    let (code, v) = run_json(&["--", &py, "-c", &script]);
    assert_eq!(code, Some(0), "deterministic, but flagged: {v:#}");
    let c = &v["cases"][0];
    let flag = c["memory_growth"].as_str().expect("flagged");
    assert!(flag.contains("memory grows step over step"), "{flag}");
    assert_eq!(c["program"]["step_memory"].as_array().unwrap().len(), 8);
}

#[test]
fn numpy_example_passes_and_its_planted_bugs_are_caught_and_blamed() {
    let Some(py) = python_with(&["numpy"]) else {
        return skip(
            "numpy_example_passes_…",
            "no Python with numpy (run ci/python.sh)",
        );
    };
    // A compressed npz entry larger than one 16 MiB read chunk (32 MiB of float64).
    let big = "import numpy as np, os\nnp.savez_compressed(os.path.join(os.environ['BITEXACT_OUT'], 'a.npz'), x=np.arange(1 << 22, dtype=np.float64))";
    let (code, out, err) = run(&["--", &py, "-c", big]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("deterministic"), "{out}");
    let script = example("train_numpy.py");
    let (code, out, err) = run(&["--runs", "3", "--", &py, &script]);
    assert_eq!(code, Some(0), "{out}{err}");
    let (code, out, _) = run(&["--vary", "all", "--", &py, &script]);
    assert_eq!(
        code,
        Some(0),
        "--vary all on the deterministic example: {out}"
    );
    assert!(
        out.contains("variations: threads, workers, poison, hashseed"),
        "{out}"
    );

    let (code, v) = run_json(&[
        "--runs",
        "3",
        "--",
        &py,
        &script,
        "--planted",
        "unseeded-workers",
    ]);
    assert_eq!(code, Some(1), "{v:#}");
    let c = &v["cases"][0];
    assert_eq!(c["verdict"], "nondeterministic");
    let first = c["divergence"]["op"].as_str().unwrap();
    assert!(first.starts_with("step_0000.safetensors:"), "{first}");
    assert!(
        c["diff"][0]["tensor"]
            .as_str()
            .unwrap()
            .starts_with("step_"),
        "{c:#}"
    );

    for (flag, variation) in [("thread-sum", "threads"), ("set-order", "hashseed")] {
        let (code, v) = run_json(&["--vary", "all", "--", &py, &script, "--planted", flag]);
        assert_eq!(code, Some(1), "{flag}: {v:#}");
        let b = &v["cases"][0]["blame"];
        assert_eq!(
            b["broken_by"],
            serde_json::json!([variation]),
            "{flag}: {b:#}"
        );
        assert_eq!(b["reproducible_when_fixed"], true);
    }
}

#[test]
fn torch_example_resume_is_bit_exact_and_its_planted_bug_is_caught() {
    let Some(py) = python_with(&["torch", "numpy"]) else {
        return skip(
            "torch_example_…",
            "no Python with torch (ci/python.sh installs it when the network allows)",
        );
    };
    let script = example("train_torch.py");
    // Odd runs checkpoint at step 10 and resume in a fresh model; even runs train straight
    // through: bit-equal outputs prove the resume restores everything.
    let (code, out, err) = run(&["--", &py, &script, "--resume-at", "10"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let (code, v) = run_json(&[
        "--",
        &py,
        &script,
        "--resume-at",
        "10",
        "--planted",
        "resume-forgets-rng",
    ]);
    assert_eq!(code, Some(1), "{v:#}");
    let first = v["cases"][0]["divergence"]["op"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(first.starts_with("step_0010"), "{first}");
    println!("torch planted bug: first divergence {first}");

    // Real PyTorch CPU convolution weight gradients follow the thread count.
    let (code, v) = run_json(&["--vary", "threads", "--", &py, &example("conv_threads.py")]);
    let c = &v["cases"][0];
    if c["verdict"] == "deterministic" {
        return common::premise_skip(
            "torch_example_resume_is_bit_exact_and_its_planted_bug_is_caught (conv_threads part)",
            "1 vs 2 threads give identical bits for conv_threads.py on this CPU: nothing to blame",
        );
    }
    assert_eq!(code, Some(1), "{v:#}");
    assert_eq!(
        c["blame"]["broken_by"],
        serde_json::json!(["threads"]),
        "{c:#}"
    );
    assert_eq!(c["blame"]["reproducible_when_fixed"], true);
    println!("conv_threads: {}", c["divergence"]["explanation"]);
}

#[test]
fn every_format_renders_a_program_case() {
    let prog = ["--", "sh", "-c", "echo $$ > \"$BITEXACT_OUT/pid.txt\""];
    let with = |format: &str| {
        let mut args = vec!["run", "--format", format];
        args.extend(prog);
        let o = bitexact(&args);
        assert_eq!(o.status.code(), Some(1), "{format}");
        stdout(&o)
    };
    let junit = with("junit");
    let doc = roxmltree::Document::parse(&junit).expect("JUnit XML parses");
    let failure = doc
        .descendants()
        .find(|n| n.has_tag_name("failure"))
        .expect("a failure");
    let text = failure.text().unwrap_or_default();
    assert!(
        text.contains("command: sh -c") && text.contains("first divergence: pid.txt"),
        "{text}"
    );
    let md = with("markdown");
    assert!(
        md.contains("`run/sh`") && md.contains("runs (status, time, peak RSS)"),
        "{md}"
    );
    let text = with("text");
    assert!(text.contains("env: BITEXACT_BENCHMARK=0"), "{text}");
}

#[test]
fn descendants_that_leave_the_group_are_killed_and_do_not_hang_the_run() {
    let marker = format!("bitexact-setsid-{}", std::process::id());
    let t0 = Instant::now();
    let script = format!(
        "echo x > \"$BITEXACT_OUT/a\"; setsid bash -c 'exec -a {marker} sleep 40' & sleep 0.3"
    );
    let (code, out, _) = run(&["--timeout", "5", "--", "bash", "-c", &script]);
    assert!(
        t0.elapsed() < Duration::from_secs(15),
        "took {:?}",
        t0.elapsed()
    );
    assert_eq!(code, Some(0), "{out}");
    std::thread::sleep(Duration::from_millis(300));
    let left = processes_named(&marker);
    assert_eq!(left, 0, "an escaped descendant survived");
}

#[test]
fn every_run_directory_is_gone_when_bitexact_exits() {
    // Runs' directories are removed in the background as the harness lets go of them; all of
    // them, and the root, are gone by the time bitexact exits: deterministic, differing (runs
    // kept for explanation), and with a blame pass.
    let tmp = tempfile::tempdir().unwrap();
    let same = "head -c 3000000 /dev/zero > \"$BITEXACT_OUT/a.bin\"";
    let differ = format!("{same}; echo $BITEXACT_RUN > \"$BITEXACT_OUT/run.txt\"");
    for (args, write, code) in [
        (vec!["--runs", "3"], same, 0),
        (
            vec!["--runs", "3", "--vary", "hashseed"],
            differ.as_str(),
            1,
        ),
    ] {
        let mut all = vec!["run"];
        all.extend(args);
        all.extend(["--", "sh", "-c", write]);
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_bitexact"))
            .args(&all)
            .env("TMPDIR", tmp.path())
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(code), "{}", stdout(&o));
        let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
        assert!(left.is_empty(), "left in TMPDIR: {left:?}");
    }
}

/// A Python program that raised: the failure names the exception (the last of a chain, its
/// message's lines joined) before the last lines of standard error.
#[test]
fn a_python_exception_is_named_in_the_failure() {
    let Some(py) = python_with(&[]) else {
        return skip("a_python_exception_is_named_in_the_failure", "no python3");
    };
    let script = "try:\n    {}['k']\nexcept KeyError as e:\n    \
                  raise RuntimeError('wrapped\\nsecond line') from e\n";
    let (code, out, _) = run(&["--", &py, "-c", script]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains(
            "exited with status 1: RuntimeError: wrapped second line; last lines of stderr:"
        ),
        "{out}"
    );
}
