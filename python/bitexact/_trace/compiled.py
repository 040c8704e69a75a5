"""Compiled regions under the op tracer (:mod:`bitexact._trace`): a function or module compiled
with ``torch.compile`` runs compiled under ``bitexact run --trace``, each call one record.

Why: while a ``TorchDispatchMode`` is on the stack, TorchDynamo skips every frame (it would
have to send each op to the mode), so a compiled model traced op by op runs eagerly: other
kernels, other bits, and none of the compiled code's own nondeterminism. Instead:

- **Forward.** Each call of a compiled callable made while tracing (``torch.compile(fn)``,
  ``torch.compile(module)``, ``module.compile()``, ``torch._dynamo.optimize``: what
  ``OptimizeContext.__call__`` returns, wrapped by :func:`install`) runs with the tracer's mode
  off the dispatch stack and its hooks silent (:func:`inside`), so TorchDynamo compiles and runs
  it exactly as in an untraced run, and is one record::

      {"phase": "forward", "module": "GPT", "op": "compiled GPT", "in": [...], "out": [...]}

  ``op`` is ``compiled <name>``: the class name of a compiled module, the qualified name of a
  compiled function (``compiled train_step``; ``<locals>.`` left out). ``module`` is the compiled
  module's qualified name (``Net.block``; the ``OptimizedModule`` wrapper and its ``_orig_mod``
  are not part of names) or, for a compiled function, the module running when it is called.
  ``in`` is every tensor argument and, for a module, its parameters and buffers (hashed before
  the call); ``out`` the tensors it returns. Tensors a compiled function reads from globals or
  closures are not inputs. The whole call is one record, graph breaks and the eager code between
  the graphs included: nothing inside a compiled call is recorded op by op, so a divergence
  inside it is reported on this record (``inputs identical, output differs``). Under ``--trace
  ops`` the kernels it launches are recorded before it (:mod:`bitexact._trace.kernels`), and
  the report names the first of them that differs.
- **Backward** (``--trace ops``): every autograd node the compiled call created (for a region
  compiled into one graph, AOTAutograd's single ``CompiledFunctionBackward``; more with graph
  breaks or outputs that are views) runs as the untraced run runs it, and each of its runs is
  one record with the same ``op`` and ``module``, phase ``backward``: ``in`` the gradients it
  receives (hashed before it runs), ``out`` the gradients it produces (the region's input and
  parameter gradients). The ops inside such a node are not recorded op by op; its kernels are,
  as the forward's. ``--trace modules`` records the forward call and, as for any model, parameter
  gradients before each optimizer step.
- Eager tracing inside a compiled region (running it uncompiled to record its ops) is not
  offered: it would change what the program computes.

Hooks the tracer installs globally (module forward hooks, the module tracker's) are traced by
TorchDynamo into compiled graphs when a compiled module calls a submodule; each returns at once
when ``torch.compiler.is_compiling()`` (a constant while TorchDynamo traces) or :func:`inside`
(the eager parts of a compiled call: the compiled module's own ``__call__``, code between graph
breaks). A hook that touched its state while traced (a ``WeakKeyDictionary``, a set) made
TorchDynamo fail (``AssertionError: ... already tracked for mutation``).
"""

import contextlib
import functools

from .. import _imports
from . import kernels
from . import state as ts

_EVAL_FRAME = "torch._dynamo.eval_frame"  # the module of OptimizeContext
_local = ts.Depth()  # compiled calls running on this thread
_active = None  # (state, is_tracer, level) while tracing
_TAG = "bitexact.compiled"  # key in node.metadata of a compiled region's autograd nodes
_current_node = None  # torch._C._current_autograd_node (None before install, or in an old torch)
_tagged = False  # whether a compiled region's autograd node was ever tagged (_created)


def inside():
    """Whether this thread is running a compiled call (its eager parts included): the tracer's
    hooks do nothing there."""
    return _local.depth > 0


def silent(mod=None):
    """Whether a tracer hook called now (for module ``mod``) must return at once: inside a
    compiled call, or for a ``torch.compile`` wrapper module (``OptimizedModule``: its
    ``_orig_mod`` is the module, recorded by the compiled call). A hook checks
    ``torch.compiler.is_compiling()`` first, itself: TorchDynamo folds that to a constant while
    it traces the hook, and traces nothing further."""
    if inside():
        return True
    return mod is not None and type(mod).__name__ == "OptimizedModule" and hasattr(mod, "_orig_mod")


