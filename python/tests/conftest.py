"""Test setup: import the installed package when there is one (what users get: the native
module, the console script; test_native checks its Python files are this checkout's), else the
helper from this source tree (python/, pure Python); and give each test a clean bitexact
environment."""

import json
import os
import subprocess
import sys

import pytest

try:
    import bitexact  # noqa: F401  (installed)
except ImportError:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import bitexact  # noqa: E402


def pytest_report_header(config):
    from bitexact import _digest

    where = os.path.dirname(os.path.abspath(bitexact.__file__))
    native = "native module present" if _digest._native else "no native module (pure Python)"
    return "bitexact imported from %s (%s)" % (where, native)

_VARS = [
    "BITEXACT_OUT", "BITEXACT_RUN", "BITEXACT_SEED", "BITEXACT_DETERMINISTIC",
    "BITEXACT_BENCHMARK", "BITEXACT_WORKERS", "BITEXACT_THREADS", "BITEXACT_POISON",
    "CUBLAS_WORKSPACE_CONFIG", "RANK", "LOCAL_RANK", "WORLD_SIZE", "BITEXACT_TRACE_OWNER",
    "BITEXACT_SEEDED", "BITEXACT_TRACE_ROWS",
]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    """No bitexact variables set, and the module's per-process state reset."""
    for v in _VARS:
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setattr(bitexact._seed, "_last_seed", None)
    monkeypatch.setattr(bitexact._outputs, "_platform_written", False)
    monkeypatch.setattr(bitexact._controls, "_recorded", set())
    yield


@pytest.fixture
def out(tmp_path, monkeypatch):
    """A fresh $BITEXACT_OUT, as bitexact run gives each run."""
    d = tmp_path / "out"
    d.mkdir()
    monkeypatch.setenv("BITEXACT_OUT", str(d))
    return d


def records(path):
    """The records of a trace file, in order."""
    with open(path) as f:
        return [json.loads(line) for line in f]


def traced(path, fn, **start):
    """The bytes of the trace of ``fn()``, written to ``path`` (``start``: the options of
    ``bitexact._trace.start``)."""
    from bitexact import _trace

    _trace.start(str(path), **start)
    try:
        fn()
    finally:
        _trace.stop()
    with open(path, "rb") as f:
        return f.read()


def no_host_lanes(monkeypatch):
    """Every record of the tracer sorted by ``describe``: neither its all-host lane
    (``bitexact._trace.digest._all_fast``) nor the native lanes of ``bitexact._trace.plain``,
    which read host tensors themselves (so that host tensors can stand for device tensors, or
    the lanes be compared with sorting)."""
    from bitexact._trace import digest, plain

    monkeypatch.setattr(digest, "_all_fast", lambda tensors, max_bytes: None)
    monkeypatch.setattr(plain, "NATIVE", False)


@pytest.fixture
def trace(tmp_path):
    """A trace file's path; the tracer is stopped after the test."""
    from bitexact import _trace

    path = str(tmp_path / "t.jsonl")
    yield path
    _trace.stop()


# What run_alone puts before a script: ``waited(pid, seconds)``, whether a forked child ended
# within that time (one that did not is killed). A hang is for ever: the default is generous,
# since a forked child of a torch program takes about a second to exit on an idle 2-core
# machine, and several times that while CI's Rust tests run beside pytest.
WAITED = """
def waited(pid, seconds=30):
    import os, time
    for _ in range(int(seconds * 20)):
        if os.waitpid(pid, os.WNOHANG)[0]:
            return True
        time.sleep(0.05)
    os.kill(pid, 9)
    return False
"""


def run_alone(script, *args, timeout=60):
    """Runs a Python ``script`` (after :data:`WAITED`) in a session of its own; a hang (a
    failure) is killed with every process it forked, never left behind."""
    import signal

    proc = subprocess.Popen([sys.executable, "-c", WAITED + script, *args],
                            start_new_session=True)
    try:
        assert proc.wait(timeout=timeout) == 0
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        pytest.fail("hung for %d s" % timeout)
