//! `bitexact run --trace ops` on unmodified PyTorch scripts (`examples/python/ops_trace.py`,
//! which never imports bitexact): the deterministic script passes, a planted unseeded noise is
//! localized to its op, module, phase, step and source line, a random branch is reported as
//! control flow diverging, and a `sitecustomize` the injected one shadows still runs. A
//! `torch.compile`d model (`tests/fixtures/programs/compiled_gpt.py`) runs compiled under
//! `--trace`, each call one record, and a nondeterministic compiled region is the origin. Needs
//! a Python with torch and the installed bitexact package (ci/python.sh), and a C++ compiler
//! for the compiled model; says `SKIPPED` without.

use crate::common;

use std::path::Path;
use std::process::Command;

fn example() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/python/ops_trace.py")
        .display()
        .to_string()
}

/// `bitexact run --trace ops --format json ARGS -- PY SCRIPT…`: (exit code, the case).
fn run(args: &[&str], program: &[&str], env: &[(&str, &str)]) -> (i32, serde_json::Value) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_bitexact"));
    c.args(["run", "--trace", "ops", "--format", "json"])
        .args(args)
        .arg("--")
        .args(program);
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    let report = common::json(&o);
    (o.status.code().unwrap(), report["cases"][0].clone())
}

fn divergence(case: &serde_json::Value) -> String {
    case["divergence"]["explanation"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn an_unmodified_script_is_traced_and_deterministic() {
    let Some(py) = common::tracer_python("an_unmodified_script_is_traced_and_deterministic") else {
        return;
    };
    let (code, case) = run(&[], &[&py, &example()], &[]);
    assert_eq!(code, 0, "{case:#}");
    assert!(case["digests"]["<ops>"].is_string(), "{case:#}");
}

#[test]
fn unseeded_noise_is_named_with_its_op_module_and_line() {
    let Some(py) = common::tracer_python("unseeded_noise_is_named_with_its_op_module_and_line")
    else {
        return;
    };
    let keep = tempfile::tempdir().unwrap();
    let kept = keep.path().join("runs");
    let (code, case) = run(
        &["--keep", kept.to_str().unwrap()],
        &[&py, &example(), "--planted", "noise"],
        &[],
    );
    assert_eq!(code, 1, "{case:#}");
    let d = divergence(&case);
    // The kept traces give the same answer through diff-trace, from anywhere.
    let o = common::bitexact(&[
        "diff-trace",
        kept.join("run-0").to_str().unwrap(),
        kept.join("run-1/.bitexact-trace-rank0.jsonl")
            .to_str()
            .unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let (located, captured) = d.split_once("; captured in 2 more runs: ").expect(&d);
    // Its first line; the noise judgement and the fp64 replay's hint follow. A Generator
    // argument is named by its type, never by its address (which differs every run).
    let out = common::stdout(&o);
    assert_eq!(
        out.lines().next().unwrap_or_default().trim(),
        located,
        "{out}"
    );
    assert!(!out.contains(" at 0x"), "{out}");
    assert!(
        out.contains("fp64 replay: no capture of this op in A or B; capture it with `bitexact run --trace ops --capture '[0,\"\",0,\"forward\",\"Classifier.head\",\"aten::randn.generator\",0]'"),
        "{out}"
    );
    // The op's output, captured in a re-run of runs 0 and 1, explained element by element.
    assert!(
        captured.starts_with("output 0: ") && captured.contains("elements differ"),
        "{captured}"
    );
    let o = common::bitexact(&[
        "diff-trace",
        kept.join("run-0").to_str().unwrap(),
        kept.join("run-0").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", common::stdout(&o));
    let source = std::fs::read_to_string(example()).unwrap();
    let line = 1 + source
        .lines()
        .position(|l| l.contains("torch.randn(x.shape, generator=self.gen)"))
        .unwrap();
    for want in [
        "step 0, rank 0, aten::randn.generator",
        "in module Classifier.head (forward)",
        &format!("ops_trace.py:{line} "),
        "inputs identical, generator state differs before the call (Classifier.head.gen's torch.Generator): seeded differently in the two runs",
    ] {
        assert!(d.contains(want), "{want:?} not in {d}");
    }
    assert!(!d.contains("nondeterministic"), "{d}");
    assert_eq!(case["divergence"]["inputs_matched"], true);
    assert_eq!(
        case["divergence"]["generator"],
        "Classifier.head.gen's torch.Generator"
    );
}

#[test]
fn the_default_generator_reseeded_from_the_clock_is_named() {
    let Some(py) = common::tracer_python("the_default_generator_reseeded_from_the_clock_is_named")
    else {
        return;
    };
    let (code, case) = run(&[], &[&py, &example(), "--planted", "clock"], &[]);
    assert_eq!(code, 1, "{case:#}");
    let d = divergence(&case);
    assert!(d.contains("aten::bernoulli_"), "{d}"); // the encoder's first dropout
    assert!(
        d.contains("inputs identical, generator state differs before the call (torch's default CPU generator): seeded differently in the two runs"),
        "{d}"
    );
    assert!(!d.contains("nondeterministic"), "{d}");
}

#[test]
fn a_random_op_whose_generator_state_agrees_is_still_nondeterministic() {
    let test = "a_random_op_whose_generator_state_agrees_is_still_nondeterministic";
    let Some(py) = common::tracer_python(test) else {
        return;
    };
    // A stand-in for a race: odd runs flush denormal results to zero (a switch no input shows).
    let (code, case) = run(&[], &[&py, &example(), "--planted", "race"], &[]);
    assert_eq!(code, 1, "{case:#}");
    let d = divergence(&case);
    assert!(
        d.contains("aten::uniform_ (call 1 of aten::uniform_) in module Classifier.head (forward)"),
        "{d}"
    );
    assert!(
        d.contains(
            "inputs and generator state identical, output differs: this op is nondeterministic"
        ),
        "{d}"
    );
    assert!(case["divergence"]["generator"].is_null(), "{case:#}");
}

#[test]
fn a_random_branch_is_control_flow_diverging() {
    let Some(py) = common::tracer_python("a_random_branch_is_control_flow_diverging") else {
        return;
    };
    let (code, case) = run(
        &["--runs", "4"],
        &[&py, &example(), "--planted", "branch"],
        &[],
    );
    assert_eq!(code, 1, "{case:#}");
    let d = divergence(&case);
    assert!(d.contains("control flow diverged"), "{d}");
    assert!(d.contains("aten::relu") && d.contains("aten::gelu"), "{d}");
    assert!(d.contains("in module Classifier (forward)"), "{d}");
}

#[test]
fn a_shadowed_sitecustomize_still_runs() {
    let Some(py) = common::tracer_python("a_shadowed_sitecustomize_still_runs") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("sitecustomize.py"),
        "import os\nopen(os.path.join(os.environ['BITEXACT_OUT'], 'chained.txt'), 'w').write('yes')\n",
    )
    .unwrap();
    let script = "import torch; torch.manual_seed(0); print(float((torch.randn(3) * 2).sum()))";
    let path = dir.path().display().to_string();
    let (code, case) = run(&[], &[&py, "-c", script], &[("PYTHONPATH", &path)]);
    assert_eq!(code, 0, "{case:#}");
    assert!(case["digests"]["chained.txt"].is_string(), "{case:#}");
    assert!(case["digests"]["<ops>"].is_string(), "{case:#}");
}

#[test]
fn module_traces_name_the_module_that_received_the_difference() {
    let Some(py) =
        common::tracer_python("module_traces_name_the_module_that_received_the_difference")
    else {
        return;
    };
    let mut c = Command::new(env!("CARGO_BIN_EXE_bitexact"));
    c.args(["run", "--trace", "modules", "--format", "json", "--"])
        .args([&py, &example(), "--planted", "noise"]);
    let o = c.output().unwrap();
    let case = common::json(&o)["cases"][0].clone();
    assert_eq!(o.status.code(), Some(1), "{case:#}");
    let d = divergence(&case);
    assert!(
        d.contains("module Classifier.head.fc (call 1 of Classifier.head.fc) (forward)"),
        "{d}"
    );
    // Its argument, made by its parent's own forward (not its weight or bias: "own" tells).
    assert!(
        d.contains("already received different inputs (tensor argument 0)")
            && d.contains("code between traced module calls"),
        "{d}"
    );
    // Neither the parent, whose record lists none of its callees' state, nor anything else
    // had identical inputs: not judged, never "within noise".
    let noise = &case["divergence"]["noise"];
    assert_eq!(noise["classification"], "not-judged", "{noise:#}");
    let notes = case["notes"].to_string();
    assert!(
        notes.contains("module trace: ") && !notes.contains("op calls"),
        "{notes}"
    );
    // The trace's digest counts what it holds: module records, not op calls.
    let ops = &case["diff"][0];
    assert_eq!(ops["tensor"], "<ops>", "{case:#}");
    assert!(
        ops["first_values"][0]
            .as_str()
            .is_some_and(|v| v.ends_with(" module records")),
        "{ops:#}"
    );
}

/// A program that edits a BatchNorm buffer with unseeded noise after a training step: the
/// module record names the buffer (record version 8) and only a buffer's causes (its own
/// forward in an earlier call, a load or edit; no optimizer step, which updates parameters).
#[test]
fn module_traces_name_a_buffer_that_differs() {
    let Some(py) = common::tracer_python("module_traces_name_a_buffer_that_differs") else {
        return;
    };
    let script = "import os, torch\n\
        torch.manual_seed(0)\n\
        class Net(torch.nn.Module):\n\
        \x20   def __init__(s):\n\
        \x20       super().__init__(); s.pre = torch.nn.Linear(4, 4); s.bn = torch.nn.BatchNorm1d(4)\n\
        \x20   def forward(s, x): return s.bn(s.pre(x))\n\
        m, x = Net(), torch.arange(12.).reshape(3, 4)\n\
        opt = torch.optim.SGD(m.parameters(), lr=0.1)\n\
        m(x).sum().backward(); opt.step()\n\
        g = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), 'little'))\n\
        with torch.no_grad(): m.bn.running_var.mul_(1 + torch.rand(4, generator=g) * 1e-3)\n\
        m.eval(); print(float(m(x).sum()))\n";
    let mut c = Command::new(env!("CARGO_BIN_EXE_bitexact"));
    c.args(["run", "--trace", "modules", "--format", "json", "--"])
        .args([&py, "-c", script]);
    let o = c.output().unwrap();
    let case = common::json(&o)["cases"][0].clone();
    assert_eq!(o.status.code(), Some(1), "{case:#}");
    let d = divergence(&case);
    assert!(
        d.contains("step 1, rank 0, module Net.bn (call 1 of Net.bn) (forward)")
            && d.contains("already received different inputs (its buffer Net.bn.running_var)")
            && d.contains("or the module's own forward in an earlier call")
            && !d.contains("optimizer"),
        "{d}"
    );
}

#[test]
fn blame_names_the_op_each_variation_breaks() {
    let test = "blame_names_the_op_each_variation_breaks";
    let Some(py) = common::tracer_python(test) else {
        return;
    };
    // The run the HTML report test draws: its JSON report is embedded in the page.
    let shared = crate::shared_runs::conv_threads_traced(&py);
    let (code, case) = (shared.code.unwrap(), shared.report()["cases"][0].clone());
    if case["verdict"] == "deterministic" {
        return common::premise_skip(
            test,
            "1 vs 2 threads give identical bits for conv_threads.py on this CPU: nothing to blame",
        );
    }
    assert_eq!(code, 1, "{case:#}");
    // The first divergence names the thread counts, never "nondeterministic": the op gives
    // other bits at another thread count, which is what was varied.
    let varied = &case["divergence"]["varied"][0];
    assert_eq!(varied["variation"], "threads", "{case:#}");
    let [a, b] = [0, 1].map(|i| varied["values"][i].as_str().unwrap().to_string());
    let d = divergence(&case);
    assert!(
        d.contains(&format!(
            "inputs identical, output differs at {a} vs {b} threads"
        )),
        "{d}"
    );
    assert!(!d.contains("nondeterministic"), "{d}");
    let blame = &case["blame"];
    assert_eq!(
        blame["broken_by"],
        serde_json::json!(["threads"]),
        "{blame:#}"
    );
    let (variation, at) = (&blame["first_ops"][0][0], blame["first_ops"][0][1].as_str());
    assert_eq!(variation, "threads", "{blame:#}");
    let at = at.unwrap_or_default();
    assert!(
        at.contains("aten::") && at.contains("conv_threads.py:"),
        "{at}"
    );
    assert!(blame["explanation"]
        .as_str()
        .unwrap()
        .contains("threads: first at step "));
}

#[test]
fn dropout_left_on_in_eval_is_named_under_a_varied_seed() {
    let Some(py) = common::tracer_python("dropout_left_on_in_eval_is_named_under_a_varied_seed")
    else {
        return;
    };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/python/eval_dropout.py");
    let script = script.to_str().unwrap();
    let flags = ["--seed-everything", "--vary", "seed"];
    let (code, case) = run(&flags, &[&py, script], &[]);
    assert_eq!(code, 0, "{case:#}");
    let (code, case) = run(&flags, &[&py, script, "--planted", "train-mode"], &[]);
    assert_eq!(code, 1, "{case:#}");
    let d = divergence(&case);
    assert!(d.contains("in module Net.drop (forward)"), "{d}");
    assert!(
        d.contains("inputs identical, generator state differs before the call (torch's default CPU generator): seeded differently in the two runs, made with seed 0 vs "),
        "{d}"
    );
    assert!(!d.contains("nondeterministic"), "{d}");
    assert!(
        case["digests"]["predictions.pt:predictions"].is_string(),
        "{case:#}"
    );
}

/// `--trace` was asked for: a program in which no Python started the tracer fails, saying
/// so, instead of degrading to a file comparison (see tests/it/tracer_env.rs for the others).
#[test]
fn a_program_that_records_no_trace_fails_and_says_why() {
    let (code, case) = run(&[], &["sh", "-c", "echo hi > \"$BITEXACT_OUT/x.txt\""], &[]);
    assert_eq!(code, 1, "{case:#}");
    assert_eq!(case["verdict"], "error", "{case:#}");
    let failure = &case["evidence"]["failure"];
    assert_eq!(failure["kind"], "trace-unavailable", "{case:#}");
    let msg = failure["message"].as_str().unwrap();
    assert!(
        msg.starts_with("--trace ops: no Python process started it"),
        "{msg}"
    );
}

#[test]
fn a_difference_outside_the_traced_ops_is_said_to_be_so() {
    let Some(py) = common::tracer_python("a_difference_outside_the_traced_ops_is_said_to_be_so")
    else {
        return;
    };
    // Every torch op is the same in both runs; the clock is mixed in by plain Python.
    let script = "import os, time, torch\n\
                  y = float((torch.ones(4) * 3).sum())\n\
                  open(os.path.join(os.environ['BITEXACT_OUT'], 'y.txt'), 'w')\
                  .write(repr((y, time.time_ns())))\n";
    let (code, case) = run(&[], &[&py, "-c", script], &[]);
    assert_eq!(code, 1, "{case:#}");
    let d = divergence(&case);
    assert!(d.starts_with("first divergence: y.txt"), "{d}");
    assert!(d.contains("the op traces were identical ("), "{d}");
    assert!(
        d.contains("the difference arose outside the traced ops"),
        "{d}"
    );
}

#[test]
fn an_in_place_op_whose_tensor_changed_outside_the_traced_ops_is_not_blamed() {
    let test = "an_in_place_op_whose_tensor_changed_outside_the_traced_ops_is_not_blamed";
    let Some(py) = common::tracer_python(test) else {
        return;
    };
    // numpy writes the clock into x, where no traced op runs; add_ then reads and writes x.
    let script = "import os, time, torch\n\
                  x = torch.ones(4)\n\
                  x.numpy()[1] = time.time_ns() % 1000 + 2\n\
                  x.add_(torch.full((4,), 0.5))\n\
                  open(os.path.join(os.environ['BITEXACT_OUT'], 'y.txt'), 'w')\
                  .write(repr((x * 2).tolist()))\n";
    let (code, case) = run(&[], &[&py, "-c", script], &[]);
    assert_eq!(code, 1, "{case:#}");
    let d = divergence(&case);
    assert!(d.contains("aten::add_.Tensor"), "{d}");
    assert!(
        d.contains("already received different inputs (input 0)"),
        "{d}"
    );
    assert!(!d.contains("nondeterministic"), "{d}");
}

/// A Python with torch, the installed bitexact package and a C++ compiler for Inductor's CPU
/// backend (`torch.compile`'s default; g++ or `$CXX`, found as Inductor finds it).
fn compiled_gpt() -> String {
    common::fixture_program("compiled_gpt.py")
}

/// `bitexact run [--trace LEVEL] --format json --keep DIR -- PROGRAM`: (exit code, the case,
/// the records of run 0's trace).
fn kept(
    level: Option<&str>,
    program: &[&str],
    keep: &Path,
) -> (i32, serde_json::Value, Vec<serde_json::Value>) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_bitexact"));
    c.args(["run", "--format", "json", "--keep", keep.to_str().unwrap()]);
    if let Some(level) = level {
        c.args(["--trace", level]);
    }
    let o = c.arg("--").args(program).output().unwrap();
    let case = common::json(&o)["cases"][0].clone();
    let trace =
        std::fs::read_to_string(keep.join("run-0/.bitexact-trace-rank0.jsonl")).unwrap_or_default();
    let records = trace
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (o.status.code().unwrap(), case, records)
}

/// `(step, phase)` of the records of op `compiled GPT`.
fn compiled_calls(records: &[serde_json::Value]) -> Vec<(u64, String)> {
    records
        .iter()
        .filter(|r| r["op"] == "compiled GPT")
        .map(|r| {
            assert_eq!(r["module"], "GPT", "{r}");
            (
                r["step"].as_u64().unwrap(),
                r["phase"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// A `torch.compile`d model runs compiled under `--trace ops` and `--trace modules`: its
/// outputs are the untraced run's, bit for bit (the tracer's dispatch mode made TorchDynamo
/// skip every frame, so it ran eagerly: other bits; `--trace modules` crashed TorchDynamo with
/// `already tracked for mutation`), and each compiled call is one record, forward and backward.
#[test]
fn a_compiled_model_runs_compiled_under_trace_with_the_untraced_bits() {
    let test = "a_compiled_model_runs_compiled_under_trace_with_the_untraced_bits";
    let Some(py) = common::python_with_compiler(test) else {
        return;
    };
    let script = compiled_gpt();
    let dir = tempfile::tempdir().unwrap();
    let result =
        |level: &str| std::fs::read(dir.path().join(level).join("run-0/result.bin")).unwrap();
    let (code, case, _) = kept(None, &[&py, &script], &dir.path().join("plain"));
    assert_eq!(code, 0, "{case:#}");
    let (code, case, records) = kept(Some("ops"), &[&py, &script], &dir.path().join("ops"));
    assert_eq!(code, 0, "{case:#}");
    assert!(
        result("ops") == result("plain"),
        "traced outputs differ from untraced ones"
    );
    let both = |p: &str| [(0, p.to_string()), (1, p.to_string())];
    let mut want: Vec<(u64, String)> = vec![];
    for step in 0..2 {
        want.push((step, "forward".into()));
        want.push((step, "backward".into()));
    }
    assert_eq!(compiled_calls(&records), want);
    // Nothing inside the compiled model is recorded op by op.
    let inside: Vec<_> = records
        .iter()
        .filter(|r| r["module"].as_str().unwrap().starts_with("GPT."))
        .collect();
    assert!(inside.is_empty(), "{inside:?}");
    let (code, case, records) = kept(
        Some("modules"),
        &[&py, &script],
        &dir.path().join("modules"),
    );
    assert_eq!(code, 0, "{case:#}");
    assert!(
        result("modules") == result("plain"),
        "traced outputs differ from untraced ones"
    );
    assert_eq!(compiled_calls(&records), both("forward"));
    assert!(
        records.iter().any(|r| r["module"] == "GPT.qkv.weight"),
        "parameter grads named"
    );
}

/// A compiled model whose dropout masks differ every run (torch reseeded from the OS's entropy)
/// is nondeterministic with and without `--trace ops`, and the trace names the compiled call
/// as the origin: identical inputs, different output (it said deterministic: the tracer ran
/// the model eagerly, and its per-op trace hid the compiled code's nondeterminism).
#[test]
fn a_nondeterministic_compiled_region_is_the_origin_with_and_without_trace() {
    let test = "a_nondeterministic_compiled_region_is_the_origin_with_and_without_trace";
    let Some(py) = common::python_with_compiler(test) else {
        return;
    };
    let program = [
        py.as_str(),
        &compiled_gpt(),
        "--planted",
        "unseeded-dropout",
    ];
    let dir = tempfile::tempdir().unwrap();
    let (code, case, _) = kept(None, &program, &dir.path().join("plain"));
    assert_eq!(
        (code, case["verdict"].as_str()),
        (1, Some("nondeterministic")),
        "{case:#}"
    );
    let (code, case) = run(&[], &program, &[]);
    assert_eq!(
        (code, case["verdict"].as_str()),
        (1, Some("nondeterministic")),
        "{case:#}"
    );
    let d = divergence(&case);
    for want in [
        "step 0, rank 0, compiled GPT (call 1 of compiled GPT) in module GPT (forward)",
        "compiled_gpt.py:",
        "→ kernel cpp_fused_",
        "inputs identical, generator state differs before the call (inductor's random seeds)",
    ] {
        assert!(d.contains(want), "{want:?} not in {d}");
    }
    assert_eq!(case["divergence"]["inputs_matched"], true);
}
