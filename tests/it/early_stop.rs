//! Time to verdict (`bitexact run`): outputs are hashed as the program completes them, and a
//! run after the first is stopped at its first divergence from run 0 unless `--keep-going`.
//! The programs are small Python writers (the standard library only: python3 is on every
//! machine this project supports).

use crate::common;
use common::{bitexact, json};

/// Writes `step_<i>.safetensors` (2 f32) every `GAP` seconds for `STEPS` steps, and
/// `ckpt.safetensors` rewritten every step; odd runs write other values from step `BAD` on
/// (argv: STEPS GAP BAD; `BAD` past the end: deterministic). With `--rewrite`, it also writes
/// `late.safetensors` once, closes it, and overwrites it in place (same size, other values)
/// right after.
const WRITER: &str = r#"
import json, os, struct, sys, time
out = os.environ["BITEXACT_OUT"]; run = int(os.environ["BITEXACT_RUN"])
steps, gap, bad = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
def blob(vals):
    data = struct.pack("<%df" % len(vals), *vals)
    hdr = json.dumps({"x": {"dtype": "F32", "shape": [len(vals)], "data_offsets": [0, len(data)]}}).encode()
    hdr += b" " * (-len(hdr) % 8)
    return struct.pack("<Q", len(hdr)) + hdr + data
def save(name, vals, mode="wb"):
    with open(os.path.join(out, name), mode) as f:
        f.write(blob(vals))
if "--rewrite" in sys.argv:
    save("late.safetensors", [1.0, 2.0])
    time.sleep(0.05)
    save("late.safetensors", [3.0, 4.0], mode="r+b")
for i in range(steps):
    v = float(i) + (0.5 if (run % 2 == 1 and i >= bad) else 0.0)
    save("step_%04d.safetensors" % i, [v, 2 * v])
    save("ckpt.safetensors", [v])
    time.sleep(gap)
"#;

/// `bitexact run --format json ARGS -- python3 writer.py WRITER_ARGS`: (exit code, the case).
fn run(args: &[&str], writer: &[&str]) -> (i32, serde_json::Value) {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("writer.py");
    std::fs::write(&script, WRITER).unwrap();
    let mut all = vec!["run", "--format", "json"];
    all.extend(args);
    all.extend(["--", "python3", script.to_str().unwrap()]);
    all.extend(writer);
    let o = bitexact(&all);
    (o.status.code().unwrap(), json(&o)["cases"][0].clone())
}

/// Asserts that run 1 of `case` was stopped early on `file`; returns the first divergence.
fn stopped_at<'a>(case: &'a serde_json::Value, file: &str) -> &'a str {
    let stopped = case["program"]["runs"][1]["stopped_early"].as_str();
    assert!(stopped.is_some_and(|s| s.contains(file)), "{case:#}");
    case["divergence"]["explanation"]
        .as_str()
        .unwrap_or_default()
}

#[test]
fn a_run_that_diverges_is_stopped_and_reported_as_stopped() {
    let (code, case) = run(&[], &["20", "0.2", "2"]);
    assert_eq!(code, 1, "{case:#}");
    let runs = &case["program"]["runs"];
    assert!(runs[0]["stopped_early"].is_null(), "{case:#}");
    let stopped = runs[1]["stopped_early"].as_str().unwrap_or_default();
    assert!(
        stopped.contains("step_0002.safetensors differs from run 0's"),
        "{case:#}"
    );
    let first = case["divergence"]["explanation"].as_str().unwrap();
    assert!(first.contains("step_0002.safetensors"), "{first}");
    // What a stopped run had not written yet is not listed as missing.
    let diffs = case["diff"].as_array().unwrap();
    assert!(
        diffs
            .iter()
            .all(|d| !d["tensor"].as_str().unwrap().starts_with("step_0019")),
        "{case:#}"
    );
}

