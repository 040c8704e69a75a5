"""What a failed ``bitexact.check`` or ``@pytest.mark.bitexact`` test prints: a
short summary as the failure message (the verdict line first, the first divergence with its
counts and ULPs, the blame), built from the JSON report, and ``bitexact run``'s whole report as
a report section of the test, with the test in place of the worker's command line. Inner runs
go through pytest's ``pytester``, as in ``test_pytest_plugin``; the summary's pieces are also
checked on hand-made report entries, without processes."""

import pytest

from bitexact._pytest import check as _pytest_check
from bitexact._pytest import summary as _pytest_summary

# Imported here so that in-process inner runs (pytester restores sys.modules after each) find
# it loaded: numpy's extension cannot be loaded twice in one process.
np = pytest.importorskip("numpy")

pytest_plugins = ["pytester"]

# A planted bug: a reduction whose order follows a random stream seeded from os.urandom, as a
# racy parallel sum's does. Each of the 16 sums adds the same 256 float32 values in another
# order per process, so some of them differ in their last bits.
PLANTED = """
import os
import random

import numpy as np
import pytest

def forward():
    order = random.Random(os.urandom(16))
    x = np.random.default_rng(0).standard_normal((16, 256)).astype(np.float32)
    sums = []
    for row in x:
        idx = list(range(row.size))
        order.shuffle(idx)
        acc = np.float32(0)
        for i in idx:
            acc += row[i]
        sums.append(acc)
    return {"out": {"weight": np.array(sums, dtype=np.float32).reshape(4, 4)}}

def same():
    return {"w": np.arange(6, dtype=np.float32)}
"""

SECTION = "bitexact run's report"


@pytest.fixture(autouse=True)
def no_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)


def _call_report(reprec, name):
    """The call-phase report of test ``name`` of an inline run."""
    reports = [r for r in reprec.getreports("pytest_runtest_logreport")
               if r.when == "call" and r.nodeid.endswith("::" + name)]
    assert len(reports) == 1, reports
    return reports[0]


def test_a_failing_check_reads_like_a_pytest_failure(pytester):
    pytester.makepyfile(test_model=PLANTED + """
def test_forward(bitexact):
    print("the test's own output")
    bitexact.check(forward)
""")
    reprec = pytester.inline_run()
    reprec.assertoutcome(failed=1)
    report = _call_report(reprec, "test_forward")
    text = report.longreprtext
    lines = text.splitlines()
    # The summary: the verdict line, the first divergence, where the rest is.
    assert lines[0] == "bitexact: forward is not deterministic over 2 runs", text
    assert lines[1].startswith("    first divergence: out.weight: "), text
    assert " elements differ (runs 0 and 1), first at [" in lines[1], text
    assert lines[1].endswith(" ULP"), text
    assert lines[-1] == ("(the whole report of `bitexact run` on test_model.py::test_forward "
                         "is the section below)"), text
    for internal in ("_pytest.worker", ".pkl", "env:", "BITEXACT_OUT", "command:"):
        assert internal not in text, (internal, text)
    # The whole report: a section of its own, first, with the test as its command.
    assert [t for t, _ in report.sections][:1] == [SECTION], report.sections
    full = dict(report.sections)[SECTION]
    assert "    command: forward, called by test_model.py::test_forward, in a fresh " \
           "interpreter each run\n" in full, full
    assert "_pytest.worker" not in full and ".pkl" not in full, full
    assert "    env: BITEXACT_BENCHMARK=0" in full, full
    assert "first divergence: forward.safetensors:out.weight (every earlier output " \
           "identical)" in full, full
    # What the terminal shows: the summary, then the report, then the captured output.
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*_ test_forward _*",
        "bitexact: forward is not deterministic over 2 runs",
        "    first divergence: out.weight: */16 elements differ (runs 0 and 1), first at [[]*[]] "
        "(* vs *), max |Δ| *, max * ULP",
        "(the whole report of `bitexact run` on test_model.py::test_forward is the section "
        "below)",
        "*- bitexact run's report -*",
        "case * verdict *",
        "test_model.py::test_forward  cpu  * nondeterministic *",
        "    command: forward, called by test_model.py::test_forward, in a fresh interpreter "
        "each run",
        "    env: *",
        "*- Captured stdout call -*",
        "the test's own output",
        "FAILED test_model.py::test_forward - Failed: bitexact: forward is not determ*",
    ])


def test_a_passing_check_prints_nothing_extra(pytester):
    pytester.makepyfile(test_model=PLANTED + """
def test_same(bitexact):
    assert bitexact.check(same).deterministic

def test_not_failing(bitexact):
    r = bitexact.check(forward, fail=False)
    assert r.verdict == "nondeterministic"
    assert r.text.startswith("bitexact: forward is not deterministic over 2 runs\\n")
    assert "first divergence: out.weight: " in r.text and ".pkl" not in r.text
    assert "command: forward, called by " in r.report_text and ".pkl" not in r.report_text
""")
    reprec = pytester.inline_run()
    reprec.assertoutcome(passed=2)
    for name in ("test_same", "test_not_failing"):
        assert _call_report(reprec, name).sections == [], name
    result = pytester.runpytest("-rA")
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    assert "bitexact run's report" not in out and "bitexact:" not in out, out