def running():
    """Whether an op dispatched now belongs to a compiled region (its forward call, or one of
    its autograd nodes in the backward): the mode does not record it."""
    if inside():
        return True
    if not _tagged:  # no compiled region made an autograd node yet (the mode asks on every op)
        return False
    node = _current_node() if _current_node is not None else None
    return node is not None and _TAG in node.metadata


def _forget():
    """Forgets the tracer's state: no compiled call is traced after the tracer stops."""
    global _active
    _active = None


def install(state, is_tracer, level):
    """Wraps every callable ``torch.compile`` makes from now on (:func:`_wrap`); ``is_tracer``
    tells the tracer's dispatch modes (one per traced thread) from others. Returns a handle
    whose ``remove`` puts back ``OptimizeContext.__call__`` and stops it (callables already made
    then run as without tracing).

    TorchDynamo is not imported for this (:func:`when_dynamo_loads`): importing it costs about
    as much as importing torch, 1.5 s of CPU a process, which a program that never compiles
    must not pay."""
    global _active, _current_node
    import torch

    _current_node = getattr(torch._C, "_current_autograd_node", None)
    _active = (state, is_tracer, level)
    return _Patch(_EVAL_FRAME)


def when_dynamo_loads(then):
    """Calls ``then(eval_frame)`` with TorchDynamo's ``torch._dynamo.eval_frame`` module: now
    when it is loaded, else the moment the program's first import of TorchDynamo has executed
    it, before ``torch.compile`` can use it (:func:`bitexact._imports.when_loaded`). Returns a
    handle whose ``cancel()`` forgets ``then`` (None when it ran at once)."""
    return _imports.when_loaded(_EVAL_FRAME, then)


def when_compiling(then):
    """Calls ``then()`` once, when TorchDynamo may compile in this process: at the first
    ``OptimizeContext`` made (what ``torch.compile``, ``torch._dynamo.optimize`` and export
    make before any frame is compiled), or now when one may already have been made
    (:func:`_may_have_compiled`). Loading TorchDynamo is not enough: torch's optimizers import
    it in every training program, most of which never compile."""
    def loaded(eval_frame):
        if _may_have_compiled(eval_frame):
            then()
            return
        cls = eval_frame.OptimizeContext
        init, done = cls.__init__, []

        @functools.wraps(init)
        def __init__(self, *args, **kwargs):
            if not done:
                done.append(True)
                then()
            init(self, *args, **kwargs)

        cls.__init__ = __init__  # left in place: it costs a check per OptimizeContext made

    when_dynamo_loads(loaded)


def _may_have_compiled(eval_frame):
    """Whether an ``OptimizeContext`` may exist already: a compile backend is registered (each
    context registers its backend in ``cached_backends``; a ``DisableContext``, which torch's
    own code makes, registers None), or a frame was compiled. Both are cleared by
    ``torch._dynamo.reset()``: a context made before a reset and before tracing started, and
    used only after both, is not seen. A torch without ``cached_backends``: True."""
    import sys

    backends = getattr(eval_frame, "cached_backends", None)
    if backends is None:
        return True
    # Not loaded, or still being loaded (it imports eval_frame first): nothing compiled yet.
    frames = getattr(sys.modules.get("torch._dynamo.convert_frame"), "FRAME_COUNTER", 0)
    return frames > 0 or any(b is not None for b in list(backends.values()))


class _Patch(_imports.Patch):
    """The handle :func:`install` returns: ``OptimizeContext.__call__`` wrapped once its module
    is loaded, put back by ``remove`` (or the wait for the module stopped); ``remove`` then
    forgets the tracer's state."""

    def apply(self, eval_frame):
        """Wraps ``eval_frame.OptimizeContext.__call__`` (:func:`_wrap` on what it returns)."""
        cls = eval_frame.OptimizeContext
        # Its own in torch 2.15, inherited from _TorchDynamoContext in 2.9: the function either way.
        original = cls.__call__

        def __call__(self, fn, *args, **kwargs):
            made = original(self, fn, *args, **kwargs)
            # A module comes back as an OptimizedModule whose forward this made (wrapped then),
            # a class with its __call__ wrapped the same way.
            if callable(made) and not isinstance(made, type) and hasattr(made, "__code__"):
                return _wrap(made, fn)
            return made

        cls.__call__ = functools.wraps(original)(__call__)
        return ts.Restore(cls, "__call__", original)

    def remove(self):
        """Puts ``__call__`` back (or stops waiting) and forgets the tracer's state."""
        super().remove()
        _forget()


