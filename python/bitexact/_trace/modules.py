"""Which module an op of the op tracer (:mod:`bitexact._trace`) belongs to, and in which phase:
bitexact's own module tracker, in place of ``torch.utils.module_tracker.ModuleTracker``.

ModuleTracker keeps the modules running as an unordered set, from which a tracer can only
pick the deepest name; under non-reentrant ``torch.utils.checkpoint`` the set holds both the
module whose backward runs and the modules recomputed for it, so a recomputed ``addmm`` of
``blocks.3.fc`` would be recorded under ``blocks.3.drop (backward)``; and one set shared by
every thread would make an op's module depend on what another thread did at that moment.
This tracker keeps real stacks instead:

- **forward**: one stack per thread, pushed by a global forward pre-hook and popped by a
  global forward hook registered with ``always_call=True``, so a forward cut short by an
  exception (checkpoint's early stop of a recomputation raises one) still pops. The module of
  an op is the top of its thread's stack.
- **backward**: one stack per autograd graph task (``torch._C._current_graph_task_id()``),
  whichever thread runs it (the backward of CPU ops runs in the thread that called it, that of
  CUDA ops in autograd's device threads): a module is pushed when the gradients of its forward
  outputs are ready and removed when those of its inputs are (a multi-gradient hook as in
  ModuleTracker, but one that does not keep the graph alive: :mod:`bitexact._trace.grad_hooks`); the
  stack is dropped when the graph task ends. An op's module is the most recently entered one
  still there (modules entered together, through one gradient, in nesting order: ``Net``,
  ``Net.blocks.1``, then ``Net.blocks.1.drop`` on top) (a module whose inputs need no
  gradient, the first layer, stays to the end, as it did in ModuleTracker).
- **recompute**: a module forward that starts while a backward runs in this thread
  (``_current_graph_task_id() != -1``) is a recomputation (``torch.utils.checkpoint``, either
  kind) or other forward work a backward does. Ops inside it get the phase ``recompute`` and
  the recomputed module's name, so they neither shift the occurrence numbers of the backward's
  own ops nor borrow its module. Recomputed ops outside every module (a checkpointed function
  that calls ``torch.relu`` itself) are not seen as recomputation: they are recorded in the
  backward of the module whose backward asked for them.

Names are ModuleTracker's: the root module's class name, then attribute names
(``Net.blocks.3.fc``), assigned the first time a module runs, to every module below it at
once, each by the first path that reaches it, as ``named_modules()`` does (a module two
parents hold). A module run alone before its root (a feature pass of ``model.enc``, a
container whose own forward never runs) is named by its path from the outermost module it
was registered in while tracing (``Net.enc``: the first registration of a module two hold),
or by its class when there is none; when the root runs, it and every module below it are
named by the root's paths. Every hook returns at once while
``torch.compile`` traces (``torch.compiler.is_compiling()``). The hooks hold no tensors; the
gradient hooks they register on a forward's tensors die with them, and do nothing once the
tracker is stopped.
"""

import threading
import weakref

from . import compiled, grad_hooks
from . import state as ts

FORWARD, BACKWARD, RECOMPUTE = "forward", "backward", "recompute"


