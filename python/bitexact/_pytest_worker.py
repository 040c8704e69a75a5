"""The processes behind the pytest plugin (run as ``python -m bitexact._pytest_worker``).

* ``python -m bitexact._pytest_worker call PAYLOAD`` -- one run of
  ``bitexact.check(fn, ..., isolate=True)``: a fresh interpreter (as multiprocessing's spawn
  makes) that restores the test process's ``sys.path``, unpickles ``fn`` and its arguments,
  calls it once and writes its leaves as ``$BITEXACT_OUT/<fn name>.safetensors``.
  ``bitexact run`` starts it K times with the environment contract (seed, threads,
  ``PYTHONHASHSEED``, ``MALLOC_PERTURB_`` ...), so variations mean what they mean there.
* ``python -m bitexact._pytest_worker drive REPORT_DIR ARGV...`` -- the driver: the
  process that runs ``bitexact run`` (``bitexact._native.run_report``) for a check or a marked
  test and writes its report as text and JSON into ``REPORT_DIR``. It is a process of its own
  so that bitexact's stop-signal handlers, child subreaping and the reaping of escaped process
  groups never touch the pytest process; it dies with it (``PR_SET_PDEATHSIG``) and kills
  its runs when it does.
"""

import importlib
import importlib.util
import os
import pickle
import sys

from . import _outputs
from ._pytest_leaves import leaves


def file_stem(fn):
    """The output file name of ``fn``'s runs: its name, or ``fn`` when that is no plain name."""
    name = getattr(fn, "__name__", "") or ""
    return name if name.isidentifier() else "fn"


def payload(fn, args, kwargs):
    """The bytes a run of ``fn(*args, **kwargs)`` is started from: this process's
    ``sys.path`` and working directory, the module ``fn`` lives in (name and file, for test
    modules that are not importable by name), and the pickled call. Pickling errors propagate."""
    call = pickle.dumps((fn, args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)
    mod = sys.modules.get(getattr(fn, "__module__", None) or "")
    return pickle.dumps({
        "sys_path": list(sys.path),
        "module": (mod.__name__, getattr(mod, "__file__", None)) if mod is not None else None,
        "stem": file_stem(fn),
        "call": call,
    }, protocol=pickle.HIGHEST_PROTOCOL)


def _import_module(name, file):
    """Imports ``name`` as the test process had it: by name, else from its file."""
    try:
        importlib.import_module(name)
        return
    except ImportError:
        if not file:
            raise
    spec = importlib.util.spec_from_file_location(name, file)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)


def _call(path):
    """One run: restore, call, write the leaves."""
    with open(path, "rb") as f:
        p = pickle.load(f)
    sys.path[:] = p["sys_path"]
    if p["module"] is not None and p["module"][0] != "__main__":
        _import_module(*p["module"])
    fn, args, kwargs = pickle.loads(p["call"])
    value = fn(*args, **kwargs)
    flat = leaves(value, what=getattr(fn, "__qualname__", "fn"))
    if not _outputs.active():
        raise RuntimeError("bitexact: a check run without $BITEXACT_OUT")
    _outputs.dump(p["stem"], **dict(flat))


def _drive(report_dir, argv):
    """The driver: ``bitexact run`` with ``argv``; the report as text and JSON files."""
    from ._digest import native

    package = os.path.dirname(os.path.abspath(__file__))
    code, text, js = native().run_report(argv, package)
    if text is not None:
        for name, data in (("report.txt", text), ("report.json", js)):
            with open(os.path.join(report_dir, name), "w", encoding="utf-8") as f:
                f.write(data)
    return code


def main(argv):
    """``call PAYLOAD`` or ``drive REPORT_DIR ARGV...``."""
    if len(argv) >= 2 and argv[0] == "call":
        try:
            _call(argv[1])
        except TypeError as e:
            if str(e).startswith("bitexact:"):  # a bad return value: the message is enough
                sys.stderr.write("TypeError: %s\n" % e)
                return 1
            raise
        return 0
    if len(argv) >= 3 and argv[0] == "drive":
        return _drive(argv[1], argv[2:])
    sys.stderr.write("usage: python -m bitexact._pytest_worker call PAYLOAD | drive DIR ARGV...\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
