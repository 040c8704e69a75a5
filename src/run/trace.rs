//! `bitexact run --trace ops`: op traces of unmodified PyTorch programs. bitexact writes a
//! `sitecustomize.py` (`python/bitexact/_sitecustomize.py`, embedded in the binary) into
//! `ROOT/.bitexact-inject/`, beside every run's `$BITEXACT_OUT`, and puts that directory first
//! on the program's `PYTHONPATH` with `BITEXACT_TRACE=ops`. Python runs it at start-up: it
//! starts the tracer of the installed `bitexact` package (`bitexact._trace`, which needs the
//! package's native digests) and then runs the `sitecustomize` it shadows, if any. The tracer
//! writes `$BITEXACT_OUT/.bitexact-trace-rank<R>.jsonl` ([`crate::trace::program`]); the
//! harness aligns two runs' streams by identity and names the first op whose output differs
//! while its inputs matched ([`crate::trace::first_divergence`]).
//!
//! The script's own seeding is left alone; a Python that cannot import `bitexact` prints why
//! on standard error and runs untraced (the report then compares files only).

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// The `sitecustomize.py` the program's Python runs first.
const SITECUSTOMIZE: &str = include_str!("../../python/bitexact/_sitecustomize.py");

/// The directory put first on `PYTHONPATH` for the runs whose `$BITEXACT_OUT` is `out`.
pub fn inject_dir(out: &Path) -> PathBuf {
    out.with_file_name(".bitexact-inject")
}

/// Writes the injected `sitecustomize.py` under `root` (the directory holding `out`).
pub fn write_inject_dir(root: &Path) -> Result<()> {
    let dir = inject_dir(&root.join("out"));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    crate::atomic::write_atomically(&dir.join("sitecustomize.py"), SITECUSTOMIZE.as_bytes())
}
