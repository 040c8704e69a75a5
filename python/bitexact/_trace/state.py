"""The op tracer's per-process state and how it writes a record: what :mod:`bitexact._trace`
(the dispatch mode, collectives, starting and stopping) and :mod:`bitexact._trace.hooks` (the
module and gradient hooks, DataLoader pausing) share. Both import this module; it imports
neither, so the tracer's modules form no import cycle."""

import os
import threading
import weakref

from .. import _digest, _protocol
from . import device, digest, record
from .digest import describe  # noqa: F401  (the collectives describe their inputs)

# Where the op ``$BITEXACT_TRACE_CAPTURE`` names has its tensors saved (in0.., out0..).
CAPTURE_FILE = _protocol.CAPTURE_FILE

class Depth(threading.local):
    """A per-thread nesting depth (of :class:`paused` blocks here, of compiled calls in
    :mod:`bitexact._trace.compiled`), 0 until the thread first enters one: a class attribute,
    so the check on every op is an attribute read, not a ``getattr`` that raises and catches."""

    depth = 0


_paused = Depth()


class paused:
    """``with paused():`` ops inside are not traced (bitexact's own work, e.g. ``dump``)."""

    def __enter__(self):
        _paused.depth += 1

    def __exit__(self, *exc):
        _paused.depth -= 1


class Restore:
    """A hook handle that puts back an attribute the tracer replaced (``owner.name``), then
    calls ``then`` (when given) to forget what the replacement used."""

    def __init__(self, owner, name, original, then=None):
        self.owner, self.name, self.original, self.then = owner, name, original, then

    def remove(self):
        setattr(self.owner, self.name, self.original)
        if self.then is not None:
            self.then()


class Stream:
    """One thread's op stream (:mod:`bitexact._trace.threads`): its label (``""`` for the
    thread that started tracing) and its step: the step of the thread that started it, when it
    started, plus the optimizer steps it made itself (or, without an optimizer, the index after
    its last ``bitexact.step(i)``)."""

    def __init__(self, label="", step=0):
        self.label = label
        self.first_step = step
        self.step = step
        self.optimizer_steps = 0


class State:
    """One traced process: its trace file, rank, streams, cost controls and row slicing
    (``rows``)."""

    def __init__(self, path, rank, max_bytes, steps, skip, rows=1):
        # The native writer writes the records on its own thread, flushing each batch it finds
        # (every millisecond at most); where a core is free (digest.background(): deferred) it
        # also hashes them there, else the program's thread hashes them and hands it finished
        # lines (a Python file flushed per record, so that a run stopped early kept every
        # record, was 9% of a traced nanoGPT step). stop() (atexit, and os._exit, see _trace)
        # drains it; a process killed by a signal loses the records still queued (at most a
        # millisecond's while the program computes).
        self.deferred = digest.background()
        self.writer = _digest.native().TraceWriter(path, digest.SKETCH)
        self.lock = fork_lock(self, "lock")  # made anew in a forked child
        self.rank = rank
        self.max_bytes = max_bytes
        self.rows = rows  # n > 1: tensors labelled by n row slices (digest.describe)
        self.pid = os.getpid()
        # The thread that started tracing. The resumed launch of `--vary resume` numbers its
        # steps from the optimizer steps taken before its checkpoint, as the uninterrupted
        # run's trace does.
        resumed = os.environ.get(_protocol.RESUME_STEP_ENV, "0")
        self.main = Stream(step=int(resumed) if resumed.isdigit() else 0)
        self.streams = threading.local()  # .stream: this thread's Stream, when traced
        self.streams.stream = self.main
        self.tracker = None
        self.skip_dirs = ()
        self.first_step, self.last_step = steps
        self.skip_globs = tuple(skip)
        self.skipped_ops = {}  # op name -> whether --trace-skip matches it
        # The identity of the op to save (``$BITEXACT_TRACE_CAPTURE``: [rank, thread, step,
        # phase, module, op, occurrence]), until saved, and how many records with its
        # identity but an earlier occurrence were written (see _is_capture).
        self.capture, self.capture_seen = None, 0
        # id(parameter) -> (a weak reference to it, its name): one made where a freed one
        # was (a second model trained in the same process) is not given the freed one's name
        self.param_names = {}
        self.out_dir = os.path.dirname(path)
        # Records whose staged device tensors or device values may still be on their way to
        # the host (their host tensors copied): (line, later, slots, keep, waits, fills),
        # written by flush(), which the next record without them calls first (order is kept);
        # their bytes.
        self.pending, self.pending_bytes = [], 0

    def flush(self):
        """Writes the :attr:`pending` records, each after waiting for its staged copies and
        device values (call with :attr:`lock` held)."""
        pending, self.pending, self.pending_bytes = self.pending, [], 0  # each written once
        for line, later, slots, _keep, waits, fills in pending:
            for events, _ in waits:
                for event in events:
                    event.synchronize()
            if fills:
                line, slots = device.fill(line, slots, fills)
            self.writer.write(line, later, digest.CACHE, slots)

    def write(self, line, later, slots):
        """Writes a record whose tensors can be read now, after the :attr:`pending` ones
        (written in order, before its tensors can change; call with :attr:`lock` held)."""
        if self.pending:
            self.flush()
        self.writer.write(line, later, digest.CACHE, slots)

    def close(self):
        if _pid[0] != self.pid:  # a forked child: the writer is its parent's (its lock is
            return  # the child's own, see fork_lock)
        with self.lock:
            self.flush()
            self.writer.close()


