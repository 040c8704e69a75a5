"""The kernels a compiled region launches, under ``bitexact run --trace ops``: each kernel call
inside a recorded compiled call (:mod:`bitexact._trace.compiled`, forward and backward) is a
kernel record, so that a region whose inputs are identical and whose output differs can be
looked into: ``diff-trace`` names the first kernel whose inputs are identical and whose output
differs (``src/trace/kernels.rs``).

How: Inductor loads each graph it compiled (or found in its on-disk cache) as a Python module
through ``PyCodeCache.load_by_key_path``, whose ``call(args)`` runs the graph by calling the
module's kernel globals. :func:`install` wraps that loader: in every module with a ``call``,
each kernel global is replaced by a function that records its calls, and its ``extern_kernels``
and ``aten`` globals (library calls: matrix products, convolutions, fallbacks) by proxies that
record theirs. ``call`` looks its globals up at each call, so the same compiled code runs:
nothing is compiled again, no Inductor setting is changed, and the cache key is the untraced
run's. A kernel runs exactly as without tracing; its buffers are hashed around it (inputs
before, outputs after).

A kernel record is an op record (``v``, ``step``, ``phase``, ``module`` and ``src`` of the
region's record; ``in``/``out`` labelled by :func:`bitexact._trace.digest.describe`) with
``op`` the kernel's name and a ``"kernel"`` field::

    {..., "op": "cpp_fused_sum_mul_17", "in": [...], "out": [...],
     "kernel": {"fuses": ["aten::mul", "aten::sum"], "at": ["model.py:88"], "reduction": true}}

- **Name**: the kernel global (``cpp_fused_add_mul_0``, ``triton_red_fused_sum_1``) or the
  library call (``extern_kernels.addmm``, ``aten.convolution_backward.default``).
- **Inputs and outputs**: a C++ kernel's pointer arguments by their names in its signature
  (``in_ptr`` read, ``out_ptr`` written, ``in_out_ptr`` both); a Triton kernel's by its
  argument names the same way; a library call's ``out=`` tensors (or those its schema says it
  writes, else what it returns) are its outputs, its other tensors its inputs.
- **fuses**: the ATen ops the kernel computes: Inductor's ``Original ATen`` comment above the
  call when it wrote one (library calls, Triton kernels), else read from the kernel's name,
  which Inductor makes of its ops' names (``cpp_fused_add_mul_randn_like_0``: the longest
  ``aten`` op names that spell it).
- **at**: the program's source lines of the FX nodes Inductor generated the call from (its
  line map, kept with the cached graph too: ``stack_trace`` of each node, the innermost frame
  in the program's own code; a graph cached from another copy of the same code names that
  copy's files). Inductor's cache keys a graph by its computation, not its source lines, so a
  graph cached before an edit that moved them keeps the old numbers: each line is the one that
  reads the frame's code now, and is left out when no single line of the file does
  (:func:`bitexact._trace.kernel_source.current_line`).
- **Buffers with no value yet**: a buffer Inductor just allocated (``empty_strided_cpu``) and
  no kernel has written holds whatever the memory held; handed to a kernel as an
  ``in_out_ptr`` (Inductor reuses buffers in place, e.g. ``auto out_ptr0 = in_out_ptr0;``), it
  is an output only, else identical runs would differ at its garbage.
- **reduction**: the generated code accumulates (a C++ kernel's ``tmp_acc``, a Triton
  ``red``/``per`` kernel); for a library call, not said (false).
- **Random seeds**: Inductor draws a region's random seeds in one library call
  (``aten.randint.low_out`` into a seed buffer) that random kernels read. That call is no
  kernel record: the seed buffer is a kernel's generator, not one of its inputs (``"gen":
  "inductor's random seeds|<digest>"``, as a random op's generator state,
  :mod:`bitexact._trace.generator`), and its source line is added to the kernel's. Two runs
  reseeded differently then differ first at the kernel holding the random op, whose inputs are
  identical and whose generator state differs.

Why in every traced run, not only in a re-run of the region from its captured inputs: both runs
of a comparison then hold their kernels, and the first divergent kernel is known from the
traces alone, at once, for a divergence that a re-run in one process could not reproduce (the
thread count is the run's; an atomic add's order is the moment's). The cost is hashing each
kernel's buffers, which are the region's intermediate tensors, as the eager tracer hashes each
op's; ``BITEXACT_TRACE_KERNELS=0`` turns kernel records off.
"""

