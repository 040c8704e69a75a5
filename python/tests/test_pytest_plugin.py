"""The pytest plugin (``bitexact._pytest.plugin``), tested with pytest's ``pytester``: the
plugin is active in the inner runs through the entry point of the installed wheel, as users
get it. Inner test files use tiny arrays and few processes; the one torch test (threads
blame) starts eight interpreters that import torch (two check its premise)."""

import os
import signal
import subprocess
import sys
import time

import pytest

import bitexact

# Imported here so that in-process inner runs (pytester restores sys.modules after each) find
# it loaded: numpy's extension cannot be loaded twice in one process.
np = pytest.importorskip("numpy")

pytest_plugins = ["pytester"]

HEAD = """
import numpy as np
import pytest

def det():
    return {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "n": 3, "parts": [1.5, (True,)]}

def unseeded():
    return {"w": np.random.rand(2, 3).astype(np.float32)}
"""


@pytest.fixture(autouse=True)
def no_ci(monkeypatch):
    """Inner runs write pending snapshots unless a test sets CI."""
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("INSTA_UPDATE", raising=False)


def outcomes(result):
    return result.parseoutcomes()


def test_a_deterministic_function_passes_and_its_result_holds_canonical_digests(pytester):
    pytester.makepyfile(HEAD + """
import bitexact as bx

def test_isolated(bitexact):
    r = bitexact.check(det, runs=3)
    assert r.deterministic and r.runs == 3 and r.verdict == "deterministic"
    assert r.digests["w"] == bx.digest(np.arange(6, dtype=np.float32).reshape(2, 3))
    assert r.digests["n"] == bx.digest(3)
    assert sorted(r.digests) == ["n", "parts.0", "parts.1.0", "w"]
    assert r.report["runs"] == 3

def test_in_process(bitexact):
    r = bitexact.check(det, isolate=False)
    assert r.deterministic and r.value["n"] == 3
    assert r.digests == bitexact.check(det).digests
""")
    result = pytester.runpytest()
    result.assert_outcomes(passed=2)


def test_an_unseeded_function_fails_with_the_explanation(pytester):
    pytester.makepyfile(HEAD + """
def test_isolated(bitexact):
    bitexact.check(unseeded)

def test_in_process(bitexact):
    bitexact.check(unseeded, isolate=False)

def test_not_failing(bitexact):
    r = bitexact.check(unseeded, isolate=False, fail=False)
    assert r.verdict == "nondeterministic" and "first divergence: w" in r.text
""")
    result = pytester.runpytest()
    result.assert_outcomes(failed=2, passed=1)
    out = result.stdout.str()
    result.stdout.fnmatch_lines([
        "bitexact: unseeded is not deterministic over 2 runs",
        "    first divergence: w: 6/6 elements differ (runs 0 and 1), first at [[]0, 0[]] "
        "(* vs *), max |Δ| *, max * ULP",
        "(the whole report of `bitexact run` on test_*.py::test_isolated is the section below)",
        "*- bitexact run's report -*",
        "*first divergence: unseeded.safetensors:w (every earlier output identical)",
        "*unseeded.safetensors:w: 6/6 elements differ (runs 0 and 1), first at [[]0, 0[]] "
        "(* vs *), max |Δ| *, max * ULP",
        "bitexact: unseeded is not deterministic in this process: run 1 differs from run 0",
        "    first divergence: w: 6/6 elements differ (runs 0 and 1), first at [[]0, 0[]] "
        "(* vs *), max |Δ| *, max * ULP",
    ])
    assert "Traceback" not in out


DOT = """
def dot():
    import torch
    x = torch.rand(1 << 21, generator=torch.Generator().manual_seed(0))
    return {"dot": torch.dot(x, x)}  # BLAS splits the sum by thread count
"""


def _dot_bits(threads):
    """The bits of ``DOT``'s dot product in a fresh interpreter at ``threads`` threads."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    code = DOT + "print(dot()['dot'].numpy().tobytes().hex())"
    return subprocess.run([sys.executable, "-c", code], env=env, check=True,
                          capture_output=True, text=True).stdout


def test_vary_threads_blames_threads_on_a_thread_dependent_torch_reduction(pytester):
    pytest.importorskip("torch")
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("varying threads needs 2 cores")
    # Whether the BLAS splits this sum by thread count is the CPU's kernels' business: checked,
    # not assumed.
    if _dot_bits(1) == _dot_bits(2):
        pytest.skip("premise does not hold on this machine: torch.dot gives identical bits at "
                    "1 vs 2 threads on this CPU: nothing to blame")
    pytester.makepyfile(DOT + """

def test_threads(bitexact):
    bitexact.check(dot, vary=("threads",))
