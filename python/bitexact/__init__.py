"""bitexact: the Python side of ``bitexact run -- CMD ARGS...``.

``bitexact run`` runs a command K >= 2 times, each run with a fresh empty ``$BITEXACT_OUT``,
and compares every file the runs write there (``*.safetensors``, ``*.npy``, ``*.npz`` as
tensors; other files byte for byte; files named ``.bitexact-*`` are metadata, never compared).
This module is what a training script calls:

* :func:`seed_everything` -- seed ``random``, numpy and torch from ``BITEXACT_SEED`` and apply
  the determinism controls (``BITEXACT_DETERMINISTIC``, ``BITEXACT_BENCHMARK``,
  ``BITEXACT_THREADS``);
* :func:`dataloader_kwargs` -- ``DataLoader(ds, **bitexact.dataloader_kwargs())``: the run's
  worker count, seeded workers and a seeded shuffling generator in one call;
* :func:`controls` / :func:`workers` / :func:`threads` -- the run's controls (what
  ``--vary workers`` and friends change); reading them is recorded, so the report can say which
  varied controls a script never read;
* :func:`worker_init_fn` / :func:`worker_seed` / :func:`pool_initializer` -- per-worker seeds
  for ``torch.utils.data.DataLoader`` workers and ``multiprocessing`` pools;
* :func:`dump` / :func:`step` -- write tensors as safetensors into ``$BITEXACT_OUT`` (written
  by hand: no safetensors package needed); :func:`step` also records memory per step; a rank
  of a torch.distributed run (``torchrun``) writes under ``$BITEXACT_OUT/rank<RANK>/``;
* :func:`write_platform` -- ``.bitexact-platform.json`` (python/numpy/torch/CUDA versions);
* :func:`active` -- whether the script runs under bitexact;
* :func:`digest` / :func:`digests` -- bitexact's canonical digest of a numpy array, torch tensor
  (CPU or CUDA) or bytes, computed natively by the Rust crate (``bitexact._native``): the digest
  ``bitexact run`` reports for the same values in a file. Needs the installed package
  (``pip install bitexact-harness``); everything else here is pure Python.

The installed package also gives the ``bitexact`` command (``bitexact run``, ``report``, ...),
the same command line as the Rust binary.

Outside bitexact (``BITEXACT_OUT`` unset) :func:`dump` and :func:`step` do nothing, while
:func:`seed_everything` still seeds, so a script behaves the same when run plainly.
No dependency is required: numpy and torch are used when present.
"""

import hashlib
import importlib
import json
import os
import random
import struct
import sys

from . import _protocol
from . import _controls, _dist, _platform_info, _safetensors
from ._controls import controls, threads, workers
from ._digest import cuda_status, digest, digests

_env_flag = _controls.env_flag

__version__ = "0.1.0"

__all__ = [
    "active",
    "controls",
    "cuda_status",
    "dataloader_kwargs",
    "digest",
    "digests",
    "dump",
    "out_dir",
    "pool_initializer",
    "seed_everything",
    "step",
    "threads",
    "worker_init_fn",
    "worker_seed",
    "workers",
    "write_platform",
]

MEMORY_FILE = _protocol.MEMORY_FILE
PLATFORM_FILE = _protocol.PLATFORM_FILE
_MASK64 = (1 << 64) - 1

# The seed of the last seed_everything() call in this process (inherited by forked workers).
_seed = None
# Seconds the last seed_everything() took (torch's deterministic switches import a lot).
_seed_seconds = None
# Step indices step() wrote, per output directory: a repeated index is an error.
_steps_written = {}
_platform_written = False


# ----------------------------------------------------------------------------- environment

def active():
    """Whether this process runs under ``bitexact run`` (``BITEXACT_OUT`` is set)."""
    return bool(os.environ.get(_protocol.OUT_ENV))


def out_dir():
    """The run's output directory, or ``None`` outside bitexact: ``$BITEXACT_OUT``, or for a
    rank of a torch.distributed run (``RANK`` and ``WORLD_SIZE`` set, e.g. by ``torchrun``)
    ``$BITEXACT_OUT/rank<RANK>`` (created), where :func:`dump` and :func:`step` write too."""
    return _dist.out_root()


