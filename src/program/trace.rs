//! `bitexact run --trace ops`: op traces of unmodified PyTorch programs. bitexact writes a
//! `sitecustomize.py` (`python/bitexact/_sitecustomize.py`, embedded in the binary) into
//! `ROOT/.bitexact-inject/`, beside every run's `$BITEXACT_OUT`, with a link to bitexact's own
//! Python package, and puts that directory first on the program's `PYTHONPATH` with
//! `BITEXACT_TRACE=ops`. Python runs it at start-up: it starts the tracer (`bitexact._trace`,
//! which needs the package's native digests) and then runs the `sitecustomize` it shadows, if any. The tracer
//! writes `$BITEXACT_OUT/.bitexact-trace-rank<R>.jsonl` ([`crate::trace::program`]); the
//! harness aligns two runs' streams by identity and names the first op whose output differs
//! while its inputs matched ([`crate::trace::first_divergence`]).
//!
//! The script's own seeding is left alone. Which `bitexact` package the program's Python
//! imports, and what happens when it cannot trace (the run fails, saying why): [`super::tracer`].

use crate::harness::{explain, Collected, RunSource, RunStart, Runs};
use crate::protocol::TraceLevel;
use crate::trace::{Divergence, TraceEntry};
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Largest tensor hashed in a trace unless `--trace-max-bytes` says otherwise (64 MiB).
pub const DEFAULT_MAX_BYTES: u64 = 64 << 20;

/// What `--trace` records: the level and the cost controls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceOptions {
    /// `ops` (every ATen op) or `modules` (module outputs and parameter gradients only).
    pub level: TraceLevel,
    /// Only these steps, inclusive (`--trace-steps A..B`, `A..`, `N`); all when `None`.
    pub steps: Option<(u64, Option<u64>)>,
    /// Tensors larger than this are recorded by dtype and shape only (`--trace-max-bytes`).
    pub max_bytes: u64,
    /// Ops not recorded, as globs over names like `aten::copy_` (`--trace-skip`).
    pub skip: Vec<String>,
    /// The op whose tensors every run saves (`--capture`): its identity as
    /// [`crate::trace::identity_json`] writes it, so that `diff-trace` can replay it in float64
    /// (`python/bitexact/_replay.py`). A capture re-run of localization asks for its own op.
    pub capture: Option<String>,
}

impl Default for TraceOptions {
    fn default() -> Self {
        TraceOptions {
            level: TraceLevel::Ops,
            steps: None,
            max_bytes: DEFAULT_MAX_BYTES,
            skip: Vec::new(),
            capture: None,
        }
    }
}

impl TraceOptions {
    /// Parses `--trace-steps`: `A..B` (A through B), `A..` (A onwards) or `N` (that step).
    pub fn parse_steps(s: &str) -> Result<(u64, Option<u64>)> {
        let num = |t: &str| -> Result<u64> {
            t.trim()
                .parse()
                .map_err(|_| anyhow::anyhow!("{t:?} is not a step number"))
        };
        let (a, b) = match s.split_once("..") {
            None => (num(s)?, Some(num(s)?)),
            Some((a, "")) => (num(a)?, None),
            Some((a, b)) => (num(a)?, Some(num(b)?)),
        };
        if b.is_some_and(|b| b < a) {
            bail!("{s:?}: the last step comes before the first");
        }
        Ok((a, b))
    }

    /// Checks the skip globs (no commas: they travel comma-separated).
    pub fn validate(&self) -> Result<()> {
        if let Some(g) = self.skip.iter().find(|g| g.is_empty() || g.contains(',')) {
            bail!("--trace-skip {g:?}: an op-name glob, non-empty and without commas");
        }
        Ok(())
    }

    /// The variables the tracer reads (`python/bitexact/_trace/__init__.py`).
    pub fn env(&self) -> BTreeMap<String, String> {
        let mut env = BTreeMap::from([
            (
                crate::protocol::TRACE_ENV.to_string(),
                self.level.to_string(),
            ),
            (
                crate::protocol::TRACE_MAX_BYTES_ENV.to_string(),
                self.max_bytes.to_string(),
            ),
        ]);
        if let Some((a, b)) = self.steps {
            let b = b.map(|b| b.to_string()).unwrap_or_default();
            env.insert(crate::protocol::TRACE_STEPS_ENV.into(), format!("{a}..{b}"));
        }
        if !self.skip.is_empty() {
            env.insert(crate::protocol::TRACE_SKIP_ENV.into(), self.skip.join(","));
        }
        if let Some(key) = &self.capture {
            env.insert(crate::protocol::TRACE_CAPTURE_ENV.into(), key.clone());
        }
        env
    }
}

