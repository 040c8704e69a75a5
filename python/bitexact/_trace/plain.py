"""The op tracer's fast lanes for its most common records, of ops without a generator whose
tensors are all plain host tensors:

- :func:`record`: an op that writes none of its arguments;
- :func:`hold` and :func:`finish`: an in-place op that reads and writes its ``self`` only
  (:data:`bitexact._trace.writes.SELF`: ``add_``, ``mul_``, ``addcmul_``, an optimizer's
  chain), ``self`` held before the op as :func:`bitexact._trace.writes.read_before` holds it.

Each writes byte for byte the line :func:`bitexact._trace.state.emit` writes for the same op,
without the :class:`~bitexact._trace.state.Record` and the sorting of
:func:`bitexact._trace.digest.describe` that the general case needs. Anything else (a capture
asked for, row slices, a CUDA graph being captured, records waiting for device copies, scratch
tensors, a tensor off the host's fast path, an in-place op whose input holds the bytes it
writes) takes the general path.

Where the native module has it (always, in a built package), a record is made by one native
call, ``bitexact._native.Lane`` (``crates/bitexact-python/src/trace_lane.rs``): the op's
tensors read through torch's Python API, its arguments' text, module, phase and source line,
and the JSON line, queued without a Python object per tensor: to be hashed by the
background writer (:attr:`bitexact._trace.state.State.deferred`), or hashed then on the
program's thread, as the general path's :func:`bitexact._trace.digest.describe` does. This
module's Python (:func:`_python_record`, for the background writer only) is the reference the
tests hold it to (``python/tests/test_trace_lane.py``), and the fallback where it is missing;
the in-place lane has no Python of its own (without the native module, :func:`hold` leaves
the op to the general path).
:data:`NATIVE` off makes every record take the Python. Per op, on a loop of 64-float
``torch.add``: 17.5 µs traced with the Python lane, 15.2–15.4 µs with the native one;
``x.add_(y)``: 29.5 µs on the general path, 16.4 µs in the native lane."""

from .. import _digest, _protocol
from . import device, digest, record as _record_line, writes
from . import state as ts

# Whether the native lane makes the lane's records (the tests turn it off to compare).
NATIVE = True
_lanes = []  # [the native lane, or None where the native module has none], once made

_plain = {}  # op name -> whether its records may take a lane, by name (_BETA: see _plain_op)
_BETA = "beta"


def _plain_op(op, kwargs):
    """Whether ``op`` has no scratch results or arguments and reads ``self``: by name, and for
    one of :data:`bitexact._trace.writes.BETA_OPS` (``addmm``: a linear layer), unless its
    ``beta`` is 0 (:func:`bitexact._trace.writes.ignores_self`)."""
    known = _plain.get(op)
    if known is None:
        base = op.partition(".")[0]
        known = _plain[op] = _BETA if base in writes.BETA_OPS else (
            base not in ts._SCRATCH_RESULTS and base not in ts.SCRATCH_ARGS)
    return known is True or known is _BETA and not writes.ignores_self(op, kwargs)


def _lane():
    """The native lane (made once), or None."""
    if not _lanes:
        import torch

        make = getattr(_digest.native(), "Lane", None)
        _lanes.append(None if make is None else make(
            torch.Tensor, torch.strided, _digest._torch_dtypes, digest, _record_line,
            _protocol.TRACE_RECORD_VERSION))
    return _lanes[0]


def native():
    """The native lane where :data:`NATIVE` is on and the native module has it, else None."""
    if not NATIVE:
        return None
    return _lanes[0] if _lanes else _lane()


def _open(state, op, kwargs):
    """Whether a record of ``op`` called with ``kwargs`` may take a native lane now (the
    Python lane also needs :attr:`~bitexact._trace.state.State.deferred`)."""
    return state.rows == 1 and state.capture is None and _plain_op(op, kwargs) \
        and not device.capturing()


