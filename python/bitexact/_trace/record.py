"""One op trace record as a JSON line (:func:`line`) and its source location (:func:`source`),
made cheaply: the tracer makes one per op, hundreds per training step.

- :func:`line` writes exactly what ``json.dumps(record, separators=(",", ":"))`` writes for the
  record's fields in their order, without building the dict: the strings that repeat (phase,
  module, op, source) are encoded once each and remembered; the tensor labels are made of
  ASCII letters, digits and ``[],:-_./`` only (see :mod:`bitexact._trace.digest`), which JSON
  writes as they are.
- :func:`source` walks the stack to the innermost frame in the program's own code; whether a
  file is the program's own, and how it is shown, is worked out once per file name (and
  working directory).
"""

import json
import os
import sys

from .. import _protocol

# Memo sizes: past this many entries a memo starts over (a program that makes code or module
# names without end keeps this bounded).
_MEMO_MAX = 1 << 14

_quoted = {}


def _quote(s):
    """``json.dumps(s)``, remembered."""
    q = _quoted.get(s)
    if q is None:
        if len(_quoted) >= _MEMO_MAX:
            _quoted.clear()
        q = _quoted[s] = json.dumps(s)
    return q


_owns = {}


def own(params, buffers):
    """A module record's ``"own"`` field, as JSON (``{"params":["weight","bias"],
    "buffers":[]}``): the names of the module's own parameters, then of its persistent
    buffers, in the order its record lists them first among its inputs; remembered (the
    native lane writes the text it is given)."""
    key = (params, buffers)
    text = _owns.get(key)
    if text is None:
        if len(_owns) >= _MEMO_MAX:
            _owns.clear()
        text = _owns[key] = '{"params":[%s],"buffers":[%s]}' % (
            ",".join(map(_quote, params)), ",".join(map(_quote, buffers)))
    return text


def _labels(labels):
    return '"' + '","'.join(labels) + '"' if labels else ""


# A record's fields up to its outputs, with its version (see ``src/protocol.rs``).
_LINE = ('{"v":%d,' % _protocol.TRACE_RECORD_VERSION
         + '"step":%d,"rank":%d,"phase":%s,"module":%s,"op":%s,"src":%s,"in":[%s],"out":[%s]%s')


def line(step, rank, phase, module, op, src, ins, outs, thread="", args="", sketches=(),
         gen=None, kernel=None, own=None, entered=None, late=None):
    """The record's JSON line (fields: ``_protocol.TRACE_RECORD_FIELDS``), newline-terminated;
    then, only when there are,
    ``"args"`` (the op's non-tensor arguments, :func:`arguments`), ``"sk"`` (a sketch of each
    result, ``src/trace/sketch.rs``: digits, ``e.-,|``, ``NaN`` and ``inf`` only, which JSON
    writes as they are), ``"gen"`` (a random op's generator and its state before the call,
    :mod:`bitexact._trace.generator`), ``"kernel"`` (a compiled region's kernel: a dict,
    :mod:`bitexact._trace.kernels`) and ``"thread"`` (a thread other than the one that
    started tracing).
    ``sketches`` = ``"\1"``: the background writer's mark for the ``"sk"`` field
    (:data:`bitexact._trace.digest.SKETCH_MARK`), written as it is. ``"own"`` (a
    ``--trace modules`` module record's: the names of the module's own parameters and
    persistent buffers, its first inputs, as :func:`own` writes them), ``"entered"`` (its
    call's number among its thread's module calls, in the order they began) and ``"late"``
    (how many of its last inputs were labelled after its forward: its keyword tensor
    arguments) come before ``"args"``, when not None (``"late"``: when not 0 either)."""
    tail = ',"own":%s' % own if own is not None else ""
    tail += ',"entered":%d' % entered if entered is not None else ""
    tail += ',"late":%d' % late if late else ""
    tail += ',"args":%s' % _quote(args) if args else ""
    if gen:
        tail += ',"gen":%s' % _quote(gen)
    if sketches == "\1":
        tail += sketches
    elif any(sketches):
        tail += ',"sk":[%s]' % _labels(sketches)
    if kernel is not None:
        tail += ',"kernel":%s' % json.dumps(kernel, separators=(",", ":"))
    tail += ',"thread":%s}\n' % _quote(thread) if thread else "}\n"
    return _LINE % (step, rank, _quote(phase), _quote(module), _quote(op), _quote(src),
                    _labels(ins), _labels(outs), tail)


