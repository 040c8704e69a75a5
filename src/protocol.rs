//! The contract between bitexact and the programs it runs, in one place: every environment
//! variable and metadata file name that Rust and Python share, the trace levels, the fields of
//! an op-trace record, the positions a tensor's sketch samples and the dtype table. The Python
//! package reads the same names from `python/bitexact/_protocol.py`, which is generated from
//! this module (`python_module`) and checked for drift by `tests/it/protocol.rs` (a name changed
//! on one side only fails it, and so does a `BITEXACT_*` or `.bitexact-*` literal in either
//! language that is not listed here).
//!
//! To add a name: a constant in the `names!` list below (its doc comment is its doc in both
//! languages), then `BITEXACT_WRITE_PROTOCOL=1 cargo test --test it protocol::` to regenerate the
//! Python file.

use crate::tensor::DType;

/// One shared name: the constant's name (the same in Rust and Python), its value, and what it
/// means (the docs of both languages and the generated reference).
#[derive(Clone, Copy, Debug)]
pub struct Name {
    /// Constant name, e.g. `OUT_ENV`.
    pub constant: &'static str,
    /// The value, e.g. `BITEXACT_OUT`.
    pub value: &'static str,
    /// One line on what it is and who sets or reads it.
    pub doc: &'static str,
}

