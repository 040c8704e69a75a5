"""The processes behind the pytest plugin, and what they share with it.

* :func:`leaves` -- what a checked function returned (or a test recorded), flattened to named
  leaves: tensors, arrays and Python numbers, inside nested dicts, lists and tuples. Names are
  dotted paths as in a torch ``state_dict`` (``layers.0.weight``); a bare tensor is
  ``return``. Anything else is a :class:`TypeError` naming its path.
* :func:`record` -- ``bitexact.record(**tensors)``: in a run of a ``@pytest.mark.bitexact``
  test, writes the leaves as ``$BITEXACT_OUT/record_<n>.safetensors`` (``n`` counts calls), so
  a training loop's steps are compared in order and the first differing step is named.
  Outside such a run it does nothing (as :func:`bitexact.dump`).
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

# What `check` accepts as leaves, named in errors.
ACCEPTED = ("torch tensors, numpy arrays, Python numbers (bool, int, float), and dicts, lists "
            "and tuples of them")

# Environment variable set in the runs of a `@pytest.mark.bitexact` test.
WORKER_ENV = "BITEXACT_PYTEST_WORKER"

_record_calls = [0]


def _is_leaf(v):
    """Whether ``v`` is hashed as one tensor: a number, a torch tensor or an array."""
    if isinstance(v, (bool, int, float)):
        return True
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(v, torch.Tensor):
        return True
    return hasattr(v, "__array_interface__")


def leaves(value, root=None, what="the function"):
    """``[(path, leaf), ...]`` of ``value`` in order; ``root`` names a bare leaf (default
    ``return``) and prefixes every path. :class:`TypeError` names the path of anything that is
    not a tensor, an array, a number or a container of them."""
    out = []

    def walk(v, path):
        if _is_leaf(v):
            out.append((path or "return", v))
        elif isinstance(v, dict):
            for k, x in v.items():
                if not isinstance(k, (str, int)):
                    raise TypeError("bitexact: %s returned a dict with a %s key at %s; keys "
                                    "must be strings or ints" % (what, type(k).__name__, path or "the top"))
                walk(x, "%s.%s" % (path, k) if path else str(k))
        elif isinstance(v, (list, tuple)):
            for i, x in enumerate(v):
                walk(x, "%s.%d" % (path, i) if path else str(i))
        else:
            raise TypeError("bitexact: %s returned a %s at `%s`, which is not a tensor: bitexact "
                            "compares %s" % (what, type(v).__name__, path or "return", ACCEPTED))

    walk(value, root)
    if not out:
        raise TypeError("bitexact: %s returned nothing to compare (%r): return %s"
                        % (what, value, ACCEPTED))
    names = [p for p, _ in out]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise TypeError("bitexact: %s returned two leaves named %s" % (what, ", ".join(dup)))
    return out


def record(**tensors):
    """Writes ``tensors`` (flattened by :func:`leaves`) as ``record_<n>.safetensors`` in a run
    of a ``@pytest.mark.bitexact`` test (or any run of ``bitexact run``); returns the path, or
    ``None`` outside a run."""
    if not tensors:
        raise TypeError("bitexact.record: name the tensors to record, e.g. record(loss=loss)")
    flat = []
    for name, value in tensors.items():
        flat.extend(leaves(value, root=name, what="record(%s=...)" % name))
    n = _record_calls[0]
    _record_calls[0] += 1
    return _outputs.dump("record_%04d" % n, **dict(flat))


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