# Records held back while their staged device tensors reach the host (State.pending): the
# program's thread waits for the copies once every this many records (or bytes), not per op,
# so the GPU keeps working ahead of it; and at once after an op that brings device data to the
# host (device.reaches_host), which waited for the GPU anyway: the program may write what it
# got to a file next, and a run stopped early for that file (`bitexact run`) then loses no more
# of the records of the ops that made it than a CPU run does (the writer's last millisecond).
PENDING_RECORDS = 64
PENDING_BYTES = 64 << 20


def stream_of(state):
    """The calling thread's :class:`Stream`: ``None`` in a thread the tracer does not follow
    (started before tracing, or by bitexact's or torch's own work)."""
    return getattr(state.streams, "stream", None)


# Results that are scratch memory, not values: the RNN workspaces handed to the backward
# (uninitialized bytes; they differ between identical runs). Recorded by dtype and shape only.
# Verified for mkldnn_rnn_layer (CPU LSTM: result 3, a u8 buffer); _cudnn_rnn's reserve
# (result 3) is the same kind of buffer on CUDA.
_SCRATCH_RESULTS = {"aten::mkldnn_rnn_layer": {3}, "aten::_cudnn_rnn": {3}}
# The same workspaces where the backward reads them (by argument name): recorded by dtype and
# shape only there too, or identical runs differ at the backward's input (found on
# word_language_model's LSTM, a false "divergence from code between traced ops").
SCRATCH_ARGS = {"aten::mkldnn_rnn_layer_backward": "workspace",
                "aten::_cudnn_rnn_backward": "reserve", "aten::miopen_rnn_backward": "reserve"}


def collect_tensors(x, cls, out):
    """Appends the tensors in ``x`` (nested tuples, lists and dict values) to ``out``."""
    if isinstance(x, cls):
        out.append(x)
        return out
    if isinstance(x, dict):
        x = x.values()
    elif not isinstance(x, (list, tuple)):
        return out
    for v in x:  # an op's arguments: mostly tensors and numbers, seldom nested
        if isinstance(v, cls):
            out.append(v)
        elif isinstance(v, (list, tuple, dict)):
            collect_tensors(v, cls, out)
    return out


# This process's id, kept by a fork handler: os.getpid() is a system call, and mine() runs on
# every op the program dispatches.
_pid = [os.getpid()]
_renewed = weakref.WeakKeyDictionary()  # owner -> its lock's attribute (fork_lock)


def _forked():
    _pid[0] = os.getpid()
    for owner, name in list(_renewed.items()):
        setattr(owner, name, threading.Lock())


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