# id(op overload) -> (the overload, its schema's argument names): by id, since an OpOverload's
# __hash__ is a Python method
_names = {}
_LEFT_OUT = ("device", "pin_memory", "layout")  # where, not what: never a numeric difference


def _value(x, tensor_type):
    """An argument's text, or None for a tensor, None, a device or a list of tensors."""
    if isinstance(x, tensor_type) or x is None:
        return None
    if isinstance(x, (list, tuple)):
        items = [_value(v, tensor_type) for v in x]
        if x and all(i is None for i in items):
            return None
        return "[%s]" % ",".join("T" if i is None else i for i in items)
    if isinstance(x, float):
        return repr(x)
    text = str(x)
    if text.startswith("torch."):  # a dtype, memory format
        return text[6:]
    if type(x).__name__ == "device":
        return None
    if " at 0x" in text:  # an object's default repr (a torch.Generator): its address, new each run
        return "<%s>" % type(x).__name__
    return text


def _argument_names(func):
    """The argument names of ``func``'s schema, remembered."""
    known = _names.get(id(func))
    if known is None or known[0] is not func:
        if len(_names) >= _MEMO_MAX:
            _names.clear()
        known = _names[id(func)] = (func, [a.name for a in func._schema.arguments])
    return known[1]


def arguments(func, args, kwargs, tensor_type):
    """The op's non-tensor arguments as ``name=value`` pairs, comma-separated
    (``normalized_shape=[16],eps=1e-05``): numbers (floats by ``repr``), bools, dtypes, lists
    of them (a tensor inside a list as ``T``), by the schema's names; tensors, ``None``,
    devices and layouts are left out. What ``bitexact diff-trace`` names when an op's inputs
    are identical and its arguments are not."""
    parts = names = None
    for i, a in enumerate(args):
        if a is None or isinstance(a, tensor_type):  # most arguments: no call for them
            continue
        kind = type(a)  # a number (an optimizer's scalars): no call to _value
        text = repr(a) if kind is float else str(a) if kind is int or kind is bool \
            else _value(a, tensor_type)
        if text is None:
            continue
        if parts is None:
            parts, names = [], _argument_names(func)
        parts.append("%s=%s" % (names[i] if i < len(names) else "#%d" % i, text))
    for k, v in kwargs.items():
        text = None if k in _LEFT_OUT else _value(v, tensor_type)
        if text is not None:
            if parts is None:
                parts = []
            parts.append("%s=%s" % (k, text))
    return ",".join(parts) if parts else ""


_shown = {}  # file name -> how a record shows it, or None when it is not the program's own
_shown_for = [None, None]  # the skip_dirs _shown holds answers for, and the directory names
# are relative to: the working directory when a trace first asked (never looked up again: a
# system call on every op, and a program that changes directory keeps its names)


def _show(name, skip_dirs, base):
    if name.startswith(skip_dirs) or name.startswith("<") or "-packages" + os.sep in name:
        return None
    try:
        rel = os.path.relpath(name, base) if base else os.path.relpath(name)
    except (OSError, ValueError):  # the working directory is gone; another drive
        return name
    return name if rel.startswith("..") else rel


def source(skip_dirs, depth=2):
    """``file:line`` of the innermost frame (from ``depth`` frames up) in the program's own
    code: not torch, bitexact, the standard library or installed packages (relative to the
    working directory the trace started in, when inside it)."""
    if _shown_for[0] is not skip_dirs:
        try:
            cwd = os.getcwd()
        except OSError:
            cwd = None
        _shown.clear()
        _shown_for[:] = [skip_dirs, cwd]
    elif len(_shown) >= _MEMO_MAX:
        _shown.clear()
    base = _shown_for[1]
    f = sys._getframe(depth)
    while f is not None:
        name = f.f_code.co_filename
        try:
            shown = _shown[name]
        except KeyError:
            shown = _shown[name] = _show(name, skip_dirs, base)
        if shown is not None:
            return "%s:%d" % (shown, f.f_lineno)
        f = f.f_back
    return ""
