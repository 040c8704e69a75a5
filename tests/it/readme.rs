//! The README's commands run as written: every fenced block whose info string is
//! `sh runnable` (optionally `exit=N`, the status it must end with; default 0) is run by bash
//! (`-e`), in the repository root, with the built `bitexact` and CI's Python (`python`,
//! `python3`) first on `PATH`. Blocks not marked runnable are the install command (tested by
//! `ci/wheel.sh`, which installs the built wheel where no Rust is) and the two commands CI
//! itself runs (`ci/test.sh`, and the report in `ci/snapshots.sh`).
//!
//! `readme_links_resolve` checks that every relative link of the README names a file of the
//! checkout (the docs site's own links are checked by `mkdocs build --strict`, ci/docs.sh).
//!
//! Skipped, saying so, without a Python that has numpy and the installed bitexact package
//! (run ci/python.sh).

use crate::common;

use std::path::Path;
use std::process::Command;

/// One runnable block: its commands and the exit status it must end with.
#[derive(Debug, PartialEq)]
struct Block {
    script: String,
    exit: i32,
}

/// The runnable blocks of a Markdown text.
fn runnable_blocks(markdown: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut lines = markdown.lines();
    while let Some(line) = lines.next() {
        let Some(info) = line.strip_prefix("```") else {
            continue;
        };
        let words: Vec<&str> = info.split_whitespace().collect();
        let body: Vec<&str> = lines
            .by_ref()
            .take_while(|l| !l.starts_with("```"))
            .collect();
        if words.first() != Some(&"sh") || !words.contains(&"runnable") {
            continue;
        }
        let exit = words
            .iter()
            .find_map(|w| w.strip_prefix("exit="))
            .map(|n| n.parse().expect("exit=N is a number"))
            .unwrap_or(0);
        blocks.push(Block {
            script: body.join("\n") + "\n",
            exit,
        });
    }
    blocks
}

#[test]
fn blocks_are_found_with_their_exit_status() {
    let md = "x\n```sh runnable\na\nb\n```\n```sh\nno\n```\n```text\nout\n```\n\
              ```sh runnable exit=1\nc\n```\n";
    assert_eq!(
        runnable_blocks(md),
        [
            Block {
                script: "a\nb\n".into(),
                exit: 0
            },
            Block {
                script: "c\n".into(),
                exit: 1
            },
        ]
    );
}

#[test]
fn readme_commands_run_as_written() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let blocks = runnable_blocks(&readme);
    assert!(blocks.len() >= 3, "the README has runnable blocks");
    let Some(python) = common::python_with(&["numpy", "bitexact._native"]) else {
        common::tool_missing(
            "readme_commands_run_as_written",
            "no Python with numpy and the installed bitexact package (run ci/python.sh)",
        );
        return;
    };
    // A directory first on PATH: the built `bitexact`, and `python`/`python3` running CI's
    // Python (a wrapper, not a link, so a venv's interpreter still finds its venv).
    let bin = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_bitexact"), bin.path().join("bitexact"))
        .unwrap();
    for name in ["python", "python3"] {
        let p = bin.path().join(name);
        std::fs::write(&p, format!("#!/bin/sh\nexec '{python}' \"$@\"\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for b in blocks {
        let mut cmd = Command::new("bash");
        cmd.args(["-e", "-c", &b.script])
            .current_dir(root)
            .env("PATH", &path);
        for var in ["SEED", "DETERMINISTIC", "BENCHMARK", "WORKERS", "THREADS"] {
            cmd.env_remove(format!("BITEXACT_{var}"));
        }
        let out = cmd.output().expect("bash runs");
        assert_eq!(
            out.status.code(),
            Some(b.exit),
            "README block\n{}exited {:?}, not {}\nstdout:\n{}\nstderr:\n{}",
            b.script,
            out.status.code(),
            b.exit,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn readme_links_resolve() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let link = regex::Regex::new(r"\]\(([^)#\s]+)(#[^)]*)?\)").unwrap();
    let mut seen = 0;
    for c in link.captures_iter(&readme) {
        let target = &c[1];
        if target.contains("://") {
            continue;
        }
        seen += 1;
        assert!(
            root.join(target).exists(),
            "README links to {target}, which does not exist"
        );
    }
    assert!(seen >= 10, "the README links into the docs ({seen} links)");
}

/// The README is about a screen; everything else lives in the docs site.
#[test]
fn readme_is_at_most_150_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lines = std::fs::read_to_string(root.join("README.md"))
        .unwrap()
        .lines()
        .count();
    assert!(
        lines <= 150,
        "README.md has {lines} lines (at most 150: move text into docs/)"
    );
}