""")
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "bitexact: dot is not deterministic over 2 runs",
        "    first divergence: dot: 1/1 elements differ*",
        "    blame: breaks when varying: threads*",
        "*- bitexact run's report -*",
        "*varied per run: BITEXACT_THREADS=1|2*",
        "*dot.safetensors:dot: 1/1 elements differ*",
        "*blame: breaks when varying: threads*",
    ])


def _snap_files(pytester):
    d = pytester.path / "snapshots"
    return sorted(str(p.relative_to(d)) for p in d.rglob("*")) if d.exists() else []


def test_snapshot_workflow_first_run_update_change_review_and_ci(pytester, monkeypatch):
    test = pytester.makepyfile(HEAD + """
def test_snap(bitexact):
    bitexact.assert_snapshot(w=det()["w"], n=2)
""")
    # First run: pending .snap.new, the test fails saying how to accept.
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "no committed snapshot for test_snapshot_workflow*.py::test_snap at *@seed0-det.snap",
        "wrote the new digests to *.snap.new; to accept them, run one of:",
        "*pytest --bitexact-update test_snapshot_workflow*.py::test_snap",
        "*bitexact snapshot review --accept --snapshots *",
    ])
    files = _snap_files(pytester)
    assert len(files) == 2 and files[1].endswith("::test_snap@seed0-det.snap.new"), files
    cls = files[0]
    # --bitexact-update writes the .snap and removes the pending file; then it passes.
    pytester.runpytest("--bitexact-update").assert_outcomes(passed=1)
    snap = [f for f in _snap_files(pytester) if f.endswith(".snap")]
    assert snap and not [f for f in _snap_files(pytester) if f.endswith(".new")]
    text = (pytester.path / "snapshots" / snap[0]).read_text()
    assert "  n: " + bitexact.digest(2) in text and "program.numpy" in text and cls in snap[0]
    pytester.runpytest().assert_outcomes(passed=1)
    # A change: fails naming the tensor, pending written; `bitexact snapshot review` accepts.
    test.write_text(test.read_text().replace("n=2", "n=3"))
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["snapshot mismatch for *::test_snap (*): tensor `n` * → *; "
                                 "same platform fingerprint: regression*"])
    review = subprocess.run(
        [sys.executable, "-m", "bitexact", "snapshot", "review", "--accept", "--snapshots",
         str(pytester.path / "snapshots")], capture_output=True, text=True)
    assert review.returncode == 0, review.stderr
    pytester.runpytest().assert_outcomes(passed=1)
    # CI: nothing written, the test fails.
    test.write_text(test.read_text().replace("n=3", "n=4"))
    monkeypatch.setenv("CI", "true")
    before = _snap_files(pytester)
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["CI is set: nothing written*"])
    assert _snap_files(pytester) == before


def test_snapshot_names_and_leaves(pytester):
    pytester.makepyfile(HEAD + """
@pytest.mark.parametrize("k", [1, 2])
def test_two(bitexact, k):
    bitexact.assert_snapshot(state={"w": det()["w"], "k": [k]})
    bitexact.assert_snapshot(x=k)
    bitexact.assert_snapshot("named", y=k)
""")
    pytester.runpytest("--bitexact-update").assert_outcomes(passed=2)
    names = sorted(f.split("/")[-1] for f in _snap_files(pytester) if f.endswith(".snap"))
    stem = "test_snapshot_names_and_leaves.py::test_two"
    assert names == sorted(["named@seed0-det.snap"] + [
        "%s[%d]%s@seed0-det.snap" % (stem, k, s) for k in (1, 2) for s in ("", "-2")]), names
    pytester.runpytest().assert_outcomes(passed=1, failed=1)  # "named" differs between k


def test_the_marker_compares_what_each_run_records(pytester):
    pytester.makepyfile(HEAD + """
@pytest.mark.bitexact(runs=2)
def test_loop_ok(bitexact, tmp_path):
    for step in range(3):
        bitexact.record(loss=float(step), w=np.ones(2) * step)

@pytest.mark.bitexact(runs=2)
def test_loop_diverges(bitexact):
    noise = np.random.rand(2)
    for step in range(3):
        bitexact.record(loss=float(step), w=noise if step == 2 else np.zeros(2))

@pytest.mark.bitexact
def test_loop_raises(bitexact):
    bitexact.record(loss=1.0)
    assert 1 == 2, "the loop broke"
""")
    result = pytester.runpytest()
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines([
        "bitexact: test_loop_diverges is not deterministic over 2 runs",
        "    first divergence: record_0002.safetensors:w: 2/2 elements differ (runs 0 and 1)*",
        "*command: test_*.py::test_loop_diverges, alone in a fresh pytest process each run",
        "*first divergence: record_0002.safetensors:w (every earlier output identical)",
        "bitexact: test_loop_raises failed in a fresh process*",
        "*the loop broke*",
    ])


def test_bad_uses_are_named(pytester):
    pytester.makepyfile(HEAD + """
