"""Op traces of unmodified PyTorch programs (``bitexact run --trace ops`` or, the cheaper rung,
``--trace modules``: module outputs and parameter gradients only).

``bitexact run --trace ops`` puts a ``sitecustomize`` on the program's ``PYTHONPATH`` that
calls :func:`install_from_env` (and then runs any ``sitecustomize`` it shadows), so a script
that never imports bitexact is traced. Every ATen op call the process makes (forward and
backward: torch's RecordFunction callbacks, :mod:`bitexact._trace.observer`, on a machine
without a GPU where they can be compiled; else a ``TorchDispatchMode``) becomes one JSON line in
``$BITEXACT_OUT/.bitexact-trace-rank<R>.jsonl`` (metadata: never compared as an output; a rank
of a torch.distributed run writes it under ``$BITEXACT_OUT/rank<R>/``, see
:mod:`bitexact._dist`)::

    {"v": 5, "step": 0, "rank": 0, "phase": "forward", "module": "Net.fc1",
     "op": "aten::addmm", "src": "train.py:42",
     "in": ["f32[64,10]:<fingerprint>", ...], "out": ["f32[64,10]:<fingerprint>"]}

- ``step``: optimizer steps completed so far (``torch.optim`` step hooks), or, for a script
  without an optimizer, the index after its last ``bitexact.step(i)``.
- ``thread``: only in records of a thread the program started (``"thread": "ema_loop#0"``):
  every thread started through ``threading`` after tracing started is traced as its own
  stream, with a label stable across runs and a step of its own
  (:mod:`bitexact._trace.threads`).
- ``phase``: ``forward``, ``backward``, or ``recompute``: a module forward run again while a
  backward runs (activation checkpointing).
- ``module``: the innermost module running, by fully qualified name from the root's class
  name (:mod:`bitexact._trace.modules`: a stack per thread from forward hooks, a stack per
  backward from gradient hooks).
- no occurrence number: the trace's reader counts a record's occurrence among the records of
  the same op in the same step, rank, thread, module and phase, from their order (what
  aligns two runs' streams: identity, not position; ``src/trace/streams.rs``). A capture
  (``$BITEXACT_TRACE_CAPTURE``) is found by the same count (:mod:`bitexact._trace.state`).
- cost controls: ``$BITEXACT_TRACE_STEPS`` (``A..B`` inclusive, ``A..``) records only those
  steps, ``$BITEXACT_TRACE_SKIP`` (comma-separated globs such as ``aten::copy_*``) leaves ops
  out (``--trace-steps``, ``--trace-skip``, ``--trace-max-bytes``).
- ``src``: the innermost frame in the program's own code (not torch, not bitexact).
- ``in``: the tensors the op reads. A tensor it writes (in-place ``self``, ``out=``) is a
  result, hashed after the op; an in-place ``self`` the op also reads (``add_``, ``mul_``, an
  optimizer's ``_foreach_*_``; not ``copy_``, ``fill_``, the random fills, partial writes such
  as ``index_put_``: ``writes.OVERWRITES``), and the written arguments
  ``writes.READS_TOO`` names (a fused optimizer's states, a batch norm's running statistics),
  are hashed before it too, as its
  first inputs, and so are its other inputs when one is a tensor it writes (``x.add_(x)``):
  an op whose tensor was changed where no traced op ran (numpy, ``.data``) is not called
  nondeterministic. ``self`` of a ``beta=0`` product (``writes.BETA_OPS``), never read, is
  labelled by dtype and shape only (:mod:`bitexact._trace.writes`).
- labels: the 128-bit trace fingerprint (``docs/concepts/fingerprint.md``, not the canonical
  SHA-256) of each tensor argument and result, from the native module for host tensors, one
  call per op, and on its device for a device tensor (:mod:`bitexact._trace.digest`: a tensor
  whose bytes are unchanged since it was last hashed, checked by an XXH3-128 of them, reuses
  its fingerprint; records are made by :mod:`bitexact._trace.record` and written by a native
  writer on a background thread, which also hashes them where torch leaves a core free or the
  machine has an NVIDIA GPU, so the program does not wait for the hashing; :func:`stop`
  (atexit, ``os._exit``) waits for the queued records, and a process killed by a signal loses
  them); a tensor over
  ``BITEXACT_TRACE_MAX_BYTES`` (default 64 MiB) is recorded as ``dtype[shape]:-`` (not
  hashed), and so is an RNN workspace result (``_SCRATCH_RESULTS``: uninitialized scratch
  that differs between identical runs).
  ``sk``: a float64 sketch of each result (norm, largest magnitude, non-finite count, eight
  fixed elements; ``src/trace/sketch.rs``), made with its digest (a device tensor's on its
  device, :func:`bitexact._trace.device.device_sketches`); ``args``: the op's
  non-tensor arguments (``eps=1e-05``, see :func:`bitexact._trace.record.arguments`). Both
  are what ``bitexact diff-trace`` judges noise with (``src/trace/noise.rs``). With
  ``$BITEXACT_TRACE_ROWS`` = n > 1 (the larger-batch run of ``--vary batch``), a tensor whose
  first dimension is a multiple of n is labelled ``dtype[shape]/n:<d1>,...,<dn>`` by its n row
  slices' digests instead.

A module or function compiled with ``torch.compile`` runs compiled (TorchDynamo skips every
frame while a dispatch mode is on the stack; the tracer takes its mode off around each compiled
call), and each call is one record, op ``compiled <name>``, forward and backward: see
:mod:`bitexact._trace.compiled`.

View and alias ops (``is_view``, and ``aten::_unsafe_view``: a reshape that is not marked as a
view) carry no new data and are skipped, and so are allocations of
uninitialized memory (``aten::empty*``) and ``aten::set_`` (how a DataLoader batch is received
from a worker, at a moment that depends on worker timing: the batch is hashed where the program
first uses it). Only the process that
installed the tracer records (DataLoader workers, forked or spawned, do not), and batch loading
in that process (``num_workers=0``) is not traced either, so the stream does not depend on the
worker count. No tensor is kept
after it is hashed. The tracer never changes what the program computes. It also records the
platform in ``.bitexact-platform.json`` (metadata, like the trace) when it starts and at exit,
unless the script writes it itself (:func:`bitexact._outputs.record_platform`).

Collectives (``c10d::allreduce_`` from ``dist.all_reduce`` and DDP's gradient buckets,
``c10d::broadcast_``, ...) are recorded like ops: their ``in`` is this rank's contribution,
hashed before the call, and their ``out`` what the rank received, hashed after waiting for the
collective. That is what tells the rank where a difference started (its first differing op had
identical inputs) from the ranks that received it through a collective. A receive buffer is
never an input: ``all_gather``'s output list, a broadcast's tensor on a rank other than the
root, a ``recv`` buffer and a barrier's placeholder hold whatever bytes were there before
(uninitialized memory); hashed as inputs, they would make identical runs differ "already at
the inputs" there. Which arguments a collective reads is read from its schema by argument name
(an unknown collective: every tensor argument not named as an output buffer), see
:mod:`bitexact._trace.c10d`.
"""

