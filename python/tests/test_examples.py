"""The examples in examples/python/, run twice the way `bitexact run` runs them (a fresh
BITEXACT_OUT per run, BITEXACT_RUN = 0, 1): outputs identical in the normal mode, and each
planted bug shows up exactly when the variation that should blame it is applied.

The torch example (train_torch.py: a resume equal to the uninterrupted run, and its planted
forgotten RNG diverging at the resume step) is tested through `bitexact run` itself, by the Rust
test `run_mode::torch_example_resume_is_bit_exact_and_its_planted_bug_is_caught`: the same
runs again here would only cost CI a minute."""

import hashlib
import os
import platform
import subprocess
import sys

import pytest

pytest.importorskip("numpy")

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "python")
FIXED = {"PYTHONHASHSEED": "0", "BITEXACT_SEED": "0", "BITEXACT_DETERMINISTIC": "1",
         "BITEXACT_BENCHMARK": "0"}
# Every process-level variation bitexact applies, at once: run 0 gets the first value.
VARIED = {
    "BITEXACT_THREADS": ("1", "4"), "OMP_NUM_THREADS": ("1", "4"),
    "OPENBLAS_NUM_THREADS": ("1", "4"), "MKL_NUM_THREADS": ("1", "4"),
    "BITEXACT_WORKERS": ("0", "3"), "PYTHONHASHSEED": ("1", "2"),
    "MALLOC_PERTURB_": ("85", "170"), "BITEXACT_POISON": ("85", "170"),
}


def run_twice(tmp_path, script, args, vary=()):
    """Runs the example twice; returns the {relative path: sha256} of each run's outputs
    (metadata files named .bitexact-* left out)."""
    digests = []
    for run in (0, 1):
        out = tmp_path / ("run%d" % run)
        out.mkdir(parents=True)
        env = dict(os.environ, BITEXACT_OUT=str(out), BITEXACT_RUN=str(run), **FIXED)
        for var in vary:
            env[var] = VARIED[var][run]
        subprocess.run([sys.executable, os.path.join(EXAMPLES, script)] + list(args), env=env,
                       check=True, stdout=subprocess.PIPE)
        found = {}
        for root, _, files in os.walk(str(out)):
            for f in files:
                if not f.startswith(".bitexact-"):
                    p = os.path.join(root, f)
                    found[os.path.relpath(p, str(out))] = hashlib.sha256(open(p, "rb").read()).digest()
        assert found, "the example wrote nothing"
        assert (out / ".bitexact-memory.jsonl").is_file()
        digests.append(found)
    return digests


def differing(digests):
    a, b = digests
    assert sorted(a) == sorted(b)
    return sorted(n for n in a if a[n] != b[n])


def test_numpy_example_is_deterministic_under_every_variation(tmp_path):
    assert differing(run_twice(tmp_path, "train_numpy.py", [], vary=list(VARIED))) == []


@pytest.mark.parametrize("planted,blame", [
    ("unseeded-workers", None),  # differs even with nothing varied
    ("thread-sum", ["BITEXACT_THREADS", "OMP_NUM_THREADS"]),
    ("set-order", ["PYTHONHASHSEED"]),
    ("uninit-read", ["MALLOC_PERTURB_", "BITEXACT_POISON"]),
])
def test_numpy_example_planted_bugs_are_caught_and_blamed(tmp_path, planted, blame):
    if planted == "uninit-read" and platform.libc_ver()[0] != "glibc":
        pytest.skip("MALLOC_PERTURB_ is a glibc feature")
    args = ["--planted", planted, "--steps", "6"]
    if blame is None:
        diff = differing(run_twice(tmp_path / "control", args=args, script="train_numpy.py"))
        assert "step_0000.safetensors" in diff
        return
    others = [v for v in VARIED if v not in blame]
    assert differing(run_twice(tmp_path / "control", "train_numpy.py", args, vary=others)) == []
    diff = differing(run_twice(tmp_path / "blamed", "train_numpy.py", args, vary=blame))
    assert "step_0000.safetensors" in diff and "final.safetensors" in diff
