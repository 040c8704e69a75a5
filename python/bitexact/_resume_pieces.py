"""The pieces of a state record (:mod:`bitexact._resume_state`): how each kind of value
becomes a piece's digest and value, and how objects are named.

* A tensor: an equality fingerprint (:func:`fingerprints`: the native XXH3-128 of its dtype,
  shape and bytes, 32 hex digits; a device tensor by the op tracer's canonical digest), all of
  a record's host tensors in one native call; a one-element tensor also gets its number as the
  value.
* A small value (number, string, None, a short list or tuple of those): the SHA-256 of its text,
  which is also its value (Python's ``repr``: exact for floats).
* Anything else (numpy's RNG state, a loader's ``state_dict()``): a SHA-256 over its nested
  parts (:func:`feed`), no value.
"""

import hashlib
import weakref

from . import _digest
from ._trace import digest as _trace_digest

HEX = 32


class Whole:
    """The op tracer's digest settings for :func:`bitexact._trace.digest.describe`: every tensor hashed
    whole, whatever its size."""

    max_bytes = 1 << 62
    rows = 1


class Live:
    """The objects of one kind alive now, in the order they were registered (weakly held)."""

    def __init__(self):
        self._refs, self._n = {}, 0

    def add(self, obj):
        """Registers ``obj`` (once; an object that takes no weak reference is left out)."""
        held = self._refs.get(id(obj))
        if held is not None and held[0]() is obj:
            return
        try:
            ref = weakref.ref(obj)
        except TypeError:
            return
        self._n += 1
        self._refs[id(obj)] = (ref, self._n)

    def alive(self):
        """The registered objects still alive, oldest first."""
        found = []
        for key, (ref, n) in list(self._refs.items()):
            obj = ref()
            if obj is None:
                del self._refs[key]
            else:
                found.append((n, obj))
        return [obj for _, obj in sorted(found, key=lambda f: f[0])]


def sha(data):
    """The first :data:`HEX` hex digits of the SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()[:HEX]


def text(v):
    """A small value as a piece shows it: numbers as Python writes them (exact for floats), a
    one-element tensor as its number, tuples and lists of those."""
    if hasattr(v, "numel") and hasattr(v, "item") and v.numel() == 1:
        v = v.item()
    if isinstance(v, (list, tuple)):
        inner = ", ".join(text(x) for x in v)
        return "[%s]" % inner if isinstance(v, list) else "(%s)" % inner
    return repr(v)


def small(v):
    """Whether ``v`` is a value a piece can carry (a number, string, None, a one-element
    tensor, or a short list or tuple of those)."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return True
    if isinstance(v, (list, tuple)):
        return len(v) <= 16 and all(small(x) for x in v)
    return hasattr(v, "numel") and hasattr(v, "item") and v.numel() == 1


def flat(d, prefix=""):
    """``(key, value)`` of a state dict's small values, nested dicts (and lists of dicts)
    flattened as ``outer.inner`` / ``outer[0].inner``; other values left out (functions,
    objects: their text would differ between processes)."""
    for k in sorted(d, key=str):
        v, key = d[k], prefix + str(k)
        if isinstance(v, dict):
            yield from flat(v, key + ".")
        elif isinstance(v, (list, tuple)) and v and all(isinstance(x, dict) for x in v):
            for i, x in enumerate(v):
                yield from flat(x, "%s[%d]." % (key, i))
        elif small(v):
            yield key, v


def feed(h, obj):
    """Feeds a nested value (dicts, lists, bytes, arrays, tensors, numbers) into the hash ``h``:
    a loader's ``state_dict()``, numpy's state."""
    if isinstance(obj, dict):
        for k in sorted(obj, key=str):
            h.update(b"k" + str(k).encode())
            feed(h, obj[k])
    elif isinstance(obj, (list, tuple)):
        h.update(b"[%d" % len(obj))
        for x in obj:
            feed(h, x)
    elif isinstance(obj, (bytes, bytearray)):
        h.update(bytes(obj))
    elif hasattr(obj, "tobytes") and hasattr(obj, "dtype"):  # numpy
        h.update(("%s%s" % (obj.dtype, obj.shape)).encode() + obj.tobytes())
    elif hasattr(obj, "data_ptr"):  # a tensor
        h.update(_trace_digest.describe([obj], Whole)[0].encode())
    elif obj is None or isinstance(obj, (bool, int, float, str)):
        h.update(repr(obj).encode())
    else:
        h.update(type(obj).__name__.encode())