macro_rules! names {
    ($($(#[doc = $doc:literal])* $c:ident = $v:literal;)*) => {
        $($(#[doc = $doc])* pub const $c: &str = $v;)*

        /// Every shared name, in the order `_protocol.py` lists them.
        pub const NAMES: &[Name] = &[$(Name {
            constant: stringify!($c),
            value: $v,
            doc: concat!($($doc),*),
        }),*];
    };
}

names! {
    /// The directory a run writes its outputs into (fresh and empty each run).
    OUT_ENV = "BITEXACT_OUT";
    /// The run's index, 0..K-1.
    RUN_ENV = "BITEXACT_RUN";
    /// The seed of the run (`--seed`, varied by `--vary seed`).
    SEED_ENV = "BITEXACT_SEED";
    /// `1`/`0`: deterministic algorithms on or off.
    DETERMINISTIC_ENV = "BITEXACT_DETERMINISTIC";
    /// `1`/`0`: autotuning (cuDNN benchmark) on or off.
    BENCHMARK_ENV = "BITEXACT_BENCHMARK";
    /// The DataLoader worker count to use.
    WORKERS_ENV = "BITEXACT_WORKERS";
    /// The thread count to use (with `OMP_NUM_THREADS` and friends).
    THREADS_ENV = "BITEXACT_THREADS";
    /// The byte fresh memory is filled with under `--vary poison`.
    POISON_ENV = "BITEXACT_POISON";
    /// The trace level (`ops`, `modules`) asked of the injected tracer.
    TRACE_ENV = "BITEXACT_TRACE";
    /// Largest tensor hashed in a trace, in bytes.
    TRACE_MAX_BYTES_ENV = "BITEXACT_TRACE_MAX_BYTES";
    /// The steps a trace records: `A..B` (inclusive) or `A..`.
    TRACE_STEPS_ENV = "BITEXACT_TRACE_STEPS";
    /// Comma-separated op-name globs the tracer leaves out.
    TRACE_SKIP_ENV = "BITEXACT_TRACE_SKIP";
    /// The identity (JSON list) of the one op whose tensors the tracer saves.
    TRACE_CAPTURE_ENV = "BITEXACT_TRACE_CAPTURE";
    /// Python: the process of a rank that claimed the tracer (its children do not trace).
    TRACE_OWNER_ENV = "BITEXACT_TRACE_OWNER";
    /// `n` > 1: the tracer labels each tensor whose first dimension is a multiple of `n` by
    /// the digests of its `n` row slices (the larger-batch run of `--vary batch`: `n` = B/A).
    TRACE_ROWS_ENV = "BITEXACT_TRACE_ROWS";
    /// Python: `1` makes the tracer hash on a background thread (the trace writer), `0` on the
    /// program's thread; unset, the background thread is used on a machine with an NVIDIA GPU
    /// or where torch leaves a core free.
    TRACE_BACKGROUND_ENV = "BITEXACT_TRACE_BACKGROUND";
    /// Python: `0` turns off the records of the kernels a compiled region launches under
    /// `--trace ops` (`python/bitexact/_trace/kernels.py`); unset or `1`, they are made.
    TRACE_KERNELS_ENV = "BITEXACT_TRACE_KERNELS";
    /// Python: how ops reach the tracer: `auto` (the default: the observer where it can be
    /// built and the machine has no GPU, else the mode), `observer` (torch's RecordFunction
    /// callbacks, compiled on first use: `python/bitexact/_trace/observer.py`) or `mode` (a
    /// `TorchDispatchMode`).
    TRACE_DRIVER_ENV = "BITEXACT_TRACE_DRIVER";
    /// Python: the directory of bitexact's caches (the tracer's compiled observer), instead of
    /// `~/.cache/bitexact`.
    CACHE_DIR_ENV = "BITEXACT_CACHE_DIR";
    /// `1`: the injected `sitecustomize` calls `bitexact.seed_everything()` (`--seed-everything`).
    SEED_EVERYTHING_ENV = "BITEXACT_SEED_EVERYTHING";
    /// Python: the process of a rank that seeded (its children do not seed again).
    SEEDED_ENV = "BITEXACT_SEEDED";
    /// Python: a process seeded without torch, so a child with torch seeds torch.
    SEEDED_WITHOUT_TORCH_ENV = "BITEXACT_SEEDED_WITHOUT_TORCH";
    /// A file each skipped test appends its `SKIPPED what: why` line to (Rust's
    /// `bitexact::check::skip_notice`); `ci/test.sh` prints them in its summary.
    SKIP_LOG_ENV = "BITEXACT_SKIP_LOG";
    /// The Python package a cargo-built `bitexact` injects into programs under `--trace`.
    PYTHON_PACKAGE_ENV = "BITEXACT_PYTHON_PACKAGE";
    /// The Python (with torch) `diff-trace` replays a captured op with in float64 (default: the
    /// program's own, recorded in the capture, else `python3` on `PATH`).
    PYTHON_ENV = "BITEXACT_PYTHON";
    /// `1`: the injected `sitecustomize` records the state a bit-exact resume needs at every
    /// optimizer step (`--vary resume`), into [`STATE_FILE_PREFIX`]`<R>.jsonl`.
    STATE_ENV = "BITEXACT_STATE";
    /// Set in the resumed launch of `--vary resume`: the optimizer steps the killed launch
    /// took before its checkpoint completed; the state recorder numbers the resumed launch's
    /// steps from it, so they line up with the uninterrupted run's.
    RESUME_STEP_ENV = "BITEXACT_RESUME_STEP";
    /// `--checkpoint GLOB` of `--vary resume`, for the state recorder: a write to a matching
    /// path under `$BITEXACT_OUT` makes the next optimizer step's record a full one (unset: a
    /// name containing `ckpt` or `checkpoint`).
    STATE_CHECKPOINT_ENV = "BITEXACT_STATE_CHECKPOINT";
    /// The steps whose state record is full (`A..B`, `A..` or `N`; `0..` for every step).
    /// Unset: the first step of each launch and each step after a checkpoint write, the only
    /// steps a resume is compared at.
    STATE_STEPS_ENV = "BITEXACT_STATE_STEPS";
    /// Marks every process of a run, so none outlives it.
    RUN_ID_ENV = "BITEXACT_RUN_ID";
    /// Python: `1` in the runs of a pytest test marked `@pytest.mark.bitexact` (the test's body
    /// runs and `bitexact.record` writes its tensors).
    PYTEST_WORKER_ENV = "BITEXACT_PYTEST_WORKER";

    /// Metadata: one JSON line per step with the process's resident memory.
    MEMORY_FILE = ".bitexact-memory.jsonl";
    /// Metadata: the program's platform (Python, numpy, torch, CUDA versions).
    PLATFORM_FILE = ".bitexact-platform.json";
    /// Metadata, in a kept run directory: bitexact's platform fingerprint and the run's controls.
    RECORD_FILE = ".bitexact-record.json";
    /// Metadata: the controls the program read (`{"control": "workers", ...}` per line).
    CONTROLS_FILE = ".bitexact-controls.jsonl";
    /// Metadata: the op trace of rank R is `<prefix><R>.jsonl`.
    TRACE_FILE_PREFIX = ".bitexact-trace-rank";
    /// Metadata: the state record of rank R is `<prefix><R>.jsonl`: one JSON line per optimizer
    /// step, `{"step", "rank", "pieces": [{"name", "kind", "digest", "value", "hint"}]}`,
    /// appended and closed per line (each line is one completed write bitexact can count).
    STATE_FILE_PREFIX = ".bitexact-state-rank";
    /// Metadata: the tensors of the captured op (`in0…`, `out0…`, safetensors).
    CAPTURE_FILE = ".bitexact-capture.safetensors";
    /// Beside `$BITEXACT_OUT`: the injected `sitecustomize` and the tracer's records.
    INJECT_DIR = ".bitexact-inject";
    /// In [`INJECT_DIR`]: one JSON line per Python process that tried to trace or seed.
    TRACER_RECORDS_FILE = "records.jsonl";
    /// Every metadata file under `$BITEXACT_OUT` starts with this and is never compared.
    METADATA_PREFIX = ".bitexact-";
}

/// How much `--trace` records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TraceLevel {
    /// Every ATen op call and collective.
    Ops,
    /// Every module's output and each parameter's gradient (the cheaper rung).
    Modules,
}

impl TraceLevel {
    /// Every level, in order of detail.
    pub const ALL: [TraceLevel; 2] = [TraceLevel::Ops, TraceLevel::Modules];

    /// The name on the command line and in `$BITEXACT_TRACE`.
    pub fn name(self) -> &'static str {
        match self {
            TraceLevel::Ops => "ops",
            TraceLevel::Modules => "modules",
        }
    }

    /// The level named `s`, if any.
    pub fn parse(s: &str) -> Option<TraceLevel> {
        TraceLevel::ALL.into_iter().find(|l| l.name() == s)
    }
}

impl std::fmt::Display for TraceLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The fields of one op-trace record, in the order the tracer writes them. A record carries
/// no occurrence number: the reader counts a record's occurrence among the records of its
/// stream with the same step, phase, module and op (`trace::streams::identities`).
pub const TRACE_RECORD_FIELDS: [&str; 9] = [
    "v", "step", "rank", "phase", "module", "op", "src", "in", "out",
];

/// The trace record format version the tracer writes (`"v"`). Version 8 writes a
/// `--trace modules` module record's `"own"` as the names of the module's own parameters and
/// persistent buffers (`{"params":["weight"],"buffers":["running_var"]}`), so that a verdict
/// names the buffer that differs, not its place, and adds `"late"` where some of its inputs
/// were labelled after its forward (its keyword tensor arguments: how many, last). Version 7 adds `"entered"` to
/// a `--trace modules` module record: its call's number among its thread's module calls, in
/// the order they began (the calls recorded after it with smaller numbers enclosed it; those
/// before it with larger ones it made). Version 6 adds `"own"` to a
/// `--trace modules` module record: how many of its first inputs are the module's own
/// parameters and persistent buffers (the rest are its arguments). Version 5 lists, first among an
/// in-place op's inputs, the tensor it writes and reads (`add_`'s `self`), as it was before the
/// op; version 4 left it out (a result only). Versions 4 to 8 label tensors with the 128-bit
/// trace fingerprint (`docs/concepts/fingerprint.md`); versions 2 and 3 with the first 32 hex
/// digits of the canonical SHA-256, so their labels never equal version 4's
/// (`trace::program::Labels`). Version 2 records also carry `"occ"`, which the reader ignores
/// (it counts occurrences itself).
pub const TRACE_RECORD_VERSION: u32 = 8;

/// How many elements a float64 sketch of a traced tensor samples (fewer for a smaller tensor:
/// all of them); see `trace::sketch`.
pub const SKETCH_SAMPLES: usize = 8;

/// The positions a sketch samples in a tensor of `n` elements: the middles of
/// [`SKETCH_SAMPLES`] equal parts (every element when `n` ≤ [`SKETCH_SAMPLES`]). The Python
/// package's `_protocol.sketch_positions` is [`SKETCH_POSITIONS_PY`], the same expression.
pub fn sketch_positions(n: usize) -> impl Iterator<Item = usize> {
    let k = n.min(SKETCH_SAMPLES);
    (0..k).map(move |j| ((2 * j + 1) * n) / (2 * k))
}

/// [`sketch_positions`] in Python, as `_protocol.py` holds it (`tests/it/protocol.rs` runs it
/// against the Rust function).
pub const SKETCH_POSITIONS_PY: &str = "\
def sketch_positions(n):
    \"\"\"The positions a sketch samples in a tensor of ``n`` elements: the middles of
    SKETCH_SAMPLES equal parts (every element when ``n`` <= SKETCH_SAMPLES).\"\"\"
    k = min(n, SKETCH_SAMPLES)
    return [((2 * j + 1) * n) // (2 * k) for j in range(k)]
";

/// The text of `python/bitexact/_protocol.py`: every [`NAMES`] constant, the trace levels, the
/// record fields, the sketch's sample positions and the dtype table, as Python.
pub fn python_module() -> String {
    let mut s = String::from(
        "\"\"\"The names bitexact (Rust) and this package share: environment variables, \
         metadata file\nnames, trace levels, trace record fields, the sketch's sample positions \
         and the dtypes.\nGENERATED from src/protocol.rs \
         (BITEXACT_WRITE_PROTOCOL=1 cargo test --test it protocol::); do not\nedit: \
         tests/it/protocol.rs fails on drift.\"\"\"\n\n",
    );
    for n in NAMES {
        s.push_str(&format!(
            "{} = {:?}  # {}\n",
            n.constant,
            n.value,
            n.doc.trim()
        ));
    }
    let levels: Vec<String> = TraceLevel::ALL
        .iter()
        .map(|l| format!("{:?}", l.name()))
        .collect();
    s.push_str(&format!(
        "TRACE_LEVELS = ({},)  # what --trace accepts, in order of detail\n",
        levels.join(", ")
    ));
    let fields: Vec<String> = TRACE_RECORD_FIELDS
        .iter()
        .map(|f| format!("{f:?}"))
        .collect();
    s.push_str(&format!(
        "TRACE_RECORD_FIELDS = ({})  # one op-trace record's fields, in order\n",
        fields.join(", ")
    ));
    s.push_str(&format!(
        "TRACE_RECORD_VERSION = {TRACE_RECORD_VERSION}  # the record's \"v\"\n"
    ));
    s.push_str(&format!(
        "SKETCH_SAMPLES = {SKETCH_SAMPLES}  # how many elements a sketch samples, at most\n"
    ));
    s.push_str(&python_dtypes());
    s.push_str("\n\n");
    s.push_str(SKETCH_POSITIONS_PY);
    s
}

/// `DTYPES`, the dtype table of `_protocol.py`: one tuple per [`DType`], in tag order.
fn python_dtypes() -> String {
    let mut s = String::from(
        "# Every bitexact dtype, in digest-tag order: (name, safetensors name, bytes per element, \
         torch name,\n# floating point)\nDTYPES = (\n",
    );
    for d in DType::ALL {
        let float = if d.is_float() { "True" } else { "False" };
        s.push_str(&format!(
            "    ({:?}, {:?}, {}, {:?}, {float}),\n",
            d.name(),
            d.safetensors_name(),
            d.size(),
            d.torch_name()
        ));
    }
    s.push_str(")\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_levels_round_trip() {
        let mut seen = std::collections::BTreeSet::new();
        for n in NAMES {
            assert!(seen.insert(n.value), "{} twice", n.value);
            assert!(!n.doc.is_empty());
        }
        for l in TraceLevel::ALL {
            assert_eq!(TraceLevel::parse(l.name()), Some(l));
        }
        assert_eq!(TraceLevel::parse("op"), None);
    }
}
