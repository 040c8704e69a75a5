"""``bitexact.check``: a function's determinism, checked from a pytest test.

``check(fn, *args, runs=2, vary=(), isolate=True, trace=False, timeout=None, fail=True,
**kwargs)`` calls ``fn(*args, **kwargs)`` ``runs`` times and compares every leaf of what it
returns (see :func:`bitexact._pytest.worker.leaves`) by bitexact's canonical digest.

* ``isolate=True`` (the default): every call in a fresh interpreter. The check *is*
  ``bitexact run`` (:func:`run_program`), with a command that calls ``fn`` once
  (``python -m bitexact._pytest.worker call``): the same environment contract, variations
  (``vary=("threads", "seed", "hashseed", "poison", "workers")`` or ``"all"``) and blame, op
  tracer (``trace=True``: the first diverging op), per-run ``timeout`` (seconds), explanation
  and report text as the command line. ``fn`` must be picklable (a module-level function).
* ``isolate=False``: ``runs`` calls in this process, each later result compared with run 0's
  by dtype, shape and bytes (what equal canonical digests stand for, natively at memory
  speed); run 0's digests are computed when ``result.digests`` is first read. Differing
  leaves are explained by the library's own explanation (:func:`bitexact._native.explain`).
  Variations and tracing need fresh processes, so they need ``isolate=True``.

It returns a :class:`CheckResult`. On a difference, an error or a crash the test fails with
the explanation (``fail=False`` returns the result instead); a check the machine cannot make
(``vary=("threads",)`` on one core) is skipped with the reason.

The failure reads like pytest's: a short summary (:func:`summary`, built from the case's entry
of the JSON report, never by reading the text) is the failure message, and ``bitexact run``'s
whole report follows in a report section of its own, titled ``bitexact run's report``
(:data:`SECTION`), that pytest prints below the message as it prints captured output. The
summary is the verdict line (``bitexact: forward is not deterministic over 2 runs``), the
first divergence with its counts and ULPs (``first divergence: out.weight: 3/16 elements
differ (runs 0 and 1), first at [0, 2] (… vs …), max |Δ| …, max 4 ULP``), up to three more
differing outputs, the error of a run that failed, the blame when there is one, and a last line
naming the test whose report follows. The section, rather than a report shown only under
``-vv``, because a nondeterministic failure may not come back when the test runs again: what
the runs found is shown the first time. In that report the worker's command line (an
interpreter, ``-m bitexact._pytest.worker`` and a temporary pickle, gone by then) is replaced
by the function and the test that called it. A check called outside the ``bitexact`` fixture
(no test to attach a section to) puts the whole report below the summary instead.
"""

import json
import os
import pickle
import signal
import subprocess
import shutil
import sys
import tempfile

from .. import _digest
from .leaves import leaves
from .summary import show_command, summary
from .worker import file_stem, payload

# Variations a check may ask for (`bitexact run --vary` for programs, without the ones whose
# command must take a placeholder).
VARIATIONS = ("threads", "workers", "poison", "hashseed", "seed", "all")


class CheckResult:
    """What a check found: ``verdict`` (``deterministic``, ``nondeterministic``, ``error``),
    ``runs``, ``digests`` ({leaf path: hex digest} of run 0), ``text`` (the explanation: the
    failure message), ``report_text`` (``bitexact run``'s whole report under ``isolate=True``,
    else ``None``), ``report`` (the case's entry of the JSON report under ``isolate=True``,
    with ``blame``, ``divergence``, ``diff``...), ``value`` (run 0's return value under
    ``isolate=False``)."""

    def __init__(self, verdict, runs, digests, text, report=None, value=None, report_text=None):
        # `digests`: a dict, or run 0's leaves (in-process), hashed when first read.
        self.verdict, self.runs, self._digests = verdict, runs, digests
        self.text, self.report, self.value = text, report, value
        self.report_text = report_text

    @property
    def digests(self):
        """``{leaf path: canonical hex digest}`` of run 0."""
        if isinstance(self._digests, list):
            self._digests = _digest.digests(**dict(self._digests))
        return self._digests

    @property
    def deterministic(self):
        """Whether every run gave the same bits."""
        return self.verdict == "deterministic"

    @property
    def blame(self):
        """The blame of ``bitexact run`` (what the variations found), or ``None``."""
        return (self.report or {}).get("blame")

    def __repr__(self):
        return "CheckResult(verdict=%r, runs=%d)" % (self.verdict, self.runs)


