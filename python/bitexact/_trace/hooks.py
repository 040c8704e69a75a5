"""Hooks of the op tracer (:mod:`bitexact._trace`) besides its dispatch mode: the module and
gradient hooks of ``--trace modules``, and what keeps a DataLoader's own work out of a trace.
The state and record writing they share with the dispatch mode are in
:mod:`bitexact._trace.state`."""

import os
import threading
import weakref

from . import compiled, device, digest, plain, record
from . import state as ts

# The "own" of a forward entered before tracing began: none of its inputs is its state.
NO_STATE = record.own((), ())
# The output a forward hook is not given when the forward raised (torch then calls a hook
# registered with always_call with the module, its arguments and None).
_RAISED = object()


def module_hooks(state, torch):
    """``--trace modules``: every module's forward output (op ``module output``, phase
    ``forward``, or ``recompute`` when a backward recomputes it; its inputs the module's own
    parameters and persistent buffers (:func:`_state_of`, named by the record's ``"own"``)
    and the forward's positional tensor
    arguments, hashed as the forward receives them (a forward that writes its argument in
    place, as ``ReLU(inplace=True)``, is recorded with the argument it was given), then its
    keyword tensor arguments, hashed after it: torch's global forward pre-hook is not given
    them; a forward entered before tracing began: its arguments only, hashed after it; its
    outputs: the tensors in tuples, lists, dict values and a returned dataclass's fields; its
    ``"entered"``: the call's number among its thread's module calls, in the order they began
    (:meth:`~bitexact._trace.modules.Tracker.entered`; none for a forward entered before
    tracing began); a forward that raised: no record) and,
    before each optimizer step (after a step given a closure: :func:`_closure`), every
    parameter's gradient (op ``parameter grad``, phase
    ``backward``, the parameter's name as module: :class:`_ParamNames`), in the stream of the
    thread that made them. Registered before the tracer's own step hook, which moves the
    stream to the next step. The forward pre-hook and the forward hook (called also when a
    forward raises) are also the module tracker's (``state.tracker``, started without its
    own: two hooks per module call, not four)."""
    from torch.nn.modules import module as nn_module
    import torch.optim.optimizer as optimizer

    from torch.nn.parameter import is_lazy

    tracker = state.tracker
    # .held: [(module, its state's and arguments' labels before, name, phase, its record's
    # "own", its number among the thread's module calls)]
    local = threading.local()
    is_compiling = torch.compiler.is_compiling
    names = _ParamNames(tracker, state)

    def recording():
        stream = ts.stream_of(state)
        if stream is None or not ts.mine(state) or not ts.in_steps(state, stream):
            return None
        return stream

    def before_forward(mod, args):
        # Compile-safe: silent while TorchDynamo traces it into a compiled module's graph, and
        # in a compiled call (recorded as one, see compiled).
        if is_compiling() or compiled.silent(mod):
            return
        name, phase = tracker.push(mod)
        if recording() is None:
            return
        held = getattr(local, "held", None)
        # An outermost forward (just entered): what forwards that raised left behind is
        # dropped.
        if held is None or tracker.depth() <= 1:
            held = local.held = []
        given, own = _state_of(mod, is_lazy)
        if args:
            ts.collect_tensors(args, torch.Tensor, given)
        before = None
        if given:
            before = ts.Record("module output", "", "", given, ())
            before.described_ins = digest.labels_now(state, given, before, hold=LANE)
        held.append((mod, before, name, phase, own, tracker.entered()))

    def after_forward(mod, args, kwargs, output=_RAISED):
        # Called with (mod, args, None) when the forward raised (always_call), else with its
        # keyword arguments and output.
        if is_compiling() or compiled.silent(mod):
            return
        tracker.pop(mod)
        stream = recording()
        if stream is None or output is _RAISED:
            return
        held = getattr(local, "held", None) or []
        for k in range(len(held) - 1, -1, -1):  # its own entry, past any of forwards inside
            if held[k][0] is mod:  # it that raised
                _, before, name, phase, own, entered = held[k]
                del held[k:]
                given = kwargs
                break
        else:  # entered before tracing (or its steps) began: its arguments read now
            before, name, phase = None, tracker.name(mod), tracker.forward_phase()
            own = NO_STATE
            entered = None  # (not on the tracker's stack)
            given = (args, kwargs)
        if hasattr(type(output), "__dataclass_fields__"):
            output = _fields(output)
        if LANE and _lane(state, stream, phase, name, "module output", before, given, output,
                          own, entered):
            return
        if before is not None:
            _held_labels(state, before)
        ins = ts.collect_tensors(given, torch.Tensor, [])
        outs = ts.collect_tensors(output, torch.Tensor, [])
        rec = ts.Record("module output", phase, name, ins, outs)
        rec.before = before  # its state and arguments as the forward received them: first
        rec.own, rec.entered = own, entered
        ts.emit(state, stream, rec)

    def grads(opt):
        stream = ts.stream_of(state)
        if ts.pid() != state.pid or stream is None or not ts.in_steps(state, stream):
            return
        for group in opt.param_groups:
            for i, p in enumerate(group["params"]):
                grad = p.grad
                if grad is None:
                    continue
                name = names.of(p, i)
                if not (LANE and _lane(state, stream, "backward", name, "parameter grad", None,
                                       p, grad)):
                    ts.emit(state, stream, ts.Record("parameter grad", "backward", name,
                                                     [p.detach()], [grad]))

    def before_step(opt, args, kwargs):
        if not is_compiling() and not _closure(args, kwargs):
            grads(opt)

    def after_step(opt, args, kwargs):
        if not is_compiling() and _closure(args, kwargs):
            grads(opt)

    return [nn_module.register_module_forward_pre_hook(before_forward),
            nn_module.register_module_forward_hook(after_forward, with_kwargs=True,
                                                   always_call=True),
            optimizer.register_optimizer_step_pre_hook(before_step),
            optimizer.register_optimizer_step_post_hook(after_step)]


