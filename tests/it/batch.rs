//! Batch invariance (`bitexact run --vary batch=A,B -- CMD … {batch}`): `{batch}` is A
//! in the even runs and B in the odd runs; a request whose result follows the batch size is
//! `batch-variant` (exit 1), one that does not passes; a command without `{batch}` is a usage
//! error (exit 2). The example `examples/python/batch_invariance.py` (a small causal LM) is
//! batch-variant where the CPU's matmul reduces in another order for 1 row than for 8 (the tests
//! skip, saying so, where it does not) and invariant with `--invariant`, and under `--trace ops`
//! a matrix product in a linear layer is named (which one is read from the run); a training loop under gradient accumulation
//! (`tests/fixtures/programs/accumulate.py`) is compared across micro-batch sizes. The torch
//! tests need a Python with torch (they say `SKIPPED` without).

use crate::common;

use std::path::Path;
use std::process::Command;

/// `bitexact run --format json ARGS -- PROGRAM…`: (exit code, the case, stderr).
fn run(args: &[&str], program: &[&str]) -> (i32, serde_json::Value, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_bitexact"))
        .args(["run", "--format", "json"])
        .args(args)
        .arg("--")
        .args(program)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    let case = match o.status.code() {
        Some(2) => serde_json::Value::Null,
        _ => common::json(&o)["cases"][0].clone(),
    };
    (o.status.code().unwrap(), case, stderr)
}