import contextlib
import functools
import os
import threading

from .. import _imports, _protocol
from . import kernel_source as source
from . import record
from . import state as ts

_local = threading.local()  # .region: the recorded compiled call running on this thread
_MARK = "_bitexact_kernels"  # set on a module whose kernels are wrapped

_SEEDS = "randint.low_out"  # the library call Inductor draws a region's random seeds with
SEEDS_WHO = "inductor's random seeds"


def enabled():
    """Whether kernel records are made (``$BITEXACT_TRACE_KERNELS`` is not ``0``)."""
    return os.environ.get(_protocol.TRACE_KERNELS_ENV, "1") != "0"


class _Region:
    """A recorded compiled call running on this thread: where its kernel records go, and the
    seed buffers its calls drew (data pointer -> (label, source lines))."""

    def __init__(self, state, stream, module, op, phase):
        self.state, self.stream, self.module, self.op, self.phase = (state, stream, module, op,
                                                                     phase)
        self.seeds = {}
        self.fresh = set()  # data pointers of buffers allocated in the call and not yet written
        self.src = record.source(state.skip_dirs, 1)  # the region's call


@contextlib.contextmanager
def region(state, stream, module, op, phase):
    """While it runs, this thread's kernel calls are recorded as the compiled call's
    (``module``, ``op``, ``phase``) in ``stream``."""
    previous = begin(state, stream, module, op, phase)
    try:
        yield
    finally:
        end(previous)


def begin(state, stream, module, op, phase):
    """:func:`region` entered without a ``with`` (a backward node's pre-hook); :func:`end`
    leaves it."""
    previous = getattr(_local, "region", None)
    _local.region = _Region(state, stream, module, op, phase)
    return previous


def end(previous):
    """Leaves the region :func:`begin` entered."""
    _local.region = previous


def _current():
    """This thread's recorded region, when the program (not bitexact) is running."""
    r = getattr(_local, "region", None)
    if r is None or not ts.mine(r.state):
        return None
    return r


def install():
    """Wraps Inductor's module loader (see the module docstring) once Inductor's code cache is
    loaded: now when it is, else when the program first compiles (importing Inductor costs a
    process seconds of CPU that a program that never compiles must not pay:
    :func:`bitexact._imports.when_loaded`). Returns a handle whose ``remove`` puts it back
    (modules already loaded keep their wrapped kernels, which record nothing outside a
    region)."""
    return _LoaderPatch("torch._inductor.codecache")


class _LoaderPatch(_imports.Patch):
    """The handle :func:`install` returns: Inductor's loader wrapped once its code cache is
    loaded."""

    def apply(self, codecache):
        """Wraps ``codecache.PyCodeCache.load_by_key_path``: each module it loads is
        instrumented (:func:`instrument`)."""
        cache = codecache.PyCodeCache
        original = cache.__dict__["load_by_key_path"]
        load = original.__func__

        def load_by_key_path(cls, key, path, linemap=None, attrs=None, **kwargs):
            mod = load(cls, key, path, linemap, attrs, **kwargs)
            try:
                instrument(mod, path, linemap)
            except Exception:  # never break the program: its kernels are then not recorded
                pass
            return mod

        cache.load_by_key_path = classmethod(functools.wraps(load)(load_by_key_path))
        return ts.Restore(cache, "load_by_key_path", original)


