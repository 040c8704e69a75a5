//! Programs go through the one pipeline (`suite::run`) like cases: the same progress events,
//! the same judge, typed failures in the evidence, and the same progress bar on a terminal.

use crate::common;
use bitexact::program::Program;
use bitexact::suite::{self, Event, Subject, SuiteConfig};
use bitexact::FailureKind;
use bitexact::{Backend, CaseReport, Controls, Verdict};
use std::ffi::OsString;
use std::time::Duration;

fn program(script: &str) -> Program {
    let mut p = Program::new(["sh", "-c", script].iter().map(OsString::from).collect());
    p.name = "run/test".into();
    p
}

/// Runs `p` through the suite, returning the events (as text) and the one report.
fn suite_run(p: &Program, runs: usize) -> (Vec<String>, CaseReport) {
    let config = SuiteConfig::new(vec![Backend::Cpu], Controls::default(), runs);
    let mut events = Vec::new();
    let report = suite::run(&[Subject::Program(p)], &config, &mut |e| {
        events.push(match e {
            Event::Started { name, backend } => format!("started {name} {backend}"),
            Event::Finished(r) => format!("finished {} {}", r.name, r.verdict.name()),
            Event::Run { name, run } => {
                format!("run {name} {} {}/{}", run.purpose, run.index, run.of)
            }
            _ => "other".into(),
        })
    })
    .unwrap();
    assert_eq!(report.cases.len(), 1);
    (events, report.cases.into_iter().next().unwrap())
}

#[test]
fn a_program_gets_the_suite_events_and_the_judge() {
    let (events, r) = suite_run(&program("echo same > \"$BITEXACT_OUT/x.txt\""), 3);
    assert_eq!(
        events,
        [
            "started run/test cpu",
            "run run/test main 0/3",
            "run run/test main 1/3",
            "run run/test main 2/3",
            "finished run/test deterministic"
        ]
    );
    assert_eq!((r.verdict(), r.runs), (Verdict::Deterministic, 3));
    assert_eq!(r.program.as_ref().unwrap().runs.len(), 3);

    let (events, r) = suite_run(
        &program(
            "echo $BITEXACT_RUN > \"$BITEXACT_OUT/b.txt\"; echo same > \"$BITEXACT_OUT/a.txt\"",
        ),
        2,
    );
    assert_eq!(
        events.last().unwrap(),
        "finished run/test nondeterministic",
        "{:?}",
        r.message
    );
    assert_eq!(r.verdict, Verdict::Nondeterministic);
    let d = r.divergence.expect("first divergence");
    assert_eq!(d.op, "b.txt", "{d:?}");
    assert_eq!(r.diff.len(), 1, "{:?}", r.diff);
}

#[test]
fn failures_are_typed_evidence() {
    let kind = |p: Program| {
        let (_, r) = suite_run(&p, 2);
        assert_eq!(r.verdict, Verdict::Error, "{r:?}");
        let f = r.evidence.failure.expect("a typed failure");
        (f.kind, f.run)
    };
    assert_eq!(kind(program("exit 3")), (FailureKind::ExitStatus, Some(0)));
    assert_eq!(
        kind(program("kill -SEGV $$")),
        (FailureKind::Signal, Some(0))
    );
    assert_eq!(
        kind(program("true")),
        (FailureKind::NothingToCompare, Some(0))
    );
    assert_eq!(
        kind(program(
            "[ $BITEXACT_RUN = 1 ] && exit 4; echo x > \"$BITEXACT_OUT/x\""
        )),
        (FailureKind::ExitStatus, Some(1))
    );
    let mut slow = program("echo x > \"$BITEXACT_OUT/x\"; sleep 30");
    slow.timeout = Some(Duration::from_millis(300));
    assert_eq!(kind(slow), (FailureKind::Timeout, Some(0)));
    let mut bad = program("printf 'not a tensor' > \"$BITEXACT_OUT/x.npy\"");
    bad.timeout = None;
    assert_eq!(kind(bad), (FailureKind::UnreadableOutput, Some(0)));
}