def text():
    return {"a": "words"}

def crash():
    raise RuntimeError("boom in the worker")

def test_lambda(bitexact):
    bitexact.check(lambda: 1)

def test_local(bitexact):
    def inner():
        return 1
    bitexact.check(inner)

def test_not_tensors_isolated(bitexact):
    bitexact.check(text)

def test_not_tensors_in_process(bitexact):
    bitexact.check(text, isolate=False)

def test_crash(bitexact):
    bitexact.check(crash)

STATE = np.zeros(3)

def in_place():
    STATE[:] += 1
    return {"state": STATE}

def test_aliased_result(bitexact):
    bitexact.check(in_place, isolate=False)

def test_bad_arguments(bitexact):
    with pytest.raises(ValueError, match="runs=1 must be"):
        bitexact.check(det, runs=1)
    with pytest.raises(ValueError, match="'bogus' is not one of"):
        bitexact.check(det, vary=("bogus",))
    with pytest.raises(ValueError, match="need isolate=True"):
        bitexact.check(det, isolate=False, vary=("threads",))
""")
    result = pytester.runpytest()
    result.assert_outcomes(failed=6, passed=1)
    result.stdout.fnmatch_lines([
        "*cannot be pickled (Can't pickle local object 'test_lambda.<locals>.<lambda>'). "
        "Use a function defined at module level*",
        "*test_local.<locals>.inner cannot be pickled*(def inner(...) at the top of the test file*",
        "*TypeError: bitexact: text returned a str at `a`, which is not a tensor*",
        "*run 0: exited with status 1: RuntimeError: boom in the worker; last lines of stderr:",
        '*raise RuntimeError("boom in the worker")',
        "*in_place returned the same memory for `state` in run 1 as in run 0*use isolate=True",
    ])
    # In process: the failure; isolated: the failure's summary and the report below it.
    assert result.stdout.str().count("returned a str at `a`") == 3


def test_a_timeout_kills_the_run(pytester):
    pytester.makepyfile("""
def slow():
    import time
    time.sleep(60)
    return 1

def test_slow(bitexact):
    bitexact.check(slow, timeout=0.5)
""")
    t = time.monotonic()
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*timed out after 0.5s*its process group was killed*"])
    assert time.monotonic() - t < 30


def _alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_ctrl_c_leaves_no_worker_behind(pytester):
    pidfile = pytester.path / "worker.pid"
    pytester.makepyfile("""
import os, time

def hang(path):
    with open(path, "w") as f:
        f.write(str(os.getpid()))
    time.sleep(120)
    return 1

def test_hang(bitexact):
    bitexact.check(hang, %r)
""" % str(pidfile))
    # SIGINT at its default in the child, whatever this process inherited: a shell starts a
    # background job with SIGINT ignored, and Python then never raises KeyboardInterrupt.
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                            cwd=pytester.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 60
        while not (pidfile.exists() and pidfile.read_text()) and time.monotonic() < deadline:
            time.sleep(0.1)
        worker = int(pidfile.read_text())
        assert _alive(worker)
        proc.send_signal(signal.SIGINT)
        out = proc.communicate(timeout=90)[0].decode()
    finally:
        proc.kill()
    assert "KeyboardInterrupt" in out, out
    deadline = time.monotonic() + 10
    while _alive(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(worker), "worker %d outlived pytest" % worker


def test_skips_and_disabling(pytester):
    pytester.makeconftest(
        "import os\nos.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})\n")
    pytester.makepyfile(HEAD + """
def test_threads(bitexact):
    bitexact.check(det, vary=("threads",))
""")
    result = pytester.runpytest_subprocess("-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*vary=threads needs at least 2 CPU cores*"])
    result = pytester.runpytest_subprocess("-p", "no:bitexact")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*fixture 'bitexact' not found*"])


def test_junit_xml_carries_the_explanation(pytester):
    pytester.makepyfile(HEAD + """
def test_unseeded(bitexact):
    bitexact.check(unseeded, isolate=False)
""")
    pytester.runpytest("--junitxml=report.xml").assert_outcomes(failed=1)
    xml = (pytester.path / "report.xml").read_text()
    assert "first divergence: w" in xml and "elements differ (runs 0 and 1)" in xml


def test_xdist_workers_run_their_own_checks(pytester):
    pytest.importorskip("xdist", reason="pytest-xdist is not installed")
    pytester.makepyfile(HEAD + """
def test_a(bitexact):
    assert bitexact.check(det).deterministic

def test_b(bitexact):
    bitexact.check(unseeded)
""")
    result = pytester.runpytest_subprocess("-n", "2")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["    first divergence: w: 6/6 elements differ*",
                                 "*- bitexact run's report -*",
                                 "*first divergence: unseeded.safetensors:w*"])
