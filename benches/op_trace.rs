//! Op tracing cost: side by side in one Python process
//! (`benches/op_trace.py`, modes interleaved in rounds), for a training step of a small
//! transformer classifier, a training and an eval iteration of a nanoGPT-sized GPT
//! (`benches/nanogpt.py`), chains of in-place ops on 1 MiB tensors and 21 module calls on
//! a few floats each: untraced; a do-nothing `TorchDispatchMode` (the floor any Python op
//! tracer pays); do-nothing module hooks (the floor of a module tracer), and bitexact's own
//! module hooks with nothing hashed, then with only the inputs labelled (where `--trace
//! modules`' cost goes); bitexact's `--trace modules` and `--trace ops` (hashed on the background
//! writer's thread where torch leaves a core free, and `_sync`: on the program's thread; and
//! without the noise fields: each result's float64 sketch and the op's arguments; through the
//! dispatch mode driver (`ops`: how `--trace ops` reaches ops on a GPU machine) and the
//! observer driver, torch's RecordFunction callbacks (`ops_observer`: its default on the CPU));
//! PyTorch's DebugMode with
//! `log_tensor_hashes(hash_fn="hash_tensor")` (outputs only, and with inputs). Goals (a
//! nanoGPT training step): `--trace ops` ≤ 4× untraced, `--trace modules` ≤ 1.5×, both ≤
//! DebugMode + hash_tensor. Ratios, never asserted.
//!
//! `cargo bench --bench op_trace`, with the installed package's interpreter in `BITEXACT_PYTHON`
//! (default `~/.cache/bitexact/python-path`) and torch installed; `BITEXACT_REPS` steps per mode
//! (default 20), medians of wall time per step (and per step of a round including the wait for
//! the background writer at its end: `drained`), of the process's CPU time and of the
//! program thread's;
//! `OMP_NUM_THREADS` sets torch's threads (1 gives steadier figures on a busy machine, where the
//! CPU times are the ones to compare).

#[path = "common/python.rs"]
mod python;

const MODES: [(&str, &str); 15] = [
    ("untraced", "untraced"),
    ("floor", "do-nothing dispatch mode (floor)"),
    ("modules_floor", "do-nothing module hooks (floor)"),
    ("modules_hooks", "  bitexact's hooks, nothing hashed"),
    ("modules_inputs", "  ... inputs labelled, no record"),
    ("modules", "bitexact --trace modules"),
    ("modules_sync", "  hashed on the program's thread"),
    ("ops", "bitexact --trace ops, dispatch mode driver"),
    ("ops_nosketch", "  without sketches/args"),
    ("ops_sync", "  hashed on the program's thread"),
    ("ops_sync_nosketch", "  ... without sketches/args"),
    ("ops_observer", "  through the observer (CPU default)"),
    ("ops_sync_observer", "  ... hashed on the program's thread"),
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
        ("in_place_chain", "in-place chains on 1 MiB tensors"),
        ("module_calls", "20 tiny Linears, no grad (21 module calls)"),
    ] {
        let w = &v[work];
        if w.is_null() {
            continue; // (a workload of the CPU only, on a GPU run)
        }
        let f = |k: &str| w[k].as_f64();
        let base = f("untraced").expect("untraced");
        println!("{what}:");
        let drained_base = f("untraced_drained").expect("untraced_drained");
        println!(
            "  {:35} {:>8}  {:>14}  {:>15}  {:>8}  {:>8}",
            "", "wall", "", "drained", "CPU", "thread"
        );
        for (key, name) in MODES {
            let g = |suffix: &str| f(&format!("{key}{suffix}"));
            match (f(key), g("_drained"), g("_cpu"), g("_thread")) {
                (Some(t), Some(d), Some(c), Some(h)) => println!(
                    "  {name:35} {:5.1} ms  {:5.2}x untraced  {:5.2}x untraced  {:5.1} ms  {:5.1} ms",
                    t * 1e3,
                    t / base,
                    d / drained_base,
                    c * 1e3,
                    h * 1e3,
                ),
                _ if key.ends_with("observer") => match w["observer_error"].as_str() {
                    Some(e) => println!("  {name:35} unavailable: {e}"),
                    None => println!("  {name:35} unavailable: CPU only"),
                },
                _ => println!("  {name:35} unavailable: {}", w["debugmode_error"]),
            }
        }
        for (with, without, how) in [
            ("ops", "ops_nosketch", "as run"),
            ("ops_sync", "ops_sync_nosketch", "program's thread"),
        ] {
            let time = |k: &str| f(&format!("{k}_drained")).unwrap_or(f64::NAN); // writer waited for
            println!(
                "  sketches + args ({how}): {:+.1}% of a traced step (wall), {:+.1}% (CPU); \
                 goal <= 10%",
                (time(with) / time(without) - 1.0) * 100.0,
                (f(&format!("{with}_cpu")).unwrap_or(f64::NAN)
                    / f(&format!("{without}_cpu")).unwrap_or(f64::NAN)
                    - 1.0)
                    * 100.0
            );
        }
        println!(
            "  ops trace {:.0} bytes per record with sketches, {:.0} without",
            f("ops_trace_bytes_per_step").unwrap_or(0.0) / f("ops_records_per_step").unwrap_or(1.0),
            f("ops_nosketch_trace_bytes_per_step").unwrap_or(0.0)
                / f("ops_records_per_step").unwrap_or(1.0)
        );
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
