"""Seeding: :func:`seed_everything` (every RNG plus torch's determinism switches, from
``$BITEXACT_SEED``), :func:`worker_seed` / :func:`worker_init_fn` / :func:`pool_initializer`
(per-worker seeds for DataLoader workers and ``multiprocessing`` pools) and
:func:`dataloader_kwargs`. Re-exported by :mod:`bitexact`; the seed used and the time
:func:`seed_everything` took are kept here for ``.bitexact-platform.json``."""

import hashlib
import importlib
import os
import random
import struct
import sys
import time

from . import _controls, _protocol
from ._controls import workers

_MASK64 = (1 << 64) - 1

# The seed of the last seed_everything() call in this process (inherited by forked workers).
_last_seed = None
# Seconds the last seed_everything() took (torch's deterministic switches import a lot).
_last_seconds = None


def _import(name):
    """Imports module ``name`` if it is installed, else returns ``None``."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None

def _base_seed():
    """The seed set by :func:`seed_everything` in this process, else ``$BITEXACT_SEED``
    (default 0)."""
    if _last_seed is not None:
        return _last_seed
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
    global _last_seed, _last_seconds
    t0 = time.perf_counter()
    if seed is None:
        seed = _controls.seed()
    seed = int(seed) & _MASK64
    _last_seed = seed
    deterministic = _controls.env_flag(_protocol.DETERMINISTIC_ENV, True)
    benchmark = _controls.env_flag(_protocol.BENCHMARK_ENV, False)
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
        _use_deterministic_algorithms(t, deterministic)
        t.backends.cudnn.deterministic = deterministic
        t.backends.cudnn.benchmark = benchmark
        if deterministic:
            det = _import("torch.utils.deterministic")
            if det is not None and hasattr(det, "fill_uninitialized_memory"):
                det.fill_uninitialized_memory = True
        if n_threads is not None:
            t.set_num_threads(n_threads)
    _last_seconds = time.perf_counter() - t0
    return seed


def _use_deterministic_algorithms(torch, mode):
    """``torch.use_deterministic_algorithms(mode)``, without the import of Inductor's config it
    makes (which imports TorchDynamo: 1.5 s of CPU, about as much as torch itself): ATen's
    switch now, and Inductor's ``deterministic`` setting the moment ``torch._inductor.config``
    loads, or now when it has (:func:`bitexact._imports.when_loaded`). The program's own later
    call still wins: its import runs this first. Where torch lacks the switch it is called
    as is."""
    switch = getattr(torch._C, "_set_deterministic_algorithms", None)
    if switch is None:
        torch.use_deterministic_algorithms(mode)
        return
    switch(mode, warn_only=False)

    def configure(config):
        config.deterministic = mode

    from . import _imports

    global _inductor_pending
    if _inductor_pending is not None:  # a later call's mode replaces an earlier one's
        _inductor_pending.cancel()
    _inductor_pending = _imports.when_loaded("torch._inductor.config", configure)


# The setting of Inductor's ``deterministic`` waiting for its config to load (a handle with
# ``cancel()``), or None.
_inductor_pending = None


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
