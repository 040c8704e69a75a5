//! Process hygiene: after timeouts, hangs, grandchildren and a parent stopped by
//! SIGTERM, SIGINT or SIGKILL mid-run, no process of the test's own tree is left. Each
//! invocation carries a unique marker in its environment (inherited by every child and
//! grandchild), and `/proc/*/environ` is scanned for it.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Longest any one invocation may take.
const LIMIT: Duration = Duration::from_secs(60);
const MARK_VAR: &str = "BITEXACT_HYGIENE_MARK";

/// A unique marker for one test.
fn marker(test: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{test}-{}-{nanos}", std::process::id())
}

/// Live processes (not zombies) whose environment holds `mark`.
fn marked(mark: &str) -> Vec<i32> {
    let needle = format!("{MARK_VAR}={mark}");
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let zombie = stat
                .rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z'));
            !zombie
                && std::fs::read(format!("/proc/{pid}/environ"))
                    .is_ok_and(|env| env.split(|&b| b == 0).any(|kv| kv == needle.as_bytes()))
        })
        .collect()
}

/// Waits (bounded) until no marked process is left; kills and reports any that stay.
fn assert_none_left(mark: &str, what: &str) {
    let t0 = Instant::now();
    let mut left = marked(mark);
    while !left.is_empty() && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
        left = marked(mark);
    }
    let cmdlines: Vec<String> = left
        .iter()
        .map(|p| {
            let c = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
            format!("{p}: {}", String::from_utf8_lossy(&c).replace('\0', " "))
        })
        .collect();
    for &p in &left {
        // SAFETY: kill by pid; these are our own leftovers.
        unsafe { libc::kill(p, libc::SIGKILL) };
    }
    assert!(
        left.is_empty(),
        "{what}: processes left behind:\n{}",
        cmdlines.join("\n")
    );
}

fn start(mark: &str, args: &[&str]) -> Child {
    start_in(mark, args, None)
}

/// [`start`] with `TMPDIR` set to `tmp` when given.
fn start_in(mark: &str, args: &[&str], tmp: Option<&std::path::Path>) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bitexact"));
    cmd.args(args).env(MARK_VAR, mark).stdin(Stdio::null());
    if let Some(t) = tmp {
        cmd.env("TMPDIR", t);
    }
    cmd.stdout(Stdio::null()).stderr(Stdio::piped());
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
    cmd.spawn().expect("start bitexact")
}

