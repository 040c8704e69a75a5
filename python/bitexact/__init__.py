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
* :func:`record` -- ``bitexact.record(**tensors)``: what a ``@pytest.mark.bitexact`` test
  compares between its runs (the pytest plugin, ``_pytest.plugin``: the ``bitexact`` fixture
  with ``check`` and ``assert_snapshot``, and ``--bitexact-update``);
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

This file only re-exports; each concern has its module: seeding in ``_seed``, what a script
writes (``dump``, ``step``, the platform file) in ``_outputs``, the run's controls in
``_controls``, digests in ``_digest``, distributed ranks in ``_dist``, the op tracer in
the ``_trace`` subpackage, the pytest plugin in the ``_pytest`` subpackage.
"""

from . import _protocol
from ._controls import controls, threads, workers
from ._digest import cuda_status, digest, digests
from ._outputs import active, dump, out_dir, platform_info, step, write_platform
from ._pytest.leaves import record
from ._seed import (
    dataloader_kwargs,
    pool_initializer,
    seed_everything,
    worker_init_fn,
    worker_seed,
)

# The distribution this package is installed from (the PyPI name; the import name is bitexact).
_DISTRIBUTION = "bitexact-harness"
# What ``__version__`` is for a copy that was not installed (a source checkout on PYTHONPATH).
_UNKNOWN_VERSION = "0+unknown"


def __getattr__(name):
    """``bitexact.__version__``: the version of the installed distribution this very copy of
    the package came from (``importlib.metadata``, read once, at first use: the metadata is not
    read by a program that never asks). A copy that was not installed (a source checkout on
    ``PYTHONPATH``, even where another copy is installed) has none: :data:`_UNKNOWN_VERSION`, a
    PEP 440 version that sorts below every release and says it is unknown."""
    if name != "__version__":
        raise AttributeError("module %r has no attribute %r" % (__name__, name))
    version = _installed_version()
    globals()["__version__"] = version
    return version


def _installed_version():
    """The version of :data:`_DISTRIBUTION` when its files hold this ``__init__.py``, else
    :data:`_UNKNOWN_VERSION`.

    The distribution is looked for first beside this package's real directory, then on
    ``sys.path``. The first finds it where the program's ``sys.path`` does not: the package
    reached through a link from another environment, as ``bitexact run --trace`` gives a
    program whose Python lacks bitexact (``.bitexact-inject/bitexact``). The second finds an
    installed package whose directory is itself a link. ``_sitecustomize._installed_version``
    does the first search too (it cannot import this package)."""
    import os
    from importlib import metadata

    here = os.path.realpath(__file__)
    for where in ({"path": [os.path.dirname(os.path.dirname(here))]}, {}):
        try:
            for dist in metadata.distributions(name=_DISTRIBUTION, **where):
                init = dist.locate_file(os.path.join("bitexact", "__init__.py"))
                if os.path.realpath(str(init)) == here:
                    return dist.version
        except Exception:  # a broken *.dist-info: not this copy's
            continue
    return _UNKNOWN_VERSION


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
    "record",
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