/// A program source's capture state: the op whose tensors the tracer saves in the next runs
/// (a localization re-run), and how the outputs captured so far differ, for the report's
/// `captured` ([`crate::outcome::CaseReport::captured`]).
#[derive(Default)]
pub(super) struct Capture {
    /// The identity of the op to capture, while capturing.
    pub(super) key: Mutex<Option<String>>,
    /// The captured outputs compared, until the report takes them.
    pub(super) diffs: Mutex<Vec<crate::diff::TensorDiff>>,
}

/// The `sitecustomize.py` the program's Python runs first.
const SITECUSTOMIZE: &str = include_str!("../../python/bitexact/_sitecustomize.py");

/// The directory put first on `PYTHONPATH` for the runs whose `$BITEXACT_OUT` is `out`.
pub fn inject_dir(out: &Path) -> PathBuf {
    out.with_file_name(crate::protocol::INJECT_DIR)
}

/// Writes the injected `sitecustomize.py` under `root` (the directory holding `out`).
pub fn write_inject_dir(root: &Path) -> Result<()> {
    let dir = inject_dir(&root.join("out"));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    super::tracer::link_own_package(&dir)?;
    crate::atomic::write_atomically(&dir.join("sitecustomize.py"), SITECUSTOMIZE.as_bytes())
}

/// Where runs 0 and `j` first differ, for a program whose runs may carry op traces: the first
/// op whose output differs (explained further by [`explain_captured`] when its inputs
/// matched), else the first differing output file. When both runs traced and their streams
/// agree while a file differs, the explanation says so: the difference arose outside the
/// traced ops.
pub(super) fn localize(
    source: &dyn RunSource,
    capture: &Capture,
    first: &Collected,
    other: &Collected,
    j: usize,
    planner: &mut dyn Runs,
) -> Option<Divergence> {
    let (Some(a), Some(b)) = (&first.trace, &other.trace) else {
        return explain::first_output_divergence(first, other);
    };
    let sizes = [0, j].map(|i| planner.settings(i, false).knobs.batch);
    if let [Some(x), Some(y)] = sizes {
        if x != y {
            return batch_variant(first, other, [x, y]);
        }
    }
    // A run stopped early is compared on what it recorded before it was stopped. The cut
    // keeps each record's `call`, its index in run 0's whole trace `a`, used below.
    let cut;
    let compared = match other.partial {
        true => {
            cut = crate::trace::ranks::cut_to(a, b);
            &cut
        }
        false => a,
    };
    let Some(mut d) = crate::trace::first_divergence(compared, b) else {
        return explain::first_output_divergence(first, other).map(|mut d| {
            d.explanation
                .push_str(&outside_ops(compared, other.partial));
            d
        });
    };
    if d.inputs_matched && a.get(d.call).is_some_and(|e| e.call == d.call) {
        let key = crate::trace::identity_json(a, d.call);
        let differed = crate::trace::streams::outputs_differing(a, b, d.call);
        let what = explain_captured(source, capture, &key, &a[d.call], differed, j, planner);
        d.explanation.push_str(&what);
    }
    Some(d)
}

/// `--vary batch`: runs 0 and `other` at batch sizes `sizes` differ; the first op whose result
/// differs for a request both hold ([`crate::trace::batch::first_variant`]: the larger-batch
/// run recorded row slices), else the first differing output, said to arise outside the ops.
/// The smaller size is run 0's (the even runs'), so a run stopped early is the larger one,
/// whose every record has its counterpart.
fn batch_variant(first: &Collected, other: &Collected, sizes: [usize; 2]) -> Option<Divergence> {
    let (a, b) = (first.trace.as_deref()?, other.trace.as_deref()?);
    let ([small, large], lo, hi) = match sizes[0] < sizes[1] {
        true => ([a, b], sizes[0], sizes[1]),
        false => ([b, a], sizes[1], sizes[0]),
    };
    if let Some(d) = crate::trace::batch::first_variant(small, large, hi / lo, [lo, hi]) {
        return Some(d);
    }
    explain::first_output_divergence(first, other).map(|mut d| {
        d.explanation.push_str(&format!(
            "; every op call both runs made gave the same bits for every request both held \
             (batch {lo} vs {hi}): the difference arose outside the traced ops"
        ));
        d
    })
}

