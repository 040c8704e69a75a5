"""The op tracer's observer driver (the default where it builds and the machine has no GPU:
``driver="auto"``; ``start(..., driver="observer")`` or ``$BITEXACT_TRACE_DRIVER=observer``
asks for it): torch's RecordFunction callbacks (``observer.cpp``, the hook torch's profiler
uses) call the tracer's record path, :func:`bitexact._trace.calls.before` and
:func:`bitexact._trace.calls.after`, at every op the program dispatches, in place of a Python
``TorchDispatchMode``. The intercepting itself costs no Python frame and no round trip of the
op's arguments, an op the tracer does not record (a view) costs no Python at all, and the
tensors of the lane's ops (all host tensors, no list among the arguments) are read in C++ and
handed to ``bitexact._native.Lane`` as words, without torch's Python API.

The same ops are recorded with the same lines (``python/tests/test_trace_observer.py``:
threads, collectives, a reentrant backward, a raising op, both hashing modes), with one
difference that is the untraced program's own: torch computes some ops in place where no
dispatch mode is on and out of place under one (autograd's gradient accumulation, ``aten::add_``
against ``aten::add``; the mask of scaled-dot-product attention's math path), with the same
tensors. ``diff-trace`` aligns the two names as one op. Not covered yet: ops on devices (their
backward runs on autograd's device threads, where the Python thread's stream is not set, so
those ops would not be recorded: ``auto`` takes the dispatch mode on a machine with a GPU or
another accelerator, and
``observer`` is refused there), and the tasks of TorchScript's ``fork`` (and what a scripted
function runs after its ``wait``), which run on torch's interop threads: no thread that never
ran Python is followed (nor is the GIL taken there), where the dispatch mode records them.

``observer.cpp`` is compiled against the running torch's headers by the system C++ compiler
(``$CXX``, else ``c++``, else ``g++``) the first time it is needed, into
``~/.cache/bitexact/observer/<key>/`` (``$BITEXACT_CACHE_DIR`` instead of
``~/.cache/bitexact``), where ``key`` hashes the source, torch's version and path and the
Python version, and is written atomically, one process at a time (a second one waits and loads
it). :class:`Unavailable` says why it cannot be built or loaded; ``auto`` remembers a failed
build (``failed`` there) and says once per process that it traces through the dispatch mode
instead."""

import ctypes
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig

from .. import _outputs, _protocol

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "observer.cpp")
_lib = []  # the loaded library, once


class Unavailable(RuntimeError):
    """The observer cannot be built or loaded here; the message says why (the tracer's
    ``start`` raises it as its own ``Unavailable``, which fails a ``bitexact run --trace
    ops``)."""


def cache_dir():
    """Where compiled observers are kept."""
    root = os.environ.get(_protocol.CACHE_DIR_ENV) or os.path.join(
        os.path.expanduser("~"), ".cache", "bitexact")
    return os.path.join(root, "observer")


def _key(torch):
    h = hashlib.sha256()
    with open(SOURCE, "rb") as f:
        h.update(f.read())
    h.update(("%s|%s|%s" % (torch.__version__, torch.__file__, sys.version)).encode())
    return h.hexdigest()[:16]