def fork_lock(owner, name="_lock"):
    """A new lock for ``owner``'s attribute ``name``, which a forked child replaces with a new
    one: a thread of the parent's may hold it at the fork, and no thread of the child would
    ever release it (the module tracker's, taken on every module forward, and the state's,
    taken after every optimizer step, also in a fork pool's process or a DataLoader worker)."""
    _renewed[owner] = name
    return threading.Lock()


def pid():
    """This process's id (``os.getpid()``, without a system call)."""
    return _pid[0]


def param_name(state, p):
    """The name of parameter ``p`` or None: by ``id``, checked by a weak reference."""
    found = state.param_names.get(id(p))
    return found[1] if found is not None and found[0]() is p else None


def name_param(state, p, name):
    """Names parameter ``p`` ``name`` unless it has a name."""
    if param_name(state, p) is None:
        state.param_names[id(p)] = (weakref.ref(p), name)


def mine(state):
    """Whether a call now is the traced program's own: in the process that started tracing
    (not a forked DataLoader worker) and outside bitexact's own work (:class:`paused`)."""
    return _pid[0] == state.pid and not _paused.depth


def in_steps(state, stream):
    """Whether the stream's current step is one ``--trace-steps`` records."""
    return stream.step >= state.first_step and (state.last_step is None
                                                 or stream.step <= state.last_step)


def skipped(state, op):
    """Whether ``--trace-skip`` leaves ``op`` out."""
    if not state.skip_globs:
        return False
    skip = state.skipped_ops.get(op)
    if skip is None:
        import fnmatch

        skip = state.skipped_ops[op] = any(fnmatch.fnmatchcase(op, g) for g in state.skip_globs)
    return skip


class Record:
    """One op on its way to the trace, as :func:`emit` writes it. The caller gives the op
    (``op``: its name; ``phase``, ``module``), its tensors (``ins``, ``outs``) and where they
    apply: ``described_ins`` (the inputs' labels, hashed before the op ran), ``scratch_outs``
    and ``scratch_ins`` (positions recorded by dtype and shape only, :data:`SCRATCH_ARGS`),
    ``args`` (the op's non-tensor arguments, :func:`bitexact._trace.record.arguments`),
    ``call`` (``(func, args, kwargs, written)`` of an ATen op call, saved with a capture so that
    ``diff-trace`` can replay it, :mod:`bitexact._replay`) and ``gen`` (a random op's generator
    and its state before the call, :mod:`bitexact._trace.generator`).

    Where the native writer hashes (:attr:`State.deferred`),
    :func:`bitexact._trace.digest.describe` fills in what the writer needs: ``later`` (the
    fast-path tensors it hashes on its thread), ``keep`` (the tensors that own their bytes, kept
    alive until then), ``waits`` (staged device copies, and copies of values computed on a
    device, to wait for) and ``fills`` (those values, and how they become the record's device
    fingerprints and sketches: :func:`bitexact._trace.device.fill`); None elsewhere. ``held``:
    the record was made while the current CUDA stream is captured into a graph, where nothing
    may wait for the device: it waits, with any records before it, until an op after the
    capture."""

    __slots__ = ("op", "phase", "module", "ins", "outs", "described_ins", "scratch_outs",
                 "scratch_ins", "args", "call", "gen", "later", "keep", "waits", "fills", "held",
                 "kernel", "src", "before", "others", "snaps", "own", "entered")

    def __init__(self, op, phase, module, ins, outs, described_ins=None, scratch_outs=(),
                 args="", call=None, scratch_ins=(), gen=None):
        self.op, self.phase, self.module, self.ins, self.outs = op, phase, module, ins, outs
        self.described_ins, self.scratch_outs, self.scratch_ins = (described_ins, scratch_outs,
                                                                   scratch_ins)
        self.args, self.call, self.gen = args, call, gen
        self.later = self.keep = self.waits = self.fills = None
        self.held = False  # made while a CUDA graph is captured: written after the capture
        self.kernel = None  # a compiled region's kernel: its "kernel" field (trace/kernels.py)
        self.src = None  # its source line when not the stack's (a kernel's: its region's)
        # before: an in-place op's written tensors as they were before it (their labels listed
        # before ``ins``' and their device values carried along: writes.read_before); others:
        # (a record of values before an op) its inputs' labels, if taken; snaps: (the same, in a
        # capture run) id(tensor) -> a copy of its values; own, entered: a module's fields
        self.before = self.others = self.snaps = self.own = self.entered = None