def _target(fn):
    """The module a compiled callable runs (``module.__call__``, ``module._call_impl``, a
    ``wrap_inline(module)``), or None for a function."""
    import torch

    for f in (fn, getattr(fn, "__wrapped__", None)):
        mod = f if isinstance(f, torch.nn.Module) else getattr(f, "__self__", None)
        if isinstance(mod, torch.nn.Module):
            return mod
    return None


def _names(state, target, fn):
    """``(module, op)`` of a compiled call's records."""
    if target is not None:
        module = state.tracker.name(target).replace("._orig_mod", "")
        return module, "compiled " + type(target).__name__
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    return state.tracker.where()[1], "compiled " + name.replace("<locals>.", "")


@contextlib.contextmanager
def _mode_off(is_tracer):
    """The tracer's mode off this thread's dispatch stack, when it is on top of it (TorchDynamo
    compiles then, and the compiled code's ops skip Python dispatch). Under another mode it
    stays (:func:`running` keeps it from recording)."""
    from torch.utils import _python_dispatch as pd

    if not is_tracer(pd._get_current_dispatch_mode()):
        yield
        return
    with pd._pop_mode_temporarily():
        yield


def _wrap(compiled, fn):
    import torch

    target = _target(fn)

    @functools.wraps(compiled)  # keeps _torchdynamo_inline: nested compiled calls inline fn
    def compiled_call(*args, **kwargs):
        active = _active
        if active is None or inside() or torch.compiler.is_compiling():
            return compiled(*args, **kwargs)
        state, is_tracer, level = active
        module, op = _names(state, target, fn)
        stream = ts.stream_of(state)
        record = (stream is not None and ts.mine(state) and ts.in_steps(state, stream)
                  and not ts.skipped(state, op))
        if record:
            with ts.paused():
                ins = ts.collect_tensors(kwargs, torch.Tensor,
                                         ts.collect_tensors(args, torch.Tensor, []))
                if target is not None:
                    ins += list(target.parameters()) + list(target.buffers())
                    for pname, p in target.named_parameters(prefix=module):
                        ts.name_param(state, p, pname)
                described = ts.describe(ins, state)
        inner = contextlib.nullcontext()
        if record and level == "ops" and kernels.enabled():
            inner = kernels.region(state, stream, module, op, "forward")
        _local.depth += 1
        try:
            with _mode_off(is_tracer), _created(state, stream, module, op, level == "ops"), inner:
                result = compiled(*args, **kwargs)
        finally:
            _local.depth -= 1
        if record:
            with ts.paused():
                outs = ts.collect_tensors(result, torch.Tensor, [])
                ts.emit(state, stream, ts.Record(op, "forward", module, ins, outs, described))
        return result

    return compiled_call


@contextlib.contextmanager
def _created(state, stream, module, op, on):
    """While on (``--trace ops``): each autograd node created on this thread (not while
    TorchDynamo compiles, and not a leaf's ``AccumulateGrad``) is the region's: the mode does
    not record the ops it runs (:func:`running`), and each of its runs is one record."""
    import torch

    push = getattr(torch._C._autograd, "_push_node_creation_hook", None)
    if not on or push is None or stream is None:  # (no node creation hooks: ops recorded)
        yield
        return

    def created(node):
        global _tagged
        if type(node).__name__ == "AccumulateGrad" or torch._guards.TracingContext.try_get():
            return
        _tagged = True
        node.metadata[_TAG] = op
        _record_runs(node, state, stream, module, op)

    push(created)
    try:
        yield
    finally:
        torch._C._autograd._pop_node_creation_hook()


def _record_runs(node, state, created_in, module, op):
    """Hooks on a region's autograd node: before it runs, the gradients it receives are hashed;
    after, its run is recorded (phase ``backward``) in the stream of the thread running the
    backward, else (an autograd device thread) of the thread that created the node. The hooks
    do not hold the node."""
    import torch

    got = []
    each = kernels.enabled()

    def pre(grad_outputs):
        got.clear()
        stream = ts.stream_of(state) or created_in
        if ts.mine(state) and ts.in_steps(state, stream) and not ts.skipped(state, op):
            with ts.paused():
                ins = ts.collect_tensors(grad_outputs, torch.Tensor, [])
                got.append((stream, ins, ts.describe(ins, state)))
            if each:
                got.append(kernels.begin(state, stream, module, op, "backward"))

    def post(grad_inputs, _grad_outputs):
        if got:
            if each:
                kernels.end(got.pop())
            stream, ins, described = got.pop()
            with ts.paused():
                outs = ts.collect_tensors(grad_inputs, torch.Tensor, [])
                ts.emit(state, stream, ts.Record(op, "backward", module, ins, outs, described))

    node.register_prehook(pre)
    node.register_hook(post)
