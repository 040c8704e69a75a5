"""The controls ``bitexact run`` gives a run, read from its environment, and the record of
which ones the program read.

Some variations act on a program whatever it does (``--vary threads`` sets
``OMP_NUM_THREADS``; ``hashseed`` sets ``PYTHONHASHSEED``). Others reach it only if it reads
them: ``--vary workers`` changes ``$BITEXACT_WORKERS`` and ``--vary seed`` changes
``$BITEXACT_SEED``, which a script with ``num_workers=2`` or ``seed_everything(1337)`` never
looks at. Every reader here appends one line per control to
``$BITEXACT_OUT/.bitexact-controls.jsonl`` (``{"control": "workers", "value": 3, "pid": N}``,
once per process), so the report can say which varied controls the program never read.
"""

import json
import os

from . import _protocol

CONTROLS_FILE = _protocol.CONTROLS_FILE

# (output directory, control, pid) triples this process has recorded.
_recorded = set()


def env_int(name, default):
    """Integer value of environment variable ``name``, or ``default`` when unset or empty."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw, 10)
    except ValueError:
        raise ValueError("bitexact: %s=%r is not a decimal integer" % (name, raw)) from None


def env_flag(name, default):
    """Boolean value of environment variable ``name`` (``1``/``0``, also true/false/on/off)."""
    raw = os.environ.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in ("1", "true", "on", "yes"):
        return True
    if raw in ("0", "false", "off", "no"):
        return False
    raise ValueError("bitexact: %s=%r is not 1 or 0" % (name, raw))


def record(control, value):
    """Notes in ``$BITEXACT_OUT/.bitexact-controls.jsonl`` that this process read ``control``
    (once per process and output directory; nothing outside bitexact). One short ``O_APPEND``
    write per line, so DataLoader workers and ranks that share the directory do not tear
    each other's lines."""
    out = os.environ.get(_protocol.OUT_ENV)
    if not out:
        return
    key = (out, control, os.getpid())
    if key in _recorded:
        return
    _recorded.add(key)
    line = json.dumps({"control": control, "value": value, "pid": os.getpid()}, sort_keys=True)
    fd = os.open(os.path.join(out, CONTROLS_FILE), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode("utf-8"))
    finally:
        os.close(fd)


def seed():
    """``$BITEXACT_SEED`` (default 0), recorded as read."""
    s = env_int(_protocol.SEED_ENV, 0)
    record("seed", s)
    return s


def workers(default=0):
    """The data-loader worker count for this run: ``$BITEXACT_WORKERS`` when set (always, under
    ``bitexact run``: ``--workers N``, default 0, and what ``--vary workers`` alternates), else
    ``default``. Recorded as read, so ``--vary workers`` is known to reach the script."""
    n = env_int(_protocol.WORKERS_ENV, None)
    if n is None:
        return default
    if n < 0:
        raise ValueError("bitexact: BITEXACT_WORKERS=%d is negative" % n)
    record("workers", n)
    return n


def threads(default=None):
    """The CPU thread count for this run: ``$BITEXACT_THREADS`` when bitexact sets it (``--threads``
    or ``--vary threads``), else ``default``. Recorded as read. bitexact also sets
    ``OMP_NUM_THREADS`` and friends, so torch and BLAS follow it even unread."""
    n = env_int(_protocol.THREADS_ENV, None)
    if n is None:
        return default
    if n < 1:
        raise ValueError("bitexact: BITEXACT_THREADS=%d must be at least 1" % n)
    record("threads", n)
    return n


def controls():
    """Every control of this run as a dict: ``seed``, ``deterministic``, ``benchmark``,
    ``workers`` (``None`` outside bitexact), ``threads`` (``None`` when not set). All
    recorded as read."""
    out = {
        "seed": seed(),
        "deterministic": env_flag(_protocol.DETERMINISTIC_ENV, True),
        "benchmark": env_flag(_protocol.BENCHMARK_ENV, False),
        "workers": workers(None),
        "threads": threads(None),
    }
    record("deterministic", out["deterministic"])
    record("benchmark", out["benchmark"])
    return out