def _is_capture(state, identity, thread, step, rec):
    """Whether ``rec`` is the op ``$BITEXACT_TRACE_CAPTURE`` asks for (``identity``): the
    record of its rank, thread, step, phase, module and op that comes after as many such
    records as its occurrence number says. Only the asked-for identity is counted: a record's
    occurrence number is not written, the trace's reader counts it from the order of the
    records (``src/trace/streams.rs``), as this does."""
    if identity[:6] != [state.rank, thread, step, rec.phase, rec.module, rec.op]:
        return False
    if state.capture_seen < identity[6]:
        state.capture_seen += 1
        return False
    return True


def emit(state, stream, rec):
    """Writes the :class:`Record` ``rec`` of ``stream``: the capture if it is the one asked
    for, the digests (``rec.described_ins``, or the inputs hashed now; results listed by
    ``rec.scratch_outs`` recorded by dtype and shape only), the results' sketches and the
    op's non-tensor arguments."""
    thread, step = stream.label, stream.step
    identity = state.capture
    if identity is not None and _is_capture(state, identity, thread, step, rec):
        state.capture = None
        ins = rec.ins  # a module's: its state and arguments as received first, as labelled
        if rec.call is None and rec.before is not None:
            ins = rec.before.ins + ins
        save(state, ins, rec.outs, identity, rec.call, rec.before)
    ins, outs, op = rec.ins, rec.outs, rec.op
    scratch = _SCRATCH_RESULTS.get(op.partition(".")[0], ())
    if rec.scratch_outs:
        scratch = set(scratch) | set(rec.scratch_outs)
    before = rec.before
    if state.deferred:
        if before is not None and before.later is not None:  # its values come first
            rec.later, rec.keep, rec.waits, rec.fills = (before.later, before.keep,
                                                         before.waits, before.fills)
        else:
            rec.later, rec.keep, rec.waits, rec.fills = [], [], [], []
        rec.held = device.capturing()
    described_ins, scratch_ins = rec.described_ins, rec.scratch_ins
    if described_ins is None:
        n = len(ins)
        hidden = {n + i for i in scratch} | set(scratch_ins) if scratch or scratch_ins else ()
        described, sketches = describe(ins + outs, state, hidden, n, rec)
        described_ins, described_outs = described[:n], described[n:]
    else:
        described_outs, sketches = describe(outs, state, scratch, 0, rec)
    if before is not None:  # an in-place op's written tensors, as they were before it
        described_ins = before.described_ins + described_ins
    slots = None
    if state.deferred and state.rows == 1 and sketches:  # indices in later, -1, or text
        if sketches.count(-1) + sketches.count("") < len(sketches):  # any sketch to make
            slots, sketches = sketches, digest.SKETCH_MARK
        else:
            sketches = ()
    src = record.source(state.skip_dirs) if rec.src is None else rec.src
    line = record.line(step, state.rank, rec.phase, rec.module, op, src, described_ins,
                       described_outs, thread, rec.args, sketches or (), rec.gen, rec.kernel,
                       rec.own, rec.entered, len(ins) if rec.own is not None else None)
    with state.lock:
        if rec.waits or rec.held:  # keep holds the staged bytes and host copies
            state.pending.append((line, rec.later, slots, rec.keep, rec.waits, rec.fills))
            state.pending_bytes += sum(n for _, n in rec.waits)
            if not rec.held and (len(state.pending) >= PENDING_RECORDS
                                 or state.pending_bytes >= PENDING_BYTES
                                 or device.reaches_host(op, ins, outs, rec.args)):
                state.flush()
        else:  # keep holds the tensors until their bytes are read
            if rec.fills:  # device values on no CUDA stream: there already
                line, slots = device.fill(line, slots, rec.fills)
            state.write(line, rec.later or (), slots)


