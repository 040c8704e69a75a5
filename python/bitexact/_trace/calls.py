"""What the op tracer (:mod:`bitexact._trace`) does at each op call, whichever driver hands it
the call (its dispatch mode, or the observer driver, :mod:`bitexact._trace.observer`): how it
treats an op (:func:`op`: recorded, skipped, or a collective), what it reads before a
recorded op runs (:func:`before`) and the record it writes after (:func:`after`,
:func:`record`)."""

from . import c10d, compiled, digest, generator, plain, record as _line, writes
from . import state as ts

torch = None  # the torch module, set by bind() when tracing starts


def bind(module):
    """Sets the torch module the calls use (imported by the tracer's start, not here: importing
    bitexact._trace must not import torch)."""
    global torch
    torch = module


# Ops that are not computation and are not recorded: allocations of uninitialized memory,
# pointing a tensor at existing storage (how a DataLoader batch is received from a worker, at a
# moment that depends on worker timing), the profiler's markers (DDP's forward), and cutting a
# tensor from autograd's graph in place (``detach_``: no dispatch mode sees it, torch's
# observer callbacks do, from an optimizer's step).
_NOT_COMPUTATION = ("aten::empty", "aten::new_empty", "aten::resize_", "aten::set_", "profiler::",
                    "aten::detach_")
# Ops that return their input's bytes under another shape without being views (matmul's
# reshape of a result, ``_unsafe_view``): no new data, like a view; the next op that reads the
# result hashes it (in nanoGPT's step, 9 records and 7.5 MB hashed for nothing).
_SAME_BYTES = frozenset(["aten::_unsafe_view"])
# Ops that give a tensor another shape in place, never reading its values (which may be memory
# never written, ``torch.empty(2, 3).t_()``): like a view. By name, any overload.
_SHAPE_ONLY = frozenset("aten::" + n for n in (
    "t_", "transpose_", "swapdims_", "swapaxes_", "squeeze_", "unsqueeze_", "as_strided_"))


# id(op overload) -> (the overload, its kind, writes.written_args' two sets, generator.spec):
# keyed by id, with the overload kept and compared, since an OpOverload's __hash__ is a Python
# method (a call per lookup, every op the program dispatches).
ops = {}
COLLECTIVE, SKIPPED = object(), object()


def op(func):
    """``(func, kind, written, generator, read)``, remembered: how the mode treats ``func`` (a
    collective (:mod:`bitexact._trace.c10d`), skipped (a view or alias, :data:`_SAME_BYTES`,
    :data:`_SHAPE_ONLY`, or not a computation: :data:`_NOT_COMPUTATION`), or recorded under its
    name), the arguments it writes and those of them it reads
    (:func:`bitexact._trace.writes.written_args`) and where it takes its generator, for a
    random op (:func:`bitexact._trace.generator.spec`)."""
    name = func.name()
    if func.namespace in c10d.NAMESPACES:
        kind = COLLECTIVE
    elif func.is_view or name in _SAME_BYTES or name.partition(".")[0] in _SHAPE_ONLY \
            or name.startswith(_NOT_COMPUTATION):
        kind = SKIPPED
    else:
        kind = name
    if len(ops) >= 1 << 16:
        ops.clear()
    computes = kind is not SKIPPED and kind is not COLLECTIVE
    written, read = writes.written_args(func, name) if computes else ((), ())
    known = ops[id(func)] = (func, kind, written,
                              generator.spec(func, name) if computes else None, read)
    return known


def known(func):
    """:func:`op`'s answer for ``func``, from :data:`ops` when it is there (the dispatch mode
    inlines this lookup: it runs at every op)."""
    answer = ops.get(id(func))
    return answer if answer is not None and answer[0] is func else op(func)


_LANE = object()  # a token's generator slot: the op takes plain's in-place lane
_C10D = object()  # a token's generator slot: a collective (its c10d token in the next)


