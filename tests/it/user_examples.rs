//! Code written the way a user of the crate writes it, compiled into this binary and run:
//! - [`guide`]: the example of the Rust tests guide (`docs/guides/rust-tests.md`), extracted
//!   verbatim by `build.rs` (its snapshot test is ignored: that snapshot belongs in the user's
//!   crate);
//! - [`hashmap`]: the tests of the example user crate (`examples/user_crate/tests/hashmap.rs`),
//!   which prove that a process-global `HashMap` bug is caught through
//!   `check(..).vary(&[Variation::Process])` and that a crashing case becomes an error. Their
//!   `user_crate::…` is the crate's library (`examples/user_crate/src/lib.rs`), mounted at the
//!   root of this binary (`tests/it/main.rs`).
//!
//! The same crate built out of tree, as a user builds it (bitexact as its only
//! dev-dependency, its own target directory), is a separate, optional check:
//! `cargo test --test it -- --ignored user_examples::out_of_tree` (`ci/user-crate.sh`).

/// The Rust tests guide's example.
mod guide {
    include!(concat!(env!("OUT_DIR"), "/rust_tests_guide.rs"));
}

/// The same example as text, for the out-of-tree build (one extraction, `build.rs`'s).
const GUIDE_EXAMPLE: &str = include_str!(concat!(env!("OUT_DIR"), "/rust_tests_guide.rs"));

#[path = "../../examples/user_crate/tests/hashmap.rs"]
mod hashmap;

use std::path::{Path, PathBuf};
use std::process::Command;

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let name = e.file_name();
        if name == "target" || name == "Cargo.lock" {
            continue;
        }
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(&name));
        } else {
            std::fs::copy(e.path(), to.join(&name)).unwrap();
        }
    }
}

/// The user crate and the guide's example built out of tree, as a user would build them.
#[test]
#[ignore = "builds the crate a second time (minutes): run by ci/user-crate.sh"]
fn out_of_tree_build() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let scratch = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("user_crate");
    let _ = std::fs::remove_dir_all(scratch.join("src"));
    let _ = std::fs::remove_dir_all(scratch.join("tests"));
    copy_dir(&root.join("examples/user_crate"), &scratch);
    let manifest = std::fs::read_to_string(scratch.join("Cargo.toml"))
        .unwrap()
        .replace(
            "path = \"../..\"",
            &format!("path = {:?}", root.display().to_string()),
        );
    std::fs::write(scratch.join("Cargo.toml"), manifest).unwrap();
    // The same dependency versions as bitexact itself, so no resolution is needed.
    if !scratch.join("Cargo.lock").exists() {
        std::fs::copy(root.join("Cargo.lock"), scratch.join("Cargo.lock")).unwrap();
    }
    std::fs::write(scratch.join("tests/readme.rs"), GUIDE_EXAMPLE).unwrap();
    let snaps = scratch.join("snapshots");
    let _ = std::fs::remove_dir_all(&snaps);

    let mut cmd = Command::new(env!("CARGO"));
    cmd.current_dir(&scratch)
        .args(["test", "--quiet", "--", "--nocapture", "--skip", "snapshot"])
        .env("CARGO_TARGET_DIR", scratch.join("target"))
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET_DIR");
    for var in ["SEED", "DETERMINISTIC", "BENCHMARK", "WORKERS", "THREADS"] {
        cmd.env_remove(format!("BITEXACT_{var}"));
    }
    let o = cmd.output().expect("run cargo test in the user crate");
    let out = String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "user crate tests failed:\n{out}");
    assert!(
        out.contains("CAUGHT user_crate/weighted_total: breaks when varying: process"),
        "{out}"
    );
    assert!(out.contains("ISOLATED user_crate/crashes"), "{out}");
    // readme.rs (2 of its 3 tests; the snapshot one is skipped) and hashmap.rs (3).
    let passed: usize = out
        .lines()
        .filter_map(|l| l.strip_prefix("test result: ok. "))
        .filter_map(|l| l.split(' ').next()?.parse::<usize>().ok())
        .sum();
    assert_eq!(passed, 5, "{out}");
}
