"""Python threads in an op trace (:mod:`bitexact._trace`): a ``TorchDispatchMode`` is
thread-local, so without this the ops of a thread the program starts (an EMA or metrics
thread) were not traced at all.

Every thread started through ``threading.Thread.start`` by a traced thread, after tracing
started, is traced as its **own stream** (:class:`bitexact._trace.state.Stream`): the tracer
enters a dispatch mode of its own in the thread before its ``run`` and leaves it after. Each
record of a stream carries the stream's label in its ``thread`` field (absent for the thread
that started tracing, the main stream), and the label is part of the identity two runs'
records are aligned by, so how the threads interleave never shows as a difference. The label
is stable across runs, not the OS thread id:

- the thread's name with Python's default counter stripped: ``Thread-3 (ema_loop)`` (a
  ``target``) gives ``ema_loop``, ``Thread-3`` gives the class name (``Thread``, or ``EMA``
  for a subclass), a name the program gave is kept as it is;
- then ``#k``, the thread's order among the threads of that base name started by the same
  stream (``ema_loop#0``, ``ema_loop#1``);
- prefixed with the starting stream's label when that is not the main stream
  (``pool#0/worker#1``), so threads started by threads that run concurrently are still
  numbered the same in every run.

A stream's step starts at the step of the thread that started it, at that moment, and
advances only with the optimizer steps (or ``bitexact.step``) of the thread itself: an EMA
thread's records do not move between steps with the main thread's progress.

Not traced: threads started while the tracer is paused (bitexact's own work, and a
DataLoader's: its pin-memory thread is started when it is iterated, see
:func:`bitexact._trace.hooks.pause_loading`; with workers that thread exists, without them it
does not, so tracing it would make the stream depend on the worker count), threads whose code
is torch's own (their ``target``, or the ``run`` of their class, lives in torch's directory),
threads started by a thread that is not traced, and threads that existed before tracing
started. A thread pool (``ThreadPoolExecutor``) is traced, but which of its threads runs a task
is up to the pool: tasks with ops should be compared through one thread, or their outputs.
"""

import re
import threading

from . import state as ts

_DEFAULT_NAME = re.compile(r"Thread-\d+(?: \((.*)\))?$")


def base_name(thread):
    """The thread's name without Python's default counter (see the module docs)."""
    m = _DEFAULT_NAME.match(thread.name)
    if m is None:
        return thread.name
    return m.group(1) or type(thread).__name__


def _code_file(thread):
    run = getattr(thread, "_target", None) or type(thread).run
    code = getattr(run, "__code__", None)
    return code.co_filename if code is not None else ""


def follow(state, make_mode, torch_dir):
    """Traces the threads the program starts from now on (the module docs say which), each
    under ``make_mode(stream)`` (``None``: ``--trace modules``, no dispatch mode). Returns the
    handles that stop it."""
    original = threading.Thread.start
    counts = {}  # (starting stream's label, base name) -> threads started
    lock = threading.Lock()

    def start(thread):
        parent = ts.stream_of(state)
        if parent is not None and ts.mine(state) and not _code_file(thread).startswith(
                torch_dir):
            base = base_name(thread)
            with lock:
                k = counts.get((parent.label, base), 0)
                counts[(parent.label, base)] = k + 1
            label = "%s#%d" % (base, k)
            stream = ts.Stream(parent.label + "/" + label if parent.label else label,
                               parent.step)
            thread.run = _traced(state, stream, thread.run, make_mode)
        return original(thread)

    threading.Thread.start = start
    return [ts.Restore(threading.Thread, "start", original)]


def _traced(state, stream, run, make_mode):
    def traced_run():
        state.streams.stream = stream
        mode = make_mode(stream) if make_mode is not None else None
        if mode is not None:
            mode.__enter__()
        try:
            return run()
        finally:
            if mode is not None:
                mode.__exit__(None, None, None)

    return traced_run
