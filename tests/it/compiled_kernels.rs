//! The first divergent kernel inside a compiled region: under `bitexact run --trace ops`, the
//! kernels a `torch.compile`d region launches (CPU Inductor) are recorded, and a region whose
//! inputs are identical and whose output differs is looked into. Needs a Python with torch, the
//! installed bitexact package and a C++ compiler; says `SKIPPED` without. Inductor's on-disk
//! cache serves the second run of each program (and later CI runs), so each test compiles its
//! tiny model once.

use crate::common;
use std::process::Command;

/// `bitexact run --trace ops --format json [ARGS] -- PY PROGRAM`: the case.
fn traced(args: &[&str], py: &str, program: &str) -> serde_json::Value {
    let o = Command::new(env!("CARGO_BIN_EXE_bitexact"))
        .args(["run", "--trace", "ops", "--format", "json"])
        .args(args)
        .args(["--", py, program])
        .output()
        .unwrap();
    common::json(&o)["cases"][0].clone()
}

/// The line of `program` holding `text` (1-based).
fn line_of(program: &str, text: &str) -> usize {
    let source = std::fs::read_to_string(program).unwrap();
    1 + source.lines().position(|l| l.contains(text)).unwrap()
}

/// A compiled MLP whose planted `randn_like` draws other random numbers every run (torch
/// reseeded by the OS inside the program, after the region's inputs are made): the region's
/// inputs are identical, its output differs, and the first kernel inside it that differs is
/// the one holding the `randn_like`, its inputs identical and its random seeds (Inductor's
/// seed buffer: the kernel's generator state) not.
#[test]
fn a_planted_randn_like_names_the_kernel_that_holds_it() {
    let test = "a_planted_randn_like_names_the_kernel_that_holds_it";
    let Some(py) = common::python_with_compiler(test) else {
        return;
    };
    let program = common::fixture_program("compiled_mlp.py");
    let case = traced(&[], &py, &program);
    assert_eq!(case["verdict"], "nondeterministic", "{case:#}");
    let d = &case["divergence"];
    let kernel = &d["kernel"];
    let name = kernel["name"].as_str().unwrap();
    assert!(
        name.starts_with("cpp_fused_") && name.contains("randn_like"),
        "{d:#}"
    );
    let fuses: Vec<&str> = kernel["fuses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert!(fuses.contains(&"aten::randn_like"), "{d:#}");
    let planted = format!("compiled_mlp.py:{}", line_of(&program, "torch.randn_like"));
    assert!(
        kernel["at"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a.as_str().unwrap().ends_with(&planted)),
        "{d:#}"
    );
    assert_eq!(d["op"], "compiled MLP");
    let e = d["explanation"].as_str().unwrap();
    assert!(
        e.starts_with("first divergence: step 0, rank 0, compiled MLP (call 1 of compiled MLP) in module MLP (forward)"),
        "{e}"
    );
    assert!(e.contains(&format!(" → kernel {name} (fuses ")), "{e}");
    assert!(
        e.contains(
            "— inputs identical, generator state differs before the call (inductor's random seeds): seeded differently in the two runs"
        ),
        "{e}"
    );
}

/// Compiled nanoGPT (`benches/nanogpt.py`'s 2-layer, 64-wide GPT, one training step) at 1 vs
/// 2 threads: the region's backward differs with identical inputs, and the kernel named is
/// one of its backward kernels. Inductor's CPU embedding backward adds rows from several
/// threads in the order they come, so the 2-thread run may happen to give the 1-thread bits:
/// then there is nothing to localize (a premise, said as a skip).
#[test]
fn compiled_nanogpt_at_1_vs_2_threads_names_a_backward_kernel() {
    let test = "compiled_nanogpt_at_1_vs_2_threads_names_a_backward_kernel";
    let Some(py) = common::python_with_compiler(test) else {
        return;
    };
    let case = traced(
        &["--vary", "threads=1,2"],
        &py,
        &common::fixture_program("compiled_nanogpt.py"),
    );
    let d = &case["divergence"];
    if d.is_null() {
        common::premise_skip(
            test,
            &format!(
                "compiled nanoGPT gave the same bits at 1 and 2 threads (verdict: {})",
                case["verdict"]
            ),
        );
        return;
    }
    let e = d["explanation"].as_str().unwrap();
    assert!(
        e.starts_with("first divergence: step 0, rank 0, compiled GPT (call 1 of compiled GPT) in module GPT (backward)"),
        "{e}"
    );
    let name = d["kernel"]["name"].as_str().unwrap();
    assert!(name.starts_with("cpp_fused_"), "{d:#}");
    assert!(
        e.contains(&format!(" → kernel {name} (fuses "))
            && e.contains("— inputs identical, output differs at 1 vs 2 threads"),
        "{e}"
    );
    assert!(d["kernel"]["call"].as_u64().unwrap() >= 1, "{d:#}");
}