import atexit
import json
import os
import sys
import warnings

from .. import _protocol
from . import calls, compiled, kernels
from . import state as ts
from .state import paused  # noqa: F401  (bitexact.dump pauses the tracer with it)

# The names bitexact run sets for the tracer (src/protocol.rs, generated into _protocol).
ENV = _protocol.TRACE_ENV
OWNER_ENV = _protocol.TRACE_OWNER_ENV
MAX_BYTES_ENV = _protocol.TRACE_MAX_BYTES_ENV
STEPS_ENV = _protocol.TRACE_STEPS_ENV  # "A..B" (inclusive) or "A.."
SKIP_ENV = _protocol.TRACE_SKIP_ENV  # comma-separated op-name globs
# [rank, thread, step, phase, module, op, occurrence] (JSON) of one op whose tensors are saved to
# state.CAPTURE_FILE (in0.., out0..): bitexact's re-run to explain a localized divergence.
CAPTURE_ENV = _protocol.TRACE_CAPTURE_ENV
# n > 1: label each tensor whose first dimension is a multiple of n by its n row slices' digests
# (the larger-batch run of `bitexact run --vary batch`, n = B/A; see digest.describe).
ROWS_ENV = _protocol.TRACE_ROWS_ENV
FILE_PREFIX = _protocol.TRACE_FILE_PREFIX
# How ops reach the tracer: "auto" (the default), "observer" (torch's RecordFunction
# callbacks) or "mode" (a TorchDispatchMode): see start().
DRIVER_ENV = _protocol.TRACE_DRIVER_ENV

_state = None

_tracer_class = None


