//! The project file: settings of `bitexact run` that CI and users share, so they are not
//! repeated on every command line. Found the way Python tools find theirs (as ruff does): the
//! nearest of the current directory and its parents holding `bitexact.toml`, or a
//! `pyproject.toml` with a `[tool.bitexact]` table; `--config FILE` names one instead.
//!
//! ```toml
//! # bitexact.toml                      # or, in pyproject.toml: [tool.bitexact.run]
//! [run]
//! runs = 3
//! vary = "threads,hashseed"
//! ignore = ["logs/*", "ckpt.pt:optimizer.*"]
//! stdout = true
//! stdout-ignore = ['[0-9.]+ ms/batch']
//! timeout = 600
//! ```
//!
//! Flags win over the file; the ignore lists of both apply. Unknown keys are errors naming the
//! file and the key, before any run (exit 2).

use anyhow::{anyhow, Context, Result};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// Largest project file read.
const MAX_BYTES: u64 = 1 << 20;

/// The `[run]` settings of a project file.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RunSection {
    /// Runs of the program.
    pub runs: Option<usize>,
    /// Variations, as `--vary` takes them.
    pub vary: Option<String>,
    /// Output globs to leave out.
    #[serde(default)]
    pub ignore: Vec<String>,
    /// Compare standard output.
    pub stdout: Option<bool>,
    /// Regular expressions masked in standard output.
    #[serde(default)]
    pub stdout_ignore: Vec<String>,
    /// Seconds before a run is killed.
    pub timeout: Option<f64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    run: RunSection,
}

#[derive(Deserialize)]
struct Pyproject {
    tool: Option<Tool>,
}

#[derive(Deserialize)]
struct Tool {
    bitexact: Option<File>,
}

/// A project file that was found and read.
#[derive(Clone, Debug, PartialEq)]
pub struct Project {
    /// Where it was read from.
    pub path: PathBuf,
    /// Its `run` settings.
    pub run: RunSection,
}

/// Reads the project file at `path` (`bitexact.toml`, or any `pyproject.toml`). A
/// `pyproject.toml` without a `[tool.bitexact]` table gives `None`.
pub fn read(path: &Path) -> Result<Option<Project>> {
    let bytes = crate::atomic::read_regular(path, MAX_BYTES)?;
    let text = String::from_utf8(bytes).map_err(|_| anyhow!("{}: not UTF-8", path.display()))?;
    let is_pyproject = path.file_name().is_some_and(|n| n == "pyproject.toml");
    let file = if is_pyproject {
        let p: Pyproject = toml::from_str(&text)
            .with_context(|| format!("{}: not a valid pyproject.toml", path.display()))?;
        match p.tool.and_then(|t| t.bitexact) {
            Some(f) => f,
            None => return Ok(None),
        }
    } else {
        toml::from_str(&text).map_err(|e| anyhow!("{}: {}", path.display(), e.message()))?
    };
    Ok(Some(Project {
        path: path.to_path_buf(),
        run: file.run,
    }))
}

/// The nearest project file from `dir` upwards (`bitexact.toml` first in each directory, then
/// a `pyproject.toml` with a `[tool.bitexact]` table).
pub fn discover(dir: &Path) -> Result<Option<Project>> {
    for d in dir.ancestors() {
        for name in ["bitexact.toml", "pyproject.toml"] {
            let p = d.join(name);
            if p.is_file() {
                if let Some(found) = read(&p)? {
                    return Ok(Some(found));
                }
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitexact_toml_and_pyproject_tables() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("a/b");
        std::fs::create_dir_all(&sub).unwrap();
        assert_eq!(discover(&sub).unwrap(), None);
        std::fs::write(
            dir.path().join("pyproject.toml"),
            "[project]\nname='x'\n[tool.bitexact.run]\nruns = 3\nignore = ['logs/*']\n",
        )
        .unwrap();
        let p = discover(&sub).unwrap().unwrap();
        assert_eq!(
            (p.run.runs, p.run.ignore.clone()),
            (Some(3), vec!["logs/*".to_string()])
        );
        std::fs::write(
            dir.path().join("a/bitexact.toml"),
            "[run]\nstdout = true\nstdout-ignore = ['ms/batch']\n",
        )
        .unwrap();
        let p = discover(&sub).unwrap().unwrap();
        assert!(p.path.ends_with("a/bitexact.toml"));
        assert_eq!(p.run.stdout, Some(true));
        // A pyproject.toml without the table is not a project file.
        std::fs::write(dir.path().join("a/bitexact.toml"), "").unwrap();
        std::fs::remove_file(dir.path().join("a/bitexact.toml")).unwrap();
        std::fs::write(dir.path().join("a/pyproject.toml"), "[project]\nname='y'\n").unwrap();
        assert!(discover(&sub)
            .unwrap()
            .unwrap()
            .path
            .ends_with("pyproject.toml"));
        assert_eq!(
            discover(&sub).unwrap().unwrap().path,
            dir.path().join("pyproject.toml")
        );
    }

    #[test]
    fn unknown_keys_and_bad_values_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("bitexact.toml");
        std::fs::write(&f, "[run]\nrunz = 3\n").unwrap();
        let e = format!("{:#}", read(&f).unwrap_err());
        assert!(e.contains("bitexact.toml") && e.contains("runz"), "{e}");
        std::fs::write(&f, "[run]\nruns = 'three'\n").unwrap();
        assert!(format!("{:#}", read(&f).unwrap_err()).contains("bitexact.toml"));
    }
}
