//! The cost of a traced batch check: `bitexact run --vary batch --trace ops` runs a
//! program at batch size 1 and at 8, traced; the larger-batch run records row slices so each
//! op's result can be compared request by request. Side by side in one Python process
//! (`benches/batch_trace.py`, modes interleaved in rounds) on `examples/python/batch_invariance.py`:
//! untraced at each batch size, traced at each, and traced with row slices at 8. Goal: the row
//! slicing adds at most 20 % to a traced pair of runs without it. Ratios, never asserted.
//!
//! `cargo bench --bench batch_trace`, with the installed package's interpreter in
//! `BITEXACT_PYTHON` (default `~/.cache/bitexact/python-path`) and torch installed;
//! `BITEXACT_REPS` serves per mode (default 10).

#[path = "common/python.rs"]
mod python;

fn main() {
    let reps = std::env::var("BITEXACT_REPS").unwrap_or_else(|_| "10".into());
    let v = python::run_json(
        "batch_trace.py",
        &[&reps],
        "torch and the installed package",
    );
    let f = |k: &str| v[k].as_f64().expect(k);
    println!(
        "serving 16 prompts, median of {reps} per mode, torch {} on {} thread(s):",
        v["torch"], v["threads"]
    );
    println!("  {:32} {:>9}  {:>9}", "", "wall", "CPU");
    for (key, what) in [
        ("untraced_1", "untraced, batch 1"),
        ("untraced_8", "untraced, batch 8"),
        ("traced_1", "--trace ops, batch 1"),
        ("traced_8", "--trace ops, batch 8"),
        ("rows_8", "--trace ops + row slices, batch 8"),
    ] {
        println!(
            "  {what:32} {:7.1} ms  {:7.1} ms",
            f(key) * 1e3,
            f(&format!("{key}_cpu")) * 1e3
        );
    }
    for (suffix, what) in [("", "wall"), ("_cpu", "CPU")] {
        let g = |k: &str| f(&format!("{k}{suffix}"));
        let plain = g("traced_1") + g("traced_8");
        let sliced = g("traced_1") + g("rows_8");
        println!(
            "  traced pair ({what}): {:.1} ms without row slices, {:.1} ms with: {:.2}x (goal <= 1.20); \
             vs one untraced run at each size: {:.2}x",
            plain * 1e3,
            sliced * 1e3,
            sliced / plain,
            sliced / (g("untraced_1") + g("untraced_8"))
        );
    }
}
