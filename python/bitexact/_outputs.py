"""Outputs: what a script writes into ``$BITEXACT_OUT`` -- :func:`dump` and :func:`step`
(tensors as safetensors, and per step a line of memory use in ``.bitexact-memory.jsonl``),
:func:`write_platform` (``.bitexact-platform.json``; :func:`record_platform` for the tracer), and where they write: :func:`active`,
:func:`out_dir` (``$BITEXACT_OUT``, or ``rank<RANK>/`` under it for a torch.distributed rank).
Re-exported by :mod:`bitexact`; outside bitexact every writer here is a no-op."""

import json
import os
import sys

from . import _dist, _platform_info, _protocol, _safetensors, _seed

# Step indices step() wrote, per output directory: a repeated index is an error.
_steps_written = {}
# Whether this process wrote .bitexact-platform.json (dump and step write it on first use).
_platform_written = False


# ----------------------------------------------------------------------------- where

def active():
    """Whether this process runs under ``bitexact run`` (``BITEXACT_OUT`` is set)."""
    return bool(os.environ.get(_protocol.OUT_ENV))


def out_dir():
    """The run's output directory, or ``None`` outside bitexact: ``$BITEXACT_OUT``, or for a
    rank of a torch.distributed run (``RANK`` and ``WORLD_SIZE`` set, e.g. by ``torchrun``)
    ``$BITEXACT_OUT/rank<RANK>`` (created), where :func:`dump` and :func:`step` write too."""
    return _dist.out_root()


# ----------------------------------------------------------------------------- tensors

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
    """A context that does nothing: :func:`dump` without the tracer loaded."""

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


# (name, tensor name) pairs whose None value dump() warned about: each is named once.
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
    with open(os.path.join(out_dir(), _protocol.MEMORY_FILE), "a") as f:
        f.write(line + "\n")
    return path


# ----------------------------------------------------------------------------- platform

def platform_info(probe_cuda=False):
    """The dict written to ``.bitexact-platform.json``: python, numpy and torch versions, the
    seed :func:`seed_everything` used and its time, torch's threads and CUDA (see
    :func:`bitexact._platform_info.info`)."""
    return _platform_info.info(_seed._last_seed, _seed._last_seconds, probe_cuda)


def write_platform(probe_cuda=False):
    """Writes ``$BITEXACT_OUT/.bitexact-platform.json`` (see :func:`platform_info`); returns its
    path. :func:`dump` and :func:`step` call it on first use; call it yourself (after moving the
    model to the GPU, or with ``probe_cuda=True``) to record the GPU. ``None`` outside bitexact."""
    global _platform_written
    if not active():
        return None
    path = os.path.join(out_dir(), _protocol.PLATFORM_FILE)
    text = json.dumps(platform_info(probe_cuda), indent=2, sort_keys=True) + "\n"
    _atomic_write(path, text.encode("utf-8"))
    _platform_written = True
    return path


def record_platform(at_exit=False):
    """The tracer's record of the platform (``bitexact run --trace``), so that a kept run says
    where it comes from even when the script never imports bitexact: writes
    ``.bitexact-platform.json`` when tracing starts (without counting as this process's own
    write: :func:`dump` still writes it, with the seed, on first use), and at exit again
    unless the script wrote it itself and it is still there (a program may clear its output
    directory); at exit it records torch's threads as the program left them, and the GPU once
    CUDA is initialised. Never raises: the program's run must not fail for its record."""
    if not active():
        return None
    path = os.path.join(out_dir(), _protocol.PLATFORM_FILE)
    if at_exit and _platform_written and os.path.exists(path):
        return None
    if not at_exit and os.path.exists(path):
        return None
    written = _platform_written
    try:
        return write_platform()
    except Exception:
        return None
    finally:
        _set_written(written)


def _set_written(written):
    """Sets whether the program wrote ``.bitexact-platform.json`` itself."""
    global _platform_written
    _platform_written = written


def _ensure_platform():
    """Writes ``.bitexact-platform.json`` unless this process already did."""
    if not _platform_written:
        write_platform()