def instrument(mod, path, linemap):
    """Wraps the kernel globals of an Inductor module (one with ``call``) loaded from
    ``path``, once."""
    names = vars(mod)
    if names.get(_MARK) or "call" not in names or not path:
        return
    with open(path) as f:
        lines = f.read().splitlines()
    info = source.Module(lines, linemap)
    for i, text in enumerate(lines):
        m = source.DEFINITION.match(text)
        if m is None or m.group(1) not in names:
            continue
        name, kind = m.groups()
        body = source.body(lines, i)
        if kind == "cpp_pybinding":
            names[name] = _cpp(name, names[name], source.cpp_roles(body), "tmp_acc" in body, info)
        elif hasattr(names[name], "run"):
            names[name] = _Triton(name, names[name], info)
    for name in ("extern_kernels", "aten"):
        if name in names:
            names[name] = _Library(names[name], name, info)
    for name in _ALLOCATORS:
        if callable(names.get(name)):
            names[name] = _allocator(names[name])
    names[_MARK] = True


# The allocators of Inductor's modules: a buffer they return holds no value until a kernel
# writes it, so an ``in_out_ptr`` handed such a buffer is no input (its bytes are whatever the
# memory held: they would differ between identical runs).
_ALLOCATORS = ("empty_strided_cpu", "empty_strided_cuda", "empty_strided_xpu", "empty_strided")


def _allocator(fn):
    def allocate(*args, **kwargs):
        t = fn(*args, **kwargs)
        r = _current()
        if r is not None:
            r.fresh.add(t.data_ptr())
        return t

    return allocate


def _written_now(r, ins, outs):
    """``ins`` without the buffers that hold no value yet (see :data:`_ALLOCATORS`); the
    buffers in ``outs`` hold one from now on."""
    if not r.fresh:
        return ins
    kept = [t for t in ins if t.data_ptr() not in r.fresh]
    r.fresh.difference_update(t.data_ptr() for t in outs)
    return kept


def _caller_line():
    """The line of the module's ``call`` that called a kernel wrapper (``kernel``, ``run`` or a
    library call), asked by the function that records the call for that wrapper."""
    import sys

    return sys._getframe(3).f_lineno


def _emit(r, name, ins, outs, described, meta, gen=None):
    """Writes one kernel record of region ``r``."""
    rec = ts.Record(name, r.phase, r.module, ins, outs, described, gen=gen)
    rec.kernel, rec.src = meta, r.src
    ts.emit(r.state, r.stream, rec)


def _seeded(r, ins, meta):
    """Moves the region's seed buffers out of ``ins`` (see the module docstring): ``(ins, gen,
    meta)``."""
    if not r.seeds:
        return ins, None, meta
    kept, gen = [], None
    for t in ins:
        seed = r.seeds.get(t.data_ptr())
        if seed is None:
            kept.append(t)
            continue
        label, at = seed
        gen = "%s|%s" % (SEEDS_WHO, label.rpartition(":")[2])
        meta = dict(meta, at=meta["at"] + [a for a in at if a not in meta["at"]])
    return kept, gen, meta


def _kernel_call(r, name, info, reduction, args, roles, call):
    """Runs ``call()``, one call of the generated kernel ``name`` inside region ``r`` with
    ``args`` in their ``roles`` (``"in"``, ``"out"``, ``"inout"`` or None), and records it: its
    inputs described before the call, its outputs after."""
    import torch

    with ts.paused():
        fuses, at = source.site(info, r.state, _caller_line(), name)
        meta = {"fuses": fuses, "at": at, "reduction": reduction}
        pairs = [(a, role) for a, role in zip(args, roles) if isinstance(a, torch.Tensor)]
        ins = [a for a, role in pairs if role in ("in", "inout")]
        outs = [a for a, role in pairs if role in ("out", "inout")]
        ins, gen, meta = _seeded(r, _written_now(r, ins, outs), meta)
        described = ts.describe(ins, r.state)
    result = call()
    with ts.paused():
        _emit(r, name, ins, outs, described, meta, gen)
    return result