def record(state, stream, func, op, args, kwargs, result, tensor_type, tensors=None):
    """Writes the record of ``op`` (which writes no argument and has no generator) the fast
    way and returns True, or returns False when it must take the general path. ``tensors``:
    its tensors as the observer driver read them (:mod:`bitexact._trace.observer`), which
    the native lane then takes instead of reading the Python tensors."""
    if not _open(state, op, kwargs):
        return False
    lane = native()
    if lane is not None:
        return lane.record(state, stream, func, op, args, kwargs, result, None, tensors)
    if not state.deferred:
        return False
    return _python_record(state, stream, func, op, args, kwargs, result, tensor_type)


def hold(state, stream, func, op, args, kwargs, tensors=None):
    """Before an in-place op that reads and writes its ``self`` only and has no generator:
    ``self`` held natively (as :func:`bitexact._trace.writes.read_before` holds it) for
    :func:`finish`, or None, having done nothing, when the general path must take the op.
    ``tensors``: its tensors as the observer driver read them (see :func:`record`)."""
    if not NATIVE or not _open(state, op, kwargs) or not ts.in_steps(state, stream) \
            or ts.skipped(state, op):
        return None
    lane = _lanes[0] if _lanes else _lane()
    return lane.hold_self(state, func, op, args, kwargs, tensors) if lane is not None else None


def finish(state, stream, func, op, args, kwargs, result, held, tensor_type, general,
           tensors=None):
    """After the op :func:`hold` held ``self`` for: writes its record. Where the record cannot
    take the lane (a result off the host's fast path), ``general``
    (:func:`bitexact._trace.calls.record`) writes it with the value held. ``tensors``: its
    tensors as the observer driver read them (see :func:`record`)."""
    if _lanes[0].record(state, stream, func, op, args, kwargs, result, held, tensors):
        return
    before = ts.Record(op, "", "", [args[0]], ())  # what read_before would have made
    if state.deferred:
        before.later, before.keep, before.waits, before.fills = [held], [], [], []
        before.described_ins = [digest.HOLE]
    else:  # the program's thread hashes: a label
        before.described_ins = [held.label()]
    general(state, stream, func, op, writes.SELF, args, kwargs, result, tensor_type, None,
            before)


def _python_record(state, stream, func, op, args, kwargs, result, tensor_type):
    """:func:`record`'s lane in Python, once it is open."""
    ins = ts.collect_tensors(kwargs, tensor_type, ts.collect_tensors(args, tensor_type, []))
    outs = ts.collect_tensors(result, tensor_type, [])
    text = _record_line.arguments(func, args, kwargs, tensor_type) if digest.SKETCH else ""
    phase, module = state.tracker.where()
    return write_hosts(state, stream, phase, module, op, ins, outs, text)


def write_hosts(state, stream, phase, module, op, ins, outs, text="", held=(), own=None,
                entered=None):
    """Writes a record whose tensors are all plain host tensors (``digest._all_fast``) as
    :func:`bitexact._trace.state.emit` writes it, for the background writer to hash
    (``state.deferred``), and returns True; returns False, having done nothing, where one is
    not. ``held``: values held before the call (``TraceWriter.hold``), its first inputs;
    ``text``: its non-tensor arguments; ``own``, ``entered``: a module record's ``"own"`` (its
    text, :func:`bitexact._trace.record.own`) and ``"entered"``; a module record's ``"late"``
    counts ``ins``, labelled after its forward. The Python
    lanes' last step: this module's and
    ``--trace modules``' (:func:`bitexact._trace.hooks.module_hooks`), where the native module
    is missing (``Lane.record`` and ``Lane.named`` do it natively)."""
    items = digest._all_fast(ins + outs, state.max_bytes)
    if items is None:
        return False
    n = len(held) + len(ins)
    slots, sketches = None, ()
    if digest.SKETCH and outs:
        slots, sketches = list(range(n, n + len(outs))), digest.SKETCH_MARK
    line = _record_line.line(stream.step, state.rank, phase, module, op,
                             _record_line.source(state.skip_dirs), [digest.HOLE] * n,
                             [digest.HOLE] * len(outs), stream.label, text, sketches,
                             own=own, entered=entered,
                             late=len(ins) if own is not None else None)
    with state.lock:
        state.write(line, list(held) + items, slots)
    return True
