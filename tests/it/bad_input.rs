//! A corpus of hostile invocations of the `bitexact` binary: bad flags, bad values,
//! bad environment, bad paths, malformed trace and snapshot files, for every subcommand. Each
//! must end with its expected exit code (2 for usage or unreadable input) within a time bound,
//! without a panic, and with a message that names the culprit (flag, value, variable or path).

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Longest any invocation may take.
const LIMIT: Duration = Duration::from_secs(20);

/// One hostile invocation: arguments (`{tmp}` is the fixture directory), environment
/// (`<non-utf8>` stands for the bytes `ff fe`), expected exit code, and a piece of text the
/// output must contain (the culprit).
struct Bad(
    &'static [&'static str],
    &'static [(&'static str, &'static str)],
    i32,
    &'static str,
);

const fn bad(args: &'static [&'static str], code: i32, needle: &'static str) -> Bad {
    Bad(args, &[], code, needle)
}

#[rustfmt::skip]
const CORPUS: &[Bad] = &[
    // list
    bad(&["list", "--filter", "**********z"], 2, "**********z"),
    bad(&["list", "--filter", "*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*az"], 2, "no case matches"),
    bad(&["list", "--filter", "nomatch"], 2, "nomatch"),
    bad(&["list", "--filter", ""], 2, "--filter"),
    bad(&["list", "--filter"], 2, "--filter"),
    bad(&["list", "--bogus"], 2, "--bogus"),
    bad(&["frobnicate"], 2, "frobnicate"),
    bad(&[], 2, "Usage"),
    // report: values
    bad(&["report", "--runs", "1"], 2, "--runs"),
    bad(&["report", "--runs", "0"], 2, "--runs"),
    bad(&["report", "--runs", "10001"], 2, "--runs"),
    bad(&["report", "--runs", "abc"], 2, "abc"),
    bad(&["report", "--runs", "99999999999999999999999"], 2, "--runs"),
    bad(&["report", "--seed", "abc"], 2, "abc"),
    bad(&["report", "--seed", "99999999999999999999999"], 2, "--seed"),
    bad(&["report", "--deterministic", "maybe"], 2, "maybe"),
    bad(&["report", "--benchmark", "2"], 2, "--benchmark"),
    bad(&["report", "--threads", "0"], 2, "threads"),
    bad(&["report", "--threads", "1025"], 2, "threads"),
    bad(&["report", "--threads", "-3"], 2, "-3"),
    bad(&["report", "--workers", "257"], 2, "workers"),
    bad(&["report", "--workers", "18446744073709551616"], 2, "--workers"),
    bad(&["report", "--timeout", "0"], 2, "--timeout"),
    bad(&["report", "--timeout", "-1"], 2, "-1"),
    bad(&["report", "--timeout", "inf"], 2, "--timeout"),
    bad(&["report", "--timeout", "nan"], 2, "--timeout"),
    bad(&["report", "--timeout", "1e30"], 2, "--timeout"),
    bad(&["report", "--timeout", "soon"], 2, "soon"),
    bad(&["report", "--format", "yaml"], 2, "yaml"),
    bad(&["report", "--backend", "tpu"], 2, "tpu"),
    bad(&["report", "--vary", ""], 2, "--vary"),
    bad(&["report", "--vary", "threads,"], 2, "--vary"),
    bad(&["report", "--vary", "bogus"], 2, "bogus"),
    bad(&["report", "--memory-limit", "100"], 2, "--isolate"),
    bad(&["report", "--isolate", "--memory-limit", "1"], 2, "--memory-limit"),
    bad(&["report", "--isolate", "--memory-limit", "-5"], 2, "-5"),
    bad(&["report", "--filter", "nomatch"], 2, "nomatch"),
    bad(&["report", "--filter", "**********z"], 2, "**********z"),
    bad(&["report", "extra-positional"], 2, "extra-positional"),
    // report: paths
    bad(&["report", "--snapshots", "/nonexistent/snaps"], 2, "/nonexistent/snaps"),
    bad(&["report", "--snapshots", "{tmp}/file.txt"], 2, "file.txt"),
    bad(&["report", "--out", "{tmp}/dir"], 2, "{tmp}/dir"),
    bad(&["report", "--out", "{tmp}/missing/dir/x"], 2, "missing/dir"),
    bad(&["report", "--out", "/proc/version"], 2, "/proc/version"),
    bad(&["report", "--out", "/proc/self/status/x"], 2, "/proc/self/status"),
    bad(&["report", "--trace", "{tmp}/dir"], 2, "{tmp}/dir"),
    bad(&["report", "--trace", "{tmp}/x", "--out", "{tmp}/x"], 2, "--out and --trace"),
    // report: environment (a valid flag hides a bad variable, see the last two)
    Bad(&["report"], &[("BITEXACT_SEED", "abc")], 2, "BITEXACT_SEED"),
    Bad(&["report"], &[("BITEXACT_SEED", "<non-utf8>")], 2, "BITEXACT_SEED"),
    Bad(&["report"], &[("BITEXACT_THREADS", "0")], 2, "BITEXACT_THREADS"),
    Bad(&["report"], &[("BITEXACT_THREADS", "99999")], 2, "BITEXACT_THREADS"),
    Bad(&["report"], &[("BITEXACT_WORKERS", "100000")], 2, "BITEXACT_WORKERS"),
    Bad(&["report"], &[("BITEXACT_DETERMINISTIC", "maybe")], 2, "BITEXACT_DETERMINISTIC"),
    Bad(&["report"], &[("BITEXACT_BENCHMARK", "2")], 2, "BITEXACT_BENCHMARK"),
    Bad(&["report", "--seed", "1", "--runs", "1"], &[("BITEXACT_SEED", "abc")], 2, "--runs"),
    Bad(&["list", "--filter", "nomatch"], &[("BITEXACT_SEED", "abc")], 2, "nomatch"),
    // snapshot
    bad(&["snapshot"], 2, "Usage"),
    bad(&["snapshot", "bogus"], 2, "bogus"),
    bad(&["snapshot", "review", "--snapshots", "/nonexistent/snaps"], 2, "/nonexistent/snaps"),
    bad(&["snapshot", "review", "--snapshots", "{tmp}/file.txt"], 2, "file.txt"),
    Bad(&["snapshot", "update"], &[("CI", "true")], 2, "CI"),
    Bad(&["snapshot", "review", "--accept", "--snapshots", "{tmp}/snaps"], &[("CI", "true")], 2, "CI"),
    bad(&["snapshot", "update", "--runs", "1", "--snapshots", "{tmp}/out"], 2, "--runs"),
    bad(&["snapshot", "update", "--threads", "0", "--snapshots", "{tmp}/out"], 2, "threads"),
    bad(&["snapshot", "update", "--filter", "nomatch", "--snapshots", "{tmp}/out"], 2, "nomatch"),
    Bad(&["snapshot", "update", "--snapshots", "{tmp}/out"], &[("BITEXACT_SEED", "x")], 2, "BITEXACT_SEED"),
    // diff-trace
    bad(&["diff-trace", "{tmp}/good.json"], 2, "Usage"),
    bad(&["diff-trace", "{tmp}/missing.json", "{tmp}/good.json"], 2, "missing.json"),
    bad(&["diff-trace", "{tmp}/good.json", "{tmp}/missing.json"], 2, "missing.json"),
    bad(&["diff-trace", "{tmp}/not_json.json", "{tmp}/good.json"], 2, "not_json.json"),
    bad(&["diff-trace", "{tmp}/v99.json", "{tmp}/good.json"], 2, "version 99"),
    bad(&["diff-trace", "{tmp}/good.json", "{tmp}/dup.json"], 2, "appears twice"),
    bad(&["diff-trace", "{tmp}/trunc.json", "{tmp}/good.json"], 2, "trunc.json"),
    bad(&["diff-trace", "{tmp}/binary.bin", "{tmp}/good.json"], 2, "binary.bin"),
    bad(&["diff-trace", "{tmp}/wrong_shape.json", "{tmp}/good.json"], 2, "wrong_shape.json"),
    bad(&["diff-trace", "{tmp}/norun.json", "{tmp}/good.json"], 2, "no runs"),
    bad(&["diff-trace", "{tmp}/dir", "{tmp}/good.json"], 2, "{tmp}/dir"),
    bad(&["diff-trace", "/dev/zero", "{tmp}/good.json"], 2, "/dev/zero"),
    bad(&["diff-trace", "{tmp}/empty.json", "{tmp}/good.json"], 1, "first file"),
    bad(&["diff-trace", "{tmp}/good.json", "{tmp}/empty.json"], 1, "second file"),
    bad(&["diff-trace", "{tmp}/good.json", "{tmp}/other.json"], 1, "first divergence"),
    // run
    bad(&["run", "--", "/nonexistent/program"], 2, "/nonexistent/program"),
    bad(&["run"], 2, "CMD"),
    bad(&["run", "--"], 2, "CMD"),
    bad(&["run", "--", "no-such-command-bitexact"], 2, "no-such-command-bitexact"),
    bad(&["run", "--", "{tmp}/dir"], 2, "{tmp}/dir"),
    // An unwritable TMPDIR (run directories cannot be made), a bad ignore rule or
    // project file; snapshot update into a regular file.
    Bad(&["run", "--", "true"], &[("TMPDIR", "/proc")], 2, "TMPDIR"),
    bad(&["run", "--stdout-ignore", "(", "--", "true"], 2, "--stdout-ignore"),
    bad(&["run", "--config", "{tmp}/file.txt", "--", "true"], 2, "file.txt"),
    bad(&["snapshot", "update", "--snapshots", "{tmp}/file.txt", "--filter", "reduce_sum/small"], 2, "file.txt"),
    bad(&["run", "--runs", "1", "--", "true"], 2, "--runs"),
    bad(&["run", "--timeout", "0", "--", "true"], 2, "--timeout"),
    bad(&["run", "--memory-limit", "1", "--", "true"], 2, "--memory-limit"),
    // One floor for both commands (it was 16 MiB for `run`, 64 for `report`).
    bad(&["run", "--memory-limit", "20", "--", "true"], 2, "at least 64 MiB"),
    bad(&["report", "--isolate", "--memory-limit", "20"], 2, "at least 64 MiB"),
    bad(&["run", "--name", " ", "--", "true"], 2, "--name"),
    bad(&["run", "--vary", "bogus", "--", "true"], 2, "bogus"),
    // --capture: only with --trace ops, and an op identity as diff-trace prints it
    bad(&["run", "--capture", r#"[0,"",0,"forward","","aten::mm",0]"#, "--", "true"], 2, "--capture"),
    bad(&["run", "--trace", "modules", "--capture", r#"[0,"",0,"forward","","aten::mm",0]"#, "--", "true"], 2, "--capture needs --trace ops"),
    bad(&["run", "--trace", "ops", "--capture", "aten::mm", "--", "true"], 2, "--capture"),
    bad(&["run", "--trace", "ops", "--capture", "[0,1]", "--", "true"], 2, "--capture"),
    bad(&["run", "--trace", "ops", "--capture", r#"[0,"",-1,"forward","","aten::mm",0]"#, "--", "true"], 2, "step (item 3)"),
    bad(&["run", "--format", "xml", "--", "true"], 2, "xml"),
    bad(&["run", "--out", "{tmp}/dir", "--", "true"], 2, "{tmp}/dir"),
    bad(&["run", "--snapshots", "/nonexistent/snaps", "--", "true"], 2, "/nonexistent/snaps"),
    bad(&["run", "--keep", "{tmp}/file.txt", "--", "true"], 2, "file.txt"),
    Bad(&["run", "--", "true"], &[("BITEXACT_THREADS", "0")], 2, "BITEXACT_THREADS"),
    // internal
    bad(&["__child"], 1, "BITEXACT_CHILD"),
    Bad(&["__child"], &[("BITEXACT_CHILD", "{not json")], 1, "BITEXACT_CHILD"),
];

/// The fixture files the corpus names.
fn fixtures(dir: &Path) {
    use bitexact::trace::{CaseTraces, TraceEntry, TraceFile};
    let case = |name: &str, out: &str| CaseTraces {
        name: name.into(),
        backend: "cpu".into(),
        runs: vec![vec![TraceEntry {
            call: 0,
            op: "matmul".into(),
            algorithm: "tiled".into(),
            inputs: vec!["a".into()],
            output: out.into(),
            ..Default::default()
        }]],
    };
    let file = |cases| TraceFile {
        version: 1,
        platform: serde_json::json!({}),
        cases,
    };
    let write = |name: &str, f: &TraceFile| {
        std::fs::write(dir.join(name), serde_json::to_vec_pretty(f).unwrap()).unwrap()
    };
    write("good.json", &file(vec![case("k/a", "c")]));
    write("other.json", &file(vec![case("k/a", "d")]));
    write("empty.json", &file(vec![]));
    write("dup.json", &file(vec![case("k/a", "c"), case("k/a", "c")]));
    let mut v99 = file(vec![]);
    v99.version = 99;
    write("v99.json", &v99);
    let mut norun = case("k/a", "c");
    norun.runs.clear();
    write("norun.json", &file(vec![norun]));
    let good = std::fs::read(dir.join("good.json")).unwrap();
    std::fs::write(dir.join("trunc.json"), &good[..good.len() / 2]).unwrap();
    std::fs::write(dir.join("not_json.json"), "hello").unwrap();
    std::fs::write(
        dir.join("wrong_shape.json"),
        r#"{"version": 1, "cases": 3}"#,
    )
    .unwrap();
    std::fs::write(dir.join("binary.bin"), [0xff, 0xfe, 0, 1, 0x80, b'{']).unwrap();
    std::fs::write(dir.join("file.txt"), "a file").unwrap();
    std::fs::create_dir(dir.join("dir")).unwrap();
    std::fs::create_dir(dir.join("snaps")).unwrap();
}

/// Runs the binary with `args` and `env` (control variables and `CI` removed first) in `dir`,
/// killing it past [`LIMIT`]: exit code (None if killed), output, elapsed time.
fn run(dir: &Path, args: &[String], env: &[(&str, OsString)]) -> (Option<i32>, String, Duration) {
    let (out, err) = (dir.join("stdout"), dir.join("stderr"));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bitexact"));
    cmd.args(args).current_dir(dir).stdin(Stdio::null());
    for v in [
        "SEED",
        "DETERMINISTIC",
        "BENCHMARK",
        "WORKERS",
        "THREADS",
        "CHILD",
    ] {
        cmd.env_remove(format!("BITEXACT_{v}"));
    }
    for v in [
        "CI",
        "TF_BUILD",
        "GITHUB_ACTIONS",
        "BUILDKITE",
        "TEAMCITY_VERSION",
    ] {
        cmd.env_remove(v);
    }
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    cmd.stdout(std::fs::File::create(&out).unwrap());
    cmd.stderr(std::fs::File::create(&err).unwrap());
    let t0 = Instant::now();
    let mut child = cmd.spawn().expect("start bitexact");
    let code = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st.code();
        }
        if t0.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let text = std::fs::read_to_string(&out).unwrap_or_default()
        + &std::fs::read_to_string(&err).unwrap_or_default();
    (code, text, t0.elapsed())
}

#[test]
fn hostile_invocations_fail_cleanly_and_name_the_culprit() {
    assert!(
        CORPUS.len() >= 60,
        "the corpus has {} entries",
        CORPUS.len()
    );
    let tmp = tempfile::tempdir().unwrap();
    fixtures(tmp.path());
    let t = tmp.path().to_str().unwrap();
    let mut failures = Vec::new();
    for Bad(args, env, want, needle) in CORPUS {
        let args: Vec<String> = args.iter().map(|a| a.replace("{tmp}", t)).collect();
        let env: Vec<(&str, OsString)> = env
            .iter()
            .map(|&(k, v)| match v {
                "<non-utf8>" => (k, OsString::from_vec(vec![0xff, 0xfe])),
                v => (k, OsString::from(v)),
            })
            .collect();
        let needle = needle.replace("{tmp}", t);
        let (code, text, took) = run(tmp.path(), &args, &env);
        let mut wrong = Vec::new();
        if code != Some(*want) {
            wrong.push(format!("exit {code:?}, want {want}"));
        }
        if text.contains("panicked at") {
            wrong.push("panicked".to_string());
        }
        if !text.contains(&needle) {
            wrong.push(format!("output does not name {needle:?}"));
        }
        if took > LIMIT {
            wrong.push(format!("took {took:?}"));
        }
        if !wrong.is_empty() {
            failures.push(format!(
                "bitexact {args:?} env {env:?}: {}\n{}",
                wrong.join("; "),
                text.trim_end()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} hostile invocations misbehaved:\n\n{}",
        failures.len(),
        CORPUS.len(),
        failures.join("\n\n")
    );
}