/// What is said of a file difference when the traces agree: `compared`'s records (up to where
/// a run stopped early, when `partial`). A module trace leaves more out than an op trace.
fn outside_ops(compared: &[TraceEntry], partial: bool) -> String {
    let upto = if partial {
        " up to where the later run was stopped"
    } else {
        ""
    };
    let n = crate::trace::program::count(compared);
    match TraceEntry::is_module_trace(compared) {
        true => format!(
            "; the module traces were identical ({n}{upto}): the difference arose where module \
             records do not look (code outside every module, such as the loss or what is \
             written; an optimizer step's update; another process; --trace ops looks further)"
        ),
        false => format!(
            "; the op traces were identical ({n}{upto}): the difference arose outside the \
             traced ops (host-side Python or numpy, another process, or work the tracer does \
             not see)"
        ),
    }
}

/// Re-runs runs 0 and `j` with the tracer saving the tensors of the op with identity `key`
/// (`record`), and explains how its outputs differ: `; re-run to capture it: output 0
/// f32[5,16]: 37/80 elements differ, …`, keeping each output's comparison in `capture`. Two
/// more runs, said in the text; a capture that fails is said too, never fatal. `differed`:
/// which of the record's outputs differed in the traced runs (None: not known), so that an
/// output identical there and in the re-runs is not said to have a difference that "did not
/// recur".
pub(super) fn explain_captured(
    source: &dyn RunSource,
    capture: &Capture,
    key: &str,
    record: &crate::trace::TraceEntry,
    differed: Option<Vec<bool>>,
    j: usize,
    planner: &mut dyn Runs,
) -> String {
    *capture.key.lock().unwrap_or_else(|e| e.into_inner()) = Some(key.to_string());
    let mut runs = Vec::new();
    let purpose = format!("capture: runs 0 and {j}");
    for (k, index) in [0, j].into_iter().enumerate() {
        let settings = planner.settings(index, false);
        let told = RunStart {
            purpose: &purpose,
            index: k,
            of: 2,
        };
        runs.push(planner.one(source, &settings, index, told));
    }
    *capture.key.lock().unwrap_or_else(|e| e.into_inner()) = None;
    let (a, b) = match (&runs[0], &runs[1]) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(f), _) | (_, Err(f)) => {
            return format!(" (re-running to capture the op failed: {})", f.message)
        }
    };
    let outputs = record.output.split(';').filter(|o| !o.is_empty()).count();
    let mut parts = Vec::new();
    for i in 0..outputs {
        let name = format!("{}:out{i}", crate::protocol::CAPTURE_FILE);
        match (a.loader.load(&name), b.loader.load(&name)) {
            (Ok(x), Ok(y)) if x == y => parts.push(match differed.as_ref() {
                Some(d) if !d.get(i).copied().unwrap_or(true) => {
                    format!("output {i} identical, as in the traced runs")
                }
                _ => format!("output {i} identical in the re-runs (the difference did not recur)"),
            }),
            (Ok(x), Ok(y)) => {
                let d = crate::diff::explain(&format!("output {i}"), [0, j], &x, &y);
                parts.push(d.summary());
                capture
                    .diffs
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(d);
            }
            (Err(e), _) | (_, Err(e)) => parts.push(format!("output {i}: not captured ({e:#})")),
        }
    }
    format!(
        "; captured in 2 more runs: {}",
        if parts.is_empty() {
            "no tensor outputs".to_string()
        } else {
            parts.join("; ")
        }
    )
}

