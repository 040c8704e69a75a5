"""Timings for benches/pytest_check.rs (run by it; prints one JSON object): the cost of the
pytest plugin's ``bitexact.check`` against doing the same by hand, measured side by side.

- ``isolated`` / ``by_hand``: ``check(work, runs=K)`` with ``isolate=True`` (``bitexact run``
  in a driver process, K fresh interpreters, canonical digests) against K
  ``subprocess.run([python, "-c", "...work()..."])`` calls that pickle the result back,
  one after the other, and a comparison of the results (what a user writes without bitexact);
  goal: ``isolated <= 1.1 * by_hand + 0.1 s``;
- ``in_process`` / ``calls``: ``check(make_100mb, runs=K, isolate=False)`` against K plain
  calls of ``make_100mb`` in a loop (a 100 MB float32 result computed from a fixed input); goal
  ``in_process <= 1.05 * calls``. ``in_process_digests`` / ``calls_2``: the same with run
  0's digests read from the result (they are computed on first read).

Best of REPS (argv[1], default 5) for each figure, the two of a pair timed alternately, K = argv[2] (default 2). numpy only.
"""

import json
import os
import pickle
import subprocess
import sys
import time

import numpy as np

N_100MB = 25_000_000  # float32 elements


def work():
    """A small deterministic job for the isolated figures: a few ms of numpy."""
    x = np.linspace(0.0, 1.0, 200_000, dtype=np.float64)
    return {"y": np.sin(x) * np.cos(x), "sum": float(x.sum())}


_BASE = []


def make_100mb():
    """A 100 MB float32 result computed from a fixed input (an elementwise layer of sorts)."""
    if not _BASE:
        _BASE.append(np.linspace(-3.0, 3.0, N_100MB, dtype=np.float32))
    x = _BASE[0]
    y = np.tanh(x * np.float32(1.0001) + np.float32(0.5))
    y *= np.exp(-x * x)
    return {"activations": y}


def best_pair(reps, base, ours):
    """Best of ``reps`` for each of two functions, timed alternately so that both see the same
    load on a shared machine."""
    times = ([], [])
    for _ in range(reps):
        for f, into in ((base, times[0]), (ours, times[1])):
            t0 = time.perf_counter()
            f()
            into.append(time.perf_counter() - t0)
    return min(times[0]), min(times[1])


def calls(fn, k):
    """``fn`` called ``k`` times, each result dropped before the next call."""
    for _ in range(k):
        fn()


def by_hand(k):
    """K fresh interpreters calling ``work`` and pickling the result back; then compare."""
    here = os.path.dirname(os.path.abspath(__file__))
    code = ("import sys, pickle; sys.path.insert(0, %r); import pytest_check as m; "
            "sys.stdout.buffer.write(pickle.dumps(m.work()))" % here)
    results = [pickle.loads(subprocess.run([sys.executable, "-c", code], check=True,
                                           capture_output=True).stdout) for _ in range(k)]
    first = results[0]
    assert all(np.array_equal(r["y"], first["y"]) and r["sum"] == first["sum"] for r in results)


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    k = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import pytest_check as m  # `work` by an importable name, as a test module's function is
    from bitexact._pytest.check import check

    out = {"runs": k, "reps": reps}
    out["by_hand"], out["isolated"] = best_pair(
        reps, lambda: by_hand(k), lambda: check(m.work, runs=k, name="bench"))
    m.make_100mb()  # the fixed input, made once outside the timings
    out["calls"], out["in_process"] = best_pair(
        reps, lambda: calls(m.make_100mb, k),
        lambda: check(m.make_100mb, runs=k, isolate=False, name="bench"))
    out["calls_2"], out["in_process_digests"] = best_pair(
        reps, lambda: calls(m.make_100mb, k),
        lambda: check(m.make_100mb, runs=k, isolate=False, name="bench").digests)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
