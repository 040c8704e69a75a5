# Written by `bitexact run --trace ops|modules` or `--seed-everything` into a private directory
# (ROOT/.bitexact-inject/) put first on the program's PYTHONPATH (the Rust binary embeds this
# file). Beside it lies `bitexact`, a link to bitexact's own package (the one the running
# `bitexact` command belongs to), when bitexact has one; nothing else, so no other package of
# bitexact's environment reaches the program's imports.
#
# At start-up, in every Python process of the program:
# 1. Which `bitexact` this Python imports: the program's own when its environment has one of the
#    same version as bitexact's (with its native module); otherwise bitexact's own (a different
#    version of the program's is then named in the report); the program's own when bitexact
#    has none.
# 2. Seeds with bitexact.seed_everything() when asked ($BITEXACT_SEED_EVERYTHING=1, the first
#    process of each rank only; a child with torch seeds again after a parent without it) and
#    starts the op tracer when asked ($BITEXACT_TRACE).
# 3. With $BITEXACT_STATE=1 (`--vary resume`), starts the state recorder
#    (bitexact._resume_state) right after the program imports torch, and never imports torch
#    itself: a finder first on sys.meta_path wraps torch's loader, and once torch's module has
#    run, puts the loader back, leaves sys.meta_path and installs the recorder (the first
#    process of each rank only). Until then nothing of bitexact's is imported.
# 4. Records what happened, one JSON line per process that tried, in records.jsonl beside this
#    file (outside $BITEXACT_OUT, which the program may clear): {"event": "tracing" | "seeded" |
#    "state" | "failed" | "state-failed", "python", "pid", ...}. `bitexact run` fails a run in
#    which no process could trace (or seed), with the reason and the interpreter; a state
#    recorder that cannot start records "state-failed" and prints why, and the run goes on.
# 5. Runs the `sitecustomize` module this one shadows, if any.
#
# It must parse on any Python: one older than 3.9 records why it cannot trace and stops.
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_RECORDS = os.path.join(_HERE, "records.jsonl")
# Set by a process that seeded without torch: a child Python with torch seeds again.
_SEEDED_WITHOUT_TORCH = "BITEXACT_SEEDED_WITHOUT_TORCH"


