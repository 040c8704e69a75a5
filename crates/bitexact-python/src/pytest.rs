//! What the pytest plugin (`python/bitexact/_pytest/`) needs from the library, so that its
//! checks say what `bitexact run` and `cargo test` say, from the same code:
//! - [`run_report`]: `bitexact run` returning its report rendered both as text (the failing
//!   test's message) and as JSON (the result object), for the driver process of
//!   `bitexact.check(..., isolate=True)` and of the `@pytest.mark.bitexact` marker;
//! - [`explain`]: how two tensors differ ([`bitexact::explain_diff`]), and [`same`]: whether
//!   they are bit for bit the same, for in-process checks;
//! - [`snapshot_check`]: the snapshot assertion of `cargo test`
//!   ([`bitexact::snapshot::check_matches`]): the `.snap` format, platform classes, pending
//!   `.snap.new` and CI rules, for `bitexact.assert_snapshot`.

use crate::Host;
use bitexact::digest::{self, Digest};
use bitexact::outcome::ProgramInfo;
use bitexact::{Backend, CaseReport, Controls, Format, Tensor};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;

/// Runs the command line `argv` (`bitexact run [FLAGS] -- CMD …`, the program name first)
/// with the GIL released and returns `(exit code, text report, JSON report)`; the reports are
/// `None` when nothing was checked (a usage error, printed on standard error). `package` is
/// this package's directory, which `--trace` gives the program's Python. Installs bitexact's
/// stop-signal handlers: call it only in a process of its own (the plugin's driver).
#[pyfunction]
#[pyo3(signature = (argv, package=None))]
pub fn run_report(
    py: Python<'_>,
    argv: Vec<OsString>,
    package: Option<PathBuf>,
) -> (u8, Option<String>, Option<String>) {
    if let Some(dir) = package {
        bitexact::program::tracer::set_own_package(dir);
    }
    crate::fork_safe::detached(py, || match bitexact::cli::run_report(argv) {
        (code, Some(r)) => (
            code,
            Some(bitexact::report::render(Format::Text, &r)),
            Some(bitexact::report::render(Format::Json, &r)),
        ),
        (code, None) => (code, None, None),
    })
}

/// A tensor handed over as `(ptr, nbytes, dtype, shape)`, copied into a [`Tensor`].
fn tensor(item: (usize, usize, String, Vec<usize>)) -> PyResult<Tensor> {
    let h = Host::new(item.0, item.1, &item.2, item.3)?;
    Tensor::from_bytes(h.dtype, &h.shape, h.data().to_vec())
        .map_err(|e| PyValueError::new_err(format!("{e:#}")))
}

/// The one-line explanation of how tensor `b` (run `runs[1]`) differs from `a` (run
/// `runs[0]`), each `(ptr, nbytes, dtype, shape)` as `digests_ptr` takes them:
/// `name: 3/12 elements differ (runs 0 and 1), first at [0, 2] (…), max |Δ| …, max … ULP`.
#[pyfunction]
pub fn explain(
    py: Python<'_>,
    name: &str,
    runs: [usize; 2],
    a: (usize, usize, String, Vec<usize>),
    b: (usize, usize, String, Vec<usize>),
) -> PyResult<String> {
    let (a, b) = (tensor(a)?, tensor(b)?);
    Ok(crate::fork_safe::detached(py, || {
        bitexact::explain_diff(name, runs, &a, &b).summary()
    }))
}

/// Whether two tensors, each `(ptr, nbytes, dtype, shape)` as `digests_ptr` takes them, have
/// the same dtype, shape and bytes: the relation equal canonical digests stand for, decided at
/// memory speed with the GIL released (an in-process check compares each run after the first
/// with run 0 this way, and hashes only run 0).
#[pyfunction]
pub fn same(
    py: Python<'_>,
    a: (usize, usize, String, Vec<usize>),
    b: (usize, usize, String, Vec<usize>),
) -> PyResult<bool> {
    let a = Host::new(a.0, a.1, &a.2, a.3)?;
    let b = Host::new(b.0, b.1, &b.2, b.3)?;
    if a.dtype != b.dtype || a.shape != b.shape {
        return Ok(false);
    }
    Ok(crate::fork_safe::detached(py, || a.data() == b.data()))
}

/// Parses hex digests by name.
fn parse_digests(digests: &BTreeMap<String, String>) -> PyResult<BTreeMap<String, Digest>> {
    digests
        .iter()
        .map(|(k, v)| {
            Digest::from_hex(v)
                .map(|d| (k.clone(), d))
                .ok_or_else(|| PyValueError::new_err(format!("{k}: {v:?} is not a digest")))
        })
        .collect()
}

/// Compares `{name: hex digest}` of the test `name` with its committed snapshot under `dir`,
/// as `cargo test`'s `assert_snapshot` does (see [`bitexact::snapshot::check_matches`]):
/// `backend` (`cpu` or `cuda`) picks the platform class, `program` (a JSON object: python,
/// numpy, torch versions…) joins the fingerprint as `program.<key>`, `update` writes the
/// `.snap` in place, `accept` is the first way to accept a pending file the failure names.
/// Returns `(passed, message)`: the failure, or a note when a file was written.
#[pyfunction]
#[pyo3(signature = (dir, name, backend, digests, program, update, accept))]
#[allow(clippy::too_many_arguments)]
pub fn snapshot_check(
    py: Python<'_>,
    dir: PathBuf,
    name: &str,
    backend: &str,
    digests: BTreeMap<String, String>,
    program: Option<String>,
    update: bool,
    accept: &str,
) -> PyResult<(bool, Option<String>)> {
    let backend = match backend {
        "cpu" => Backend::Cpu,
        "cuda" => Backend::Cuda,
        b => return Err(PyValueError::new_err(format!("unknown backend {b:?}"))),
    };
    let run = digest::run_digest(&parse_digests(&digests)?).hex();
    let mut r = CaseReport::new(name, backend);
    r.distinct_digests = 1;
    r = r.judge();
    r.runs = 1;
    r.run_digests = vec![run];
    r.digests = digests;
    if let Some(p) = program {
        let mut info = ProgramInfo::default();
        info.platform = Some(
            serde_json::from_str(&p)
                .map_err(|e| PyValueError::new_err(format!("program platform: {e}")))?,
        );
        r.program = Some(info);
    }
    let controls = Controls::from_env().map_err(|e| PyValueError::new_err(format!("{e:#}")))?;
    let result = crate::fork_safe::detached(py, || {
        bitexact::snapshot::check_matches(&dir, &r, &controls, update, accept)
    });
    Ok(match result {
        Ok(note) => (true, note),
        Err(msg) => (false, Some(msg)),
    })
}