def _import(name):
    """Imports module ``name`` if it is installed, else returns ``None``."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


# ----------------------------------------------------------------------------- seeding

def _base_seed():
    """The seed set by :func:`seed_everything` in this process, else ``$BITEXACT_SEED``
    (default 0)."""
    if _seed is not None:
        return _seed
    return _controls.seed()


def _seed_libraries(seed, use_torch):
    """Seeds ``random``, numpy's global RNG and torch (CPU and every CUDA device) with ``seed``
    (masked to 64 bits; numpy gets it as two 32-bit words)."""
    seed &= _MASK64
    random.seed(seed)
    np = sys.modules.get("numpy") or _import("numpy")
    if np is not None:
        np.random.seed([seed & 0xFFFFFFFF, seed >> 32])
    torch = sys.modules.get("torch")
    if torch is None and use_torch is not False:
        torch = _import("torch")
    if torch is not None and use_torch is not False:
        torch.manual_seed(seed)  # CPU and, lazily, every CUDA device
        if hasattr(torch, "cuda"):
            torch.cuda.manual_seed_all(seed)  # lazy: does not initialise CUDA


def seed_everything(seed=None, torch=None):
    """Seeds every RNG and applies bitexact's determinism controls; returns the seed.

    * ``seed``: default ``$BITEXACT_SEED``, or 0 when unset (so a plain run is seeded too).
      Seeds ``random.seed(seed)``, ``numpy.random.seed`` (if numpy is installed; the 64-bit seed
      as two 32-bit words), ``torch.manual_seed`` and ``torch.cuda.manual_seed_all``.
    * ``torch``: ``None`` (default) uses torch when it is installed, ``False`` never imports it
      (saves the import time in numpy-only scripts), ``True`` requires it.
    * ``BITEXACT_DETERMINISTIC`` (default 1): when 1, sets ``CUBLAS_WORKSPACE_CONFIG=:4096:8``
      if unset, ``torch.use_deterministic_algorithms(True)``,
      ``torch.backends.cudnn.deterministic = True`` and
      ``torch.utils.deterministic.fill_uninitialized_memory = True`` (torch >= 2.1); when 0,
      turns the first two off.
    * ``BITEXACT_BENCHMARK`` (default 0) -> ``torch.backends.cudnn.benchmark``.
    * ``BITEXACT_THREADS`` (when set) -> ``torch.set_num_threads``. numpy's BLAS threads follow
      ``OMP_NUM_THREADS``/``OPENBLAS_NUM_THREADS``/``MKL_NUM_THREADS``, which bitexact sets
      before the process starts.

    The seed is remembered for :func:`worker_init_fn` in this process and forked children, and
    recorded with the time this call took in ``.bitexact-platform.json`` (``seed``,
    ``seed_everything_seconds``), so the report says which seed a run used.

    **Which seed?** ``seed_everything()`` with no argument uses bitexact's seed
    (``$BITEXACT_SEED``): ``bitexact run --seed S`` and ``--vary seed`` then reach the script,
    but the script's own seed (say ``--seed 1337`` in its config) is replaced.
    ``seed_everything(1337)`` keeps the script's seed and its results as they were, but makes
    ``--seed`` / ``--vary seed`` inert: the runs are still compared, only the seed no longer
    varies. Pick the first to test that results do not depend on the seed, the second to keep
    a reference run's numbers.
    """
    global _seed, _seed_seconds
    t0 = __import__("time").perf_counter()
    if seed is None:
        seed = _controls.seed()
    seed = int(seed) & _MASK64
    _seed = seed
    deterministic = _env_flag(_protocol.DETERMINISTIC_ENV, True)
    benchmark = _env_flag(_protocol.BENCHMARK_ENV, False)
    _controls.record("deterministic", deterministic)
    _controls.record("benchmark", benchmark)
    n_threads = _controls.threads(None)
    if deterministic and not os.environ.get("CUBLAS_WORKSPACE_CONFIG"):
        # Must be set before cuBLAS creates its first handle.
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    if torch is True:
        import torch as _torch  # noqa: F401  (raises ImportError when missing)
    _seed_libraries(seed, torch)
    t = sys.modules.get("torch") if torch is not False else None
    if t is not None:
        t.use_deterministic_algorithms(deterministic)
        t.backends.cudnn.deterministic = deterministic
        t.backends.cudnn.benchmark = benchmark
        if deterministic:
            det = _import("torch.utils.deterministic")
            if det is not None and hasattr(det, "fill_uninitialized_memory"):
                det.fill_uninitialized_memory = True
        if n_threads is not None:
            t.set_num_threads(n_threads)
    _seed_seconds = __import__("time").perf_counter() - t0
    return seed


def worker_seed(worker_id, seed=None, salt=0):
    """The 64-bit seed of worker ``worker_id``: a documented mix of (seed, worker id, salt).

    ``seed`` defaults to the seed of :func:`seed_everything` in this process (inherited by forked
    workers), else ``$BITEXACT_SEED`` (default 0). The mixing function is::

        int.from_bytes(sha256(b"bitexact-worker" + pack("<QQQ", seed, worker_id, salt))
                       .digest()[:8], "little")

    with every input masked to 64 bits, so distinct workers (or salts) get unrelated streams
    and the same inputs give the same seed in every language. Use it directly for
    per-task streams, e.g. ``numpy.random.default_rng(bitexact.worker_seed(batch_index))``:
    a pool hands tasks to whichever worker is free, so per-task seeds are what keeps results
    independent of scheduling and of the number of workers.
    """
    if seed is None:
        seed = _base_seed()
    words = struct.pack("<QQQ", int(seed) & _MASK64, int(worker_id) & _MASK64, int(salt) & _MASK64)
    return int.from_bytes(hashlib.sha256(b"bitexact-worker" + words).digest()[:8], "little")


def worker_init_fn(worker_id):
    """Seeds ``random``, numpy and torch in a worker; returns the worker's seed.

    For ``torch.utils.data.DataLoader(..., worker_init_fn=bitexact.worker_init_fn)``: the
    worker's seed is ``worker_seed(worker_id, salt=torch.initial_seed())``. Inside a DataLoader
    worker ``torch.initial_seed()`` is the loader's base seed + worker id, drawn from the
    loader's ``generator`` at every new iterator, so each epoch gets fresh (and, with a seeded
    generator, reproducible) streams. Outside a DataLoader worker the salt is 0.
    Also usable for any worker with a stable integer id (see :func:`pool_initializer`).
    """
    salt = 0
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            from torch.utils.data import get_worker_info

            if get_worker_info() is not None:
                salt = torch.initial_seed()
        except ImportError:
            pass
    s = worker_seed(worker_id, salt=salt)
    _seed_libraries(s, torch is not None)
    return s


def dataloader_kwargs(num_workers=0, seed=None):
    """Keyword arguments that make a ``torch.utils.data.DataLoader`` follow the run's controls::

        loader = DataLoader(ds, batch_size=64, shuffle=True, **bitexact.dataloader_kwargs())

    * ``num_workers``: :func:`workers` -- ``$BITEXACT_WORKERS`` under ``bitexact run`` (so
      ``--vary workers`` really changes it), else the ``num_workers`` given here;
    * ``worker_init_fn``: :func:`worker_init_fn` (seeds ``random``/numpy/torch per worker);
    * ``generator``: a ``torch.Generator`` seeded with ``seed`` (default: the seed of
      :func:`seed_everything`, else ``$BITEXACT_SEED``), which fixes the shuffle order and
      each epoch's worker base seeds independently of other draws from torch's global RNG.

    Call it once per loader: each call returns a fresh generator.
    """
    import torch

    if seed is None:
        seed = _base_seed()
    generator = torch.Generator()
    generator.manual_seed(int(seed) & _MASK64)
    return {
        "num_workers": workers(num_workers),
        "worker_init_fn": worker_init_fn,
        "generator": generator,
    }


def pool_initializer(seed=None):
    """``multiprocessing.Pool(initializer=bitexact.pool_initializer)``: seeds the global RNGs of
    each pool worker from (seed, the worker's 1-based pool index), so forked workers do not all
    continue the parent's RNG state. Returns the worker's seed.

    Note: a pool gives tasks to whichever worker is free, so global-RNG draws inside tasks are
    still scheduling-dependent; for reproducible augmentation draw from a per-task generator,
    ``numpy.random.default_rng(bitexact.worker_seed(task_index))``.
    """
    import multiprocessing

    identity = multiprocessing.current_process()._identity
    index = identity[-1] if identity else 0
    s = worker_seed(index, seed=seed)
    _seed_libraries(s, sys.modules.get("torch") is not None)
    return s


# ----------------------------------------------------------------------------- outputs

def _resolve(name, suffix=".safetensors"):
    """Absolute output path of ``name`` under :func:`out_dir`; refuses paths that escape it."""
    root = out_dir()
    name = os.fspath(name)
    if not name.endswith(suffix):
        name += suffix
    if os.path.isabs(name) or ".." in name.replace("\\", "/").split("/"):
        raise ValueError("bitexact.dump: name %r must be a relative path inside $BITEXACT_OUT" % name)
    base = os.path.basename(name)
    if base.startswith(_protocol.METADATA_PREFIX):
        raise ValueError("bitexact.dump: names starting with '.bitexact-' are reserved")
    return os.path.join(root, name)


def _atomic_write(path, data, mode="wb"):
    """Writes ``data`` to ``path`` through a temporary file and a rename."""
    d = os.path.dirname(path)
    if d:
        os.makedirs(d, exist_ok=True)
    tmp = "%s.tmp-%d" % (path, os.getpid())
    with open(tmp, mode) as f:
        f.write(data)
    os.replace(tmp, path)


def dump(name, /, **tensors):
    """Writes ``$BITEXACT_OUT/<name>.safetensors`` holding ``tensors``; returns its path.

    ``name`` may contain subdirectories (created); ``.safetensors`` is appended unless present.
    Values: numpy arrays (bool and every integer/float dtype; big-endian arrays are stored
    little-endian), torch tensors (moved to CPU, made contiguous, bits kept: bf16 stays bf16,
    f16 stays f16), Python scalars and nested lists (bool -> BOOL, int -> I64, float -> F64),
    anything with ``__array__``. Names with dots work via a dict: ``dump("w", **{"fc1.weight":
    w})``. Tensors are stored in sorted name order. Writes ``.bitexact-platform.json`` on first
    use. A no-op returning ``None`` when ``BITEXACT_OUT`` is unset.
    """
    if not active():
        return None
    path = _resolve(name)
    tensors = _without_none(name, tensors)
    tracer = sys.modules.get("bitexact._trace")  # dump's own tensor copies are not the program's ops
    with tracer.paused() if tracer is not None else _no_pause():
        blob = _safetensors.serialize(tensors)
    _atomic_write(path, blob)
    _ensure_platform()
    return path


class _no_pause:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


_none_warned = set()


def _without_none(name, tensors):
    """``tensors`` without its ``None`` values (a parameter with no gradient), each named once
    in a warning: ``dump("g", **{n: p.grad ...})`` works when some gradients do not exist."""
    missing = [k for k, v in tensors.items() if v is None]
    for k in missing:
        if (name, k) not in _none_warned:
            _none_warned.add((name, k))
            import warnings

            warnings.warn(
                "bitexact: %s: %r is None (no tensor), not written" % (name, k), stacklevel=3
            )
    return {k: v for k, v in tensors.items() if v is not None}


def _rss_bytes():
    """Current resident set size in bytes: ``/proc/self/statm``, else ``resource``'s peak RSS
    (the best available without /proc), else ``None``."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError, AttributeError):
        pass
    try:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB on Linux
    except (ImportError, OSError):
        return None


def _cuda_allocated():
    """``torch.cuda.memory_allocated()`` when torch has initialised CUDA, else ``None``."""
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "cuda"):
        return None
    try:
        if torch.cuda.is_initialized():
            return int(torch.cuda.memory_allocated())
    except Exception:  # a broken CUDA setup must not break the training script
        return None
    return None