def _pytest():
    import pytest

    return pytest


def skip(reason):
    """Skips the test, reported at the test's own location (as a ``skipif`` marker is)."""
    pytest = _pytest()
    try:
        exc = pytest.skip.Exception(reason, _use_item_location=True)
    except TypeError:  # pytest < 7
        pytest.skip(reason)
    raise exc


def _cores():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def validate(runs, vary, timeout):
    """``(runs, vary tuple)`` checked; ``ValueError`` naming the bad argument. Skips the test
    when the machine cannot vary what is asked (threads on one core)."""
    if isinstance(runs, bool) or not isinstance(runs, int) or not 2 <= runs <= 10000:
        raise ValueError("bitexact: runs=%r must be an int from 2 to 10000" % (runs,))
    if isinstance(vary, str):
        vary = (vary,)
    vary = tuple(vary)
    for v in vary:
        if v.split("=")[0] not in VARIATIONS:
            raise ValueError("bitexact: vary=%r: %r is not one of %s"
                             % (vary, v, ", ".join(VARIATIONS)))
    if timeout is not None and (isinstance(timeout, bool) or not timeout > 0):
        raise ValueError("bitexact: timeout=%r must be a positive number of seconds" % (timeout,))
    if any(v.split("=")[0] in ("threads", "all") for v in vary) and _cores() < 2:
        skip("vary=threads needs at least 2 CPU cores; this machine gives this process %d"
             % _cores())
    return runs, vary


# The driver: a bare interpreter (`-S`, no site imports) that loads the native module by
# path and runs `bitexact run` (`_native.run_report`) for a check or a marked test, writing
# its report as text and JSON. A process of its own, so that bitexact's stop-signal handlers,
# child subreaping and the reaping of escaped process groups never touch the pytest process;
# it gets SIGTERM when pytest dies (`PR_SET_PDEATHSIG`) and then kills its runs.
# argv: native module, package directory, report directory, the command line.
DRIVER = """
import importlib.util, os, sys
spec = importlib.util.spec_from_file_location("bitexact._native", sys.argv[1])
native = importlib.util.module_from_spec(spec)
spec.loader.exec_module(native)
code, text, js = native.run_report(sys.argv[4:], sys.argv[2])
if text is not None:
    for name, data in (("report.txt", text), ("report.json", js)):
        with open(os.path.join(sys.argv[3], name), "w", encoding="utf-8") as f:
            f.write(data)
sys.exit(code)
"""


def _pdeathsig():
    """A ``preexec_fn`` that gives the driver SIGTERM when this process dies (Linux)."""
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return lambda: prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def run_program(command, name, runs, vary=(), trace=False, timeout=None, env=None, shown=None):
    """Runs ``command`` ``runs`` times through ``bitexact run`` in a driver process; returns
    ``(exit code, text report, the case's JSON entry)``; ``shown`` replaces the command in the
    text report's ``command:`` line (:func:`bitexact._pytest.summary.show_command`). ``ValueError`` on a usage error. On
    any interruption (Ctrl-C, a pytest timeout) the driver is stopped, and with it every run,
    before the exception goes on."""
    argv = ["bitexact", "run", "--runs", str(runs), "--no-config", "--name", name]
    if vary:
        argv += ["--vary", ",".join(vary)]
    if trace:
        argv += ["--trace", "ops" if trace is True else str(trace)]
    if timeout is not None:
        argv += ["--timeout", str(timeout)]
    argv += ["--"] + list(command)
    report_dir = tempfile.mkdtemp(prefix="bitexact-pytest-")
    try:
        with open(os.path.join(report_dir, "driver.stderr"), "w+b") as err:
            proc = subprocess.Popen(
                [sys.executable, "-S", "-c", DRIVER, _digest.native().__file__,
                 os.path.dirname(os.path.abspath(__file__)), report_dir] + argv,
                stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                env=dict(os.environ, **(env or {})), preexec_fn=_pdeathsig())
            try:
                code = proc.wait()
            except BaseException:
                _stop(proc)
                raise
            err.seek(0)
            stderr = err.read().decode("utf-8", "replace")
        path = os.path.join(report_dir, "report.txt")
        if not os.path.exists(path):
            raise ValueError("bitexact: `bitexact run` refused the check (exit %d): %s"
                             % (code, stderr.strip()[-4000:]))
        with open(path, encoding="utf-8") as f:
            text = f.read()
        with open(os.path.join(report_dir, "report.json"), encoding="utf-8") as f:
            case = json.load(f)["cases"][0]
        return code, show_command(text, shown), case
    finally:
        shutil.rmtree(report_dir, ignore_errors=True)


