"""The state record of ``bitexact run --vary resume``: at every optimizer step of a PyTorch
program, the digests of the state a bit-exact resume needs, so that bitexact can compare the
resumed launch's first step with the uninterrupted run's step of the same number and name what
the checkpoint forgot.

Started by the injected ``sitecustomize`` when ``$BITEXACT_STATE`` is ``1``, right after the
program's ``import torch`` (never before: a program without torch stays untouched), in the first
Python process of each rank (:func:`install_from_env`).

**Where and when.** One JSON line per step of the first optimizer that steps in the process, in
``$BITEXACT_OUT/.bitexact-state-rank<R>.jsonl``, written just before the step
(``torch.optim.optimizer.register_optimizer_step_pre_hook``): the file is opened with
``O_APPEND``, written with one ``os.write`` and closed, so each line is one completed write
that bitexact's watcher counts. Steps are numbered from ``$BITEXACT_RESUME_STEP`` (0 in a fresh
run), so a resumed launch's steps carry the uninterrupted run's numbers. The other optimizers'
steps are not counted; their state is recorded with the first one's.

**A line.** ``{"step": 7, "rank": 0, "pieces": [{"name": "StepLR: last_epoch", "kind":
"scheduler", "digest": "<32 hex digits>", "value": "6", "hint": "not restored: ..."}, ...]}``.
``name`` is printed as it is; ``value`` comes with small values only (numbers, a one-element
tensor); ``hint`` says what a resume must save and load for that piece. Kinds and names:

* ``generator``: ``torch's CPU generator``, ``torch's CUDA generator <i>`` (only once CUDA is
  initialized: never initialized here), ``numpy's global generator`` (only when numpy is
  imported), ``Python's random``, and the generators a DataLoader and its sampler hold
  (``DataLoader: generator``, ``DataLoader: sampler generator``);
* ``optimizer``: ``AdamW group 0: lr`` (each value of each param group, with its value),
  ``AdamW: 0.weight exp_avg`` (each state value of each parameter, a one-element tensor such as
  ``step`` with its value) and ``AdamW: parameters with state`` (how many: a fresh optimizer has
  0 and none of the per-parameter pieces; a piece that one record has and the other lacks
  differs);
* ``scheduler``: each scalar entry of an LR scheduler's ``state_dict()``, ``StepLR: last_epoch``,
  ``StepLR: _last_lr``; ``scaler``: a GradScaler's, ``GradScaler: scale``;
* ``parameter`` / ``buffer``: ``parameter 0.weight``, ``buffer 1.running_mean``: every tensor of
  the program's root modules (an EMA copy too), named by module path; the root holding the
  first optimizer's parameters unprefixed, each other root by its class (``Sequential.0.weight``
  for an EMA copy of a ``Sequential`` model; ``Net#2.`` for the second of two other ``Net``
  roots);
* ``data``: ``DataLoader: sampler epoch`` (a DistributedSampler's), ``DataLoader: state_dict``
  (a stateful loader's), and ``gradients (what the step's data gave)``: one digest over every
  parameter's ``.grad``: when all else agrees and it differs, the step read other data;
* a class or object seen twice is numbered: ``AdamW#2``, ``DataLoader#2``.

**Digests.** Host tensors are fingerprinted by the native XXH3-128 of their dtype, shape and
bytes (:func:`bitexact._resume_pieces.fingerprints`; a state record compares two runs of one
program, so equality is all it needs), all of a step's in one call; device tensors by the op
tracer's canonical digest; other values by SHA-256 of their text or bytes (32 hex digits).
Reading state never changes what the program computes: no RNG draws, no CUDA initialization,
the tracer paused while the record is made; on a GPU, reading device tensors waits for them
(the only synchronization added).

**Full and light records.** The per-tensor pieces (parameters, buffers, each parameter's
optimizer state, the gradients) change every step and cost the most, and a resume is compared
at one step only: the resumed launch's first, against the uninterrupted run's step of that
number, the first after a checkpoint. So a record is **full** (``"heavy": true``) at a launch's
first step and at the first step after the program wrote a checkpoint, and **light** at every
other: generators, param-group values, the count of parameters with optimizer state,
schedulers, scalers, loaders (``"heavy": false``; the line still counts the step). Which
writes are checkpoints, and how they are seen: :mod:`bitexact._resume_writes`
(``STATE_CHECKPOINT_ENV``: ``--checkpoint``'s glob). A checkpoint it cannot see leaves that
step's record light: bitexact compares the light pieces and says so. ``STATE_STEPS_ENV``
(``A..B``, ``A..`` or ``N``; ``0..`` for every step) names the full steps instead.

On the nanoGPT step of ``benches/resume_state.py`` (CPU, one thread, 11 ms) the recorder adds
4.0-4.5 % (a light record is 0.18 ms of it), a full record at every step 14-15 % (most of it
the Python that walks 139 pieces; hashing them with SHA-256 would make it 20 %).

**Finding the state.** Optimizers, LR schedulers, GradScalers and DataLoaders are registered as
they are made (their ``__init__`` wrapped once, at install, weak references only); the root
modules are found once, by a scan of the garbage collector's objects at the first record (again
once more if an optimizer holds parameters no root module names).

A failure to read or write never reaches the program: that step records nothing, and the first
failure prints one line ``bitexact: state record: ...`` to stderr.
"""