/// A held-out writer of raw files: 20 steps of 1 MiB `step_<i>.bin` (and a `metrics.csv` row
/// appended each step), run 1 diverging from step 2. Raw files run 0 completed once are compared
/// as they complete, as tensor files are: run 1 is stopped at step 2, not run to its end; the
/// log appended to every step is compared at the end only and stops nothing.
#[test]
fn a_raw_file_that_diverges_stops_the_run() {
    let script = r#"
import os, sys, time
out = os.environ["BITEXACT_OUT"]; run = int(os.environ["BITEXACT_RUN"])
steps, bad = int(sys.argv[1]), int(sys.argv[2])
for i in range(steps):
    b = bytes([i % 251]) * (1 << 20)
    if run == 1 and i >= bad:
        b = b[:-1] + b"\xff"
    with open(os.path.join(out, "step_%02d.bin" % i), "wb") as f:
        f.write(b)
    with open(os.path.join(out, "metrics.csv"), "a") as f:
        f.write("%d,%d\n" % (i, run * i if "--log-differs" in sys.argv else i))
    time.sleep(0.15)
"#;
    let run = |args: &[&str]| {
        let mut all = vec!["run", "--format", "json", "--", "python3", "-c", script];
        all.extend(args);
        let o = bitexact(&all);
        (o.status.code(), json(&o)["cases"][0].clone())
    };
    let (code, case) = run(&["20", "2"]);
    assert_eq!(code, Some(1), "{case:#}");
    let first = stopped_at(&case, "step_02.bin");
    assert!(first.contains("step_02.bin"), "{first}");
    // A log completed many times is compared at the end: it differs, yet stops nothing early.
    let (code, case) = run(&["4", "99", "--log-differs"]);
    assert_eq!(code, Some(1), "{case:#}");
    let runs = &case["program"]["runs"];
    assert!(runs[1]["stopped_early"].is_null(), "{case:#}");
    let first = case["divergence"]["explanation"].as_str().unwrap();
    assert!(first.contains("metrics.csv"), "{first}");
}

/// A log appended to 5 times while the watcher is busy hashing a 50 MiB file: the kernel would
/// merge its unread completions into one event, and a hash racing an append is lost, so run 0
/// could look as if it completed the log once; run 1, slower, would then be stopped at its
/// first append. Completions are counted from events kept apart by the opens between them.
#[test]
fn a_log_appended_to_while_the_watcher_is_busy_stops_nothing() {
    let script = r#"
import os, time
out = os.environ["BITEXACT_OUT"]; slow = os.environ["BITEXACT_RUN"] != "0"
with open(os.path.join(out, "big.bin"), "wb") as f:
    f.write(b"\x01" * (50 << 20))
for i in range(5):
    with open(os.path.join(out, "log.txt"), "a") as f:
        f.write("step %d loss 0.5\n" % i)
    if slow:
        time.sleep(0.3)
"#;
    for _ in 0..2 {
        let o = bitexact(&["run", "--format", "json", "--", "python3", "-c", script]);
        let case = json(&o)["cases"][0].clone();
        assert_eq!(o.status.code(), Some(0), "{case:#}");
    }
}

#[test]
fn keep_going_runs_every_run_to_its_end() {
    let (code, case) = run(&["--keep-going"], &["6", "0.05", "2"]);
    assert_eq!(code, 1, "{case:#}");
    for r in case["program"]["runs"].as_array().unwrap() {
        assert!(r["stopped_early"].is_null(), "{case:#}");
        assert_eq!(r["exit_status"], 0, "{case:#}");
    }
    let names: Vec<&str> = case["diff"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["tensor"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"step_0005.safetensors:x"), "{names:?}");
}

#[test]
fn rewritten_files_are_digested_as_the_program_left_them() {
    let keep = tempfile::tempdir().unwrap();
    let kept = keep.path().join("runs");
    let (code, case) = run(
        &["--runs", "3", "--keep", kept.to_str().unwrap()],
        &["4", "0.02", "99", "--rewrite"],
    );
    // Deterministic: the checkpoint rewritten every step and the file overwritten in place
    // right after its first close stop no run.
    assert_eq!(code, 0, "{case:#}");
    for r in case["program"]["runs"].as_array().unwrap() {
        assert!(r["stopped_early"].is_null(), "{case:#}");
    }
    // The reported digests are those of the files as left, hashed afresh from the kept run.
    let fresh = bitexact::tensor_files::digest_dir(&kept.join("run-0")).unwrap();
    for (name, d) in fresh {
        assert_eq!(case["digests"][&name], d.hex(), "{name}");
    }
}

#[test]
fn blame_still_works_with_each_varied_run_stopped_at_its_own_divergence() {
    // The writer diverges on odd runs whatever varies: blame's control pass (everything fixed)
    // diverges too, each of its runs compared with its own run 0.
    let (code, case) = run(&["--vary", "hashseed"], &["10", "0.1", "1"]);
    assert_eq!(code, 1, "{case:#}");
    assert_eq!(case["blame"]["reproducible_when_fixed"], false, "{case:#}");
    let stopped = case["program"]["runs"][1]["stopped_early"].as_str();
    assert!(stopped.is_some_and(|s| s.contains("step_0001")), "{case:#}");
}