def _stop(proc):
    """Stops the driver: SIGTERM makes it kill every run's process group, then SIGKILL."""
    try:
        proc.terminate()
        proc.wait(10)
    except BaseException:
        proc.kill()
        proc.wait()


# The title of the report section that holds `bitexact run`'s whole report.
SECTION = "bitexact run's report"


def apply_verdict(what, text, case, runs, fail, name=None, section=None, strip=""):
    """Applies the verdict of ``bitexact run`` (``case["verdict"]``, which Rust's judge
    assigned) to the pytest test: skips it, or fails it unless the verdict is
    ``deterministic`` (and ``fail`` is true); returns ``(verdict, the failure text)``. The failure text is :func:`summary`; the whole
    report ``text`` goes to ``section(title, text)`` (the test's report section, shown below
    the failure) when there is one, else below the summary."""
    verdict = case["verdict"]
    if verdict == "skipped":
        skip(case.get("message") or "skipped by bitexact")
    short = summary(what, case, runs, strip)
    if fail and verdict != "deterministic":
        if section is not None:
            section(SECTION, text)
            short += "\n(the whole report of `bitexact run` on %s is the section below)" % (
                name or what)
        else:
            short += "\n\n`bitexact run`'s report:\n" + text
        _pytest().fail(short, pytrace=False)
    return verdict, short


def _check_isolated(fn, args, kwargs, runs, vary, trace, timeout, fail, name, section):
    __tracebackhide__ = True
    try:
        blob = payload(fn, args, kwargs)
    except (pickle.PicklingError, AttributeError, TypeError) as e:
        raise TypeError(
            "bitexact.check(isolate=True) sends fn and its arguments to fresh processes by "
            "pickling, and %s cannot be pickled (%s). Use a function defined at module level "
            "(def %s(...) at the top of the test file, arguments as plain values or "
            "functools.partial), or isolate=False to call it in this process."
            % (getattr(fn, "__qualname__", repr(fn)), e, file_stem(fn))) from None
    what = getattr(fn, "__qualname__", "fn")
    shown = "%s, called by %s, in a fresh interpreter each run" % (what, name)
    fd, path = tempfile.mkstemp(prefix="bitexact-pytest-", suffix=".pkl")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        code, text, case = run_program(
            [sys.executable, "-m", "bitexact._pytest.worker", "call", path], name, runs,
            vary, trace, timeout, shown=shown)
    finally:
        os.unlink(path)
    prefix = pickle.loads(blob)["stem"] + ".safetensors:"
    verdict, short = apply_verdict(what, text, case, runs, fail, name, section, prefix)
    digests = {k[len(prefix):] if k.startswith(prefix) else k: v
               for k, v in case.get("digests", {}).items()}
    return CheckResult(verdict, runs, digests, short, report=case, report_text=text)


