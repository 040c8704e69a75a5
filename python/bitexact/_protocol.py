"""The names bitexact (Rust) and this package share: environment variables, metadata file
names, trace levels, trace record fields, the sketch's sample positions and the dtypes.
GENERATED from src/protocol.rs (BITEXACT_WRITE_PROTOCOL=1 cargo test --test it protocol::); do not
edit: tests/it/protocol.rs fails on drift."""

OUT_ENV = "BITEXACT_OUT"  # The directory a run writes its outputs into (fresh and empty each run).
RUN_ENV = "BITEXACT_RUN"  # The run's index, 0..K-1.
SEED_ENV = "BITEXACT_SEED"  # The seed of the run (`--seed`, varied by `--vary seed`).
DETERMINISTIC_ENV = "BITEXACT_DETERMINISTIC"  # `1`/`0`: deterministic algorithms on or off.
BENCHMARK_ENV = "BITEXACT_BENCHMARK"  # `1`/`0`: autotuning (cuDNN benchmark) on or off.
WORKERS_ENV = "BITEXACT_WORKERS"  # The DataLoader worker count to use.
THREADS_ENV = "BITEXACT_THREADS"  # The thread count to use (with `OMP_NUM_THREADS` and friends).
POISON_ENV = "BITEXACT_POISON"  # The byte fresh memory is filled with under `--vary poison`.
TRACE_ENV = "BITEXACT_TRACE"  # The trace level (`ops`, `modules`) asked of the injected tracer.
TRACE_MAX_BYTES_ENV = "BITEXACT_TRACE_MAX_BYTES"  # Largest tensor hashed in a trace, in bytes.
TRACE_STEPS_ENV = "BITEXACT_TRACE_STEPS"  # The steps a trace records: `A..B` (inclusive) or `A..`.
TRACE_SKIP_ENV = "BITEXACT_TRACE_SKIP"  # Comma-separated op-name globs the tracer leaves out.
TRACE_CAPTURE_ENV = "BITEXACT_TRACE_CAPTURE"  # The identity (JSON list) of the one op whose tensors the tracer saves.
TRACE_OWNER_ENV = "BITEXACT_TRACE_OWNER"  # Python: the process of a rank that claimed the tracer (its children do not trace).
TRACE_ROWS_ENV = "BITEXACT_TRACE_ROWS"  # `n` > 1: the tracer labels each tensor whose first dimension is a multiple of `n` by the digests of its `n` row slices (the larger-batch run of `--vary batch`: `n` = B/A).
TRACE_BACKGROUND_ENV = "BITEXACT_TRACE_BACKGROUND"  # Python: `1` makes the tracer hash on a background thread (the trace writer), `0` on the program's thread; unset, the background thread is used on a machine with an NVIDIA GPU or where torch leaves a core free.
TRACE_KERNELS_ENV = "BITEXACT_TRACE_KERNELS"  # Python: `0` turns off the records of the kernels a compiled region launches under `--trace ops` (`python/bitexact/_trace/kernels.py`); unset or `1`, they are made.
TRACE_DRIVER_ENV = "BITEXACT_TRACE_DRIVER"  # Python: how ops reach the tracer: `auto` (the default: the observer where it can be built and the machine has no GPU, else the mode), `observer` (torch's RecordFunction callbacks, compiled on first use: `python/bitexact/_trace/observer.py`) or `mode` (a `TorchDispatchMode`).
CACHE_DIR_ENV = "BITEXACT_CACHE_DIR"  # Python: the directory of bitexact's caches (the tracer's compiled observer), instead of `~/.cache/bitexact`.
SEED_EVERYTHING_ENV = "BITEXACT_SEED_EVERYTHING"  # `1`: the injected `sitecustomize` calls `bitexact.seed_everything()` (`--seed-everything`).
SEEDED_ENV = "BITEXACT_SEEDED"  # Python: the process of a rank that seeded (its children do not seed again).
SEEDED_WITHOUT_TORCH_ENV = "BITEXACT_SEEDED_WITHOUT_TORCH"  # Python: a process seeded without torch, so a child with torch seeds torch.
SKIP_LOG_ENV = "BITEXACT_SKIP_LOG"  # A file each skipped test appends its `SKIPPED what: why` line to (Rust's `bitexact::check::skip_notice`); `ci/test.sh` prints them in its summary.
PYTHON_PACKAGE_ENV = "BITEXACT_PYTHON_PACKAGE"  # The Python package a cargo-built `bitexact` injects into programs under `--trace`.
PYTHON_ENV = "BITEXACT_PYTHON"  # The Python (with torch) `diff-trace` replays a captured op with in float64 (default: the program's own, recorded in the capture, else `python3` on `PATH`).
STATE_ENV = "BITEXACT_STATE"  # `1`: the injected `sitecustomize` records the state a bit-exact resume needs at every optimizer step (`--vary resume`), into [`STATE_FILE_PREFIX`]`<R>.jsonl`.
RESUME_STEP_ENV = "BITEXACT_RESUME_STEP"  # Set in the resumed launch of `--vary resume`: the optimizer steps the killed launch took before its checkpoint completed; the state recorder numbers the resumed launch's steps from it, so they line up with the uninterrupted run's.
STATE_CHECKPOINT_ENV = "BITEXACT_STATE_CHECKPOINT"  # `--checkpoint GLOB` of `--vary resume`, for the state recorder: a write to a matching path under `$BITEXACT_OUT` makes the next optimizer step's record a full one (unset: a name containing `ckpt` or `checkpoint`).
STATE_STEPS_ENV = "BITEXACT_STATE_STEPS"  # The steps whose state record is full (`A..B`, `A..` or `N`; `0..` for every step). Unset: the first step of each launch and each step after a checkpoint write, the only steps a resume is compared at.
RUN_ID_ENV = "BITEXACT_RUN_ID"  # Marks every process of a run, so none outlives it.
PYTEST_WORKER_ENV = "BITEXACT_PYTEST_WORKER"  # Python: `1` in the runs of a pytest test marked `@pytest.mark.bitexact` (the test's body runs and `bitexact.record` writes its tensors).
MEMORY_FILE = ".bitexact-memory.jsonl"  # Metadata: one JSON line per step with the process's resident memory.
PLATFORM_FILE = ".bitexact-platform.json"  # Metadata: the program's platform (Python, numpy, torch, CUDA versions).
RECORD_FILE = ".bitexact-record.json"  # Metadata, in a kept run directory: bitexact's platform fingerprint and the run's controls.
CONTROLS_FILE = ".bitexact-controls.jsonl"  # Metadata: the controls the program read (`{"control": "workers", ...}` per line).
TRACE_FILE_PREFIX = ".bitexact-trace-rank"  # Metadata: the op trace of rank R is `<prefix><R>.jsonl`.
STATE_FILE_PREFIX = ".bitexact-state-rank"  # Metadata: the state record of rank R is `<prefix><R>.jsonl`: one JSON line per optimizer step, `{"step", "rank", "pieces": [{"name", "kind", "digest", "value", "hint"}]}`, appended and closed per line (each line is one completed write bitexact can count).
CAPTURE_FILE = ".bitexact-capture.safetensors"  # Metadata: the tensors of the captured op (`in0…`, `out0…`, safetensors).
INJECT_DIR = ".bitexact-inject"  # Beside `$BITEXACT_OUT`: the injected `sitecustomize` and the tracer's records.
TRACER_RECORDS_FILE = "records.jsonl"  # In [`INJECT_DIR`]: one JSON line per Python process that tried to trace or seed.
METADATA_PREFIX = ".bitexact-"  # Every metadata file under `$BITEXACT_OUT` starts with this and is never compared.
TRACE_LEVELS = ("ops", "modules",)  # what --trace accepts, in order of detail
TRACE_RECORD_FIELDS = ("v", "step", "rank", "phase", "module", "op", "src", "in", "out")  # one op-trace record's fields, in order
TRACE_RECORD_VERSION = 8  # the record's "v"
SKETCH_SAMPLES = 8  # how many elements a sketch samples, at most
# Every bitexact dtype, in digest-tag order: (name, safetensors name, bytes per element, torch name,
# floating point)
DTYPES = (
    ("f32", "F32", 4, "float32", True),
    ("f64", "F64", 8, "float64", True),
    ("f16", "F16", 2, "float16", True),
    ("bf16", "BF16", 2, "bfloat16", True),
    ("i32", "I32", 4, "int32", False),
    ("i64", "I64", 8, "int64", False),
    ("u8", "U8", 1, "uint8", False),
    ("u32", "U32", 4, "uint32", False),
    ("bool", "BOOL", 1, "bool", False),
    ("i8", "I8", 1, "int8", False),
    ("i16", "I16", 2, "int16", False),
    ("u16", "U16", 2, "uint16", False),
    ("u64", "U64", 8, "uint64", False),
    ("f8e4m3", "F8_E4M3", 1, "float8_e4m3fn", True),
    ("f8e5m2", "F8_E5M2", 1, "float8_e5m2", True),
)


def sketch_positions(n):
    """The positions a sketch samples in a tensor of ``n`` elements: the middles of
    SKETCH_SAMPLES equal parts (every element when ``n`` <= SKETCH_SAMPLES)."""
    k = min(n, SKETCH_SAMPLES)
    return [((2 * j + 1) * n) // (2 * k) for j in range(k)]