/// The report's note on run 0's trace: how many op calls; how many tensors were recorded by
/// dtype and shape only (so not compared), those over the size cap apart from the others
/// (scratch memory such as an RNN workspace, a tensor without data); or that it left none
/// although the tracer started (else the run failed: [`super::tracer`]).
pub(super) fn note(t: Option<&[TraceEntry]>, opts: &TraceOptions) -> String {
    let Some(t) = t else {
        return format!(
            "--trace {}: the tracer started, yet run 0 left no op trace (did the program delete it from $BITEXACT_OUT?); its files were compared",
            opts.level
        );
    };
    let unhashed = t
        .iter()
        .flat_map(|e| {
            e.inputs
                .iter()
                .map(String::as_str)
                .chain(e.output.split(';'))
        })
        .filter(|d| d.ends_with(":-"));
    let (mut capped, mut other) = (0, 0);
    for label in unhashed {
        if over_cap(label, opts.max_bytes) {
            capped += 1;
        } else {
            other += 1;
        }
    }
    let mut s = match opts.level {
        TraceLevel::Ops => format!("op trace: {} op calls", t.len()),
        // `--trace modules` records module outputs and parameter gradients, not op calls
        TraceLevel::Modules => format!("module trace: {} records", t.len()),
    };
    if capped > 0 {
        s.push_str(&format!(
            "; {capped} tensors over --trace-max-bytes ({} bytes) recorded by dtype and shape only, not compared",
            opts.max_bytes
        ));
    }
    if other > 0 {
        s.push_str(&format!(
            "; {other} tensors of scratch memory (an RNN workspace) or without data recorded by dtype and shape only, not compared"
        ));
    }
    s
}

/// Whether the tensor a trace label names (`f32[2,3]:-`) is larger than `max_bytes`.
fn over_cap(label: &str, max_bytes: u64) -> bool {
    use crate::trace::sketch::{dtype_of_label, shape_of_label};
    let (Some(dtype), Some(shape)) = (dtype_of_label(label), shape_of_label(label)) else {
        return false;
    };
    let elements = shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d as u64));
    elements
        .and_then(|n| n.checked_mul(dtype.size() as u64))
        .is_none_or(|bytes| bytes > max_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_note_tells_capped_tensors_from_scratch() {
        let opts = TraceOptions {
            max_bytes: 64,
            ..TraceOptions::default()
        };
        let entry = |inputs: &[&str], output: &str| TraceEntry {
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            output: output.into(),
            ..TraceEntry::default()
        };
        let t = [
            entry(&["f32[4,8]:-", "f32[2]:ab"], "uint8[100]:-"),
            entry(&["u8[10]:-"], "f32[2,2]:cd;f64[1000]:-"),
        ];
        assert_eq!(
            note(Some(&t), &opts),
            "op trace: 2 op calls; 2 tensors over --trace-max-bytes (64 bytes) recorded by dtype \
             and shape only, not compared; 2 tensors of scratch memory (an RNN workspace) or \
             without data recorded by dtype and shape only, not compared"
        );
        assert_eq!(note(Some(&t[..0]), &opts), "op trace: 0 op calls");
        let modules = TraceOptions {
            level: TraceLevel::Modules,
            ..opts
        };
        assert_eq!(note(Some(&t[..0]), &modules), "module trace: 0 records");
    }

    #[test]
    fn steps_parse_and_bad_ones_are_named() {
        assert_eq!(TraceOptions::parse_steps("3..5").unwrap(), (3, Some(5)));
        assert_eq!(TraceOptions::parse_steps("3..").unwrap(), (3, None));
        assert_eq!(TraceOptions::parse_steps("7").unwrap(), (7, Some(7)));
        for bad in ["", "a..2", "5..3", "..2", "1..x", "-1"] {
            assert!(TraceOptions::parse_steps(bad).is_err(), "{bad}");
        }
    }

    proptest::proptest! {
        #[test]
        fn steps_round_trip(a in 0u64..1000, n in proptest::option::of(0u64..1000)) {
            let b = n.map(|n| a + n);
            let o = TraceOptions { steps: Some((a, b)), ..TraceOptions::default() };
            let text = o.env()["BITEXACT_TRACE_STEPS"].clone();
            proptest::prop_assert_eq!(TraceOptions::parse_steps(&text).unwrap(), (a, b));
        }

        #[test]
        fn parse_never_panics(s in ".{0,20}") {
            let _ = TraceOptions::parse_steps(&s);
        }
    }
}