def _make_mode(stream):
    """A dispatch mode that records ``stream``'s ops (one per traced thread: a mode is
    thread-local). Autograd runs a backward's CUDA ops in its device threads under the
    thread-local state of the thread that called it (``at::ThreadLocalState`` holds the
    dispatch modes), so they are recorded in that thread's stream (read from torch's headers;
    not checked on a GPU)."""
    global _tracer_class
    if _tracer_class is None:
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode

        class Tracer(TorchDispatchMode):
            def __init__(self, stream):
                super().__init__()
                self.stream = stream

            @classmethod
            def _should_skip_dynamo(cls):
                # TorchDispatchMode wraps a subclass's __torch_dispatch__ in TorchDynamo's
                # disable, which imports TorchDynamo at the first op (1.5 s of CPU) and costs
                # every op a call (1-3 us); it is put on below once TorchDynamo may compile,
                # the only time it can matter (see compiled.when_compiling).
                return False

            @classmethod
            def ignore_compile_internals(cls):
                # TorchDynamo compiles under this mode (it skips frames under other modes), and
                # what runs inside a compiled region is not recorded (see compiled).
                return True

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                known = calls.ops.get(id(func))  # calls.known, inlined: every op runs it
                if known is None or known[0] is not func:
                    known = calls.op(func)
                token = calls.before(_state, known, self.stream, args, kwargs)
                result = func(*args, **kwargs)
                if token is not None:
                    calls.after(token, func, args, kwargs, result)
                return result

        def guard():
            # What TorchDispatchMode does for a subclass (skipped above), once TorchDynamo may
            # compile: its frame evaluation must not trace the recorder.
            Tracer.__torch_dispatch__ = torch._disable_dynamo(
                Tracer.__dict__["__torch_dispatch__"], recursive=True)

        compiled.when_compiling(guard)
        _tracer_class = Tracer
    return _tracer_class(stream)


def _is_tracer(mode):
    """Whether a dispatch mode is one of the tracer's (one per traced thread)."""
    return _tracer_class is not None and isinstance(mode, _tracer_class)


def _resolve(name, overload):
    """The observer driver's question, once per operator: its OpOverload, and how the tracer
    records it (:data:`bitexact._trace.observer.IGNORED`: a view, an allocation; ``PLAIN``: it
    writes no argument and takes no generator, and is not a collective; ``OTHER``)."""
    from . import observer

    ns, base = name.split("::", 1)
    func = getattr(getattr(getattr(calls.torch.ops, ns), base), overload or "default")
    known = calls.op(func)
    if known[1] is calls.SKIPPED:
        return func, observer.IGNORED
    plain = not known[2] and not known[3] and known[1] is not calls.COLLECTIVE
    return func, observer.PLAIN if plain else observer.OTHER


def _driver(torch, driver):
    """The driver ``auto`` or ``observer`` traces with: the observer, built or loaded now,
    before tracing starts. Not on a machine with a GPU or another accelerator
    (``torch.accelerator``: a backward's device ops run on autograd's device threads, which it
    does not follow yet), nor where it cannot be built:
    ``auto`` then takes the dispatch mode (saying why, where it could not be built: a slower
    trace, the same records but for what torch computes in place without a dispatch mode);
    ``observer`` fails."""
    from . import observer

    accelerator = getattr(torch, "accelerator", None)  # torch >= 2.6; CUDA alone before
    if torch.cuda.is_available() or (accelerator is not None and accelerator.is_available()):
        if driver == "observer":
            raise Unavailable("the observer driver (%s=observer) does not follow autograd's "
                              "device threads yet: unset it on a machine with a GPU" % DRIVER_ENV)
        return "mode"
    try:
        observer.library(retry=driver == "observer")
    except observer.Unavailable as e:
        if driver == "observer":
            raise Unavailable(str(e)) from None
        observer.note_fallback(e)
        return "mode"
    return "observer"


def _stream():
    """The calling thread's stream while tracing (None in a thread the tracer does not
    follow, or when not tracing)."""
    state = _state
    return ts.stream_of(state) if state is not None else None


def _observed(func, args, kwargs, tensors):
    """The observer driver's start of an op that writes, takes a generator or is a collective:
    :func:`bitexact._trace.calls.before` in the calling thread's stream (``tensors``: the op's
    tensors as the observer read them)."""
    stream = _stream()
    if stream is None:
        return None
    return calls.before(_state, calls.known(func), stream, args, kwargs, tensors)