#[test]
fn the_json_report_carries_the_failure_kind() {
    let o = common::bitexact(&["run", "--format", "json", "--", "sh", "-c", "exit 7"]);
    assert_eq!(o.status.code(), Some(1));
    let j = common::json(&o);
    let f = &j["cases"][0]["evidence"]["failure"];
    assert_eq!(f["kind"], "exit-status", "{j}");
    assert_eq!(f["run"], 0, "{j}");
}

/// On a terminal (outside CI), `bitexact run` draws the same progress bar as `report`: the
/// suite's `Started` event names the program. `script` gives the command a pseudo-terminal.
#[test]
fn run_shows_the_progress_bar_on_a_terminal() {
    if std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_err()
    {
        common::tool_missing(
            "run_shows_the_progress_bar_on_a_terminal",
            "no `script` command to make a pseudo-terminal",
        );
        return;
    }
    let exe = env!("CARGO_BIN_EXE_bitexact");
    let cmd = format!(
        "{exe} run --name run/pty-probe --runs 2 -- sh -c 'sleep 0.3; echo x > \"$BITEXACT_OUT/x\"'"
    );
    let o = std::process::Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .env_remove("CI")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("run/pty-probe (cpu)"), "{out}");
    assert!(out.contains("deterministic"), "{out}");
}

/// Every run sees the same `$BITEXACT_OUT` path, so a program that records its output
/// directory (nanoGPT's `config['out_dir']` in `ckpt.pt`) is deterministic; blame's passes see
/// the same path too, and `--keep` keeps the main pass's runs.
#[test]
fn every_run_sees_the_same_output_path() {
    let script = "echo \"$BITEXACT_OUT\" > \"$BITEXACT_OUT/out_dir.txt\"; \
                  [ -z \"$(ls -A \"$BITEXACT_OUT\" | grep -v out_dir.txt)\" ] || exit 9";
    let (_, r) = suite_run(&program(script), 3);
    assert_eq!(r.verdict, Verdict::Deterministic, "{r:?}");
    // Under a variation that breaks nothing, blame does not run; one that differs per run
    // makes blame's passes use the same path as well.
    let keep = tempfile::tempdir().unwrap();
    let mut p = program("echo \"$BITEXACT_OUT $PYTHONHASHSEED\" > \"$BITEXACT_OUT/x.txt\"");
    p.keep = Some(keep.path().join("k"));
    let mut config = SuiteConfig::new(vec![Backend::Cpu], Controls::default(), 2);
    config.options.vary = vec![bitexact::Variation::Hashseed];
    let report = suite::run(&[Subject::Program(&p)], &config, &mut |_| {}).unwrap();
    let r = &report.cases[0];
    assert_eq!(r.verdict, Verdict::Nondeterministic, "{r:?}");
    let blame = r.blame.as_ref().expect("blame");
    assert_eq!(blame.broken_by, vec![bitexact::Variation::Hashseed]);
    assert_eq!(
        blame.runs, 2,
        "control 2 (hashseed alone is the main pass): {blame:?}"
    );
    let out = keep.path().join("k/out");
    for i in 0..2 {
        let text = std::fs::read_to_string(keep.path().join(format!("k/run-{i}/x.txt"))).unwrap();
        assert!(text.starts_with(&format!("{} ", out.display())), "{text}");
    }
    let left: Vec<_> = std::fs::read_dir(keep.path().join("k"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let mut left = left;
    left.sort();
    assert_eq!(
        left,
        ["run-0", "run-1"],
        "blame's runs are removed, out is moved aside"
    );
}

/// A program that swaps its `$BITEXACT_OUT` for a symlink (to `/`) cannot make bitexact read
/// what the link points to, and one that removes it is told so.
#[test]
fn a_swapped_output_directory_is_not_followed() {
    let (_, r) = suite_run(
        &program(
            "echo x > \"$BITEXACT_OUT/x\"; rm -rf \"$BITEXACT_OUT\"; ln -s / \"$BITEXACT_OUT\"",
        ),
        2,
    );
    let f = r.evidence.failure.expect("a failure");
    assert_eq!(f.kind, FailureKind::UnreadableOutput);
    assert!(f.message.contains("symlink"), "{}", f.message);
    let (_, r) = suite_run(&program("rmdir \"$BITEXACT_OUT\""), 2);
    assert!(r
        .evidence
        .failure
        .unwrap()
        .message
        .contains("removed $BITEXACT_OUT"));
}
