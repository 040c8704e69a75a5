//! End to end, the first batch-variant op: `tests/fixtures/programs/batch_serve.py` serves 8
//! requests at batch 1 and at batch 8 under the op tracer (the batch-8 run with
//! `$BITEXACT_TRACE_ROWS` = 8), and [`bitexact::trace::batch::first_variant`] on the two real
//! traces agrees with the program's own outputs: the linear head (a matrix product, `aten::addmm`
//! on x86 builds, module `Model.lm_head`) is named, with its inputs identical for the request, exactly when some
//! request's output row differs between the two runs, and nothing is named otherwise (the layer
//! norm before it is row-wise). Needs a Python with torch and this tree's bitexact package
//! (its native module beside `python/bitexact/`, or installed by ci/python.sh); says `SKIPPED`
//! without.

use crate::common;

use bitexact::protocol::{OUT_ENV, TRACE_ENV, TRACE_FILE_PREFIX, TRACE_ROWS_ENV};
use std::path::{Path, PathBuf};
use std::process::Command;

const TEST: &str = "the_first_batch_variant_op_agrees_with_the_outputs";

/// Starts the tracer as the injected `sitecustomize` does, then runs the script as `__main__`.
const LAUNCH: &str = "import runpy, sys\nfrom bitexact import _trace\n_trace.install_from_env()\n\
                      sys.argv = sys.argv[1:]\nrunpy.run_path(sys.argv[0], run_name='__main__')";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A Python with torch whose `bitexact` has row slicing (this tree's, when its native module is
/// beside it), with the `PYTHONPATH` that gives it.
fn python() -> Option<(String, Option<PathBuf>)> {
    let py = common::python_with(&["torch"])?;
    let tree = root().join("python");
    let native = tree.join("bitexact/_native.abi3.so").exists();
    let path = native.then_some(tree);
    let mut c = Command::new(&py);
    c.args([
        "-c",
        "from bitexact import _trace, _native; _trace.ROWS_ENV",
    ]);
    if let Some(p) = &path {
        c.env("PYTHONPATH", p);
    }
    c.output()
        .is_ok_and(|o| o.status.success())
        .then_some((py, path))
}

/// Runs the script at batch `b` (row slices `rows` when some) into `out`: its trace and output rows.
fn serve(
    (py, path): &(String, Option<PathBuf>),
    out: &Path,
    b: usize,
    rows: Option<usize>,
) -> (Vec<bitexact::trace::TraceEntry>, Vec<u8>) {
    std::fs::create_dir_all(out).unwrap();
    let script = common::fixture_program("batch_serve.py");
    let mut c = Command::new(py);
    c.args(["-c", LAUNCH])
        .arg(&script)
        .arg(b.to_string())
        .env(OUT_ENV, out)
        .env(TRACE_ENV, "ops")
        .env_remove(TRACE_ROWS_ENV);
    if let Some(p) = path {
        c.env("PYTHONPATH", p);
    }
    if let Some(n) = rows {
        c.env(TRACE_ROWS_ENV, n.to_string());
    }
    let o = c.output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let trace =
        bitexact::trace::program::read_jsonl(&out.join(format!("{TRACE_FILE_PREFIX}0.jsonl")))
            .unwrap();
    (trace, std::fs::read(out.join("out.bin")).unwrap())
}

#[test]
fn the_first_batch_variant_op_agrees_with_the_outputs() {
    let Some(py) = python() else {
        common::tool_missing(
            TEST,
            "no Python with torch and this tree's bitexact package",
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (small, rows_1) = serve(&py, &dir.path().join("b1"), 1, None);
    let (large, rows_8) = serve(&py, &dir.path().join("b8"), 8, Some(8));
    assert!(
        large.iter().any(|e| e.output.contains("/8:")),
        "no row slices"
    );
    assert!(small.iter().all(|e| !e.output.contains('/')));
    let found = bitexact::trace::batch::first_variant(&small, &large, 8, [1, 8]);
    let row = 512 * 4;
    let differing =
        (0..8).find(|&r| rows_1[r * row..(r + 1) * row] != rows_8[r * row..(r + 1) * row]);
    match differing {
        None => {
            assert_eq!(found, None);
            common::premise_skip(
                TEST,
                "at batch 1 vs 8 this CPU's matmul gives every row the same bits: \
                 only \"nothing named\" was checked",
            );
        }
        Some(r) => {
            let d = found.expect("a differing output row must be found");
            // The head's matrix product, as this torch build lowers a linear layer.
            assert!(
                ["aten::addmm", "aten::mm", "aten::linear"].contains(&d.op.as_str())
                    && d.inputs_matched,
                "{d:?}"
            );
            assert!(
                d.explanation
                    .contains("in module Model.lm_head (forward), ")
                    && d.explanation.contains("batch_serve.py:"),
                "{}",
                d.explanation
            );
            assert!(
                d.explanation.ends_with(&format!(
                    "inputs identical for request {r}, output differs (batch 1 vs 8)"
                )),
                "{}",
                d.explanation
            );
        }
    }
    // Row-sliced traces are deterministic: the same run again traces alike.
    let (again, _) = serve(&py, &dir.path().join("b8b"), 8, Some(8));
    assert_eq!(bitexact::trace::first_divergence(&large, &again), None);
}