def _compile(torch, lib):
    root = os.path.dirname(torch.__file__)
    include = os.path.join(root, "include")
    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or "c++"
    cmd = [compiler, "-O2", "-std=c++20", "-shared", "-fPIC", "-DNDEBUG",
           "-D_GLIBCXX_USE_CXX11_ABI=%d" % int(torch._C._GLIBCXX_USE_CXX11_ABI),
           "-I" + include, "-I" + os.path.join(include, "torch", "csrc", "api", "include"),
           "-I" + sysconfig.get_paths()["include"], SOURCE,
           "-L" + os.path.join(root, "lib"), "-lc10", "-ltorch_cpu", "-ltorch_python",
           "-Wl,-rpath," + os.path.join(root, "lib"), "-o", lib]
    os.makedirs(os.path.dirname(lib), exist_ok=True)
    tmp = "%s.%d.tmp" % (lib, os.getpid())
    try:
        done = subprocess.run(cmd[:-1] + [tmp], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    except OSError as e:
        raise Unavailable("cannot run the C++ compiler %r: %s" % (cmd[0], e)) from None
    if done.returncode != 0:
        errors = [line for line in done.stdout.splitlines() if "error" in line] or [""]
        raise Unavailable("compiling %s failed: %s\n%s\n%s" % (
            SOURCE, errors[0].strip(), " ".join(cmd), done.stdout[-4000:]))
    os.replace(tmp, lib)


def _build(torch, lib, retry):
    """Compiles ``lib`` unless another process did meanwhile, or a build failed before (and not
    ``retry``); a cache directory it cannot write is :class:`Unavailable` too."""
    try:
        _build_in(torch, lib, retry)
    except OSError as e:
        raise Unavailable("cannot write the observer's cache %s (%s: %s; %s sets another)" % (
            os.path.dirname(lib), type(e).__name__, e, _protocol.CACHE_DIR_ENV)) from None


def _build_in(torch, lib, retry):
    failed = os.path.join(os.path.dirname(lib), "failed")
    if not retry and os.path.exists(failed):
        with open(failed, encoding="utf-8", errors="replace") as f:
            raise Unavailable(f.read())
    os.makedirs(os.path.dirname(lib), exist_ok=True)
    with open(lib + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(lib):
            return
        sys.stderr.write("bitexact: compiling the op tracer's observer for torch %s (once for "
                         "this torch, about 20 s)\n" % torch.__version__)
        sys.stderr.flush()
        try:
            _compile(torch, lib)
        except Unavailable as e:
            _outputs._atomic_write(failed, str(e).encode("utf-8"))
            raise
        if os.path.exists(failed):
            os.remove(failed)


_noted = []  # whether note_fallback wrote its line in this process


def note_fallback(error):
    """Says once per process why tracing takes the dispatch mode (``auto``, where the observer
    cannot be built): the first line of ``error``."""
    if not _noted:
        _noted.append(True)
        sys.stderr.write("bitexact: tracing through a dispatch mode, slower: %s (%s=mode skips "
                         "the observer)\n" % (str(error).splitlines()[0],
                                              _protocol.TRACE_DRIVER_ENV))


def library(retry=True):
    """The observer's library, compiled if needed and loaded (once per process). A build that
    failed is remembered beside where the library would be (``failed``: the reason), and
    :class:`Unavailable` is raised again at once from it unless ``retry``. One process
    compiles at a time (a lock file); the others wait and load what it built."""
    if not _lib:
        import torch

        lib = os.path.join(cache_dir(), _key(torch), "observer.so")
        if not os.path.exists(lib):
            _build(torch, lib, retry)
        so = ctypes.PyDLL(lib)  # its functions are called with the GIL held
        so.bitexact_observer_start.argtypes = [ctypes.py_object] * 4
        so.bitexact_observer_start.restype = ctypes.c_int
        _lib.append(so)
    return _lib[0]


IGNORED, PLAIN, OTHER = 0, 1, 2  # how resolve says the tracer records an operator


def start(resolve, before, after, plain):
    """Adds the observer: ``resolve(name, overload)`` -> ``(OpOverload, kind)`` once per
    operator (:data:`IGNORED`; :data:`PLAIN`: it writes no argument and takes no generator;
    :data:`OTHER`); for an OTHER op ``before(func, args, kwargs, tensors)`` -> a token or
    None at its start and ``after(token, func, args, kwargs, result, tensors)`` at its end;
    for a PLAIN one ``plain(func, args, kwargs, result, tensors)`` at its end. ``tensors``:
    the op's tensors (its inputs, then at its end its results) as ``bitexact._native.Lane``
    reads them, or None (read them from the Python objects)."""
    library().bitexact_observer_start(resolve, before, after, plain)


def stop():
    """Removes the observer (its compiled library stays loaded)."""
    if _lib:
        _lib[0].bitexact_observer_stop()
