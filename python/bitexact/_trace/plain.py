"""The op tracer's fast lane for its most common record: an op that writes none of its
arguments and draws no random numbers, whose tensors are all plain host tensors, recorded
while the background writer hashes (:attr:`bitexact._trace.state.State.deferred`). It writes
byte for byte the line :func:`bitexact._trace.state.emit` writes for the same op, without the
:class:`~bitexact._trace.state.Record` and the sorting of
:func:`bitexact._trace.digest.describe` that the general case needs (about a third of a
record's Python on the nanoGPT bench). Anything else (a capture asked for, row slices, a CUDA
graph being captured, records waiting for device copies, scratch tensors, a tensor off the
host's fast path) takes the general path: :func:`record` returns False."""

from . import device, digest, record as _record_line, writes
from . import state as ts

_plain = {}  # op name -> whether its records may take this lane (by name only)


def _plain_op(op):
    """Whether ``op`` has no scratch results or arguments and always reads ``self``."""
    known = _plain.get(op)
    if known is None:
        base = op.partition(".")[0]
        known = _plain[op] = (base not in ts._SCRATCH_RESULTS and base not in ts.SCRATCH_ARGS
                              and base not in writes.BETA_OPS)
    return known


def record(state, stream, func, op, args, kwargs, result, tensor_type):
    """Writes the record of ``op`` (which writes no argument and has no generator) the fast
    way and returns True, or returns False when it must take the general path."""
    if not state.deferred or state.rows != 1 or state.capture is not None \
            or not _plain_op(op) or device.capturing():
        return False
    ins = ts.collect_tensors(kwargs, tensor_type, ts.collect_tensors(args, tensor_type, []))
    outs = ts.collect_tensors(result, tensor_type, [])
    n = len(ins)
    items = digest._all_fast(ins + outs, state.max_bytes)
    if items is None:
        return False
    slots, sketches = None, ()
    if digest.SKETCH:
        text = _record_line.arguments(func, args, kwargs, tensor_type)
        if outs:
            slots, sketches = list(range(n, n + len(outs))), digest.SKETCH_MARK
    else:
        text = ""
    phase, module = state.tracker.where()
    line = _record_line.line(stream.step, state.rank, phase, module, op,
                             _record_line.source(state.skip_dirs), [digest.HOLE] * n,
                             [digest.HOLE] * len(outs), stream.label, text, sketches)
    with state.lock:
        state.write(line, items, slots)
    return True
