//! Resolution from parsed flags (and a project file) to settings, without running anything.
//! Every control is given as a flag, so the environment's `BITEXACT_*` variables do not count.

use super::{ProgramSettings, ReportSettings, SnapshotSettings};
use crate::backend::Backend;
use crate::cli::args::{Cli, Command};
use crate::cli::usage::is_usage;
use crate::harness::Launcher;
use clap::Parser;
use std::time::Duration;

const CONTROLS: [&str; 10] = [
    "--seed",
    "1",
    "--deterministic",
    "off",
    "--benchmark",
    "off",
    "--workers",
    "0",
    "--threads",
    "2",
];

fn parse(args: &[&str]) -> Command {
    let (command, rest) = args.split_first().unwrap();
    let mut argv = vec!["bitexact", command];
    argv.extend(CONTROLS);
    argv.extend(rest);
    Cli::try_parse_from(argv).unwrap().command
}

fn run(args: &[&str]) -> anyhow::Result<ProgramSettings> {
    let mut all = vec!["run"];
    all.extend(args);
    all.extend(["--", "true"]);
    match parse(&all) {
        Command::Run(a) => ProgramSettings::resolve(*a),
        _ => unreachable!(),
    }
}

fn report(args: &[&str]) -> anyhow::Result<ReportSettings> {
    let mut all = vec!["report"];
    if !args.contains(&"--filter") {
        all.extend(["--filter", "kernel/*/small"]);
    }
    all.extend(args);
    match parse(&all) {
        Command::Report(a) => ReportSettings::resolve(a, Launcher::Binary("bitexact".into())),
        _ => unreachable!(),
    }
}

#[test]
fn run_flags_win_over_the_project_file_which_wins_over_the_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bitexact.toml");
    std::fs::write(&file, "[run]\nruns = 3\ntimeout = 600\nstdout = true\n").unwrap();
    let config = file.to_str().unwrap();

    let s = run(&["--config", config]).unwrap();
    assert_eq!(s.config.options.runs, 3);
    assert_eq!(s.program.timeout, Some(Duration::from_secs(600)));
    assert!(s.program.stdout);
    assert_eq!(s.program.config.as_deref(), Some(file.as_path()));
    assert_eq!(s.config.backends, [Backend::Cpu]);

    let s = run(&["--config", config, "--runs", "5", "--timeout", "7"]).unwrap();
    assert_eq!(s.config.options.runs, 5);
    assert_eq!(s.program.timeout, Some(Duration::from_secs(7)));

    let s = run(&["--no-config"]).unwrap();
    assert_eq!(s.config.options.runs, 2);
    assert_eq!((s.program.timeout, s.program.stdout), (None, false));
    assert_eq!(s.program.config, None);

    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[run]\nrunz = 3\n").unwrap();
    let e = run(&["--config", bad.to_str().unwrap()]).err().unwrap();
    assert!(is_usage(&e), "{e:#}");
    assert!(format!("{e:#}").contains("--config"), "{e:#}");
}

#[test]
fn report_settings_follow_the_flags_and_refuse_bad_ones_as_usage_errors() {
    let s = report(&["--backend", "all", "--runs", "4"]).unwrap();
    assert_eq!(s.config.backends, [Backend::Cpu, Backend::Cuda]);
    assert!(s.config.cross_device && s.config.cost_of_determinism);
    assert_eq!(s.config.options.runs, 4);
    assert!(s.config.options.isolate.is_none() && !s.cases.is_empty());

    let s = report(&["--isolate", "--memory-limit", "128"]).unwrap();
    let isolate = s.config.options.isolate.expect("--isolate");
    assert_eq!(isolate.memory_limit_mb, Some(128));
    assert!(!s.config.cross_device);

    for bad in [
        &["--memory-limit", "128"][..],
        &["--isolate", "--memory-limit", "8"],
        &["--runs", "1"],
        &["--timeout", "0"],
        &["--vary", "nonsense"],
        &["--filter", "no-such-case"],
    ] {
        let e = report(bad)
            .err()
            .unwrap_or_else(|| panic!("{bad:?} accepted"));
        assert!(is_usage(&e), "{bad:?}: {e:#}");
    }
}

#[test]
fn snapshot_update_checks_its_directory_and_leaves_planted_bugs_out() {
    let dir = tempfile::tempdir().unwrap();
    let update = |args: &[&str]| {
        let mut all = vec!["snapshot", "update", "--force"];
        all.extend(args);
        let argv = ["bitexact"].into_iter().chain(all);
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Snapshot { command } => SnapshotSettings::resolve(command),
            _ => unreachable!(),
        }
    };
    let d = dir.path().to_str().unwrap();
    let Ok(SnapshotSettings::Update(s)) = update(&["--snapshots", d]) else {
        panic!("not an update")
    };
    let planted = |c: &dyn crate::Case| c.planted_bug().is_some();
    assert!(crate::cases::select(None)
        .iter()
        .any(|c| planted(c.as_ref())));
    assert!(!s.cases.is_empty() && !s.cases.iter().any(|c| planted(c.as_ref())));
    let file = dir.path().join("f");
    std::fs::write(&file, "").unwrap();
    let e = update(&["--snapshots", file.to_str().unwrap()])
        .err()
        .unwrap();
    assert!(
        is_usage(&e) && format!("{e}").contains("not a directory"),
        "{e:#}"
    );
}