def _record(event, **fields):
    import json

    fields.update(event=event, pid=os.getpid(), python=sys.executable or "python",
                  python_version="%d.%d.%d" % tuple(sys.version_info[:3]))
    line = (json.dumps(fields, sort_keys=True) + "\n").encode("utf-8", "replace")
    try:
        # One write of one line with O_APPEND: records of concurrent processes never mix.
        fd = os.open(_RECORDS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
    except OSError:
        pass


def _fail(flag, reason):
    _record("failed", reason=reason)
    sys.stderr.write("bitexact: %s: %s %s\n" % (flag, sys.executable, reason))


def _version(init):
    """The version of the bitexact whose file is ``init`` (a package's ``__init__.py`` or a
    module), found without importing it: its distribution's metadata when it was installed
    (:func:`_installed_version`), else a ``__version__ = "..."`` line in the file (a copy that
    spells its version out); None when neither says."""
    return _installed_version(init) or _literal_version(init)


def _installed_version(init):
    """The version in the metadata of the ``bitexact-harness`` distribution installed beside
    the package of ``init`` (the ``*.dist-info`` in the directory that holds the package), or
    None (not installed: a source checkout; no ``importlib.metadata``)."""
    try:
        from importlib import metadata
    except ImportError:
        return None
    path = os.path.realpath(init)
    if os.path.basename(path) == "__init__.py":
        path = os.path.dirname(path)
    try:
        for dist in metadata.distributions(path=[os.path.dirname(path)]):
            name = (dist.metadata["Name"] or "").lower().replace("_", "-")
            if name == "bitexact-harness":
                return dist.version
    except Exception:  # a broken *.dist-info: fall back to the file
        return None
    return None


def _literal_version(init):
    """The ``__version__ = "..."`` in the file ``init``, read without importing it."""
    try:
        with open(init, encoding="utf-8") as f:
            for line in f:
                if line.startswith("__version__"):
                    return line.partition("=")[2].strip().strip("\"'")
    except (OSError, UnicodeDecodeError):
        pass
    return None


def _choose_package(rest):
    """Makes ``import bitexact`` find the package to use (see the top); returns a note for the
    report when the program's own bitexact is of another version, else ``None``."""
    import importlib.machinery

    own = os.path.join(_HERE, "bitexact")
    if not os.path.isdir(own):
        return None
    spec = importlib.machinery.PathFinder.find_spec("bitexact", rest)
    if spec is None or not spec.origin or not os.path.isfile(spec.origin):
        return None
    theirs, own_version = _version(spec.origin), _version(os.path.join(own, "__init__.py"))
    where = os.path.dirname(spec.origin)
    native = spec.submodule_search_locations and any(
        n.startswith("_native") for n in os.listdir(where))
    if native and theirs is not None and theirs == own_version:
        sys.path[:] = rest  # the program's own, the same version: it keeps using it
        return None
    return "the program's environment has bitexact %s (%s); bitexact's own %s was used in its " \
        "place, for the tracer and the program's imports of bitexact" % (
            theirs or "of unknown version", where, own_version)


def _torch_here():
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def _state_failed(reason):
    _record("state-failed", reason=reason)
    sys.stderr.write("bitexact: state record: %s %s\n" % (sys.executable, reason))


def _state_start(note):
    """Starts the state recorder (torch has just been imported) and records it."""
    try:
        import bitexact
        from bitexact import _dist, _resume_state
    except Exception as e:
        _state_failed("cannot import bitexact's state recorder (%s: %s)" % (type(e).__name__, e))
        return
    try:
        started = _resume_state.install_from_env()
    except Exception as e:
        _state_failed("failed to start the state recorder (%s: %s)" % (type(e).__name__, e))
        return
    if started:
        _record("state", rank=_dist.rank() or 0, bitexact=getattr(bitexact, "__version__", None),
                package=os.path.dirname(os.path.abspath(bitexact.__file__)), note=note)


class _AfterTorch(object):
    """torch's own loader, wrapped: runs torch's module, then starts the state recorder."""

    def __init__(self, loader, watch):
        self.loader, self.watch = loader, watch

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        spec = getattr(module, "__spec__", None)
        if spec is not None and spec.loader is self:
            spec.loader = self.loader  # torch sees its own loader from the start
        module.__loader__ = self.loader
        self.loader.exec_module(module)
        if self.watch in sys.meta_path:
            sys.meta_path.remove(self.watch)
            _state_start(self.watch.note)

    def __getattr__(self, name):
        return getattr(self.loader, name)


class _TorchWatch(object):
    """A finder first on sys.meta_path that waits for torch: it asks the finders after it for
    torch's spec and wraps its loader (a find_spec alone, importlib.util.find_spec("torch"),
    imports nothing, so the finder stays until torch's module actually runs)."""

    def __init__(self, note):
        self.note = note

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        for finder in [f for f in sys.meta_path if f is not self]:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _AfterTorch(spec.loader, self)
                return spec
        return None


def _watch_torch(note):
    if "torch" in sys.modules:  # already imported (by a .pth file)
        _state_start(note)
    else:
        sys.meta_path.insert(0, _TorchWatch(note))


def _bitexact_start(rest):
    trace = os.environ.get("BITEXACT_TRACE")
    seed = os.environ.get("BITEXACT_SEED_EVERYTHING") == "1"
    state = os.environ.get("BITEXACT_STATE") == "1"
    if not trace and not seed and not state:
        return
    flag = "--trace %s" % trace if trace else "--seed-everything"
    if sys.version_info < (3, 9):
        reason = "is Python %d.%d: bitexact's tracer needs Python 3.9 or newer" % tuple(
            sys.version_info[:2])
        if trace or seed:
            _fail(flag, reason)
        else:
            _state_failed(reason)
        return
    if not trace and not seed:  # the state recorder alone: nothing imported before torch
        try:
            _watch_torch(_choose_package(rest))
        except Exception as e:
            _state_failed("cannot find bitexact's package (%s: %s)" % (type(e).__name__, e))
        return
    try:
        note = _choose_package(rest)
        import bitexact
        import bitexact._trace
        from bitexact import _dist
    except Exception as e:  # a syntax error or a broken package too, not only ImportError
        _fail(flag, "cannot import bitexact's tracer (%s: %s)" % (type(e).__name__, e))
        return
    about = dict(rank=_dist.rank() or 0, bitexact=getattr(bitexact, "__version__", None),
                 package=os.path.dirname(os.path.abspath(bitexact.__file__)), note=note)
    if seed and os.environ.get(_SEEDED_WITHOUT_TORCH) and _torch_here():
        os.environ.pop(_SEEDED_WITHOUT_TORCH, None)
        os.environ.pop("BITEXACT_SEEDED", None)
    # Once per rank, in its first process (child processes keep their own seeding); never in
    # a torch.distributed launcher (torchrun's agent computes nothing).
    if seed and _dist.claim("BITEXACT_SEEDED"):
        bitexact.seed_everything()
        if not _torch_here():
            os.environ[_SEEDED_WITHOUT_TORCH] = "1"
        _record("seeded", **about)
    if state:
        _watch_torch(note)
    if not trace:
        return
    try:
        started = bitexact._trace.install_from_env()
    except Exception as e:
        unavailable = getattr(bitexact._trace, "Unavailable", ())
        _fail(flag, str(e) if isinstance(e, unavailable) else
              "failed to start the tracer (%s: %s)" % (type(e).__name__, e))
        return
    if started:
        _record("tracing", **about)


def _bitexact_chain(rest):
    import importlib.machinery
    import importlib.util

    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)


_rest = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
_bitexact_start(_rest)
if sys.version_info >= (3, 5):
    _bitexact_chain(_rest)