def _observed_plain(func, args, kwargs, result, tensors):
    """The observer driver's end of an op that writes no argument and takes no generator
    (nothing to read before it ran): the checks of :func:`bitexact._trace.calls.before`, then
    its record (no token: the op's one Python call; ``tensors``: the op's tensors as the
    observer read them, for the native lane)."""
    stream, state = _stream(), _state
    if stream is None or not ts.mine(state) or compiled.running():
        return
    known = calls.known(func)
    calls.record(state, stream, func, known[1], (), args, kwargs, result, calls.torch.Tensor,
                 tensors=tensors)


class _Observing:
    """Stands for the dispatch mode in :data:`_active` under the observer driver."""

    def __init__(self, observer):
        self._observer = observer

    def __exit__(self, *exc):
        self._observer.stop()


def on_helper_step(i):
    """``bitexact.step(i)`` was called: for a script without an optimizer, later ops of the
    calling thread belong to step ``i + 1``."""
    state = _state
    stream = ts.stream_of(state) if state is not None else None
    if stream is not None and stream.optimizer_steps == 0:
        with state.lock:
            stream.step = int(i) + 1


class Unavailable(RuntimeError):
    """Tracing cannot work in this Python; the message says why (``has no torch (...)``).
    ``bitexact run --trace`` fails the run with it and the interpreter's path."""


def _check_can_trace():
    """Raises :class:`Unavailable` unless this Python can trace: it loads bitexact's native
    module (the digests) and imports torch."""
    from .. import _digest

    try:
        _digest.native()
    except ImportError:
        import platform

        raise Unavailable(
            "cannot load bitexact's native module (this is %s %d.%d on %s %s; the module needs "
            "CPython >= 3.9 on the platform bitexact was built for): %s" % (
                platform.python_implementation(), sys.version_info[0], sys.version_info[1],
                sys.platform, platform.machine(), _digest._native_error)) from None
    try:
        import torch  # noqa: F401
    except Exception as e:  # a torch that fails to load (OSError, ...) cannot trace either
        if isinstance(e, ImportError) and (e.name or "").partition(".")[0] == "torch":
            raise Unavailable("has no torch (%s)" % e) from None
        raise Unavailable("cannot import torch (%s: %s)" % (type(e).__name__, e)) from None


def install_from_env():
    """Starts tracing this process when ``$BITEXACT_TRACE`` is ``ops`` or ``modules`` and
    ``$BITEXACT_OUT`` is set (what ``bitexact run --trace LEVEL`` gives), once, in the first
    Python process of each rank (see :mod:`bitexact._dist`). Returns whether it started;
    raises :class:`Unavailable` when this process should trace and cannot."""
    level = os.environ.get(ENV)
    out = os.environ.get(_protocol.OUT_ENV)
    if _state is not None or level not in _protocol.TRACE_LEVELS or not out:
        return False
    from .. import _dist

    # The first process of each rank (not its DataLoader workers or tools; not torchrun's
    # agent, which computes nothing).
    held = os.environ.get(OWNER_ENV)
    if not _dist.claim(OWNER_ENV):
        return False
    try:
        _check_can_trace()
    except Unavailable:
        # Not this process's to keep: a child Python that can trace (a torch-less wrapper
        # launching the real program) claims it.
        if held is None:
            os.environ.pop(OWNER_ENV, None)
        else:
            os.environ[OWNER_ENV] = held
        raise
    rank = _dist.rank() or 0
    first, _, last = os.environ.get(STEPS_ENV, "0..").partition("..")
    start(
        os.path.join(_dist.out_root(), "%s%d.jsonl" % (FILE_PREFIX, rank)),
        rank=rank,
        max_bytes=int(os.environ.get(MAX_BYTES_ENV, str(64 << 20))),
        steps=(int(first or 0), int(last) if last else None),
        skip=tuple(g for g in os.environ.get(SKIP_ENV, "").split(",") if g),
        level=level,
    )
    if os.environ.get(CAPTURE_ENV):
        _state.capture = json.loads(os.environ[CAPTURE_ENV])
    # The run's platform, recorded whether or not the script imports bitexact; once more at
    # exit, after tracing stops (atexit runs last-registered first), unless the script wrote it.
    from .. import _outputs

    atexit.register(_outputs.record_platform, at_exit=True)
    atexit.register(stop)
    with paused():
        _outputs.record_platform()
    return True


