//! Variations that act only if the program reads them (`--vary workers`, `--vary seed`): the
//! helper records what a script read, and the report says which varied controls never reached
//! it; `--vary threads=A,B` chooses the counts. Needs a `python3` (the helper has no
//! dependencies); says `SKIPPED` without one.

use crate::common;
use common::{bitexact, json, python_with};
use std::path::Path;

/// `bitexact run --format json ARGS -- python -c SOURCE` with the helper importable; returns
/// (exit code, report).
fn run(py: &str, args: &[&str], source: &str) -> (Option<i32>, serde_json::Value) {
    let helper = Path::new(env!("CARGO_MANIFEST_DIR")).join("python");
    let code = format!(
        "import sys; sys.path.insert(0, {:?})\nimport bitexact, os\n{source}",
        helper.display().to_string()
    );
    let mut all = vec!["run", "--no-config", "--format", "json"];
    all.extend(args);
    all.extend(["--", py, "-c", &code]);
    let o = bitexact(&all);
    (o.status.code(), json(&o))
}

fn note(report: &serde_json::Value) -> String {
    report["cases"][0]["notes"].to_string()
}

#[test]
fn a_hard_coded_worker_count_is_reported_as_not_reached() {
    let Some(py) = python_with(&[]) else {
        return common::tool_missing("a_hard_coded_worker_count…", "no python3");
    };
    // Uses the helper (seed_everything, dump) but hard-codes its worker count.
    let hard = "bitexact.seed_everything(torch=False)\nworkers = 2\nbitexact.dump('x', w=[float(workers)])\n";
    let (code, r) = run(&py, &["--vary", "workers"], hard);
    assert_eq!(code, Some(0), "{r}");
    let n = note(&r);
    assert!(
        n.contains("varied but never read by the program: workers"),
        "{n}"
    );
    assert_eq!(
        r["cases"][0]["program"]["unread_controls"],
        serde_json::json!(["workers"])
    );
    // Read through the helper: really varied, and a worker-count bug is caught.
    let read = "bitexact.seed_everything(torch=False)\nbitexact.dump('x', w=[float(bitexact.workers(2))])\n";
    let (code, r) = run(&py, &["--vary", "workers"], read);
    assert_eq!(code, Some(1), "{r}");
    assert!(!note(&r).contains("never read"), "{r}");
    assert_eq!(
        r["cases"][0]["blame"]["broken_by"],
        serde_json::json!(["workers"])
    );
    // A script without the helper's readers: bitexact says it cannot tell.
    let (code, r) = run(
        &py,
        &["--vary", "workers,seed"],
        "open(os.environ['BITEXACT_OUT'] + '/x.bin', 'w').write('1')\n",
    );
    assert_eq!(code, Some(0), "{r}");
    let n = note(&r);
    assert!(
        n.contains("varied workers, seed reach the program only through")
            && n.contains("cannot tell"),
        "{n}"
    );
}

#[test]
fn thread_counts_are_chosen_with_the_variation() {
    let Some(py) = python_with(&[]) else {
        return common::tool_missing("thread_counts_are_chosen…", "no python3");
    };
    let src =
        "bitexact.dump('x', t=[float(os.environ['OMP_NUM_THREADS']), float(bitexact.threads())])\n";
    let (code, r) = run(&py, &["--vary", "threads=1,3", "--runs", "2"], src);
    assert_eq!(code, Some(1), "{r}");
    let varied = &r["cases"][0]["program"]["varied"]["OMP_NUM_THREADS"];
    assert_eq!(varied, &serde_json::json!(["1", "3"]), "{r}");
    assert_eq!(r["controls"]["thread_pair"], serde_json::json!([1, 3]));
    let o = bitexact(&["run", "--vary", "threads=2", "--", &py, "-c", "pass"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("give two counts"));
}