class Pieces:
    """A record's pieces as they are gathered; the tensors among them are hashed together by
    :meth:`hash` (one native call), each piece made of one tensor or of several (its digest
    then a SHA-256 over their names and digests). Without ``heavy``, the pieces of tensors of
    more than one element are left out, except generators' states (a record of the light
    pieces only)."""

    def __init__(self, heavy=True):
        self.list, self._tensors, self._places = [], [], []
        self.heavy = heavy

    def _add(self, name, kind, digest, value=None, hint=None):
        piece = {"name": name, "kind": kind, "digest": digest}
        if value is not None:
            piece["value"] = value
        if hint:
            piece["hint"] = hint
        self.list.append(piece)
        return piece

    def value(self, name, kind, v, hint=None):
        shown = text(v)
        self._add(name, kind, sha(shown.encode()), shown, hint)

    def blob(self, name, kind, data, hint=None):
        """A piece whose digest is the SHA-256 of the bytes ``data``, shown nowhere."""
        self._add(name, kind, sha(data), None, hint)

    def obj(self, name, kind, v, hint=None):
        h = hashlib.sha256()
        feed(h, v)
        self._add(name, kind, h.hexdigest()[:HEX], None, hint)

    def tensor(self, name, kind, t, hint=None, value=True):
        one = t.numel() == 1
        if one or self.heavy or kind == "generator":
            self.tensors(name, kind, [(None, t)], hint, text(t) if one and value else None)

    def tensors(self, name, kind, named, hint=None, value=None):
        """A piece of the tensors ``named`` (``(label, tensor or None)`` each), hashed by
        :meth:`hash`."""
        if not self.heavy and len(named) != 1:
            return
        piece = self._add(name, kind, None, value, hint)
        for label, t in named:
            if t is not None:
                self._places.append((piece, label, len(self._tensors)))
                self._tensors.append(t)
            else:
                self._places.append((piece, label, None))

    def hash(self):
        made = fingerprints(self._tensors) if self._tensors else []
        parts = {}
        for piece, label, i in self._places:
            d = made[i].rpartition(":")[2] if i is not None else "none"
            parts.setdefault(id(piece), (piece, []))[1].append((label, d))
        for piece in self.list:
            if piece["digest"] is None and id(piece) not in parts:
                piece["digest"] = sha(b"")  # a piece of no tensors
        for piece, got in parts.values():
            if len(got) == 1 and got[0][0] is None:
                piece["digest"] = got[0][1]
            else:
                piece["digest"] = sha("\n".join("%s:%s" % g for g in got).encode())


def fingerprints(tensors):
    """Each tensor's equality fingerprint, as ``dtype[shape]:<32 hex digits>``: host tensors by
    the native XXH3-128 of their bytes (``fingerprints_ptr``, about ten times SHA-256's speed:
    a state record compares two runs of one program, so equality is all it needs), the others
    (device tensors, or a native module without it) by the op tracer's canonical digest."""
    nat = _digest.native()
    fast = getattr(nat, "fingerprints_ptr", None)
    hosts, made = [], [None] * len(tensors)
    for i, t in enumerate(tensors):
        host, device = _digest._from_torch(t) if fast is not None else (None, t)
        if host is None:
            made[i] = _trace_digest.describe([t], Whole)[0]
        else:
            hosts.append((i, host))
    if hosts:
        for (i, h), f in zip(hosts, fast([h.args() for _, h in hosts])):
            made[i] = "%s%s:%s" % (h.dtype, list(h.shape), f)
    return made


def labels(objs):
    """Each object's name in pieces: its class name, the second and later of a class numbered
    (``AdamW``, ``AdamW#2``)."""
    names = [type(o).__name__ for o in objs]
    seen, out = {}, []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        out.append(n if names.count(n) == 1 or seen[n] == 1 else "%s#%d" % (n, seen[n]))
    return out
