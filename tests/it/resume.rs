//! Resume ≡ uninterrupted (`bitexact run --vary resume --resume-with ARGS -- CMD`):
//! a program killed (SIGKILL) right after its Nth checkpoint and relaunched with ARGS in the
//! same `$BITEXACT_OUT` must end exactly as runs 0 and 1, which ran uninterrupted.
//!
//! `tests/fixtures/programs/resume_numpy.py` (numpy only) checkpoints as a file, as a
//! temporary file renamed into place, as a Trainer-shaped directory, or not at all; its planted
//! bugs forget the RNG state or crash while resuming. A correct resume passes (exit 0); a
//! forgotten RNG is `resume-mismatch` (exit 1) with the checkpoint used; no checkpoint and a
//! crashing resumed launch are errors that say why; bad flags are usage errors (exit 2). The
//! killed and the resumed launch are runs of the one planner (`passes`).
//!
//! Needs a Python with numpy (ci/python.sh); says `SKIPPED` without.

use crate::common;

use std::path::Path;

fn fixture() -> String {
    common::fixture_program("resume_numpy.py")
}

/// `bitexact run --vary resume --resume-with=--resume --format json [FLAGS] -- PY FIXTURE
/// ARGS`: (exit code, the case).
fn resume(py: &str, flags: &[&str], args: &[&str]) -> (i32, serde_json::Value) {
    let fixture = fixture();
    let mut all = vec!["run", "--vary", "resume", "--resume-with=--resume"];
    all.extend(["--format", "json"]);
    all.extend(flags);
    all.extend(["--", py, &fixture]);
    all.extend(args);
    let o = common::bitexact(&all);
    let code = o.status.code().unwrap();
    (code, common::json(&o)["cases"][0].clone())
}

fn numpy(test: &str) -> Option<String> {
    let py = common::python_with(&["numpy"]);
    if py.is_none() {
        common::tool_missing(test, "no Python with numpy (run ci/python.sh)");
    }
    py
}

