"""Named leaves of what a checked function returns or a test records, and ``record``.

* :func:`leaves` -- a value flattened to named leaves: tensors, arrays and Python numbers,
  inside nested dicts, lists and tuples. Names are dotted paths as in a torch ``state_dict``
  (``layers.0.weight``); a bare tensor is ``return``. Anything else is a :class:`TypeError`
  naming its path.
* :func:`record` -- ``bitexact.record(**tensors)``: in a run of a ``@pytest.mark.bitexact``
  test, writes the leaves as ``$BITEXACT_OUT/record_<n>.safetensors`` (``n`` counts calls), so
  a training loop's steps are compared in order and the first differing step is named.
  Outside such a run it does nothing (as :func:`bitexact.dump`).

Used by the pytest plugin (the other modules of ``bitexact._pytest``) and re-exported as ``bitexact.record``.
"""

import sys

from .. import _outputs, _protocol

# What `check` accepts as leaves, named in errors.
ACCEPTED = ("torch tensors, numpy arrays, Python numbers (bool, int, float), and dicts, lists "
            "and tuples of them")

# Environment variable set in the runs of a `@pytest.mark.bitexact` test.
WORKER_ENV = _protocol.PYTEST_WORKER_ENV

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
    __tracebackhide__ = True
    out = []

    def walk(v, path):
        __tracebackhide__ = True
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
