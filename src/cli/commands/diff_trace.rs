//! `bitexact diff-trace A B`: compare two trace files and name the first diverging op.

use crate::cli::usage::usage;
use crate::trace::{self, TraceFile};
use anyhow::Result;
use std::path::Path;

/// Exit 0 when every case in either file has identical traces, 1 when any differs or is in one
/// file only, 2 when a file is unreadable or not a valid trace file (version, duplicates).
/// Program op traces (`bitexact run --trace ops --keep DIR`: a run directory or its
/// `.bitexact-trace-rank<R>.jsonl`) are compared the same way, with the same answer.
pub(crate) fn diff_trace(a: &Path, b: &Path) -> Result<u8> {
    let program = |p: &Path| p.is_dir() || p.extension().is_some_and(|x| x == "jsonl");
    if program(a) || program(b) {
        return diff_program_traces(a, b);
    }
    let load = |p: &Path| TraceFile::load(p).map_err(|e| usage(format!("{e:#}")));
    let (ta, tb) = (load(a)?, load(b)?);
    let diffs = trace::diff_files(&ta, &tb);
    if diffs.is_empty() {
        println!("no traced cases in either file");
    }
    let mut differing = 0;
    for (name, backend, d) in diffs {
        match d {
            None => println!("{name} [{backend}]: identical traces"),
            Some(d) => {
                differing += 1;
                println!("{name} [{backend}]: {}", d.explanation);
            }
        }
    }
    Ok(u8::from(differing > 0))
}

/// Compares two programs' op traces (each a kept run directory or its `.jsonl`).
fn diff_program_traces(a: &Path, b: &Path) -> Result<u8> {
    let load = |p: &Path| -> Result<Vec<trace::TraceEntry>> {
        let t = if p.is_dir() {
            trace::program::read_dir(p)?.ok_or_else(|| {
                anyhow::anyhow!(
                    "{}: no {}<R>.jsonl in it (keep runs with `bitexact run --trace ops --keep DIR`)",
                    p.display(),
                    crate::protocol::TRACE_FILE_PREFIX
                )
            })?
        } else {
            trace::program::read_jsonl(p)?
        };
        Ok(t)
    };
    let bad = |e: anyhow::Error| usage(format!("{e:#}"));
    let (ta, tb) = (load(a).map_err(bad)?, load(b).map_err(bad)?);
    Ok(match trace::first_divergence(&ta, &tb) {
        None => {
            println!("identical op traces ({} op calls)", ta.len());
            0
        }
        Some(d) => {
            println!("{}", d.explanation);
            1
        }
    })
}
