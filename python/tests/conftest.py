"""Test setup: import the helper from this source tree (python/), installed or not, and give
each test a clean bitexact environment."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import bitexact  # noqa: E402

_VARS = [
    "BITEXACT_OUT", "BITEXACT_RUN", "BITEXACT_SEED", "BITEXACT_DETERMINISTIC",
    "BITEXACT_BENCHMARK", "BITEXACT_WORKERS", "BITEXACT_THREADS", "BITEXACT_POISON",
    "CUBLAS_WORKSPACE_CONFIG",
]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    """No bitexact variables set, and the module's per-process state reset."""
    for v in _VARS:
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setattr(bitexact, "_seed", None)
    monkeypatch.setattr(bitexact, "_platform_written", False)
    monkeypatch.setattr(bitexact._controls, "_recorded", set())
    yield


@pytest.fixture
def out(tmp_path, monkeypatch):
    """A fresh $BITEXACT_OUT, as bitexact run gives each run."""
    d = tmp_path / "out"
    d.mkdir()
    monkeypatch.setenv("BITEXACT_OUT", str(d))
    return d
