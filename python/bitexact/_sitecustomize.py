# Written by `bitexact run --trace ops|modules` or `--seed-everything` into a private directory
# (ROOT/.bitexact-inject/) put first on the program's PYTHONPATH (the Rust binary embeds this
# file). Beside it lies `bitexact`, a link to bitexact's own package (the one the running
# `bitexact` command belongs to), when bitexact has one; nothing else, so no other package of
# bitexact's environment reaches the program's imports.
#
# At start-up, in every Python process of the program:
# 1. Which `bitexact` this Python imports: the program's own when its environment has one of the
#    same version as bitexact's; otherwise bitexact's own (a different version of the program's
#    is then named in the report); the program's own when bitexact has none.
# 2. Seeds with bitexact.seed_everything() when asked ($BITEXACT_SEED_EVERYTHING=1, the first
#    process of each rank only) and starts the op tracer when asked ($BITEXACT_TRACE).
# 3. Records what happened, one JSON line per process that tried, in
#    $BITEXACT_OUT/.bitexact-tracer.jsonl: {"event": "tracing" | "seeded" | "failed", "python",
#    "pid", ...}; `bitexact run` fails a run in which no process could trace (or seed), with
#    the reason and the interpreter (a Python that skips PYTHONPATH, -I / -E / -S, records
#    nothing).
# 4. Runs the `sitecustomize` module this one shadows, if any.
import os
import sys

_RECORDS = ".bitexact-tracer.jsonl"


def _record(event, **fields):
    out = os.environ.get("BITEXACT_OUT")
    if not out:
        return
    import json

    fields.update(event=event, pid=os.getpid(), python=sys.executable or "python",
                  python_version="%d.%d.%d" % sys.version_info[:3])
    line = (json.dumps(fields, sort_keys=True) + "\n").encode("utf-8", "replace")
    try:
        # One write of one line with O_APPEND: records of concurrent processes never mix.
        fd = os.open(os.path.join(out, _RECORDS), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
    except OSError:
        pass


def _version(package_dir):
    """The ``__version__`` of the bitexact package in ``package_dir``, read without importing
    it."""
    try:
        with open(os.path.join(package_dir, "__init__.py"), encoding="utf-8") as f:
            for line in f:
                if line.startswith("__version__"):
                    return line.partition("=")[2].strip().strip("\"'")
    except (OSError, UnicodeDecodeError):
        pass
    return None


def _choose_package(here):
    """Makes ``import bitexact`` find the package to use (see the top); returns a note for the
    report when the program's own bitexact is of another version, else ``None``."""
    import importlib.machinery

    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    own = os.path.join(here, "bitexact")
    if not os.path.isdir(own):
        return None
    spec = importlib.machinery.PathFinder.find_spec("bitexact", rest)
    if spec is None or not spec.origin:
        return None
    theirs = os.path.dirname(spec.origin)
    theirs_version, own_version = _version(theirs), _version(own)
    if theirs_version is not None and theirs_version == own_version:
        sys.path[:] = rest  # the program's own, the same version: it keeps using it
        return None
    return "the program's environment has bitexact %s (%s); bitexact's own %s was used in its " \
        "place, for the tracer and the program's imports of bitexact" % (
            theirs_version or "of unknown version", theirs, own_version)


def _bitexact_start():
    trace = os.environ.get("BITEXACT_TRACE")
    seed = os.environ.get("BITEXACT_SEED_EVERYTHING") == "1"
    if not trace and not seed:
        return
    here = os.path.dirname(os.path.abspath(__file__))
    note = _choose_package(here)
    try:
        import bitexact
        import bitexact._trace
        from bitexact import _dist
    except Exception as e:  # a syntax error on an old Python too, not only ImportError
        reason = "cannot import bitexact's tracer (%s: %s)" % (type(e).__name__, e)
        _record("failed", reason=reason)
        sys.stderr.write("bitexact: %s\n" % reason)
        return
    about = dict(rank=_dist.rank() or 0, bitexact=getattr(bitexact, "__version__", None),
                 package=os.path.dirname(os.path.abspath(bitexact.__file__)), note=note)
    # Once per rank, in its first process (child processes keep their own seeding); never in
    # a torch.distributed launcher (torchrun's agent computes nothing).
    if seed and _dist.claim("BITEXACT_SEEDED"):
        bitexact.seed_everything()
        _record("seeded", **about)
    if not trace:
        return
    try:
        started = bitexact._trace.install_from_env()
    except Exception as e:
        unavailable = getattr(bitexact._trace, "Unavailable", ())
        reason = str(e) if isinstance(e, unavailable) else \
            "failed to start the tracer (%s: %s)" % (type(e).__name__, e)
        _record("failed", reason=reason)
        sys.stderr.write("bitexact: --trace %s: %s %s\n" % (trace, sys.executable, reason))
        return
    if started:
        _record("tracing", **about)


def _bitexact_chain():
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)


_bitexact_start()
_bitexact_chain()