def before(state, known, stream, args, kwargs, tensors=None):
    """What the tracer does before an op runs (``known``: :func:`op`'s answer for it):
    returns the token :func:`after` takes after it ran, or None where the op is not recorded
    (skipped, not the program's own, inside a compiled call). A collective's inputs are
    hashed now (:func:`bitexact._trace.c10d.before`).
    An in-place op that reads and writes only its ``self`` has ``self`` held by plain's lane
    (:func:`bitexact._trace.plain.hold`); a random op's generator state
    (:mod:`bitexact._trace.generator`) and the written tensors an op reads
    (:func:`bitexact._trace.writes.read_before`) are read now. Shared by the dispatch mode and
    the observer driver (:mod:`bitexact._trace.observer`; ``tensors``: the op's tensors as it
    read them, for plain's lane)."""
    kind = known[1]
    if kind is SKIPPED or state is None or not ts.mine(state) or compiled.running():
        return None
    func, written, gen_spec = known[0], known[2], known[3]
    if kind is COLLECTIVE:
        token = c10d.before(state, stream, func, args, kwargs, torch.Tensor)
        return None if token is None else (state, stream, known, _C10D, token)
    if written is writes.SELF and known[4] is writes.SELF and not gen_spec:
        held = plain.hold(state, stream, func, kind, args, kwargs, tensors)
        if held is not None:
            return (state, stream, known, _LANE, held)
    gen = gen_spec and generator.before(torch, gen_spec, args, kwargs, state.tracker)
    read = writes.read_before(state, stream, kind, written, known[4], args, kwargs,
                              torch.Tensor) if written else None
    return (state, stream, known, gen, read)


def after(token, func, args, kwargs, result, tensors=None):
    """Records the op :func:`before` returned ``token`` for, now that it returned
    ``result`` (``tensors``: as :func:`before`'s)."""
    state, stream, known, gen, read = token
    if gen is _C10D:
        c10d.after(read, result)
    elif gen is _LANE:
        plain.finish(state, stream, func, known[1], args, kwargs, result, read, torch.Tensor,
                     record, tensors)
    else:
        record(state, stream, func, known[1], known[2], args, kwargs, result, torch.Tensor, gen,
               read)


def record(state, stream, func, op, written, args, kwargs, result, tensor_type, gen=None,
            before=None, tensors=None):
    """Records one computing op ``op`` (its name) of ``stream`` (not a collective, not a
    view): its inputs are what it read (``before``: the written tensors it read, hashed before
    it ran, :func:`bitexact._trace.writes.read_before`; then its other tensor arguments), its
    outputs what it returned (``written``: the arguments it writes in place or through ``out=``,
    results); ``gen``: a random op's generator and its state before the call
    (:mod:`bitexact._trace.generator`); ``tensors``: its tensors as the observer driver read
    them (:func:`bitexact._trace.plain.record`)."""
    if not ts.in_steps(state, stream) or ts.skipped(state, op):
        return
    if not written and gen is None and plain.record(state, stream, func, op, args, kwargs,
                                                    result, tensor_type, tensors):
        return
    text = _line.arguments(func, args, kwargs, tensor_type) if digest.SKETCH \
        else ""
    call = (func, args, kwargs, written)  # for a capture's replay (state.save)
    scratch = writes.scratch_arg(func, op, args, kwargs)
    outs = ts.collect_tensors(result, tensor_type, [])
    if written:  # in-place and out= ops: the written tensor is a result, not an input
        if not outs:  # one that returns nothing (``_foreach_add_``, ``_fused_adam_``): the
            # tensors it wrote are its results (an optimizer's step, on CUDA by default)
            outs = writes.tensors_at(args, kwargs, written, tensor_type)
        ins = writes.tensors_at(args, kwargs, written, tensor_type, among=False)
    else:
        ins = ts.collect_tensors(kwargs, tensor_type, ts.collect_tensors(args, tensor_type, []))
    phase, module = state.tracker.where()
    hidden = () if scratch is None else [j for j, t in enumerate(ins) if t is scratch]
    rec = ts.Record(op, phase, module, ins, outs, args=text, call=call, scratch_ins=hidden,
                    gen=gen, described_ins=before.others if before is not None else None)
    rec.before = before
    ts.emit(state, stream, rec)