def step(i, /, **tensors):
    """``dump(f"step_{i:04d}", **tensors)`` plus a line in ``$BITEXACT_OUT/.bitexact-memory.jsonl``:
    ``{"step": i, "rss_bytes": ..., "torch_cuda_allocated": bytes or null}`` that bitexact checks
    for growth step over step. Returns the safetensors path; a no-op outside bitexact.

    ``i`` is a **global** step index: each may be written once per run. Writing the same index
    twice (``for i, batch in enumerate(loader)`` inside an epoch loop) raises ``ValueError``
    instead of silently overwriting the earlier epoch: number steps across epochs
    (``step(epoch * len(loader) + i, ...)``, or a counter). ``None`` values are skipped with a
    warning (see :func:`dump`)."""
    if not active():
        return None
    i = int(i)
    written = _steps_written.setdefault(out_dir(), set())
    if i in written:
        raise ValueError(
            "bitexact.step(%d): step %d was already written (step_%04d.safetensors); step "
            "indices are global, so number them across epochs, e.g. "
            "step(epoch * len(loader) + i, ...)" % (i, i, i)
        )
    written.add(i)
    path = dump("step_%04d" % i, **tensors)
    tracer = sys.modules.get("bitexact._trace")  # under `bitexact run --trace ops`
    if tracer is not None:
        tracer.on_helper_step(i)
    line = json.dumps(
        {"step": i, "rss_bytes": _rss_bytes(), "torch_cuda_allocated": _cuda_allocated()},
        separators=(", ", ": "),
    )
    with open(os.path.join(out_dir(), MEMORY_FILE), "a") as f:
        f.write(line + "\n")
    return path


# ----------------------------------------------------------------------------- platform

def platform_info(probe_cuda=False):
    """The dict written to ``.bitexact-platform.json``: python, numpy and torch versions, the
    seed :func:`seed_everything` used and its time, torch's threads and CUDA (see
    :func:`bitexact._platform_info.info`)."""
    return _platform_info.info(_seed, _seed_seconds, probe_cuda)


def write_platform(probe_cuda=False):
    """Writes ``$BITEXACT_OUT/.bitexact-platform.json`` (see :func:`platform_info`); returns its
    path. :func:`dump` and :func:`step` call it on first use; call it yourself (after moving the
    model to the GPU, or with ``probe_cuda=True``) to record the GPU. ``None`` outside bitexact."""
    global _platform_written
    if not active():
        return None
    path = os.path.join(out_dir(), PLATFORM_FILE)
    text = json.dumps(platform_info(probe_cuda), indent=2, sort_keys=True) + "\n"
    _atomic_write(path, text.encode("utf-8"))
    _platform_written = True
    return path


def _ensure_platform():
    if not _platform_written:
        write_platform()
