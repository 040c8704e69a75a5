//! Op tracing cost (issues 19 and 29): side by side in one Python process
//! (`benches/op_trace.py`, modes interleaved in rounds), for a training step of a small
//! transformer classifier and a training and an eval iteration of a nanoGPT-sized GPT
//! (`benches/nanogpt.py`): untraced; a do-nothing `TorchDispatchMode` (the floor any Python op
//! tracer pays); bitexact's `--trace modules` and `--trace ops` (with and without the noise
//! fields: each result's float64 sketch and the op's arguments, issue 32); PyTorch's DebugMode with
//! `log_tensor_hashes(hash_fn="hash_tensor")` (outputs only, and with inputs). Goals (issue 29,
//! nanoGPT training step): `--trace ops` ≤ 4× untraced, `--trace modules` ≤ 1.5×, both ≤
//! DebugMode + hash_tensor. Ratios, never asserted.
//!
//! `cargo bench --bench op_trace`, with the installed package's interpreter in `BITEXACT_PYTHON`
//! (default `~/.cache/bitexact/python-path`) and torch installed; `BITEXACT_REPS` steps per mode
//! (default 20), medians of wall time and of the process's CPU time per step;
//! `OMP_NUM_THREADS` sets torch's threads (1 gives steadier figures on a busy machine, where the
//! CPU times are the ones to compare).

#[path = "common/python.rs"]
mod python;

const MODES: [(&str, &str); 7] = [
    ("untraced", "untraced"),
    ("floor", "do-nothing dispatch mode (floor)"),
    ("modules", "bitexact --trace modules"),
    ("ops", "bitexact --trace ops"),
    ("ops_nosketch", "--trace ops without sketches/args"),
    ("debugmode", "DebugMode + hash_tensor (outputs)"),
    ("debugmode_inputs", "DebugMode + hash_tensor (+inputs)"),
];

fn main() {
    let reps = std::env::var("BITEXACT_REPS").unwrap_or_else(|_| "20".into());
    let v = python::run_json("op_trace.py", &[&reps], "torch and the installed package");
    println!(
        "median of {reps} steps per mode, torch {} on {} thread(s):",
        v["torch"], v["threads"]
    );
    for (work, what) in [
        ("classifier", "classifier training step"),
        ("nanogpt", "nanoGPT training iteration"),
        ("nanogpt_eval", "nanoGPT eval iteration (no_grad forward)"),
    ] {
        let w = &v[work];
        let f = |k: &str| w[k].as_f64();
        let base = f("untraced").expect("untraced");
        println!("{what}:");
        let cpu_base = f("untraced_cpu").expect("untraced_cpu");
        println!(
            "  {:35} {:>8}  {:>14}  {:>8}  {:>14}",
            "", "wall", "", "CPU", ""
        );
        for (key, name) in MODES {
            match (f(key), f(&format!("{key}_cpu"))) {
                (Some(t), Some(c)) => println!(
                    "  {name:35} {:5.1} ms  {:5.2}x untraced  {:5.1} ms  {:5.2}x untraced",
                    t * 1e3,
                    t / base,
                    c * 1e3,
                    c / cpu_base
                ),
                _ => println!("  {name:35} unavailable: {}", w["debugmode_error"]),
            }
        }
        if let (Some(b), Some(n)) = (f("ops"), f("ops_nosketch")) {
            println!(
                "  sketches + args: {:+.1}% of a traced step (wall), {:+.1}% (CPU); goal <= 10%",
                (b / n - 1.0) * 100.0,
                (f("ops_cpu").unwrap_or(0.0) / f("ops_nosketch_cpu").unwrap_or(1.0) - 1.0) * 100.0
            );
            println!(
                "  ops trace {:.0} bytes per record with sketches, {:.0} without",
                f("ops_trace_bytes_per_step").unwrap_or(0.0)
                    / f("ops_records_per_step").unwrap_or(1.0),
                f("ops_nosketch_trace_bytes_per_step").unwrap_or(0.0)
                    / f("ops_records_per_step").unwrap_or(1.0)
            );
        }
        if let (Some(b), Some(d)) = (f("ops"), f("debugmode")) {
            println!(
                "  ops / DebugMode(outputs)            {:.2}x time (goal <= 1)",
                b / d
            );
        }
        println!(
            "  records per step: {:.0} (ops), {:.0} (modules); ops trace {:.1} KiB per step",
            f("ops_records_per_step").unwrap_or(0.0),
            f("modules_records_per_step").unwrap_or(0.0),
            f("ops_trace_bytes_per_step").unwrap_or(0.0) / 1024.0
        );
    }
}