_active = None  # (mode or None, tracker, hook handles) while tracing


def start(path, rank=0, max_bytes=64 << 20, steps=(0, None), skip=(), level="ops", rows=None,
          driver=None):
    """Traces this process into ``path`` until :func:`stop` (``bitexact run --trace ops``
    calls it through :func:`install_from_env`; benchmarks call it directly). ``level`` is
    ``ops`` (every ATen op) or ``modules`` (module outputs and parameter gradients only: the
    cheaper rung, for long runs). ``rows`` (default: ``$BITEXACT_TRACE_ROWS``, else 1): n > 1
    labels each tensor whose first dimension is a multiple of n by its n row slices' digests
    (``f32[8,4]/8:<d1>,...,<d8>``; the larger-batch run of ``bitexact run --vary batch``).
    ``driver`` (default: ``$BITEXACT_TRACE_DRIVER``, else ``auto``): how ops reach the
    tracer at ``ops``: ``observer``, torch's RecordFunction callbacks
    (:mod:`bitexact._trace.observer`), or ``mode``, a Python dispatch mode; ``auto`` is the
    observer where it can be built and the machine has no GPU, else the mode
    (:func:`_driver`)."""
    global _state, _active
    import torch
    import torch.optim.optimizer as optimizer

    from . import hooks as _hooks
    from . import modules, threads

    if _state is not None:
        raise RuntimeError("bitexact: op tracing is already on")
    driver = driver or os.environ.get(DRIVER_ENV) or "auto"
    if driver not in ("auto", "mode", "observer"):
        raise ValueError("bitexact: %s must be auto, mode or observer, not %r"
                         % (DRIVER_ENV, driver))
    if level == "ops" and driver != "mode":
        driver = _driver(torch, driver)
    if rows is None:
        rows = int(os.environ.get(ROWS_ENV) or 1)
    if rows < 1:
        raise ValueError("bitexact: %s must be a positive integer, not %d" % (ROWS_ENV, rows))
    state = ts.State(path, rank, max_bytes, steps, skip, rows)
    calls.bind(torch)
    torch_dir = os.path.dirname(os.path.abspath(torch.__file__))
    here = os.path.dirname(os.path.abspath(__file__))
    stdlib = os.path.dirname(os.path.abspath(os.__file__))
    state.skip_dirs = (torch_dir, here, stdlib)
    state.tracker = modules.Tracker(torch)
    state.tracker.start(backward=level != "modules", hooks=level != "modules")

    def after_step(_optimizer, _args, _kwargs):
        if torch.compiler.is_compiling():
            return
        stream = ts.stream_of(state)
        if stream is not None:
            with state.lock:
                stream.optimizer_steps += 1
                stream.step = stream.first_step + stream.optimizer_steps

    # The module hooks first: a step's gradients recorded after it (a closure's) are its own.
    hooks = _hooks.module_hooks(state, torch) if level == "modules" else []
    hooks += [optimizer.register_optimizer_step_post_hook(after_step)] + _hooks.pause_loading()
    mode = None
    if level == "ops" and driver == "observer":
        from . import observer

        observer.start(_resolve, _observed, calls.after, _observed_plain)
        mode = _Observing(observer)
    elif level == "ops":
        mode = _make_mode(state.main)
        mode.__enter__()
    hooks += threads.follow(state, _make_mode if driver == "mode" and level == "ops" else None,
                            torch_dir)
    hooks.append(compiled.install(state, _is_tracer, level))
    if level == "ops" and kernels.enabled():
        hooks.append(kernels.install())
    hooks.append(_hooks.drain_on_exit(state, stop))
    # torch.compile(module) warns that global module hooks (the tracer's) fire an extra time
    # for its wrapper: they do nothing for it (compiled.silent).
    warnings.filterwarnings("ignore", message=r"Using `torch.compile\(module\)` when there are "
                            "global hooks", category=UserWarning)
    _state = state
    _active = (mode, state.tracker, hooks)


def stop():
    """Stops tracing and closes the trace file (idempotent)."""
    global _state, _active
    state, active = _state, _active
    _state, _active = None, None
    if active is not None:
        mode, tracker, hooks = active
        try:
            if mode is not None:
                mode.__exit__(None, None, None)
            tracker.stop()
        except Exception:  # at interpreter exit the mode stack may already be gone
            pass
        for h in hooks:
            h.remove()
    if state is not None:
        state.close()
