//! `cargo bench --bench early_stop`: time to verdict when the second run diverges early. The
//! program writes `STEPS` step files `GAP` seconds apart; run 1 (odd runs) differs from step 2
//! on. Measured in the same run:
//! - the program alone, and the moment it completes step 2's file (from its own clock);
//! - `bitexact run --runs 2` (stops run 1 at its first divergence) and `--keep-going`.
//!
//! Goal: time to verdict ≤ program + time to step 2 + 0.5 s, and its ratio to
//! `--keep-going`. `BITEXACT_BENCH_STEPS` / `BITEXACT_BENCH_GAP` change the shape (default
//! 20 and 0.5). Never run in tests.

use std::process::Command;
use std::time::Instant;

/// The program: `step_<i>.safetensors` every `gap` seconds; prints when step 2 was complete.
const WRITER: &str = r#"
import json, os, struct, sys, time
t0 = time.perf_counter()
out = os.environ.get("BITEXACT_OUT") or sys.argv[3]; run = int(os.environ.get("BITEXACT_RUN", "0"))
steps, gap = int(sys.argv[1]), float(sys.argv[2])
for i in range(steps):
    v = float(i) + (0.5 if run % 2 == 1 and i >= 2 else 0.0)
    data = struct.pack("<2f", v, 2 * v)
    hdr = json.dumps({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    hdr += b" " * (-len(hdr) % 8)
    with open(os.path.join(out, "step_%04d.safetensors" % i), "wb") as f:
        f.write(struct.pack("<Q", len(hdr)) + hdr + data)
    if i == 2:
        print(time.perf_counter() - t0, flush=True)
    time.sleep(gap)
"#;

fn main() {
    let steps: usize = std::env::var("BITEXACT_BENCH_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let gap: f64 = std::env::var("BITEXACT_BENCH_GAP")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0.5);
    let py = std::env::var("BITEXACT_PYTHON").unwrap_or_else(|_| "python3".into());
    let exe = env!("CARGO_BIN_EXE_bitexact");
    let dir = tempfile::tempdir().expect("temp dir");
    let script = dir.path().join("writer.py");
    std::fs::write(&script, WRITER).unwrap();
    let args = [steps.to_string(), gap.to_string()];

    let t = Instant::now();
    let o = Command::new(&py)
        .arg(&script)
        .args(&args)
        .arg(dir.path())
        .output()
        .expect("run the writer");
    let alone = t.elapsed().as_secs_f64();
    let to_step2: f64 = String::from_utf8_lossy(&o.stdout)
        .trim()
        .parse()
        .expect("secs");

    let verdict = |extra: &[&str]| {
        let t = Instant::now();
        let o = Command::new(exe)
            .args(["run", "--runs", "2", "--format", "json"])
            .args(extra)
            .arg("--")
            .arg(&py)
            .arg(&script)
            .args(&args)
            .output()
            .expect("bitexact run");
        let secs = t.elapsed().as_secs_f64();
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json report");
        assert_eq!(v["cases"][0]["verdict"], "nondeterministic", "{v:#}");
        secs
    };
    let early = verdict(&[]);
    let keep_going = verdict(&["--keep-going"]);
    let goal = alone + to_step2 + 0.5;
    println!("time to verdict, {steps} steps {gap} s apart, run 1 diverging at step 2");
    println!("  program alone {alone:.2} s, step 2 complete after {to_step2:.2} s");
    println!(
        "  bitexact run --runs 2: {early:.2} s (goal <= {goal:.2} s: {}), --keep-going {keep_going:.2} s: {:.2} x",
        if early <= goal { "met" } else { "NOT met" },
        early / keep_going
    );
}