import array
import contextlib
import functools
import gc
import json
import os
import sys
import weakref

from . import _dist, _protocol
from ._resume_pieces import Live, Pieces, flat, labels, small
from ._resume_writes import is_checkpoint, watch_writes

# The process of a rank that records (its children, DataLoader workers, do not): the tracer's
# claim, so that under --trace both watch the same process (a claim holds for the process
# that made it, and a torch-less launcher never imports torch, so never claims it here).
OWNER_ENV = _protocol.TRACE_OWNER_ENV
KINDS = ("optimizer", "scheduler", "scaler", "loader")
_RESTORE = "not restored: save and load "
HINTS = {
    "torch": _RESTORE + "torch.get_rng_state()",
    "cuda": _RESTORE + "torch.cuda.get_rng_state_all()",
    "numpy": _RESTORE + "np.random.get_state()",
    "random": _RESTORE + "random.getstate()",
    "optimizer": _RESTORE + "optimizer.state_dict()",
    "scheduler": _RESTORE + "scheduler.state_dict()",
    "scaler": _RESTORE + "scaler.state_dict()",
    "parameter": _RESTORE + "model.state_dict()",
    "buffer": _RESTORE + "model.state_dict(), which holds the buffers (BatchNorm running "
              "statistics), not only the parameters",
    "loader": "not restored: save the loader generator's state at the epoch start and set it "
              "before that epoch's iter()",
    "epoch": "not restored: call sampler.set_epoch() with the checkpoint's epoch",
    "stateful": _RESTORE + "the DataLoader's state_dict()",
    "data": "the batch the step read differs when all else agrees: the data position (epoch, "
            "batch in epoch) not restored",
}
DATA_PIECE = "gradients (what the step's data gave)"

_recorder = None


def install_from_env():
    """Starts the recorder when ``$BITEXACT_STATE`` is ``1`` and ``$BITEXACT_OUT`` is set, once,
    in the first Python process of each rank; returns whether it started. Call it after
    ``import torch`` (the injected ``sitecustomize`` does, right after torch is imported)."""
    if os.environ.get(_protocol.STATE_ENV) != "1" or not os.environ.get(_protocol.OUT_ENV):
        return False
    if _recorder is not None or not _dist.claim(OWNER_ENV):
        return False
    return install() is not None


def heavy_steps():
    """The steps whose record is full, ``(first, last)``, from ``STATE_STEPS_ENV`` (``A..B``,
    ``A..`` or ``N``, as the tracer's steps), or ``AUTO`` when it is unset."""
    spec = os.environ.get(_protocol.STATE_STEPS_ENV, "").strip()
    if not spec:
        return AUTO
    first, dots, last = spec.partition("..")
    first = int(first or 0)
    return first, (int(last) if last else float("inf")) if dots else first


# The default heavy steps: a launch's first, and each one after a checkpoint write.
AUTO = "auto"


def _wrote(path):
    """The program wrote ``path``: when it is a checkpoint, the next record is full."""
    r = _recorder
    if r is None or r.after_checkpoint or r.heavy != AUTO:
        return
    if isinstance(path, (str, bytes, os.PathLike)) and is_checkpoint(
            os.fspath(path), r.out, r.glob):
        r.after_checkpoint = True