def test_a_marked_test_failure_reads_the_same(pytester):
    pytester.makepyfile(test_loop="""
import numpy as np
import pytest

@pytest.mark.bitexact(runs=2)
def test_loop(bitexact):
    noise = np.random.rand(2)
    for step in range(2):
        bitexact.record(w=noise if step == 1 else np.zeros(2))
""")
    reprec = pytester.inline_run()
    reprec.assertoutcome(failed=1)
    report = _call_report(reprec, "test_loop")
    lines = report.longreprtext.splitlines()
    assert lines[0] == "bitexact: test_loop is not deterministic over 2 runs", lines
    assert lines[1].startswith("    first divergence: record_0001.safetensors:w: 2/2 elements "
                               "differ (runs 0 and 1), first at [0] ("), lines
    assert lines[-1] == ("(the whole report of `bitexact run` on test_loop.py::test_loop is "
                         "the section below)"), lines
    full = dict(report.sections)[SECTION]
    assert "    command: test_loop.py::test_loop, alone in a fresh pytest process each run\n" \
        in full, full
    assert " -m pytest " not in full, full


def test_a_check_outside_the_fixture_puts_the_report_below_the_summary():
    with pytest.raises(pytest.fail.Exception) as e:
        _pytest_check.check(_unseeded, name="a script")
    text = str(e.value)
    assert text.startswith("bitexact: _unseeded is not deterministic over 2 runs\n"
                           "    first divergence: w: 3/3 elements differ"), text
    assert "\n\n`bitexact run`'s report:\ncase " in text, text
    assert "    command: _unseeded, called by a script, in a fresh interpreter each run\n" in text
    assert ".pkl" not in text, text


def _unseeded():
    return {"w": np.random.rand(3)}


def _diff(name, differing=3, ulp=4):
    return {"tensor": name, "runs": [0, 1], "elements_differing": differing, "elements": 16,
            "first_index": [0, 2], "first_values": ["0.5", "0.50000024"], "max_abs": 2.384e-7,
            "max_ulp": ulp, "note": None}


def test_the_summary_is_built_from_the_json_report():
    p = "forward.safetensors:"
    case = {"verdict": "nondeterministic", "diff": [_diff(p + "out.weight")],
            "divergence": {"op": p + "out.weight", "explanation": "first divergence: ..."},
            "blame": {"explanation": "breaks when varying: threads (blame made 4 more runs)"},
            "message": None}
    assert _pytest_summary.summary("forward", case, 2, p).splitlines() == [
        "bitexact: forward is not deterministic over 2 runs",
        "    first divergence: out.weight: 3/16 elements differ (runs 0 and 1), first at [0, 2] "
        "(0.5 vs 0.50000024), max |Δ| 2.384e-7, max 4 ULP",
        "    blame: breaks when varying: threads (blame made 4 more runs)",
    ]
    # Under trace=True the divergence is an op, in its own words; then the first output.
    case["divergence"] = {"op": "aten::addmm", "explanation": "first divergence: step 0, "
                          "rank 0, aten::addmm — inputs identical, output differs"}
    case["diff"] += [_diff(p + "b%d" % i, 1, None) for i in range(5)]
    case["diff"][-1]["note"] = "shape differs: [2] vs [3]"
    case["blame"] = None
    assert _pytest_summary.summary("forward", case, 4, p).splitlines() == [
        "bitexact: forward is not deterministic over 4 runs",
        "    first divergence: step 0, rank 0, aten::addmm — inputs identical, output differs",
        "    first differing output: out.weight: 3/16 elements differ (runs 0 and 1), first at "
        "[0, 2] (0.5 vs 0.50000024), max |Δ| 2.384e-7, max 4 ULP",
        "    b0: 1/16 elements differ (runs 0 and 1), first at [0, 2] (0.5 vs 0.50000024), "
        "max |Δ| 2.384e-7",
        "    b1: 1/16 elements differ (runs 0 and 1), first at [0, 2] (0.5 vs 0.50000024), "
        "max |Δ| 2.384e-7",
        "    b2: 1/16 elements differ (runs 0 and 1), first at [0, 2] (0.5 vs 0.50000024), "
        "max |Δ| 2.384e-7",
        "    2 more differ: b3, b4",
    ]
    error = {"verdict": "error", "diff": [], "message": "run 0: exited with status 1: boom; "
             "last lines of stderr:\n  Traceback\nRuntimeError: boom"}
    assert _pytest_summary.summary("crash", error, 2).splitlines() == [
        "bitexact: crash failed in a fresh process",
        "    run 0: exited with status 1: boom; last lines of stderr:",
        "      Traceback",
        "    RuntimeError: boom",
    ]


@pytest.mark.parametrize("x, text", [(0.8838, "8.838e-1"), (5.722e-6, "5.722e-6"),
                                     (0.0, "0.000e0"), (12346.0, "1.235e4"),
                                     (float("inf"), "inf"), (None, "inf")])
def test_numbers_read_as_in_the_report(x, text):
    assert _pytest_summary._sci(x) == text


def test_only_the_command_line_is_replaced():
    text = ("case  backend\nt.py::t  cpu\n    command: python -m bitexact._pytest.worker call "
            "/tmp/x.pkl\n    env: A=1\n    command: not this one\n")
    assert _pytest_summary.show_command(text, "fn, called by t.py::t") == (
        "case  backend\nt.py::t  cpu\n    command: fn, called by t.py::t\n    env: A=1\n"
        "    command: not this one\n")
    assert _pytest_summary.show_command(text, None) == text
