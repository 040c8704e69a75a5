"""One run of an isolated check (``python -m bitexact._pytest.worker call PAYLOAD``).

A run of ``bitexact.check(fn, ..., isolate=True)`` is a fresh interpreter (as
multiprocessing's spawn makes) that restores the test process's ``sys.path``, unpickles ``fn``
and its arguments, calls it once and writes its leaves as ``$BITEXACT_OUT/<fn name>.safetensors``.
``bitexact run`` starts it K times with the environment contract (seed, threads,
``PYTHONHASHSEED``, ``MALLOC_PERTURB_`` ...), so variations mean what they mean there.

``bitexact run`` itself runs in a driver process started by ``check.run_program``.
"""

import importlib
import importlib.util
import os
import pickle
import sys

from .. import _outputs
from .leaves import leaves


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
    if os.environ.get("BITEXACT_RUN", "0") != "0":
        # The report shows run 0's platform file: later runs skip the version lookups
        # (importlib.metadata, tens of ms a run).
        _outputs._platform_written = True
    _outputs.dump(p["stem"], **dict(flat))


def main(argv):
    """``call PAYLOAD``."""
    if len(argv) >= 2 and argv[0] == "call":
        try:
            _call(argv[1])
        except TypeError as e:
            if str(e).startswith("bitexact:"):  # a bad return value: the message is enough
                sys.stderr.write("TypeError: %s\n" % e)
                return 1
            raise
        return 0
    sys.stderr.write("usage: python -m bitexact._pytest.worker call PAYLOAD\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
