//! End-to-end tests of the `bitexact` binary: exit codes, formats, filters.

use crate::common;
use common::{bitexact, stdout};
use std::process::Command;

#[test]
fn report_small_cases_is_deterministic_and_exits_0() {
    let o = bitexact(&["report", "--filter", "kernel/*/small", "--backend", "cpu"]);
    let out = stdout(&o);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let ops = bitexact::ops::catalog();
    for (op, _) in &ops {
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("kernel/{op}/small")))
            .unwrap_or_else(|| panic!("kernel/{op}/small missing: {out}"));
        assert!(line.contains("deterministic"), "{line}");
    }
    let counts = format!(
        "{} deterministic, 0 nondeterministic, 0 errors, 0 skipped",
        ops.len()
    );
    assert!(out.contains(&counts), "{out}");
}

#[test]
fn deterministic_off_catches_atomics_and_exits_1() {
    // Atomic accumulation order varies between runs; retry a bounded number of times (K below)
    // so a rare identical interleaving cannot make the test flaky.
    const ATTEMPTS: usize = 3;
    let mut last = String::new();
    for _ in 0..ATTEMPTS {
        let o = bitexact(&[
            "report",
            "--filter",
            "scatter_add/large",
            "--deterministic",
            "off",
            "--runs",
            "8",
            "--threads",
            "4",
        ]);
        last = stdout(&o);
        if o.status.code() == Some(1) {
            assert!(last.contains("nondeterministic"), "{last}");
            assert!(last.contains("elements differ"), "{last}");
            assert!(last.contains("scatter_add=atomic_cas"), "{last}");
            assert!(last.contains("cost of determinism"), "{last}");
            return;
        }
    }
    panic!("atomic scatter_add not caught in {ATTEMPTS} attempts of 8 runs:\n{last}");
}

#[test]
fn json_report_matches_the_contract() {
    let o = bitexact(&[
        "report",
        "--filter",
        "kernel/dropout/small,reduce_sum/small",
        "--format",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("valid JSON");
    for key in ["version", "controls", "platform", "cases", "summary"] {
        assert!(v.get(key).is_some(), "missing {key}");
    }
    let cases = v["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 2);
    for c in cases {
        for key in [
            "name",
            "backend",
            "verdict",
            "runs",
            "distinct_digests",
            "digests",
            "diff",
            "algorithms",
            "seconds",
        ] {
            assert!(c.get(key).is_some(), "case missing {key}: {c}");
        }
        assert_eq!(c["verdict"], "deterministic");
        assert_eq!(c["backend"], "cpu");
        for d in c["digests"].as_object().unwrap().values() {
            assert_eq!(d.as_str().unwrap().len(), 64);
        }
    }
    let dropout = cases
        .iter()
        .find(|c| c["name"] == "kernel/dropout/small")
        .unwrap();
    assert!(dropout["digests"].get("mask").is_some() && dropout["digests"].get("y").is_some());
    assert_eq!(v["summary"]["deterministic"], 2);
    assert_eq!(v["controls"]["deterministic"], true);
}

#[test]
fn usage_errors_exit_2_with_a_message() {
    let o = bitexact(&["report", "--filter", "nomatch"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no case matches --filter \"nomatch\""));
    assert_eq!(bitexact(&["report", "--runs", "1"]).status.code(), Some(2));
    assert_eq!(
        bitexact(&["report", "--no-such-flag"]).status.code(),
        Some(2)
    );
    assert_eq!(
        bitexact(&["report", "--deterministic", "maybe"])
            .status
            .code(),
        Some(2)
    );
    let bad_env = Command::new(env!("CARGO_BIN_EXE_bitexact"))
        .args(["report", "--filter", "small"])
        .env("BITEXACT_SEED", "abc")
        .output()
        .unwrap();
    assert_eq!(bad_env.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad_env.stderr).contains("BITEXACT_SEED"));
}

#[test]
fn list_shows_cases_backends_and_ops() {
    let o = bitexact(&["list"]);
    assert_eq!(o.status.code(), Some(0));
    let out = stdout(&o);
    let line = out
        .lines()
        .find(|l| l.starts_with("kernel/matmul/large"))
        .expect("matmul listed");
    assert!(line.contains("cpu") && line.contains("matmul"), "{line}");
}

#[test]
fn out_file_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.json");
    let o = bitexact(&[
        "report",
        "--filter",
        "reduce_sum/small",
        "--format",
        "json",
        "--out",
        path.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(v["cases"][0]["name"], "kernel/reduce_sum/small");
}

#[test]
fn format_help_lists_every_format_from_one_place() {
    // The format list comes from `report::Format::ALL` alone: a new format shows up in `--help`
    // of both commands that take `--format` without any help text written for it.
    let names: Vec<&str> = bitexact::report::Format::ALL
        .iter()
        .map(|(_, n)| *n)
        .collect();
    for command in ["report", "run"] {
        let o = bitexact(&[command, "--help"]);
        let out = stdout(&o);
        assert_eq!(o.status.code(), Some(0), "{out}");
        let possible = format!("[possible values: {}]", names.join(", "));
        assert!(
            out.contains(&possible),
            "{command} --help lacks {possible}:\n{out}"
        );
    }
}
