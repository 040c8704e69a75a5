"""Backward hooks on several tensors at once for the module tracker
(:mod:`bitexact._trace.modules`), without the leak of ``torch.autograd.graph.register_multi_grad_hook``.

``register_multi_grad_hook(tensors, fn)`` (mode ``"all"``) closes its per-tensor hooks over
the tensors' autograd nodes, to ask the engine at the first gradient how many of them the
backward will run (``torch._C._will_engine_execute_node``). Each hook is stored on one of
those nodes, so node → hook → closure → node is a cycle through C++ that Python's garbage
collector cannot see: every hooked node of every step, and the graph behind it, stayed alive
(a root module returning ``(logits, loss)`` kept each step's whole graph).

Here the hooks hold only a key. The nodes wait in this object's table, which lets go of them:

- when the backward that ran the hooks ends (``queue_callback`` of its graph task), since a
  graph is normally run once;
- when two newer root-module forwards have started, for hooks no backward ran (a forward
  under grad whose outputs were never backpropagated, or outputs the loss does not use).

A hook whose nodes were let go (a second backward through ``retain_graph=True``, or one that
comes more than a forward later, as in a pipeline schedule) calls ``fn`` at its first gradient
in each backward: the module is then entered or left a little early, never twice.
"""

import itertools

from . import state as ts


class GradHooks:
    """Calls a function once the gradients of every tensor of a set that a backward computes
    are ready (see the module docs)."""

    def __init__(self, torch):
        self._torch = torch
        self._lock = ts.fork_lock(self)  # made anew in a forked child
        self._keys = itertools.count()
        self._waiting = {}  # key -> [nodes, fn, forward generation, {task: count}]
        self._fallback = set()  # (key, task) already called without nodes
        self._generation = 0

    def on(self, tensors, fn):
        """Registers ``fn()`` for when the gradients of ``tensors`` (each requiring one) that
        the running backward computes are all ready."""
        from torch.autograd.graph import _get_grad_fn_or_grad_acc

        nodes = [_get_grad_fn_or_grad_acc(t) for t in tensors]
        key = next(self._keys)
        with self._lock:
            self._waiting[key] = [nodes, fn, self._generation, {}]
        for t in tensors:
            t.register_hook(self._hook(key, fn))

    def root_forward(self):
        """A root module's forward starts: lets go of the nodes of hooks made two or more
        root forwards ago that no backward has run."""
        with self._lock:
            self._generation += 1
            stale = [k for k, w in self._waiting.items() if w[2] < self._generation - 1
                     and not w[3]]
            for k in stale:
                del self._waiting[k]

    def pending(self):
        """How many hook sets still hold their nodes (for tests)."""
        with self._lock:
            return len(self._waiting)

    def _hook(self, key, fn):
        # Holds the key, fn and self only: never a node (see the module docs).
        def fired(_grad):
            task = self._torch._C._current_graph_task_id()
            with self._lock:
                waiting = self._waiting.get(key)
                if waiting is None:
                    call = (key, task) not in self._fallback
                    if call:
                        self._fallback.add((key, task))
                        self._at_end(task, lambda: self._fallback.discard((key, task)))
                else:
                    counts = waiting[3]
                    if task not in counts:
                        counts[task] = [0, sum(map(self._torch._C._will_engine_execute_node,
                                                   waiting[0]))]
                        self._at_end(task, lambda: self._waiting.pop(key, None))
                    counts[task][0] += 1
                    call = counts[task][0] == counts[task][1]
            if call:
                fn(None)

        return fired

    def _at_end(self, task, then):
        if task != -1:
            self._torch.autograd.Variable._execution_engine.queue_callback(then)