def _cpp(name, fn, roles, reduction, info):
    """A C++ kernel's wrapper: records each call made inside a region."""

    def kernel(*args):
        r = _current()
        if r is None:
            return fn(*args)
        return _kernel_call(r, name, info, reduction, args, roles, lambda: fn(*args))

    return functools.wraps(fn)(kernel) if hasattr(fn, "__name__") else kernel


class _Triton:
    """A Triton kernel (Inductor's ``CachingAutotuner``) whose ``run`` records each call made
    inside a region; every other attribute is the kernel's."""

    def __init__(self, name, kernel, info):
        self._name, self._kernel, self._info = name, kernel, info
        arg_names = list(getattr(getattr(kernel, "fn", None), "arg_names", ()) or ())
        mutated = set(getattr(kernel, "mutated_arg_names", ()) or ())
        self._roles = [("inout" if n.startswith("in_out_ptr") else "out"
                        if n.startswith("out_ptr") or n in mutated else "in") for n in arg_names]
        self._reduction = name.startswith(("triton_red_", "triton_per_"))

    def __getattr__(self, attr):
        return getattr(self._kernel, attr)

    def run(self, *args, **kwargs):
        r = _current()
        if r is None:
            return self._kernel.run(*args, **kwargs)
        return _kernel_call(r, self._name, self._info, self._reduction, args, self._roles,
                            lambda: self._kernel.run(*args, **kwargs))


class _Library:
    """``extern_kernels`` or ``aten`` of an Inductor module: each call made through it inside a
    region is recorded (named ``extern_kernels.mm``, ``aten.convolution_backward.default``)."""

    def __init__(self, target, name, info):
        self._target, self._name, self._info = target, name, info

    def __getattr__(self, attr):
        value = getattr(self._target, attr)
        if not callable(value) and not hasattr(value, "overloads"):
            return value
        return _Library(value, "%s.%s" % (self._name, attr), self._info)

    def __call__(self, *args, **kwargs):
        r = _current()
        if r is None:
            return self._target(*args, **kwargs)
        return _library_call(r, self, args, kwargs)


def _written(target, args, kwargs):
    """The positions (ints) and names of the arguments a library call writes: its schema's
    written arguments (an ATen overload), else ``out``; and whether they are outputs only
    (``out=`` arguments, not read)."""
    schema = getattr(target, "_schema", None)
    if schema is None:
        return ({"out"} if "out" in kwargs else set()), True
    written, only = set(), True
    for i, a in enumerate(schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            written.add(i if i < len(args) else a.name)
            only = only and a.kwarg_only
    return written, only


def _library_call(r, lib, args, kwargs):
    import torch

    name = lib._name
    with ts.paused():
        written, only = _written(lib._target, args, kwargs)
        places = list(enumerate(args)) + list(kwargs.items())
        outs = [t for k, v in places if k in written
                for t in ts.collect_tensors(v, torch.Tensor, [])]
        ins = [t for k, v in places if k not in written or not only
               for t in ts.collect_tensors(v, torch.Tensor, [])]
        seeds = name.endswith(_SEEDS)
        ins = _written_now(r, ins, outs)
        if not seeds:
            fuses, at = source.site(lib._info, r.state, _caller_line(), name)
            described = ts.describe(ins, r.state)
    result = lib._target(*args, **kwargs)
    with ts.paused():
        if seeds:  # the region's seed buffer: a generator, not a kernel
            fuses, at = source.site(lib._info, r.state, _caller_line(), name)
            for t in outs:
                r.seeds[t.data_ptr()] = (ts.describe([t], r.state)[0], at)
            return result
        if not written:
            outs = ts.collect_tensors(result, torch.Tensor, [])
        _emit(r, name, ins, outs, described, {"fuses": fuses, "at": at, "reduction": False})
    return result
