//! Snapshot files from the outside: the `.snap` format against insta's own reader and writer
//! and against random input, what a user sees when the first `assert_snapshot()` of a new crate
//! fails, and what `bitexact snapshot review` does with bad input and in CI.

use bitexact::cases;
use bitexact::platform::Platform;
use bitexact::snapshot::format::is_digest;
use bitexact::snapshot::Snapshot;
use proptest::prelude::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A snapshot as this machine records it, with two tensors (one name needs YAML quoting in
/// nothing but the body).
fn snapshot() -> Snapshot {
    let mut info = vec![
        ("case".to_string(), "kernel/test/small".to_string()),
        ("backend".to_string(), "cpu".to_string()),
        (
            "controls".to_string(),
            "seed 0, deterministic: on".to_string(),
        ),
    ];
    info.extend(
        Platform::detect()
            .fields()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v)),
    );
    Snapshot {
        run: "ab".repeat(32),
        tensors: [("x", "11"), ("y: z", "22")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.repeat(32)))
            .collect(),
        description: "bitexact digests of kernel/test/small on cpu (seed0-det)".into(),
        info,
    }
}

fn committed() -> Vec<std::path::PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("snapshots");
    let mut v = Vec::new();
    for class in std::fs::read_dir(dir).unwrap() {
        for f in std::fs::read_dir(class.unwrap().path()).unwrap() {
            v.push(f.unwrap().path());
        }
    }
    assert!(v.len() >= 12, "{v:?}");
    v
}

#[test]
fn committed_files_load_and_rewrite_byte_for_byte() {
    for f in committed() {
        let text = std::fs::read_to_string(&f).unwrap();
        let s = Snapshot::load(&f).unwrap();
        assert_eq!(s.file_text(), text, "{}", f.display());
        // insta reads the same digests.
        let theirs = insta::Snapshot::from_file(&f).unwrap();
        assert_eq!(theirs.as_text().unwrap().to_string(), s.body(), "{f:?}");
    }
}

#[test]
fn insta_accepts_our_files_byte_for_byte() {
    // `cargo insta accept` loads the `.snap.new` and saves it as `.snap`: the bytes must
    // not change, so accepting through insta or through bitexact gives the same file.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let new = dir.join("x@seed0-det.snap.new");
    let text = snapshot().file_text();
    std::fs::write(&new, &text).unwrap();
    let saved = dir.join("x@seed0-det.snap");
    insta::Snapshot::from_file(&new)
        .unwrap()
        .save(&saved)
        .unwrap();
    let resaved = std::fs::read_to_string(&saved).unwrap();
    assert_eq!(resaved, text);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = Snapshot::from_bytes(&bytes);
    }

    #[test]
    fn truncations_and_bit_flips_never_panic(
        cut in any::<prop::sample::Index>(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), 0u8..8), 0..4),
    ) {
        let text = snapshot().file_text().into_bytes();
        let mut bytes = text[..cut.index(text.len() + 1)].to_vec();
        if !bytes.is_empty() {
            for (at, bit) in flips {
                let i = at.index(bytes.len());
                bytes[i] ^= 1 << bit;
            }
        }
        if let Ok(s) = Snapshot::from_bytes(&bytes) {
            // Whatever parses is a valid snapshot: it writes back and parses the same.
            prop_assert!(is_digest(&s.run) && s.tensors.values().all(|d| is_digest(d)));
            prop_assert_eq!(Snapshot::from_bytes(s.file_text().as_bytes()).unwrap(), s);
        }
    }
}

/// A path that does not exist yet (`.0`, named `tag`) inside a temporary directory removed on
/// drop.
struct Scratch(PathBuf, #[allow(dead_code)] tempfile::TempDir);
impl Scratch {
    fn new(tag: &str) -> Scratch {
        let t = tempfile::tempdir().unwrap();
        Scratch(t.path().join(tag), t)
    }
}

/// Run by [`a_first_assert_snapshot_fails_once_saying_what_was_written`] in a child process:
/// asserts a snapshot into the empty directory `BITEXACT_TEST_SNAPSHOTS`.
#[test]
#[ignore = "run as a child process by a_first_assert_snapshot_fails_once_saying_what_was_written"]
fn child_first_assert_snapshot() {
    let dir = std::env::var("BITEXACT_TEST_SNAPSHOTS").expect("run by the parent test");
    let case = cases::find("kernel/reduce_sum/small").unwrap();
    bitexact::check(case.as_ref())
        .snapshot_dir(dir)
        .assert_snapshot();
}

#[test]
fn a_first_assert_snapshot_fails_once_saying_what_was_written() {
    let s = Scratch::new("first");
    let o = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "snapshot_files::child_first_assert_snapshot",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("BITEXACT_TEST_SNAPSHOTS", &s.0)
        .env_remove("CI")
        .env_remove("TF_BUILD")
        .env_remove("INSTA_UPDATE")
        .env_remove("INSTA_FORCE_PASS")
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap();
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!o.status.success(), "{out}");
    assert_eq!(out.matches("panicked at").count(), 1, "{out}");
    assert!(!out.contains("stored new snapshot"), "{out}");
    assert!(!out.contains("Snapshot Summary"), "{out}");
    let pending = bitexact::snapshot::pending(&s.0);
    assert_eq!(pending.len(), 1, "{out}");
    let p = pending[0].display().to_string();
    assert!(
        out.contains(&format!("wrote the new digests to {p}")),
        "{out}"
    );
    assert!(out.contains("cargo insta review"), "{out}");
    assert!(
        out.contains("bitexact snapshot review --accept --snapshots"),
        "{out}"
    );
    assert!(out.contains(&format!("mv {p} ")), "{out}");
}

fn review(dir: &Path, accept: bool, ci: bool) -> (Option<i32>, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bitexact"));
    cmd.args(["snapshot", "review", "--snapshots"]).arg(dir);
    if accept {
        cmd.arg("--accept");
    }
    if ci {
        cmd.env("CI", "true");
    } else {
        cmd.env_remove("CI").env_remove("TF_BUILD");
    }
    let o = cmd.output().unwrap();
    (
        o.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

#[test]
fn cli_review_refuses_to_accept_in_ci_and_names_a_missing_directory() {
    let s = Scratch::new("review");
    let missing = s.0.join("missing");
    let (code, out) = review(&missing, false, false);
    assert_ne!(code, Some(0), "{out}");
    assert!(out.contains(&missing.display().to_string()), "{out}");

    let pending = s.0.join("cpu-x86_64/x@seed0-det.snap.new");
    std::fs::create_dir_all(pending.parent().unwrap()).unwrap();
    let d = "ab".repeat(32);
    std::fs::write(
        &pending,
        format!("---\ninfo:\n  case: t/x\n---\nrun: {d}\ntensors:\n  y: {d}\n"),
    )
    .unwrap();
    let (code, out) = review(&s.0, true, true);
    assert_ne!(code, Some(0), "{out}");
    assert!(out.contains("refusing to accept snapshots in CI"), "{out}");
    assert!(pending.exists());
    let (code, out) = review(&s.0, true, false);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("t/x: new snapshot") && out.contains("accepted"),
        "{out}"
    );
    assert!(!pending.exists() && s.0.join("cpu-x86_64/x@seed0-det.snap").exists());
}