#[test]
fn a_file_truncated_while_it_is_hashed_harms_nothing() {
    // Rewrites a 32 MiB file 30 times (each open truncates it) while bitexact hashes its
    // earlier completions: reading, not mapping, keeps bitexact alive (no SIGBUS), and the
    // final digest is the last version's.
    let script = "import os\nout = os.environ['BITEXACT_OUT']\nfor i in range(30):\n    with open(os.path.join(out, 'big.bin'), 'wb') as f:\n        f.write(bytes([i % 7]) * (32 << 20))\n";
    let o = bitexact(&[
        "run", "--format", "json", "--runs", "3", "--", "python3", "-c", script,
    ]);
    let case = json(&o)["cases"][0].clone();
    assert_eq!(o.status.code(), Some(0), "{case:#}");
    assert_eq!(case["verdict"], "deterministic", "{case:#}");
}

/// A traced PyTorch loop (never imports bitexact) that saves `step_<i>.pt` every 0.3 s for 12
/// steps; run 1 draws other noise from step 2 on (an `aten::randn` whose inputs match).
const TRACED: &str = r#"
import os, time, torch
out = os.environ["BITEXACT_OUT"]; run = int(os.environ["BITEXACT_RUN"])
torch.manual_seed(0)
lin = torch.nn.Linear(8, 8)
x = torch.randn(4, 8)
for step in range(12):
    g = torch.Generator().manual_seed(step + (1000 if run == 1 and step >= 2 else 0))
    with torch.no_grad():
        x = torch.tanh(lin(x) + torch.randn(4, 8, generator=g))
    torch.save({"x": x}, os.path.join(out, "step_%04d.pt" % step))
    time.sleep(0.3)
"#;

#[test]
fn a_traced_run_is_stopped_early_and_still_names_the_op() {
    let Some(py) = common::tracer_python("a_traced_run_is_stopped_early_and_still_names_the_op")
    else {
        return;
    };
    let o = bitexact(&[
        "run", "--format", "json", "--trace", "ops", "--", &py, "-c", TRACED,
    ]);
    let case = json(&o)["cases"][0].clone();
    assert_eq!(o.status.code(), Some(1), "{case:#}");
    // The stopped run's trace ends where it was killed; what both recorded names the op.
    let first = stopped_at(&case, "step_0002.pt");
    assert!(first.contains("aten::randn"), "{first}");
    assert!(first.contains("inputs identical"), "{first}");
    assert!(!first.contains("control flow"), "{first}");
    let ops = case["diff"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["tensor"] == "<ops>");
    let note = ops.and_then(|d| d["note"].as_str()).unwrap_or_default();
    assert!(note.contains("op calls (stopped early)"), "{case:#}");
}

/// Writes four 80 MiB safetensors step files (over the 64 MiB the watcher hashes during a run)
/// 0.4 s apart. Run 1's last byte of data differs from step 1 on; with `--meta`, every run
/// writes its own `__metadata__` instead (headers differ, tensors equal).
const LARGE: &str = r#"
import json, os, struct, sys, time
out = os.environ["BITEXACT_OUT"]; run = int(os.environ["BITEXACT_RUN"])
n = 80 << 20
meta = {"__metadata__": {"run": str(run)}} if "--meta" in sys.argv else {}
for step in range(4):
    hdr = json.dumps({**meta, "w": {"dtype": "U8", "shape": [n], "data_offsets": [0, n]}}).encode()
    hdr += b" " * (-len(hdr) % 8)
    data = bytearray(bytes([step]) * n)
    if run == 1 and step >= 1 and not meta:
        data[-1] ^= 1
    with open(os.path.join(out, "step_%d.safetensors" % step), "wb") as f:
        f.write(struct.pack("<Q", len(hdr)) + hdr)
        f.write(data)
    time.sleep(0.4)
"#;

#[test]
fn a_large_file_is_compared_by_its_bytes_while_the_run_goes_on() {
    let o = bitexact(&["run", "--format", "json", "--", "python3", "-c", LARGE]);
    let case = json(&o)["cases"][0].clone();
    assert_eq!(o.status.code(), Some(1), "{case:#}");
    let first = stopped_at(&case, "step_1.safetensors");
    assert!(first.contains("step_1.safetensors:w"), "{first}");
    // Headers that differ while the tensors are equal stop nothing: digests decide at the end.
    let o = bitexact(&[
        "run", "--format", "json", "--", "python3", "-c", LARGE, "--meta",
    ]);
    let case = json(&o)["cases"][0].clone();
    assert_eq!(o.status.code(), Some(0), "{case:#}");
    assert!(
        case["program"]["runs"][1]["stopped_early"].is_null(),
        "{case:#}"
    );
}