def _held_labels(state, before):
    """Where the program's thread hashes (``state.deferred`` off), the values of a module's
    own state and arguments held before its forward (``digest.labels_now`` with ``hold``, for
    :func:`_lane`), made into ``before``'s labels (``described_ins``) for the general path,
    which takes labels there; anywhere else, nothing."""
    if not state.deferred and before.later:
        before.described_ins = [h.label() for h in before.later]
        before.later = None


def _fields(output):
    """A forward's output that is a dataclass instance, as the list of its fields' values, so
    that its tensors are recorded (``collect_tensors`` walks tuples, lists and dicts; an
    output of ``transformers`` is a dict already)."""
    import dataclasses

    if isinstance(output, type):
        return output
    return [getattr(output, f.name, None) for f in dataclasses.fields(output)]


def _closure(args, kwargs):
    """Whether an optimizer's step was given a closure (``step(closure)``: LBFGS always, any
    optimizer may): the gradients it uses are computed by the closure inside the step, so they
    are recorded after it (the last ones the closure computed, with the parameters as the step
    left them); before it, they are the previous step's, or none. ``args`` are the step's
    as torch's step hooks see them: the optimizer first."""
    closure = kwargs.get("closure", args[1] if len(args) > 1 else None)
    return closure is not None


# Whether a module's record may take :func:`_lane` (the tests turn it off to compare).
LANE = True


def _lane(state, stream, phase, name, op, before, ins, outs, own=None, entered=None):
    """Writes a record of ``op`` (``module output``: ``before`` holds the module's own state and
    positional arguments as its forward received them, ``ins`` and ``outs`` are its keyword
    arguments (all its arguments, for a forward entered before tracing began: ``before`` is
    None) and output, ``own`` its record's ``"own"`` (:func:`_state_of`), ``entered`` its
    number among its thread's module calls (None: unknown); ``parameter grad``:
    the parameter and its gradient) the short way and returns True, as
    :func:`bitexact._trace.state.emit` writes it (the reference, which the tests compare it
    with): by one native call (``Lane.named``), or else
    :func:`bitexact._trace.plain.write_hosts`. Only where every tensor is a plain host tensor,
    the writer hashes (``state.deferred``; the native call also where the program's thread
    hashes, then making the digests itself) and nothing else applies (a capture, row slices,
    a CUDA graph being captured, module state read as copies or from a device); else returns
    False, having done nothing."""
    native = plain.native()
    if not (state.deferred or native is not None) or state.rows != 1 \
            or state.capture is not None or device.capturing():
        return False
    if before is not None and (before.keep or before.waits or before.fills
                               or before.later is None
                               or len(before.later) != len(before.described_ins)):
        return False  # (some labelled at once, off the fast path: the general path lists them)
    held = before.later if before is not None else None
    if native is not None:
        return native.named(state, stream, phase, name, op, ins, outs, held, own, entered)
    import torch

    tensor = torch.Tensor
    return plain.write_hosts(state, stream, phase, name, op, ts.collect_tensors(ins, tensor, []),
                             ts.collect_tensors(outs, tensor, []), held=held or (), own=own,
                             entered=entered)


