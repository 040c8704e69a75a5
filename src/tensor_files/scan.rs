//! Walking an output directory.
//!
//! Symlinks: a link to a regular file inside the directory is an output under the link's own
//! name (read through its resolved target); a link to a directory is not descended (its files
//! are outputs under their real paths already, and cycles are impossible); a link that
//! dangles or resolves outside the directory is an error, never silently skipped. Special
//! files (FIFOs, sockets, devices) are errors too. Names must be UTF-8.

use super::{natural_cmp, FileKind, OutputFile};
use crate::protocol::METADATA_PREFIX;
use crate::quote::{self, MAX_PATH};
use anyhow::{bail, Context, Result};
use std::fs;
use std::path::{Path, PathBuf};

/// Every regular file under `dir`: (outputs, `.bitexact-*` metadata files), each sorted
/// naturally by name.
pub(crate) fn walk(dir: &Path) -> Result<(Vec<OutputFile>, Vec<OutputFile>)> {
    let root = dir
        .canonicalize()
        .with_context(|| format!("output directory {}", quote::path(dir)))?;
    if !root.is_dir() {
        bail!("output directory {} is not a directory", quote::path(dir));
    }
    let (mut outputs, mut meta) = (Vec::new(), Vec::new());
    let mut todo: Vec<(PathBuf, String)> = vec![(root.clone(), String::new())];
    while let Some((path, prefix)) = todo.pop() {
        let entries =
            fs::read_dir(&path).with_context(|| format!("reading {}", quote::path(&path)))?;
        for entry in entries {
            let entry = entry.with_context(|| format!("reading {}", quote::path(&path)))?;
            let base = entry.file_name().into_string().map_err(|n| {
                let name = format!("{prefix}{}", n.to_string_lossy());
                anyhow::anyhow!("{}: file name is not UTF-8", quote::middle(&name, MAX_PATH))
            })?;
            let name = format!("{prefix}{base}");
            let ty = entry
                .file_type()
                .with_context(|| format!("{}: reading its type", quote::middle(&name, MAX_PATH)))?;
            // Sized exactly: 100 000 outputs hold 100 000 of these paths.
            let mut target = PathBuf::with_capacity(path.as_os_str().len() + 1 + base.len());
            target.push(&path);
            target.push(&base);
            if ty.is_symlink() {
                target = match fs::canonicalize(&target) {
                    Ok(t) if t.starts_with(&root) => t,
                    Ok(t) => bail!(
                        "{}: symlink points outside the output directory (to {})",
                        quote::middle(&name, MAX_PATH),
                        quote::path(&t)
                    ),
                    Err(e) => bail!("{}: dangling symlink ({e})", quote::middle(&name, MAX_PATH)),
                };
                if target.is_dir() {
                    continue;
                }
            } else if ty.is_dir() {
                todo.push((target, format!("{name}/")));
                continue;
            }
            let md = fs::metadata(&target)
                .with_context(|| format!("{}: reading metadata", quote::middle(&name, MAX_PATH)))?;
            if !md.is_file() {
                bail!("{}: not a regular file", quote::middle(&name, MAX_PATH));
            }
            let file = OutputFile {
                kind: FileKind::of(&base),
                name,
                path: target,
                len: md.len(),
                modified: md.modified().ok(),
            };
            if base.starts_with(METADATA_PREFIX) {
                meta.push(file);
            } else {
                outputs.push(file);
            }
        }
    }
    // Names are unique: an unstable sort gives the same order, without a stable sort's
    // scratch copy of the list.
    outputs.sort_unstable_by(|a, b| natural_cmp(&a.name, &b.name));
    meta.sort_unstable_by(|a, b| natural_cmp(&a.name, &b.name));
    Ok((outputs, meta))
}