def install(out=None, rank=None, start=None, heavy=None):
    """Records the state at every optimizer step into ``out`` (default ``$BITEXACT_OUT``) as
    rank ``rank`` (default this process's), numbering steps from ``start`` (default
    ``$BITEXACT_RESUME_STEP``, else 0), with the heavy pieces at the steps ``heavy`` (``(first,
    last)``; default :func:`heavy_steps`). Returns the :class:`Recorder`, or None when there is
    no ``out`` or a recorder is installed already."""
    global _recorder
    out = out or os.environ.get(_protocol.OUT_ENV)
    if _recorder is not None or not out:
        return None
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    if rank is None:
        rank = _dist.rank() or 0
    if start is None:
        start = int(os.environ.get(_protocol.RESUME_STEP_ENV, "") or 0)
    path = os.path.join(out, "%s%d.jsonl" % (_protocol.STATE_FILE_PREFIX, rank))
    _recorder = Recorder(path, rank, start, heavy if heavy is not None else heavy_steps())
    _recorder.out = os.path.abspath(out)
    _recorder.glob = os.environ.get(_protocol.STATE_CHECKPOINT_ENV) or None
    watch_writes(_wrote)
    _track_made(_recorder.live)
    _recorder.handle = register_optimizer_step_pre_hook(_recorder.pre_step)
    return _recorder


def uninstall():
    """Stops the recorder (the tests use it); the classes stay wrapped, registering nowhere."""
    global _recorder
    if _recorder is not None:
        _recorder.handle.remove()
        _REGISTRIES.clear()
        _recorder = None


# Where each kind's objects go once the recorder is installed: {kind: Live} (empty before).
_REGISTRIES = {}


def _classes():
    """{kind: classes whose instances are registered}: optimizers, LR schedulers (older torch's
    ReduceLROnPlateau is not an LRScheduler), GradScalers, DataLoaders."""
    import torch
    from torch.optim import lr_scheduler
    from torch.utils.data import DataLoader

    schedulers = [getattr(lr_scheduler, "LRScheduler", None) or lr_scheduler._LRScheduler,
                  lr_scheduler.ReduceLROnPlateau]
    scalers = [getattr(getattr(torch, "amp", None), "GradScaler", None),
               getattr(getattr(torch.cuda, "amp", None), "GradScaler", None)]
    return {"optimizer": [torch.optim.Optimizer], "scheduler": schedulers,
            "scaler": [c for c in scalers if c is not None], "loader": [DataLoader]}


def _track_made(live):
    """Wraps each tracked class's ``__init__`` (once per process) so that every instance made
    from now on is registered in ``live[kind]``."""
    _REGISTRIES.clear()
    _REGISTRIES.update(live)
    for kind, classes in _classes().items():
        for cls in classes:
            if any(issubclass(cls, c) and cls is not c for c in classes):
                continue  # its base's wrapper registers it
            init = cls.__init__
            if getattr(init, "_bitexact_state", None) == kind:
                continue

            def wrapped(self, *args, _init=init, _kind=kind, **kwargs):
                _init(self, *args, **kwargs)
                registry = _REGISTRIES.get(_kind)
                if registry is not None:
                    registry.add(self)

            wrapped = functools.wraps(init)(wrapped)
            wrapped._bitexact_state = kind
            cls.__init__ = wrapped


def _append(path, line):
    """Appends ``line`` to ``path``: one open with O_APPEND, one write, one close."""
    data = line.encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        written = os.write(fd, data)
        while written < len(data):  # a short write (rare, on a full disk): finish the line
            written += os.write(fd, data[written:])
    finally:
        os.close(fd)