class Tracker:
    """The module stacks of one traced process (see the module docs); :meth:`where` answers
    for the calling thread."""

    def __init__(self, torch):
        self._torch = torch
        self._task = torch._C._current_graph_task_id  # where() asks it on every op
        self._names = weakref.WeakKeyDictionary()  # module -> qualified name
        self._named = weakref.WeakSet()  # modules whose children are named
        # module -> (a weak reference to the module it was first registered in, its attribute)
        self._parents = weakref.WeakKeyDictionary()
        self._local = threading.local()  # .stack: [(name, recomputed, module)] of this thread
        self._backward = {}  # graph task id -> [module names entered in its backward]
        self._lock = ts.fork_lock(self)  # made anew in a forked child
        self._handles = []
        self._on = False
        self._follow_backward = True
        self._grads = grad_hooks.GradHooks(torch)

    def start(self, backward=True, hooks=True):
        """Installs the global forward hooks; with ``backward`` also the gradient hooks that
        name the modules of backward ops (``--trace modules`` asks only forward names: its
        backward records are parameter gradients, named by parameter). Without ``hooks``, the
        caller's own forward pre-hook and always-called forward hook call :meth:`push` and
        :meth:`pop` (``--trace modules``'s: two hooks per module call, not four)."""
        from torch.nn.modules import module as nn_module

        self._on = True
        self._follow_backward = backward
        self._handles = [nn_module.register_module_forward_hook(self._post, always_call=True),
                         nn_module.register_module_forward_pre_hook(self._pre)] if hooks else []
        registered = getattr(nn_module, "register_module_module_registration_hook", None)
        if registered is not None:  # (torch 2.0 on)
            self._handles.append(registered(self._registered))

    def stop(self):
        """Removes the hooks; gradient hooks still attached to tensors do nothing from now."""
        self._on = False
        for h in self._handles:
            h.remove()
        self._handles = []

    def name(self, mod):
        """The module's qualified name (``Net.fc1``; a module first seen alone: its class)."""
        with self._lock:
            return self._name(mod)

    def named_modules(self):
        """``(module, qualified name)`` of every module named so far."""
        with self._lock:
            return list(self._names.items())

    def _registered(self, parent, attribute, child):
        # Where a module was first registered (a module two parents hold: the first), so that
        # one run before the module holding it is named by its path from there; not in
        # torch.compile's wrapper (registered as its _orig_mod before compiled.silent knows it).
        if child is not None and child not in self._parents \
                and type(parent).__name__ != "OptimizedModule":
            self._parents[child] = (weakref.ref(parent), attribute)

    def _name(self, mod):
        name = self._names.get(mod)
        if name is None:
            name = self._names[mod] = self._registered_name(mod)
        if mod not in self._named:
            self._named.add(mod)
            self._name_below(mod, name, {mod})
        return name

    def _registered_name(self, mod):
        """A module not named yet: its path from the outermost module it was registered in,
        as first registered (``Net.enc``, run before ``Net``; that module by its name if it
        has one), or its class when it was registered in none (or before tracing began)."""
        path, top = [], mod
        while True:
            link = self._parents.get(top)
            parent = link[0]() if link is not None else None
            if parent is None or parent is mod or len(path) > 1000:  # (a cycle)
                break
            path.append(link[1])
            top = parent
            if top in self._names:
                break
        head = self._names.get(top) or type(top).__name__
        return ".".join([head] + path[::-1])

    def _name_below(self, mod, name, done):
        """Names every module below ``mod`` (named ``name``), depth first, each by the first
        path that reaches it (``done``: those named in this walk), renaming any named before."""
        for child_name, child in mod.named_children():
            if child in done:
                continue
            done.add(child)
            self._named.add(child)
            below = self._names[child] = "%s.%s" % (name, child_name)
            self._name_below(child, below, done)

    def _stack(self):
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def depth(self):
        """How many module forwards this thread is inside (the one starting counts)."""
        stack = getattr(self._local, "stack", None)
        return len(stack) if stack else 0

    def entered(self):
        """How many module forwards this thread has entered (:meth:`push`), the last one
        included: a module call's number among its thread's, in the order they began."""
        return getattr(self._local, "entered", 0)

    def where(self):
        """``(phase, module)`` of an op made now in this thread: ``forward``, ``backward`` or
        ``recompute``, and the innermost module running (``""`` outside every module)."""
        stack = getattr(self._local, "stack", None)
        task = self._task()
        if task == -1:
            return FORWARD, stack[-1][0] if stack else ""
        if stack and stack[-1][1]:
            return RECOMPUTE, stack[-1][0]
        top = self._backward.get(task, [])[-1:]  # a slice: another thread may pop meanwhile
        return BACKWARD, top[0] if top else ""

    def forward_phase(self):
        """The phase of a module forward running now in this thread: ``forward``, or
        ``recompute`` while a backward runs."""
        return FORWARD if self._task() == -1 else RECOMPUTE

    def push(self, mod):
        """Enters ``mod``'s forward in this thread (the forward pre-hook's work, for a caller
        that has checked what :meth:`_pre` checks): returns ``(its name, its phase)``."""
        name, phase = self.name(mod), self.forward_phase()
        self._stack().append((name, phase == RECOMPUTE, mod))
        self._local.entered = getattr(self._local, "entered", 0) + 1
        return name, phase

    def _pre(self, mod, args):
        # Compile-safe (see compiled): nothing while TorchDynamo traces this hook into a
        # graph, nor inside a compiled call or for torch.compile's wrapper module.
        if self._torch.compiler.is_compiling() or compiled.silent(mod):
            return
        name, phase = self.push(mod)
        if not self._follow_backward:
            return
        if len(self._stack()) == 1 and phase == FORWARD:
            self._grads.root_forward()
        self._on_grads(args, self._leave(name))

    def pop(self, mod):
        """Leaves ``mod``'s forward in this thread, and any forward inside it that raised (the
        forward hook's work, for a caller that has checked what :meth:`_post` checks)."""
        stack = self._stack()
        for i in range(len(stack) - 1, -1, -1):
            if stack[i][2] is mod:  # by identity: renamed meanwhile (see _name_below), it
                del stack[i:]  # still leaves
                break

    def _post(self, mod, args, output):
        if self._torch.compiler.is_compiling() or compiled.silent(mod):
            return
        self.pop(mod)
        if self._follow_backward:  # (--trace modules names its records itself)
            self._on_grads(output, self._enter(self.name(mod)))

    def _on_grads(self, values, fn):
        """Calls ``fn`` in the backward once the gradients of the tensors in ``values`` that
        need one are computed."""
        tensor = self._torch.Tensor
        if isinstance(values, tensor):  # most outputs, and args of one tensor: no pytree walk
            flat = (values,)
        elif type(values) is tuple and all(isinstance(v, tensor) for v in values):
            flat = values
        else:
            from torch.utils._pytree import tree_flatten

            flat = tree_flatten(values)[0]
        tensors = [t for t in flat if isinstance(t, tensor) and t.requires_grad]
        if len(tensors) == 1:
            # One tensor (the common case): a plain tensor hook, which is what
            # register_multi_grad_hook registers for it, without its closure over the tensor's
            # grad_fn: that closure, held by the grad_fn's own hook, is a cycle through C++
            # that the garbage collector cannot see, so every hooked node of every step (and
            # the graph behind it) leaked, and the full collections it set off took longer
            # with every step.
            tensors[0].register_hook(lambda _grad: fn(None))
        elif tensors:
            self._grads.on(tensors, fn)  # register_multi_grad_hook leaks (grad_hooks)

    def _enter(self, name):
        def entered(_grads):
            if self._torch.compiler.is_compiling() or not self._on:
                return
            task = self._torch._C._current_graph_task_id()
            with self._lock:
                stack = self._backward.get(task)
                if stack is None:
                    stack = self._backward[task] = []
                    self._torch.autograd.Variable._execution_engine.queue_callback(
                        lambda: self._backward.pop(task, None))
                # The gradients of a module's outputs are often those of its last child's
                # (a Sequential's): their hooks fire together, innermost first. An ancestor
                # goes below the descendants just entered, so the innermost stays on top.
                i = len(stack)
                while i > 0 and stack[i - 1].startswith(name + "."):
                    i -= 1
                stack.insert(i, name)

        return entered

    def _leave(self, name):
        def left(_grads):
            if self._torch.compiler.is_compiling() or not self._on:
                return
            task = self._torch._C._current_graph_task_id()
            with self._lock:
                stack = self._backward.get(task, [])
                for i in range(len(stack) - 1, -1, -1):
                    if stack[i] == name:
                        del stack[i]
                        break

        return left