#[test]
fn a_result_that_follows_the_batch_size_is_batch_variant() {
    let script = "echo {batch} > \"$BITEXACT_OUT/request_0.txt\"; echo same > \"$BITEXACT_OUT/request_1.txt\"";
    let (code, case, _) = run(&["--vary", "batch=2,4"], &["sh", "-c", script]);
    assert_eq!(code, 1, "{case}");
    assert_eq!(case["verdict"], "batch-variant", "{case}");
    assert_eq!(case["divergence"]["op"], "request_0.txt", "{case}");
    assert_eq!(case["blame"]["broken_by"], serde_json::json!(["batch"]));
    let passes: Vec<&str> = case["passes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["purpose"].as_str().unwrap())
        .collect();
    // The only variation: "batch alone" is the main pass, not made again.
    assert_eq!(passes, ["main", "blame: control"]);
}

#[test]
fn a_result_the_batch_size_does_not_change_passes() {
    let script = "echo $(( {batch} * 0 )) > \"$BITEXACT_OUT/request_0.txt\"";
    let (code, case, _) = run(&["--vary", "batch"], &["sh", "-c", script]);
    assert_eq!(code, 0, "{case}");
    assert_eq!(case["verdict"], "deterministic", "{case}");
    assert_eq!(
        case["program"]["command"][2], script,
        "the report shows {{batch}}"
    );
}

#[test]
fn vary_batch_needs_the_placeholder_and_sizes_that_divide_under_trace() {
    let (code, _, err) = run(&["--vary", "batch"], &["sh", "-c", "true"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("--vary batch") && err.contains("{batch}"),
        "{err}"
    );
    let (code, _, err) = run(
        &["--vary", "batch=3,8", "--trace", "ops"],
        &["python3", "x.py", "{batch}"],
    );
    assert_eq!(code, 2);
    assert!(
        err.contains("batch=3,8") && err.contains("multiple"),
        "{err}"
    );
    let (code, _, err) = run(&["--vary", "batch=0,8"], &["sh", "-c", "{batch}"]);
    assert_eq!(code, 2);
    assert!(err.contains("at least 1"), "{err}");
}

fn example() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/python/batch_invariance.py")
        .display()
        .to_string()
}

/// What a CPU whose matmul gives every request the same bits at batch 1 and 8 makes of the
/// example: nothing batch-variant to find (the premise of the two tests below).
const NOTHING_VARIANT: &str =
    "at batch 1 vs 8 this CPU's matmul gives every request the same bits: nothing batch-variant to find";

/// An op that multiplies matrices (the head's linear layer, as this torch build lowers it).
fn matmul_like(op: &str) -> bool {
    [
        "aten::addmm",
        "aten::mm",
        "aten::bmm",
        "aten::matmul",
        "aten::linear",
        "aten::baddbmm",
    ]
    .iter()
    .any(|m| op == *m || op.starts_with(&format!("{m}.")))
}

#[test]
fn the_example_is_batch_variant_and_its_fix_is_not() {
    let test = "the_example_is_batch_variant_and_its_fix_is_not";
    let Some(py) = common::python_with(&["torch"]) else {
        common::tool_missing(test, "no Python with torch (run ci/python.sh)");
        return;
    };
    let ex = example();
    // The fix holds on every CPU: one row at a time, whatever the batch.
    let (code, case, _) = run(
        &["--vary", "batch"],
        &[&py, &ex, "--batch-size", "{batch}", "--invariant"],
    );
    assert_eq!(code, 0, "{case}");
    assert_eq!(case["verdict"], "deterministic", "{case}");
    let (code, case, _) = run(&["--vary", "batch"], &[&py, &ex, "--batch-size", "{batch}"]);
    if case["verdict"] == "deterministic" {
        return common::premise_skip(test, NOTHING_VARIANT);
    }
    assert_eq!(code, 1, "{case}");
    assert_eq!(case["verdict"], "batch-variant", "{case}");
    // Which request differs first is this CPU's matmul's business: some request's logits.
    let first = case["divergence"]["op"].as_str().unwrap_or_default();
    assert!(
        first.starts_with("logits_") && first.ends_with(".pt"),
        "{case}"
    );
}

#[test]
fn under_trace_the_first_batch_variant_op_is_named() {
    let test = "under_trace_the_first_batch_variant_op_is_named";
    let Some(py) = common::tracer_python(test) else {
        return;
    };
    let ex = example();
    // The fix: every op gives each request the same bits at both batch sizes.
    let (code, case, _) = run(
        &["--vary", "batch", "--trace", "ops"],
        &[&py, &ex, "--batch-size", "{batch}", "--invariant"],
    );
    assert_eq!(code, 0, "{case}");
    let (code, case, _) = run(
        &["--vary", "batch", "--trace", "ops"],
        &[&py, &ex, "--batch-size", "{batch}"],
    );
    if case["verdict"] == "deterministic" {
        return common::premise_skip(test, NOTHING_VARIANT);
    }
    assert_eq!(code, 1, "{case}");
    assert_eq!(case["verdict"], "batch-variant", "{case}");
    let d = &case["divergence"];
    let text = d["explanation"].as_str().unwrap_or_default();
    // The op, the module and the request are read from the run; what must hold of them is
    // checked: a matrix product whose inputs match for the request, in a linear layer.
    assert!(matmul_like(d["op"].as_str().unwrap_or_default()), "{text}");
    assert_eq!(d["inputs_matched"], true, "{text}");
    assert!(
        text.starts_with("first batch-variant op: ")
            && (text.contains("in module Model.lm_head (forward)")
                || text.contains("in module Model.blocks."))
            && text.contains("inputs identical for request ")
            && text.contains(", output differs (batch 1 vs 8)"),
        "{text}"
    );
}

#[test]
fn a_training_loop_is_compared_across_micro_batch_sizes() {
    let Some(py) = common::python_with(&["torch"]) else {
        common::tool_missing(
            "a_training_loop_is_compared_across_micro_batch_sizes",
            "no Python with torch (run ci/python.sh)",
        );
        return;
    };
    // The global batch and the data order fixed, the micro-batch `{batch}`: the gradient is
    // summed in another order, and the first step's weights already differ.
    let script = common::fixture_program("accumulate.py");
    let (code, case, _) = run(
        &["--vary", "batch=2,16"],
        &[&py, &script, "--micro-batch", "{batch}"],
    );
    assert_eq!(code, 1, "{case}");
    assert_eq!(case["verdict"], "batch-variant", "{case}");
    let first = case["divergence"]["op"].as_str().unwrap_or_default();
    assert!(first.starts_with("step_0.pt:"), "{case}");
}