def _host_args(leaf):
    """``(ptr, nbytes, dtype, shape)`` of a leaf in host memory, and the object owning it."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(leaf, torch.Tensor) and not leaf.is_cpu:
        leaf = leaf.detach().cpu()
    kind, v = _digest._prepare(leaf)
    if kind == "host":
        return v.args(), v
    import ctypes

    data, name, shape = v
    buf = (ctypes.c_char * max(len(data), 1)).from_buffer_copy(data or b"\0")
    return (ctypes.addressof(buf), len(data), name, shape), buf


def _explain(what, run, first, other, differing):
    """The explanation of run ``run`` against run 0, leaf by leaf, first difference first, in
    the shape of :func:`summary`'s."""
    nat = _digest.native()
    paths0, paths = [p for p, _ in first], [p for p, _ in other]
    lines = []
    if paths0 != paths:
        lines.append("leaves differ: run 0 returned %s, run %d returned %s" % (paths0, run, paths))
    by0, by = dict(first), dict(other)
    for i, p in enumerate(differing):
        a, own_a = _host_args(by0[p])
        b, own_b = _host_args(by[p])
        lines.append(("first divergence: " if i == 0 else "") + nat.explain(p, [0, run], a, b))
        del own_a, own_b
    head = "bitexact: %s is not deterministic in this process: run %d differs from run 0" % (
        what, run)
    return "\n    ".join([head] + lines)


def _differing(first, other, what, run):
    """Paths of the leaves of ``other`` (run ``run`` of ``what``) whose dtype, shape or bits
    differ from run 0's; :class:`TypeError` when a leaf is run 0's memory itself."""
    __tracebackhide__ = True
    nat = _digest.native()
    by = dict(other)
    out = []
    for p, leaf in first:
        if p in by:
            a, own_a = _host_args(leaf)
            b, own_b = _host_args(by[p])
            if a[0] == b[0] and a[1] > 0:
                raise TypeError(
                    "bitexact.check(isolate=False): %s returned the same memory for `%s` in "
                    "run %d as in run 0 (a tensor or array it updates in place, such as a "
                    "module-level model's parameters), so the runs cannot be compared; return "
                    "copies (t.clone(), a.copy()) or use isolate=True" % (what, p, run))
            if not nat.same(a, b):
                out.append(p)
            del own_a, own_b
    return out


def _check_in_process(fn, args, kwargs, runs, fail, name):
    """``runs`` calls here, one after the other. Every run after the first is compared with
    run 0 leaf by leaf: dtype, shape and bytes (``bitexact._native.same``, the relation equal
    canonical digests stand for, at memory speed, the GIL released). Run 0's digests are
    computed when the result's ``digests`` are first read, so a passing check costs the calls
    plus one read of each later result."""
    __tracebackhide__ = True
    what = getattr(fn, "__qualname__", "fn")
    value0 = fn(*args, **kwargs)
    first = leaves(value0, what=what)
    for i in range(1, runs):
        other = leaves(fn(*args, **kwargs), what=what)
        differing = _differing(first, other, what, i)
        if differing or [p for p, _ in first] != [p for p, _ in other]:
            text = _explain(what, i, first, other, differing)
            if fail:
                _pytest().fail(text, pytrace=False)
            return CheckResult("nondeterministic", runs, first, text, value=value0)
    return CheckResult("deterministic", runs, first, "deterministic over %d runs" % runs,
                       value=value0)


def check(fn, args=(), kwargs=None, *, runs=2, vary=(), isolate=True, trace=False,
          timeout=None, fail=True, name=None, section=None):
    """The check behind ``bitexact.check(fn, *args, ...)`` (see the module docs); ``name``
    names it in reports (the test's node id); ``section(title, text)``, when given, takes
    ``bitexact run``'s whole report when the check fails the test (the fixture's: a report
    section of the test)."""
    __tracebackhide__ = True
    if not callable(fn):
        raise TypeError("bitexact.check: fn must be callable, not %s" % type(fn).__name__)
    runs, vary = validate(runs, vary, timeout)
    name = name or getattr(fn, "__qualname__", "fn")
    if not isolate:
        if vary or trace:
            raise ValueError("bitexact.check: vary= and trace= need isolate=True (variations "
                             "are set when a process starts; the tracer runs in the process)")
        if timeout is not None:
            raise ValueError("bitexact.check: timeout= needs isolate=True (a call in this "
                             "process cannot be stopped safely)")
        return _check_in_process(fn, args, kwargs or {}, runs, fail, name)
    return _check_isolated(fn, args, kwargs or {}, runs, vary, trace, timeout, fail, name,
                           section)