/// Waits for `child` within [`LIMIT`] (killing it past that): exit code and stderr.
fn finish(mut child: Child) -> (Option<i32>, String) {
    use std::io::Read;
    let mut pipe = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = pipe.read_to_string(&mut s);
        s
    });
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t0.elapsed() > LIMIT {
            let _ = child.kill();
            panic!("bitexact ran past {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (status.code(), reader.join().unwrap())
}

/// Runs to completion and checks the exit code and that nothing is left.
fn complete(test: &str, args: &[&str], want: i32) {
    let mark = marker(test);
    let (code, stderr) = finish(start(&mark, args));
    assert_eq!(code, Some(want), "bitexact {args:?}: {stderr}");
    assert!(!stderr.contains("panicked at"), "{stderr}");
    assert_none_left(&mark, &format!("bitexact {args:?}"));
}

#[test]
fn isolated_hangs_leave_nothing() {
    complete(
        "hang",
        &[
            "report",
            "--isolate",
            "--filter",
            "selftest/hang",
            "--timeout",
            "2",
        ],
        1,
    );
}

#[test]
fn vary_process_with_a_timeout_leaves_nothing() {
    complete(
        "vary",
        &[
            "report",
            "--vary",
            "process",
            "--filter",
            "kernel/reduce_sum/small",
            "--timeout",
            "30",
        ],
        0,
    );
}

#[test]
fn run_timeout_kills_grandchildren() {
    complete(
        "grandchild",
        &[
            "run",
            "--timeout",
            "1",
            "--",
            "sh",
            "-c",
            "sleep 100 & sleep 100",
        ],
        1,
    );
}

/// Starts `args`, waits until bitexact has a marked child (more than one marked process),
/// and sends `sig` to bitexact. Returns the marker and bitexact's exit code.
fn signal_mid_run(test: &str, args: &[&str], sig: i32) -> (String, Option<i32>, String) {
    let mark = marker(test);
    let child = start(&mark, args);
    let t0 = Instant::now();
    while marked(&mark).len() < 2 {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no child started: {args:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    // SAFETY: signals our own child by pid.
    unsafe { libc::kill(child.id() as i32, sig) };
    let (code, stderr) = finish(child);
    (mark, code, stderr)
}

#[test]
fn sigterm_and_sigint_kill_every_child_group() {
    let cases: [(&str, &[&str], i32); 4] = [
        (
            "term-iso",
            &[
                "report",
                "--isolate",
                "--filter",
                "selftest/hang",
                "--timeout",
                "60",
            ],
            libc::SIGTERM,
        ),
        (
            "int-iso",
            &[
                "report",
                "--isolate",
                "--filter",
                "selftest/hang",
                "--timeout",
                "60",
            ],
            libc::SIGINT,
        ),
        (
            "term-run",
            &["run", "--", "sh", "-c", "sleep 100 & sleep 100"],
            libc::SIGTERM,
        ),
        (
            "int-run",
            &["run", "--", "sh", "-c", "sleep 100 & sleep 100"],
            libc::SIGINT,
        ),
    ];
    for (test, args, sig) in cases {
        let (mark, code, stderr) = signal_mid_run(test, args, sig);
        assert_eq!(code, Some(128 + sig), "{args:?}: {stderr}");
        assert!(stderr.contains("killed"), "{stderr}");
        assert_none_left(&mark, &format!("{test}: bitexact {args:?}"));
    }
}

#[test]
fn sigkill_of_the_parent_kills_its_direct_children() {
    let args = [
        "report",
        "--isolate",
        "--filter",
        "selftest/hang",
        "--timeout",
        "60",
    ];
    let (mark, code, _) = signal_mid_run("kill-iso", &args, libc::SIGKILL);
    assert_eq!(code, None, "killed by a signal");
    assert_none_left(&mark, "SIGKILL of bitexact report --isolate");
}

/// Documents the limit: SIGKILL cannot be caught, so a `bitexact run` program's own children
/// (grandchildren of bitexact) outlive it; its direct child dies (PR_SET_PDEATHSIG).
#[test]
fn sigkill_of_the_parent_leaves_only_grandchildren_of_run_programs() {
    let mark = marker("kill-run");
    // SIGKILL skips every cleanup: bitexact's run directory stays, so it goes in a TMPDIR of
    // the test's own (not /tmp, where one would pile up per test run).
    let tmp = tempfile::tempdir().unwrap();
    let child = start_in(
        &mark,
        &["run", "--", "sh", "-c", "sleep 100 & sleep 100"],
        Some(tmp.path()),
    );
    let t0 = Instant::now();
    let direct = loop {
        let me = child.id().to_string();
        let direct = marked(&mark).into_iter().find(|p| {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
            stat.rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().nth(1).map(str::to_owned))
                == Some(me.clone())
        });
        if let (Some(d), true) = (direct, marked(&mark).len() >= 3) {
            break d;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the program did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    // SAFETY: signals our own child by pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let _ = finish(child);
    let t0 = Instant::now();
    while marked(&mark).contains(&direct) && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !marked(&mark).contains(&direct),
        "the direct child outlived bitexact"
    );
    // What is left is the program's own child, in the group bitexact gave the program.
    // SAFETY: kills that process group (the test's own leftovers).
    unsafe { libc::kill(-direct, libc::SIGKILL) };
    assert_none_left(&mark, "the grandchild's process group");
}

/// A daemon: a double fork out of a new session, so the grandchild leads no process group and
/// is no child of the program. It holds the program's stderr open too.
const DAEMON: &str = "setsid sh -c 'sleep 100 & exit' & sleep 0.3; echo x > \"$BITEXACT_OUT/x\"";

#[test]
fn a_double_forked_setsid_daemon_does_not_survive_a_run() {
    let mark = marker("daemon");
    let t0 = Instant::now();
    let (code, stderr) = finish(start(&mark, &["run", "--", "sh", "-c", DAEMON]));
    assert_eq!(code, Some(0), "{stderr}");
    assert_none_left(&mark, "a run whose program left a setsid daemon");
    // Nothing holds stderr open once the run's processes are gone: no wait for it. (Not a
    // timing assertion on bitexact's speed: two runs of 0.3 s are far below 100 s.)
    assert!(t0.elapsed() < Duration::from_secs(60));
}

#[test]
fn a_daemon_does_not_survive_a_timeout() {
    let mark = marker("daemon-timeout");
    let script = format!("{DAEMON}; sleep 60");
    let (code, stderr) = finish(start(
        &mark,
        &["run", "--timeout", "1", "--", "sh", "-c", &script],
    ));
    assert_eq!(code, Some(1), "{stderr}");
    assert_none_left(&mark, "a timed-out run whose program left a setsid daemon");
}

#[test]
fn sigterm_kills_a_new_session_child_and_removes_the_run_directories() {
    let mark = marker("term-session");
    let tmp = tempfile::tempdir().unwrap();
    let script = "setsid sh -c 'sleep 100 & sleep 100' & sleep 100";
    let child = start_in(&mark, &["run", "--", "sh", "-c", script], Some(tmp.path()));
    let t0 = Instant::now();
    while marked(&mark).len() < 4 {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the program did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: signals our own child by pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let (code, stderr) = finish(child);
    assert_eq!(code, Some(128 + libc::SIGTERM), "{stderr}");
    assert_none_left(&mark, "SIGTERM of bitexact run with a new-session child");
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "left in TMPDIR: {left:?}");
}
