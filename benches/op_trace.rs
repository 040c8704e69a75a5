//! Op tracing cost (issue 19): one training step of a small transformer, untraced, under
//! PyTorch's DebugMode with `log_tensor_hashes(hash_fn="hash_tensor")` (outputs only, and with
//! inputs), and under bitexact's tracer (`--trace ops`: SHA-256 of every op's inputs and
//! outputs, module, source line, JSONL), side by side in one Python process
//! (`benches/op_trace.py`). Goal: bitexact's traced step ≤ DebugMode + hash_tensor's. Ratios,
//! never asserted.
//!
//! `cargo bench --bench op_trace`, with the installed package's interpreter in `BITEXACT_PYTHON`
//! (default `~/.cache/bitexact/python-path`) and torch installed; `BITEXACT_REPS` steps per mode
//! (default 20), medians.

#[path = "common/python.rs"]
mod python;

fn main() {
    let reps = std::env::var("BITEXACT_REPS").unwrap_or_else(|_| "20".into());
    let v = python::run_json("op_trace.py", &[&reps], "torch and the installed package");
    let f = |k: &str| v[k].as_f64();
    let base = f("untraced").expect("untraced");
    println!("one training step, median of {reps}:");
    println!("  untraced                          {:8.2} ms", base * 1e3);
    for (key, what) in [
        ("debugmode", "DebugMode + hash_tensor (outputs)"),
        ("debugmode_inputs", "DebugMode + hash_tensor (+inputs)"),
        ("bitexact", "bitexact --trace ops"),
    ] {
        match f(key) {
            Some(t) => println!("  {what:33} {:8.2} ms  {:6.1}x untraced", t * 1e3, t / base),
            None => println!("  {what:33} unavailable: {}", v[format!("{key}_error")]),
        }
    }
    if let (Some(b), Some(d)) = (f("bitexact"), f("debugmode")) {
        println!(
            "  bitexact / DebugMode(outputs)      {:.2}x time (goal <= 1)",
            b / d
        );
    }
    if let (Some(b), Some(d)) = (f("bitexact"), f("debugmode_inputs")) {
        println!("  bitexact / DebugMode(+inputs)      {:.2}x time", b / d);
    }
    println!(
        "  trace: {:.0} op calls and {:.1} KiB per step",
        f("ops_per_step").unwrap_or(0.0),
        f("trace_bytes_per_step").unwrap_or(0.0) / 1024.0
    );
}
