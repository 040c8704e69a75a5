//! Tests of the checkpoint [`super::Detector`]: which completions are checkpoints, and when
//! a file or a directory is complete.

use super::*;

fn file(n: &str) -> Event {
    Event::File(n.into())
}

fn dir(n: &str, moved: bool) -> Event {
    Event::Dir {
        name: n.into(),
        moved,
    }
}

fn run(m: Matcher, events: &[Event]) -> Detector {
    let mut d = Detector::new(m);
    for (i, e) in events.iter().enumerate() {
        d.event(e, i as f64);
    }
    d
}

fn names(d: &Detector) -> Vec<(&str, usize)> {
    d.completed
        .iter()
        .map(|c| (c.name.as_str(), c.steps))
        .collect()
}

#[test]
fn a_file_counts_when_closed_and_a_temporary_one_when_renamed_into_place() {
    let state = ".bitexact-state-rank0.jsonl";
    let d = run(
        Matcher::default(),
        &[
            file(state),
            file("step_0000.npy"),
            file(state),
            file("ckpt.pt.tmp"), // closed, not yet in place
            file("ckpt.pt"),     // the rename
            file(state),
            file("model_checkpoint.safetensors"),
        ],
    );
    assert_eq!(
        names(&d),
        [("ckpt.pt", 2), ("model_checkpoint.safetensors", 3)]
    );
    assert_eq!(d.steps, 3);
    assert_eq!(d.others, ["step_0000.npy", "ckpt.pt.tmp"]); // a temporary file is named too
}

#[test]
fn a_directory_created_in_place_completes_when_the_program_writes_outside_it() {
    let d = run(
        Matcher::default(),
        &[
            dir("out", false),
            dir("out/checkpoint-4", false),
            file("out/checkpoint-4/model.safetensors"),
            file("out/checkpoint-4/optimizer.pt"),
            dir("out/checkpoint-4/sub", false),
            file("out/checkpoint-4/sub/checkpoint.json"), // part of it, not one more
            file(".bitexact-state-rank0.jsonl"),          // the next step: gone on
            dir("out/checkpoint-8", false),
            file("out/checkpoint-8/model.safetensors"),
        ],
    );
    assert_eq!(names(&d), [("out/checkpoint-4/", 0)]);
    assert!(d
        .seen(2)
        .starts_with("2 wanted, 1 seen; out/checkpoint-8 never followed"));
}

#[test]
fn an_empty_directory_is_not_complete_and_a_renamed_one_is_at_once() {
    let d = run(
        Matcher::default(),
        &[
            dir("checkpoint-1", false),
            file("log.txt"), // before anything was written into it
            dir("tmp-checkpoint-2", false),
            file("tmp-checkpoint-2/checkpoint.pt"), // inside a temporary directory
            dir("checkpoint-2", true),
            Event::Listed("checkpoint-2/checkpoint.pt".into()), // found when it landed
        ],
    );
    assert_eq!(names(&d), [("checkpoint-2/", 0)]);
}

#[test]
fn a_new_sibling_directory_completes_the_last_and_a_container_is_not_one() {
    let d = run(
        Matcher::default(),
        &[
            dir("checkpoint-3", false),
            file("checkpoint-3/w.npy"),
            dir("checkpoint-6", false), // nothing written outside: the next one began
            file("checkpoint-6/w.npy"),
        ],
    );
    assert_eq!(names(&d), [("checkpoint-3/", 0)]);
    // Lightning's `checkpoints/epoch=N.ckpt`: the folder holds checkpoints.
    let d = run(
        Matcher::default(),
        &[
            dir("lightning_logs/version_0/checkpoints", false),
            file("lightning_logs/version_0/checkpoints/epoch=0.ckpt"),
            file("lightning_logs/version_0/checkpoints/epoch=1.ckpt"),
        ],
    );
    assert_eq!(
        names(&d),
        [
            ("lightning_logs/version_0/checkpoints/epoch=0.ckpt", 0),
            ("lightning_logs/version_0/checkpoints/epoch=1.ckpt", 0)
        ]
    );
}

#[test]
fn a_file_found_in_a_new_directory_waits_for_its_close_or_the_next_write() {
    let listed = |n: &str| Event::Listed(n.into());
    // Still open when found: counted at its close, once.
    let d = run(
        Matcher::default(),
        &[
            dir("out", false),
            listed("out/ckpt_1.pt"),
            file("out/ckpt_1.pt"),
        ],
    );
    assert_eq!(names(&d), [("out/ckpt_1.pt", 0)]);
    // Closed before bitexact watched its directory: counted when the program goes on.
    let d = run(
        Matcher::default(),
        &[dir("out", false), listed("out/ckpt_1.pt")],
    );
    assert!(d.completed.is_empty());
    let d = run(
        Matcher::default(),
        &[
            dir("out", false),
            listed("out/ckpt_1.pt"),
            file("out/log.txt"),
        ],
    );
    assert_eq!(names(&d), [("out/ckpt_1.pt", 0)]);
}

#[test]
fn a_glob_matches_the_path_or_the_name() {
    let by_name = Matcher {
        glob: Some("state_*.bin".into()),
    };
    assert!(by_name.matches("a/b/state_3.bin"));
    assert!(!by_name.matches("ckpt.pt"));
    assert!(!by_name.matches("state_3.bin.partial"));
    let by_path = Matcher {
        glob: Some("saves/*.pt".into()),
    };
    assert!(by_path.matches("saves/e1.pt") && !by_path.matches("e1.pt"));
    assert!(Matcher::default().matches("run/Model_CKPT_3"));
    assert!(!Matcher::default().matches("weights.safetensors"));
}

#[test]
fn nothing_seen_is_said_with_what_the_program_wrote() {
    let d = run(
        Matcher::default(),
        &[file("step_0001.safetensors"), file("step_0002.safetensors")],
    );
    assert_eq!(
        d.seen(1),
        "1 wanted, 0 seen; the program wrote step_0001.safetensors, step_0002.safetensors"
    );
}

#[test]
fn a_checkpoint_begun_after_the_last_complete_one_is_named_until_it_completes() {
    let opened = |n: &str| Event::Opened(n.into());
    let d = run(
        Matcher::default(),
        &[
            opened("step_0000.npy"),
            file("step_0000.npy"),
            opened("ckpt.pt"),
            file("ckpt.pt"),
            opened("ckpt.pt"), // the next save, cut short
        ],
    );
    assert_eq!(names(&d), [("ckpt.pt", 0)]);
    assert_eq!(d.begun.as_deref(), Some("ckpt.pt"));
    // A directory: begun when created, named by itself, done when the program goes on.
    let mut events = vec![dir("checkpoint-3", false)];
    events.extend([opened("checkpoint-3/w.npy"), file("checkpoint-3/w.npy")]);
    events.extend([file("step_0003.npy"), dir("checkpoint-6", false)]);
    events.push(opened("checkpoint-6/w.npy"));
    let d = run(Matcher::default(), &events);
    assert_eq!(names(&d), [("checkpoint-3/", 0)]);
    assert_eq!(d.begun.as_deref(), Some("checkpoint-6/"));
    // A temporary file is not a checkpoint begun: the published name is untouched.
    let d = run(
        Matcher::default(),
        &[file("ckpt.pt"), opened("ckpt.pt.tmp")],
    );
    assert_eq!(d.begun, None);
}