def call_spec(x, tensor_type, found):
    """An argument as JSON for the capture's ``call`` (format: :mod:`bitexact._replay`); its
    tensors are appended to ``found`` in the order :func:`collect_tensors` meets them."""
    if isinstance(x, tensor_type):
        found.append(x)
        return {"T": len(found) - 1}
    if isinstance(x, (list, tuple)):
        return [call_spec(v, tensor_type, found) for v in x]
    if x is None or isinstance(x, (bool, int, str)):
        return x
    if isinstance(x, float):
        return {"f": repr(x)}
    text, kind = str(x), type(x).__name__
    if kind == "dtype":
        return {"dtype": text[6:]}
    if kind == "device":
        return {"device": text}
    if kind in ("layout", "memory_format"):
        return {"torch": text[6:]}
    return {"repr": repr(x)}


def _kept(a, snaps, tensor_type):
    """An argument with each tensor replaced by its copy in ``snaps`` (by id: its values
    before the op); None when a tensor of it has none."""
    if isinstance(a, tensor_type):
        return snaps.get(id(a))
    if isinstance(a, (list, tuple)) and any(isinstance(v, tensor_type) for v in a):
        kept = [_kept(v, snaps, tensor_type) if isinstance(v, tensor_type) else v for v in a]
        return None if any(k is None for k, v in zip(kept, a) if isinstance(v, tensor_type)) \
            else kept
    return None


def _tagged(spec, name):
    """A written argument's spec (:func:`call_spec`): each tensor's ``{"T": i}`` marked
    ``"W": name``, so the replay knows what the op wrote."""
    if isinstance(spec, dict) and "T" in spec:
        spec["W"] = name
    elif isinstance(spec, list):
        for s in spec:
            _tagged(s, name)
    return spec


def save(state, ins, outs, identity=None, call=None, before=None):
    """Writes the op's tensors to ``CAPTURE_FILE`` (host copies, bits kept), with the op, its
    identity and, for an ATen call, its arguments as metadata (:func:`call_spec`). ``before``:
    the values an in-place op read of what it writes, copied before it ran
    (:func:`bitexact._trace.writes.read_before`), saved as its inputs so the call can be
    replayed (``{"T": i, "W": name}``); a written argument without them is ``{"W": name}``."""
    import json

    from .. import _safetensors

    import sys

    meta = {"identity": json.dumps(identity, separators=(",", ":"))} if identity else {}
    meta["python"] = sys.executable or ""  # the replay's interpreter (torch as the program had)
    if call is not None:
        func, args, kwargs, written = call
        tensor_type = type(ins[0]) if ins else type(outs[0]) if outs else None
        found, snaps = [], before.snaps if before is not None and before.snaps else {}
        names = [a.name for a in func._schema.arguments]
        extra = []  # the tensors of written arguments among found

        def spec_of(a, name, wrote):
            kept = _kept(a, snaps, tensor_type)
            if not wrote:
                return call_spec(kept if kept is not None else a, tensor_type, found)
            if kept is None:
                return {"W": name}
            mark = len(found)
            spec = _tagged(call_spec(kept, tensor_type, found), name)
            extra.extend(found[mark:])
            return spec

        spec = {"args": [spec_of(a, names[i] if i < len(names) else "#%d" % i, i in written)
                         for i, a in enumerate(args)],
                "kwargs": {k: spec_of(v, k, k in written) for k, v in kwargs.items()}}
        if len(found) == len(ins) + len(extra):
            ins = found
            meta.update(op=str(func), call=json.dumps(spec))
    tensors = {"in%d" % i: t for i, t in enumerate(ins)}
    tensors.update({"out%d" % i: t for i, t in enumerate(outs)})
    with paused():
        blob = _safetensors.serialize({k: v.detach() for k, v in tensors.items()}, meta)
    root = os.environ.get(_protocol.OUT_ENV) or state.out_dir  # one capture per run, any rank
    with open(os.path.join(root, CAPTURE_FILE), "wb") as f:
        f.write(blob)
