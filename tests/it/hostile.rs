//! Hostile programs: what a program does under `$BITEXACT_OUT`, or beside it, must
//! never make bitexact fail or hide why a run failed.

use crate::common;

/// The failure of a `bitexact run --format json -- sh -c SCRIPT`: its message.
fn failure_of(script: &str) -> String {
    let o = common::bitexact(&["run", "--format", "json", "--", "sh", "-c", script]);
    let j = common::json(&o);
    assert_eq!(o.status.code(), Some(1), "{j}");
    let f = &j["cases"][0]["evidence"]["failure"];
    f["message"]
        .as_str()
        .expect("a failure message")
        .to_string()
}

/// A directory nested past PATH_MAX (4 000 characters): reading it fails with
/// `File name too long`. The failure message shortens the long path in the middle and keeps
/// the cause, which a message cut at 2 KiB in the middle of the path would lose.
#[test]
fn a_path_too_long_to_read_keeps_its_cause() {
    let script = r#"cd "$BITEXACT_OUT"; echo x > top.bin
d=$(printf 'd%.0s' $(seq 200))
for i in $(seq 25); do mkdir $d && cd $d || exit 0; done"#;
    let m = failure_of(script);
    assert!(m.len() < 1000, "{} bytes: {m}", m.len());
    assert!(m.ends_with("File name too long (os error 36)"), "{m}");
    assert!(m.contains("/run-0/dddd") && m.contains(" bytes]…"), "{m}");
}

/// The program's own error quotes the long path (`mkdir: cannot create directory '…': File
/// name too long`): each quoted line is shortened in the middle, and its end kept.
#[test]
fn a_programs_error_about_a_long_path_keeps_its_cause() {
    let script = r#"d=$(printf 'd%.0s' $(seq 200)); p="$BITEXACT_OUT"
for i in $(seq 25); do p="$p/$d"; done
mkdir -p "$p""#;
    let m = failure_of(script);
    assert!(m.len() < 1000, "{} bytes: {m}", m.len());
    assert!(m.contains("File name too long"), "{m}");
}

/// Run 0 takes the names bitexact gives run 1's outputs beside `$BITEXACT_OUT` (`run-1`, and
/// `run-1.stdout` as a link to a file of the user's); blame's hidden `.pass<p>-run-<i>` too.
const SQUAT: &str = r#"echo x > "$BITEXACT_OUT/a.bin"; echo hi; R=$(dirname "$BITEXACT_OUT")
if [ "$BITEXACT_RUN" = 0 ]; then
  mkdir -p "$R/run-1"; echo junk > "$R/run-1/j"; ln -s "$VICTIM" "$R/run-1.stdout"
  for p in 2 3 4 5 6; do for i in 0 1 2 3; do mkdir -p "$R/.pass$p-run-$i"; done; done
fi"#;

/// `bitexact run` with `$VICTIM` naming `victim` (a file of the user's the program links to).
fn squatted(args: &[&str], victim: &std::path::Path) -> (Option<i32>, serde_json::Value) {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_bitexact"));
    cmd.args(["run", "--stdout", "--format", "json"]).args(args);
    cmd.args(["--", "sh", "-c", SQUAT]).env("VICTIM", victim);
    let o = cmd.output().unwrap();
    (o.status.code(), common::json(&o))
}

#[test]
fn names_a_program_took_beside_its_output_directory_are_never_used() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim.txt");
    std::fs::write(&victim, "mine").unwrap();
    let (code, j) = squatted(&[], &victim);
    assert_eq!(code, Some(0), "{j}");
    assert_eq!(j["cases"][0]["verdict"], "deterministic", "{j}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "mine");

    // --keep DIR promises DIR/run-<i>: run 1's outputs go to a fresh name, and a note says so.
    let keep = dir.path().join("kept");
    let (code, j) = squatted(&["--keep", keep.to_str().unwrap()], &victim);
    assert_eq!(code, Some(0), "{j}");
    assert_eq!(
        std::fs::read_to_string(keep.join("run-0/a.bin")).unwrap(),
        "x\n"
    );
    let notes = j["cases"][0]["notes"].to_string();
    let moved = std::fs::read_dir(&keep)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .find(|n| n.starts_with("run-1-") && !n.ends_with(".stdout"))
        .expect("run 1 kept under a fresh name");
    assert!(notes.contains(&format!(
        "run 1's outputs are in {}",
        keep.join(&moved).display()
    )));
    assert_eq!(
        std::fs::read_to_string(keep.join(moved).join("a.bin")).unwrap(),
        "x\n"
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "mine");
}

#[test]
fn blames_hidden_run_names_taken_by_the_program_are_never_used() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim.txt");
    // Differs run to run, so blame's passes are made (into the hidden names run 0 took).
    std::fs::write(&victim, "mine").unwrap();
    let script = SQUAT.replace("echo x >", "echo $BITEXACT_RUN >");
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_bitexact"));
    cmd.args([
        "run", "--vary", "threads", "--format", "json", "--", "sh", "-c", &script,
    ]);
    let o = cmd.env("VICTIM", &victim).output().unwrap();
    let j = common::json(&o);
    let case = &j["cases"][0];
    assert_eq!(case["verdict"], "nondeterministic", "{j}");
    let blame = &case["blame"];
    assert_eq!(blame["reproducible_when_fixed"], false, "{j}");
    assert!(case["evidence"]["failure"].is_null(), "{j}");
}
