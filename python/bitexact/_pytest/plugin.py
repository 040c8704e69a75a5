"""The pytest plugin of ``bitexact-harness`` (entry point ``pytest11``: ``bitexact``), active
wherever the package is installed, with no conftest code; ``-p no:bitexact`` turns it off.

It gives:

* the ``bitexact`` fixture (:class:`Bitexact`): ``bitexact.check(fn, *args, runs=2, vary=(),
  isolate=True, trace=False, timeout=None, fail=True, **kwargs)`` (see
  :mod:`bitexact._pytest.check`), ``bitexact.assert_snapshot(name=None, **tensors)`` (see
  :mod:`bitexact._pytest.snapshot`) and ``bitexact.record(**tensors)``;
* the option ``--bitexact-update``: write missing or changed snapshots as ``.snap`` and pass;
* the marker ``@pytest.mark.bitexact(runs=2, vary=(), trace=False, timeout=None)``: the whole
  test function runs ``runs`` times, each in a fresh ``pytest`` process started by
  ``bitexact run`` (its fixtures set up there), and everything it passes to
  ``bitexact.record(**tensors)`` is compared, call by call (``record_0000``,
  ``record_0001``...), so a training loop's first differing step is named. The test fails with
  the summary of ``bitexact run``'s report. In those runs (``BITEXACT_PYTEST_WORKER`` set) the
  test simply runs, and a failure is written to standard error, where the report shows its tail.

A failed check or marked test reads like any pytest failure: the failure message is a short
summary (the verdict, the first divergence with its counts and ULPs, a failed run's error, the
blame), and ``bitexact run``'s whole report, with the test in place of the worker's command
line, is a report section of the test (``bitexact run's report``) that pytest prints below the
message, as it prints captured output (``--show-capture=no`` hides it; pytest-xdist carries
it). A section rather than ``-vv``: a nondeterministic failure may not come back on a rerun, so
the whole report is there the first time. See :func:`bitexact._pytest.check.summary`.

Everything fails through pytest (``pytest.fail``/``pytest.skip``), so ``--junitxml``,
``-x``, ``-k`` and pytest-xdist (each worker starts its own runs) work as for any test.
"""

import os
import sys
import weakref

import pytest

from .check import check as _check
from .check import apply_verdict, run_program, validate
from .snapshot import Snapshots
from .leaves import WORKER_ENV, record

# Report sections waiting for a test's call report: {item: [(title, text), ...]}.
_sections = weakref.WeakKeyDictionary()

MARKER = ("bitexact(runs=2, vary=(), trace=False, timeout=None): run the test function "
          "`runs` times, each in a fresh process, and compare every tensor it passes to "
          "bitexact.record(**tensors)")


def pytest_addoption(parser):
    """``--bitexact-update``."""
    group = parser.getgroup("bitexact", "bitexact (determinism checks and snapshots)")
    group.addoption(
        "--bitexact-update", action="store_true", default=False,
        help="write missing or changed bitexact snapshots as .snap (accepting them) instead "
             "of pending .snap.new; the tests pass")


def pytest_configure(config):
    """Registers the marker."""
    config.addinivalue_line("markers", MARKER)


class Bitexact:
    """The ``bitexact`` fixture: checks and snapshots for the requesting test."""

    def __init__(self, request):
        self._node = request.node
        self._section = lambda title, text: add_section(request.node, title, text)
        self._snapshots = Snapshots(request.node.path, request.node.nodeid,
                                    request.config.getoption("bitexact_update"))

    def check(self, fn, *args, runs=2, vary=(), isolate=True, trace=False, timeout=None,
              fail=True, **kwargs):
        """Calls ``fn(*args, **kwargs)`` ``runs`` times, each in a fresh process
        (``isolate=True``) or in this one, and fails the test with the explanation when what
        it returns differs; returns a :class:`bitexact._pytest.check.CheckResult`."""
        __tracebackhide__ = True
        return _check(fn, args, kwargs, runs=runs, vary=vary, isolate=isolate, trace=trace,
                      timeout=timeout, fail=fail, name=self._node.nodeid,
                      section=self._section)

    def assert_snapshot(self, name=None, **tensors):
        """Compares the tensors' digests with the committed snapshot (default name: the
        test's node id); returns ``{leaf: digest}``."""
        __tracebackhide__ = True
        return self._snapshots.assert_snapshot(name, **tensors)

    @staticmethod
    def record(**tensors):
        """In a run of a ``@pytest.mark.bitexact`` test, records ``tensors`` for comparison
        (one call, one step); elsewhere does nothing."""
        return record(**tensors)


@pytest.fixture
def bitexact(request):
    """bitexact's determinism checks and snapshots: ``bitexact.check(fn, *args)``,
    ``bitexact.assert_snapshot(**tensors)``, ``bitexact.record(**tensors)``."""
    return Bitexact(request)


def add_section(item, title, text):
    """Adds a section (``title``: ``text``) to the report of ``item``'s current phase (the
    call, or the setup or teardown of a fixture that checks), printed below its failure
    (:func:`pytest_runtest_makereport`)."""
    _sections.setdefault(item, []).append((title, text))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Puts the sections :func:`add_section` gathered in this phase at the head of its
    report's, so the report of ``bitexact run`` comes right below the failure, before captured
    output."""
    outcome = yield
    sections = _sections.pop(item, None)
    if sections:
        report = outcome.get_result()
        report.sections[:0] = sections


def _in_worker():
    return bool(os.environ.get(WORKER_ENV))


def _marker_command(item):
    """The command that runs ``item`` alone in a fresh pytest process, as this one would."""
    config = item.config
    _, sep, rest = item.nodeid.partition("::")
    cmd = [sys.executable, "-m", "pytest", str(item.path) + sep + rest, "-q", "-s",
           "-p", "no:cacheprovider", "-o", "addopts=", "--rootdir", str(config.rootpath),
           "--no-header", "-W", "ignore::pytest.PytestAssertRewriteWarning"]
    if config.inipath is not None:
        cmd += ["-c", str(config.inipath)]
    return cmd


def _marker_args(runs=2, vary=(), trace=False, timeout=None):
    return runs, vary, trace, timeout


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    """Runs a ``@pytest.mark.bitexact`` test through ``bitexact run`` instead of here."""
    marker = pyfuncitem.get_closest_marker("bitexact")
    if marker is None or _in_worker():
        return None
    __tracebackhide__ = True
    try:
        runs, vary, trace, timeout = _marker_args(*marker.args, **marker.kwargs)
    except TypeError as e:
        raise TypeError("@pytest.mark.bitexact: %s (it takes runs=, vary=, trace=, timeout=)"
                        % e) from None
    runs, vary = validate(runs, vary, timeout)
    shown = "%s, alone in a fresh pytest process each run" % pyfuncitem.nodeid
    code, text, case = run_program(_marker_command(pyfuncitem), pyfuncitem.nodeid, runs, vary,
                                   trace, timeout, env={WORKER_ENV: "1"}, shown=shown)
    apply_verdict(pyfuncitem.name, text, case, runs, fail=True, name=pyfuncitem.nodeid,
                  section=lambda title, report: add_section(pyfuncitem, title, report))
    return True


def pytest_runtest_logreport(report):
    """In a run of a marked test, a failure goes to standard error, which the report shows."""
    if _in_worker() and report.failed:
        sys.stderr.write("%s %s failed:\n%s\n" % (report.nodeid, report.when, report.longreprtext))
        sys.stderr.flush()