class Recorder:
    """Writes a record before each step of the first optimizer that steps in this process (see
    the module's doc): ``pre_step`` is the global optimizer step pre-hook."""

    def __init__(self, path, rank, start, heavy=None):
        self.path, self.rank, self.step, self.pid = path, rank, start, os.getpid()
        self.heavy = heavy  # (first, last) steps whose records are full; None: all; AUTO
        self.start = start
        self.after_checkpoint = False  # AUTO: the program wrote a checkpoint since the record
        self.out, self.glob = os.path.dirname(path), None
        self.live = {k: Live() for k in KINDS}
        self.first = None  # the counted optimizer (a weak reference)
        self.roots = None  # [(name prefix, weak reference to a root module)]
        self.rescanned = self.failed = self.full = False
        self.handle = None

    def pre_step(self, opt, args, kwargs):
        if os.getpid() != self.pid:
            return None  # a forked child (a DataLoader worker, Hogwild) is not this rank
        first = self.first() if self.first is not None else None
        if first is None:
            self.first = weakref.ref(opt)
        elif first is not opt:
            return None
        step, self.step = self.step, self.step + 1
        try:
            self.live["optimizer"].add(opt)
            _append(self.path, self.line(step))
        except Exception as e:  # never the program's problem
            if not self.failed:
                self.failed = True
                sys.stderr.write("bitexact: state record: step %d not recorded (%s: %s)\n"
                                 % (step, type(e).__name__, e))
        return None

    def line(self, step):
        """The record of step ``step``, as a line of JSON."""
        self.full = self.wants_heavy(step)
        tracer = sys.modules.get("bitexact._trace")
        with tracer.paused() if tracer is not None else contextlib.nullcontext():
            pieces = self.pieces(step)
        return json.dumps({"step": step, "rank": self.rank, "heavy": self.full,
                           "pieces": pieces}, separators=(",", ":")) + "\n"

    def wants_heavy(self, step):
        """Whether the record of ``step`` is full (see the module's doc)."""
        if self.heavy is None:
            return True
        if self.heavy == AUTO:
            full = step == self.start or self.after_checkpoint
            self.after_checkpoint = False
            return full
        return self.heavy[0] <= step <= self.heavy[1]

    def pieces(self, step):
        import torch

        if self.roots is None:
            self.scan(torch)
        heavy = self.full
        # A light record names no tensor of the model: no walk.
        params, buffers, names = self.model_tensors() if heavy else ([], [], {})
        p = Pieces(heavy)
        self.generators(p, torch)
        extra = self.optimizers(p, names)
        if extra and not self.rescanned:
            # Parameters no module was seen holding: new root modules were made since the
            # scan (look for them, once).
            self.rescanned = True
            self.scan(torch)
            return self.pieces(step)
        for kind in ("scheduler", "scaler"):
            objs = self.live[kind].alive()
            for label, obj in zip(labels(objs), objs):
                for key, v in flat(obj.state_dict()):
                    p.value("%s: %s" % (label, key), kind, v, HINTS[kind])
        self.loaders(p, torch)
        if not heavy:
            p.hash()
            return p.list
        for name, t in params + extra:
            p.tensor("parameter " + name, "parameter", t, HINTS["parameter"])
        for name, t in buffers:
            p.tensor("buffer " + name, "buffer", t, HINTS["buffer"])
        p.tensors(DATA_PIECE, "data", [(n, t.grad) for n, t in params + extra], HINTS["data"])
        p.hash()
        return p.list

    def generators(self, p, torch):
        p.tensor("torch's CPU generator", "generator", torch.default_generator.get_state(),
                 HINTS["torch"], value=False)
        if torch.cuda.is_initialized():  # never initialized here
            for i, g in enumerate(torch.cuda.default_generators):
                p.tensor("torch's CUDA generator %d" % i, "generator", g.get_state(),
                         HINTS["cuda"], value=False)
        nprandom = sys.modules.get("numpy.random")
        if nprandom is not None:
            p.obj("numpy's global generator", "generator", nprandom.get_state(), HINTS["numpy"])
        rnd = sys.modules.get("random")
        if rnd is not None:
            version, words, gauss = rnd.getstate()
            p.blob("Python's random", "generator", array.array("Q", words).tobytes()
                   + repr((version, gauss)).encode(), HINTS["random"])

    def scan(self, torch):
        """Finds the root modules (those no other module holds, with tensors), and registers
        the optimizers, schedulers, scalers and loaders made before the recorder was installed,
        in one pass over the garbage collector's objects."""
        kinds = [(k, tuple(cs)) for k, cs in _classes().items()]
        module = torch.nn.Module
        modules, children = [], set()
        for o in gc.get_objects():
            t = type(o)  # never o.__class__: a proxy object could run code
            if issubclass(t, module):
                modules.append(o)
                held = o.__dict__.get("_modules") or {}
                children.update(id(c) for c in held.values() if c is not None)
                continue
            for kind, classes in kinds:
                if issubclass(t, classes):
                    self.live[kind].add(o)
                    break
        roots = [m for m in modules if id(m) not in children
                 and (next(m.parameters(), None) is not None
                      or next(m.buffers(), None) is not None)]
        self.roots = self.prefixes(roots)

    def prefixes(self, roots):
        """``[(prefix, weakref)]`` of the root modules: the one holding the counted
        optimizer's parameters first and unprefixed, the others by class name."""
        first = self.first() if self.first is not None else None
        mine = set()
        for group in (first.param_groups if first is not None else ()):
            mine.update(id(t) for t in group["params"])
        main = next((r for r in roots if any(id(t) in mine for t in r.parameters())), None)
        others = [r for r in roots if r is not main]
        out = [("", weakref.ref(main))] if main is not None else []
        return out + [(label + ".", weakref.ref(r)) for label, r in zip(labels(others), others)]

    def model_tensors(self):
        """``(parameters, buffers, {id: name})`` of the root modules, ``(name, tensor)`` each,
        a tensor held twice named once (one walk over each root's modules)."""
        params, buffers, names = [], [], {}
        for prefix, ref in self.roots:
            root = ref()
            if root is None:
                continue
            for path, module in root.named_modules(prefix=prefix.rstrip(".")):
                path = path + "." if path else ""
                for into, held in ((params, module._parameters), (buffers, module._buffers)):
                    for name, t in held.items():
                        if t is not None and id(t) not in names:
                            names[id(t)] = path + name
                            into.append((path + name, t))
        return params, buffers, names

    def optimizers(self, p, names):
        """The pieces of every optimizer, the counted one first; returns ``(name, parameter)``
        of the parameters no root module holds (named by optimizer, group and place)."""
        first = self.first()
        opts = [first] + [o for o in self.live["optimizer"].alive() if o is not first]
        extra, hint = [], HINTS["optimizer"]
        for label, opt in zip(labels(opts), opts):
            # Named even when a fresh optimizer has no state yet (its pieces are then absent).
            held = sum(1 for v in opt.state.values() if v)
            p.value(label + ": parameters with state", "optimizer", held, hint)
            for g, group in enumerate(opt.param_groups):
                for key in sorted(k for k in group if k != "params"):
                    v = group[key]
                    name = "%s group %d: %s" % (label, g, key)
                    (p.value if small(v) else p.obj)(name, "optimizer", v, hint)
                if not p.heavy:
                    continue  # a light record: no per-parameter piece
                for i, t in enumerate(group["params"]):
                    if id(t) not in names:
                        names[id(t)] = "%s group %d #%d" % (label, g, i)
                        extra.append((names[id(t)], t))
                    for key, v in sorted(opt.state.get(t, {}).items(), key=lambda kv: str(kv[0])):
                        name = "%s: %s %s" % (label, names[id(t)], key)
                        if hasattr(v, "data_ptr"):
                            p.tensor(name, "optimizer", v, hint)
                        else:
                            (p.value if small(v) else p.obj)(name, "optimizer", v, hint)
        return extra

    def loaders(self, p, torch):
        """Each DataLoader's generators (its own, its sampler's when another), its sampler's
        epoch (DistributedSampler) and a stateful loader's ``state_dict()``."""
        loaders = self.live["loader"].alive()
        for label, dl in zip(labels(loaders), loaders):
            g = getattr(dl, "generator", None)
            if isinstance(g, torch.Generator):
                p.tensor(label + ": generator", "generator", g.get_state(), HINTS["loader"],
                         value=False)
            sampler = getattr(dl, "sampler", None)
            sg = getattr(sampler, "generator", None)
            if isinstance(sg, torch.Generator) and sg is not g:
                p.tensor(label + ": sampler generator", "generator", sg.get_state(),
                         HINTS["loader"], value=False)
            epoch = getattr(sampler, "epoch", None)
            if isinstance(epoch, int):
                p.value(label + ": sampler epoch", "data", epoch, HINTS["epoch"])
            state_dict = getattr(dl, "state_dict", None)
            if callable(state_dict):
                p.obj(label + ": state_dict", "data", state_dict(), HINTS["stateful"])