class _ParamNames:
    """The names of ``parameter grad`` records (``GPT.transformer.wte.weight``), kept in
    ``state`` (:func:`bitexact._trace.state.param_name`, shared with the compiled calls'
    records). A parameter not named yet has every traced root module's parameters named at
    once, as ``model.named_parameters()`` names them (a parameter two modules hold, such as
    tied embeddings, by the first that holds it), then the own parameters of each part named
    by its path before its root ran. One no traced module holds is ``param<i>``
    (its place in its group), and is not looked for again until more modules are named. A
    name once given is kept (a part trained alone before its model keeps its own)."""

    def __init__(self, tracker, state):
        self._tracker, self._state = tracker, state
        # modules named at the last walk; id -> a weak reference, of parameters not found then
        self._count, self._unnamed = None, {}

    def of(self, p, i):
        """The name of parameter ``p``, the ``i``-th of its group."""
        name = ts.param_name(self._state, p)
        if name is None:
            name = self._walk(p) or "param%d" % i
        return name

    def _walk(self, p):
        named = self._tracker.named_modules()
        if self._count != len(named):
            self._count, self._unnamed = len(named), {}
        else:
            missed = self._unnamed.get(id(p))
            if missed is not None and missed() is p:
                return None
        for mod, name in named:
            if "." not in name:  # a root: its parameters as named_parameters() names them
                for pname, q in mod.named_parameters(prefix=name):
                    ts.name_param(self._state, q, pname)
        for mod, name in named:  # a part named by its path before its root ran
            if "." in name:
                for pname, q in mod.named_parameters(prefix=name, recurse=False):
                    ts.name_param(self._state, q, pname)
        found = ts.param_name(self._state, p)
        if found is None:
            self._unnamed[id(p)] = weakref.ref(p)
        return found


def _state_of(mod, is_lazy):
    """What a module's forward reads of its own (not its children's): its parameters and
    its persistent buffers (a buffer left out of its ``state_dict``, such as a preallocated
    KV cache, may hold memory never written; a DTensor is hashed as this process's shard,
    :func:`bitexact._trace.digest.describe`); a lazy module's, before its first forward makes
    them (``is_lazy``), none. With their names, as the record's ``"own"``
    (:func:`bitexact._trace.record.own`)."""
    own, params, buffers = [], [], []
    for n, p in mod._parameters.items():
        if p is not None and not is_lazy(p):
            own.append(p.detach())
            params.append(n)
    if mod._buffers:
        skip = mod._non_persistent_buffers_set
        for n, b in mod._buffers.items():
            if b is not None and n not in skip and not is_lazy(b):
                own.append(b)
                buffers.append(n)
    return own, record.own(tuple(params), tuple(buffers))


def pause_loading():
    """Leaves a DataLoader's own work out of the trace (sampling indices, its seed, loading
    and collating a batch in this process when ``num_workers=0``): with workers most of it
    runs in them, untraced, so tracing it here would make the op stream depend on the worker
    count. The batch is hashed where the program first uses it, either way. The pin-memory
    thread a DataLoader with workers starts while it is iterated is, for the same reason, not
    traced (:mod:`bitexact._trace.threads`: threads started while paused are not). Returns
    handles that put the originals back."""
    from torch.utils.data import dataloader

    handles = []
    for cls, name in ((dataloader.DataLoader, "__iter__"),
                      (dataloader._BaseDataLoaderIter, "__next__")):
        original = cls.__dict__[name]

        def wrapper(self, _original=original):
            with ts.paused():
                return _original(self)

        setattr(cls, name, wrapper)
        handles.append(ts.Restore(cls, name, original))
    return handles


def drain_on_exit(state, stop):
    """Makes ``os._exit`` in the traced process call ``stop`` first, so the records the
    background writer still holds reach the trace (atexit does not run there; a forked child's
    ``os._exit`` is left alone). Returns the handle that puts the original back."""
    original = os._exit

    def _exit(status, _original=original):
        if os.getpid() == state.pid:
            try:
                stop()
            except Exception:  # exiting anyway: the trace is as complete as it could be made
                pass
        _original(status)

    os._exit = _exit
    return ts.Restore(os, "_exit", original)
