"""Hooks of the op tracer (:mod:`bitexact._trace`) besides its dispatch mode: the module and
gradient hooks of ``--trace modules``, and what keeps a DataLoader's own work out of a trace.
The state and record writing they share with the dispatch mode are in
:mod:`bitexact._trace.state`."""

import os
import threading
import weakref

from . import compiled, digest
from . import state as ts


def module_hooks(state, torch):
    """``--trace modules``: every module's forward output (op ``module output``, phase
    ``forward``, or ``recompute`` when a backward recomputes it; its inputs the module's own
    parameters and persistent buffers, hashed before the forward (:func:`_state_of`), then the
    forward's tensor arguments) and, before each optimizer
    step, every parameter's gradient (op ``parameter grad``, phase ``backward``, the
    parameter's name as module), in the stream of the thread that made them."""
    from torch.nn.modules import module as nn_module
    import torch.optim.optimizer as optimizer

    from torch.nn.parameter import is_lazy

    named = weakref.WeakSet()  # modules whose whole subtree's parameters have names
    local = threading.local()  # .held: [(module, its state's labels before its forward)]

    def recording(mod):
        # Compile-safe: silent while TorchDynamo traces it into a compiled module's graph, and
        # in a compiled call (recorded as one, see compiled).
        if torch.compiler.is_compiling() or compiled.silent(mod):
            return None
        stream = ts.stream_of(state)
        if stream is None or not ts.mine(state) or not ts.in_steps(state, stream):
            return None
        return stream

    def before_forward(mod, args):
        if recording(mod) is None:
            return
        held = getattr(local, "held", None)
        # An outermost forward (the tracker's forward hook, before this one, has entered it):
        # what forwards that raised left behind is dropped.
        if held is None or state.tracker.depth() <= 1:
            held = local.held = []
        own = _state_of(mod, is_lazy)
        before = None
        if own:
            before = ts.Record("module output", "", "", own, ())
            before.described_ins = digest.labels_now(state, own, before)
        held.append((mod, before))

    def after_forward(mod, args, output):
        stream = recording(mod)
        if stream is None:
            return
        held, before = getattr(local, "held", None) or [], None
        for k in range(len(held) - 1, -1, -1):  # its own entry, past any of forwards inside
            if held[k][0] is mod:  # it that raised
                before = held[k][1]
                del held[k:]
                break
        name = state.tracker.name(mod)
        # The parameters' names: the whole subtree's once, then (a parameter replaced mid-run)
        # the module's own, so a forward does not walk every parameter below it each time.
        recurse = mod not in named
        named.add(mod)
        for pname, p in mod.named_parameters(prefix=name, recurse=recurse):
            state.param_names.setdefault(id(p), pname)
        ins = ts.collect_tensors(args, torch.Tensor, [])
        outs = ts.collect_tensors(output, torch.Tensor, [])
        rec = ts.Record("module output", state.tracker.forward_phase(), name, ins, outs)
        rec.before = before  # its parameters and buffers as the forward read them: first
        ts.emit(state, stream, rec)

    def before_step(opt, _args, _kwargs):
        if torch.compiler.is_compiling():
            return
        stream = ts.stream_of(state)
        if ts.pid() != state.pid or stream is None or not ts.in_steps(state, stream):
            return
        for group in opt.param_groups:
            for i, p in enumerate(group["params"]):
                if p.grad is not None:
                    name = state.param_names.get(id(p), "param%d" % i)
                    ts.emit(state, stream, ts.Record("parameter grad", "backward", name,
                                                     [p.detach()], [p.grad]))

    return [nn_module.register_module_forward_pre_hook(before_forward),
            nn_module.register_module_forward_hook(after_forward),
            optimizer.register_optimizer_step_pre_hook(before_step)]


def _state_of(mod, is_lazy):
    """What a module's forward reads of its own (not its children's): its parameters and
    its persistent buffers (a buffer left out of its ``state_dict``, such as a preallocated
    KV cache, may hold memory never written; a DTensor is hashed as this process's shard,
    :func:`bitexact._trace.digest.describe`); a lazy module's, before its first forward makes
    them (``is_lazy``), none."""
    own = [p.detach() for p in mod._parameters.values() if p is not None and not is_lazy(p)]
    if mod._buffers:
        skip = mod._non_persistent_buffers_set
        own += [b for n, b in mod._buffers.items()
                if b is not None and n not in skip and not is_lazy(b)]
    return own


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