/// The purposes of the runs a case made, each once, in order.
fn passes(case: &serde_json::Value) -> Vec<String> {
    case["passes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| format!("{} {}", p["purpose"].as_str().unwrap(), p["runs"]))
        .collect()
}

#[test]
fn a_correct_resume_passes_and_both_launches_are_planned_runs() {
    let Some(py) = numpy("a_correct_resume_passes") else {
        return;
    };
    let (code, case) = resume(&py, &[], &[]);
    assert_eq!(code, 0, "{case:#}");
    assert_eq!(case["verdict"], "deterministic", "{case:#}");
    let r = &case["program"]["resume"];
    assert_eq!(r["checkpoint"], "ckpt.npz", "{r:#}");
    assert_eq!(r["resumed_with"], serde_json::json!(["--resume"]));
    assert!(r["compared"].as_u64().unwrap() >= 8, "{r:#}");
    assert!(r.get("differing").is_none(), "{r:#}");
    assert_eq!(
        passes(&case),
        [
            "main 2",
            "resume: killed after checkpoint 1 1",
            "resume: resumed launch 1"
        ]
    );
    let notes = case["notes"].to_string();
    assert!(
        notes.contains("right after checkpoint ckpt.npz; resumed with --resume: every one of"),
        "{notes}"
    );
    // Without torch there is no state to name, and the report says so.
    assert!(notes.contains("resume: no state record"), "{notes}");
}

#[test]
fn a_forgotten_rng_is_a_resume_mismatch_naming_the_checkpoint() {
    let Some(py) = numpy("a_forgotten_rng_is_a_resume_mismatch") else {
        return;
    };
    let (code, case) = resume(&py, &["--resume-at", "2"], &["--forget-rng"]);
    assert_eq!(code, 1, "{case:#}");
    assert_eq!(case["verdict"], "resume-mismatch", "{case:#}");
    let r = &case["program"]["resume"];
    assert_eq!(r["checkpoint"], "ckpt.npz", "{r:#}");
    // Killed after the second checkpoint (step 6): steps 0-5 are the killed launch's, equal.
    let first = case["divergence"]["op"].as_str().unwrap();
    assert_eq!(first, "step_0006.npy", "{case:#}");
    let diff = &case["diff"][0];
    assert_eq!(diff["tensor"], "step_0006.npy", "{diff:#}");
    assert_eq!(diff["runs"], serde_json::json!([0, 2]), "{diff:#}");
    // JUnit fails it too.
    let o = common::bitexact(&[
        "run",
        "--vary",
        "resume",
        "--resume-with=--resume",
        "--format",
        "junit",
        "--",
        &py,
        &fixture(),
        "--forget-rng",
    ]);
    let xml = common::stdout(&o);
    assert!(
        xml.contains(r#"failures="1""#) && xml.contains(r#"type="resume-mismatch""#),
        "{xml}"
    );
    let message = case["message"].as_str().unwrap();
    assert!(
        message.starts_with("resume: killed (SIGKILL) ")
            && message.contains("outputs differ from the uninterrupted run's, first step_0006.npy"),
        "{message}"
    );
}

#[test]
fn a_checkpoint_renamed_into_place_counts_at_the_rename() {
    let Some(py) = numpy("a_checkpoint_renamed_into_place_counts_at_the_rename") else {
        return;
    };
    let (code, case) = resume(&py, &[], &["--style", "rename"]);
    assert_eq!(code, 0, "{case:#}");
    assert_eq!(case["program"]["resume"]["checkpoint"], "ckpt.npz");
    // A forgotten RNG is caught the same way.
    let (code, case) = resume(&py, &[], &["--style", "rename", "--forget-rng"]);
    assert_eq!(
        (code, case["verdict"].as_str()),
        (1, Some("resume-mismatch"))
    );
}

#[test]
fn a_directory_checkpoint_completes_when_the_program_writes_outside_it() {
    let Some(py) = numpy("a_directory_checkpoint_completes") else {
        return;
    };
    let (code, case) = resume(&py, &[], &["--style", "dir"]);
    assert_eq!(code, 0, "{case:#}");
    // The kill follows checkpoint-3/ (or, where it landed late, a later one, which the
    // resumed launch then starts from).
    let name = case["program"]["resume"]["checkpoint"].as_str().unwrap();
    assert!(
        name.starts_with("checkpoint-") && name.ends_with('/'),
        "{name}"
    );
    let (code, case) = resume(&py, &[], &["--style", "dir", "--forget-rng"]);
    assert_eq!(
        (code, case["verdict"].as_str()),
        (1, Some("resume-mismatch"))
    );
    // `--checkpoint` picks what counts: here the file the saver writes last into the directory.
    let (code, case) = resume(
        &py,
        &["--checkpoint", "checkpoint-*/gauss.npy"],
        &["--style", "dir"],
    );
    assert_eq!(code, 0, "{case:#}");
    let name = case["program"]["resume"]["checkpoint"].as_str().unwrap();
    assert!(
        name.starts_with("checkpoint-") && name.ends_with("/gauss.npy"),
        "{name}"
    );
}

#[test]
fn no_checkpoint_is_an_error_saying_what_the_program_wrote() {
    let Some(py) = numpy("no_checkpoint_is_an_error") else {
        return;
    };
    let (code, case) = resume(&py, &[], &["--style", "none"]);
    assert_eq!(code, 1, "{case:#}");
    assert_eq!(case["verdict"], "error", "{case:#}");
    let f = &case["evidence"]["failure"];
    assert_eq!(f["kind"], "no-checkpoint", "{f:#}");
    assert_eq!(f["run"], 2, "{f:#}");
    let m = f["message"].as_str().unwrap();
    assert!(
        m.starts_with("no checkpoint matching *ckpt* or *checkpoint* completed (1 wanted, 0 seen; the program wrote step_0000.npy, "),
        "{m}"
    );
    // Two wanted, one written.
    let (_, case) = resume(&py, &["--resume-at", "3"], &["--steps", "7"]);
    let m = case["evidence"]["failure"]["message"].as_str().unwrap();
    assert!(m.contains("(3 wanted, 2 seen;"), "{m}");
}

#[test]
fn a_resumed_launch_that_crashes_is_an_error_with_its_exception() {
    let Some(py) = numpy("a_resumed_launch_that_crashes") else {
        return;
    };
    let (code, case) = resume(&py, &[], &["--crash-on-resume"]);
    assert_eq!(code, 1, "{case:#}");
    assert_eq!(case["verdict"], "error", "{case:#}");
    let m = case["evidence"]["failure"]["message"].as_str().unwrap();
    assert!(
        m.starts_with("the resumed launch (after checkpoint ckpt.npz) failed: exited with status 1: RuntimeError: planted: the resumed launch cannot read its checkpoint"),
        "{m}"
    );
}

#[test]
fn uninterrupted_runs_that_differ_are_nondeterministic_and_resume_is_not_judged() {
    let Some(py) = numpy("uninterrupted_runs_that_differ") else {
        return;
    };
    let script = "import os, numpy as np\n\
                  np.save(os.path.join(os.environ['BITEXACT_OUT'], 'x.npy'), np.random.rand(3))\n\
                  open(os.path.join(os.environ['BITEXACT_OUT'], 'ckpt.bin'), 'wb').write(b'1')\n";
    let o = common::bitexact(&[
        "run",
        "--vary",
        "resume",
        "--resume-with=--resume",
        "--format",
        "json",
        "--",
        &py,
        "-c",
        script,
    ]);
    let case = &common::json(&o)["cases"][0];
    assert_eq!(o.status.code(), Some(1), "{case:#}");
    assert_eq!(case["verdict"], "nondeterministic", "{case:#}");
    assert!(case["notes"]
        .to_string()
        .contains("resume: not checked: the uninterrupted runs differ"));
    assert!(case["program"].get("resume").is_none());
}

#[test]
fn resume_flags_are_checked_before_any_run() {
    let bad = |args: &[&str], want: &str| {
        let o = common::bitexact(args);
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    };
    bad(
        &["run", "--vary", "resume", "--", "true"],
        "--vary resume needs --resume-with ARGS",
    );
    bad(
        &["run", "--resume-with=--resume", "--", "true"],
        "--resume-with needs --vary resume",
    );
    bad(
        &["run", "--checkpoint", "*.pt", "--", "true"],
        "--checkpoint needs --vary resume",
    );
    bad(
        &["run", "--", "true", "{resume}"],
        "{resume} needs --vary resume",
    );
    bad(
        &[
            "run",
            "--vary",
            "resume",
            "--resume-with=--r",
            "--resume-at",
            "0",
            "--",
            "true",
        ],
        "--resume-at must be at least 1",
    );
    bad(
        &[
            "run",
            "--vary",
            "resume",
            "--resume-with",
            "--out 'x",
            "--",
            "true",
        ],
        "--resume-with: ",
    );
    bad(
        &[
            "run",
            "--vary",
            "resume",
            "--resume-with",
            "--r",
            "--resume-at",
            "x",
            "--",
            "true",
        ],
        "--resume-at",
    );
}

/// The resume state of `case`, run with the `--forget` flags `forget`, names the piece `named`
/// (a line that starts so and contains `says`), and no piece of the list but the `forgotten`.
fn only_the_forgotten_pieces_are_named(
    case: &serde_json::Value,
    forget: &str,
    named: &str,
    says: &str,
    forgotten: &[&str],
) {
    let state: Vec<&str> = case["program"]["resume"]["state"]
        .as_array()
        .unwrap_or_else(|| panic!("{forget}: no state named: {case:#}"))
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert!(
        state
            .iter()
            .any(|s| s.starts_with(named) && s.contains(says)),
        "{forget}: {named} {says} not in {state:?}"
    );
    let others = [
        "torch's CPU generator",
        "StepLR",
        "AdamW",
        "GradScaler",
        "numpy",
        "Python's random",
    ];
    let kept = |o: &&&str| !forgotten.iter().any(|f| f.starts_with(**o));
    for other in others.iter().filter(kept) {
        assert!(
            !state.iter().any(|s| s.starts_with(other)),
            "{forget}: {other} named: {state:?}"
        );
    }
}

/// `examples/python/train_resume.py` (PyTorch: AdamW, StepLR, GradScaler, BatchNorm, a
/// shuffling DataLoader, numpy and Python noise) resumes bit for bit, and each piece its
/// `--forget` leaves out is named at the first step after the checkpoint (step 4), from the
/// state record the injected `sitecustomize` makes; the other pieces' records are tested one by
/// one in `python/tests/test_resume_state.py`.
#[test]
fn a_pytorch_resume_names_the_state_the_checkpoint_forgot() {
    let test = "a_pytorch_resume_names_the_state_the_checkpoint_forgot";
    let Some(py) = common::tracer_python(test) else {
        return;
    };
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/python/train_resume.py");
    let example = example.to_str().unwrap();
    let run = |flags: &[&str], forget: &[&str]| {
        let mut args = vec!["run", "--vary", "resume", "--resume-with=--resume"];
        args.extend(["--threads", "1", "--format", "json"]);
        args.extend(flags);
        args.extend(["--", &py, example]);
        args.extend(forget);
        let o = common::bitexact(&args);
        (
            o.status.code().unwrap(),
            common::json(&o)["cases"][0].clone(),
        )
    };
    let (code, case) = run(&[], &[]);
    assert_eq!(code, 0, "{case:#}");
    let r = &case["program"]["resume"];
    assert_eq!(
        (r["checkpoint"].as_str(), r["step"].as_u64()),
        (Some("ckpt.pt"), Some(4))
    );
    assert!(
        case["notes"].to_string().contains(
            "resume: at step 4, the first after the checkpoint, every recorded piece of state agrees"
        ),
        "{case:#}"
    );
    // The state pieces forgotten together, each named, and no piece that was kept; the data
    // position alone: with another piece forgotten, the step's gradients are said to follow
    // from that piece, and the data the step read is not named apart.
    let pieces = [
        (
            "torch-rng",
            "torch's CPU generator",
            "(not restored: save and load torch.get_rng_state())",
        ),
        (
            "scheduler",
            "StepLR: ",
            "last_epoch 0 vs 4 uninterrupted (not restored: save and load scheduler.state_dict())",
        ),
        (
            "optimizer",
            "AdamW: ",
            " pieces only in the uninterrupted run",
        ),
        (
            "data-position",
            "the data the step read (a data position not restored",
            "gradients",
        ),
    ];
    for pair in [&pieces[..3], &pieces[3..]] {
        let forget: Vec<&str> = pair.iter().flat_map(|p| ["--forget", p.0]).collect();
        let (code, case) = run(&[], &forget);
        let which = format!("{forget:?}");
        assert_eq!(
            (code, case["verdict"].as_str()),
            (1, Some("resume-mismatch")),
            "{which}: {case:#}"
        );
        let named: Vec<&str> = pair.iter().map(|p| p.1).collect();
        for (_, name, says) in pair {
            only_the_forgotten_pieces_are_named(&case, &which, name, says, &named);
        }
    }
    // With --trace ops: the first op after the resume that differs, named by its generator.
    let (code, case) = run(&["--trace", "ops"], &["--forget", "torch-rng"]);
    assert_eq!(code, 1, "{case:#}");
    let d = &case["divergence"];
    let text = d["explanation"].as_str().unwrap();
    assert_eq!(d["inputs_matched"], true, "{text}");
    assert!(
        text.starts_with("first divergence: step 4, rank 0, aten::")
            && text.ends_with(
                "inputs identical, generator state differs before the call (torch's default CPU generator): not restored at resume (runs 0 and 1 agreed)"
            ),
        "{text}"
    );
}
