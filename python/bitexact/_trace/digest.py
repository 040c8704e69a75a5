"""The labels of an op trace's records: :func:`describe` labels an op's tensors as records show
them (``f32[2,3]:<fingerprint>``: the 128-bit trace fingerprint of
``docs/concepts/fingerprint.md``, not the canonical SHA-256), with one native call per op.

Host tensors of bitexact's dtypes (the common case) take the fast path: their address, length,
dtype and shape go to ``_native.trace_digests``, which hashes them together and formats the
labels, with a cache of digests checked against the bytes (see
``crates/bitexact-python/src/trace.rs``): a tensor that an earlier op made or read and that is
unchanged since (most of an op's inputs) costs an XXH3-128 of its bytes instead of a
fingerprint (and, for a result, a float64 sketch). Whether a fingerprint is reused depends on
the bytes only, never on PyTorch's version counter, tensor identity or the ops the tracer saw, so a
write that those miss (through ``.data``, a view, numpy sharing the memory, an extension's raw
pointer) is hashed again. :data:`CACHE` turns the cache off (the tests compare traces with and
without it).

The tracer's records are written by the native ``TraceWriter``
(``crates/bitexact-python/src/trace_writer.rs``) on its own thread. Where a core is free
(:func:`background`), it hashes them there too: :func:`describe` (given ``rec.later``)
leaves a NUL byte (:data:`HOLE`) for each fast-path label and collects the tensors, which the
writer looks up in the same cache, copies when they must be hashed, and hashes (and sketches)
on its thread, filling in the labels and the ``"sk"`` field
(:data:`SKETCH_MARK`) and writing the records in order: the same bytes, without the program's
thread waiting for them.

CUDA tensors of at most ``STAGE_MAX`` bytes are first staged to the host, all of an op's in
one copy, and then take the host's fast path; larger ones are fingerprinted on their device,
only 16 bytes each coming back (:mod:`bitexact._trace.device`).

Everything else takes the general path (complex, conjugate and negative views, sparse tensors:
made plain by :mod:`bitexact._digest` and fingerprinted natively), and a tensor that
cannot be hashed (a meta tensor, one over ``BITEXACT_TRACE_MAX_BYTES``, an RNN workspace, an
unknown dtype, any device tensor of an op recorded while its stream is captured into a CUDA
graph) is labelled ``dtype[shape]:-``.

Row slices (``$BITEXACT_TRACE_ROWS`` = n > 1, the larger-batch run of ``bitexact run --vary
batch``): a tensor whose first dimension is a multiple of n is labelled
``dtype[shape]/n:<d1>,...,<dn>``, the digests of its n row slices (see :func:`describe`), so
each slice compares with the smaller-batch run's whole result for the same requests
(``src/trace/batch.rs``).
"""

from .. import _digest, _fingerprint
from . import device
from .._digest import plain_name as _plain

# Whether _native.trace_digests may reuse a digest whose bytes are unchanged (see above).
CACHE = True

# Whether records keep a float64 sketch of each result and the op's non-tensor arguments (what
# ``bitexact diff-trace`` judges noise with, src/trace/noise.rs); the op_trace bench turns it
# off to measure their cost.
SKETCH = True

# Whether the native TraceWriter hashes the records on its background thread (see above);
# False: digests on the program's thread, the writer only writing the lines; None (the
# default): on a machine with an NVIDIA GPU, or when torch leaves a core of this process free
# (:func:`background`).
BACKGROUND = None

# Where a label that the TraceWriter fills in goes, and where its "sk" field goes (JSON escapes
# both bytes inside any string, so a raw one is only ever such a mark).
HOLE = "\0"
SKETCH_MARK = "\1"


def background():
    """Whether the tracer hashes on a background thread: :data:`BACKGROUND`, or when it is None,
    ``$BITEXACT_TRACE_BACKGROUND`` (``1`` or ``0``), or when that is unset, whether this
    machine has an NVIDIA GPU (``/dev/nvidia0``: asked without CUDA, which must not start
    before a fork) or torch's intra-op threads leave a core of this process free. Where they
    take every core of a CPU-only program, the writer's thread competes with them: on 2 cores
    a traced nanoGPT step got slower with two torch threads, faster with one. A GPU program's
    threads mostly wait: on an H200 with 16 torch threads on 16 cores, the traced nanoGPT step
    took 86 ms with the writer against 133 ms without (docs/gpu-results.md)."""
    if BACKGROUND is not None:
        return BACKGROUND
    import os

    from .. import _protocol

    forced = os.environ.get(_protocol.TRACE_BACKGROUND_ENV, "")
    if forced in ("0", "1"):
        return forced == "1"
    if os.path.exists("/dev/nvidia0"):
        return True
    import torch

    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return torch.get_num_threads() < cores


def _fast(t, max_bytes, strided=False):
    """``(ptr, nbytes, dtype name, shape)`` of a host tensor of a bitexact dtype, with the
    tensor that owns the bytes; None for the general path. A view that is not contiguous is
    copied contiguous, or with ``strided`` handed over as it lies, its element strides a fifth
    item (the native side checks the bytes it spans and gathers its elements: no copy when its
    digest is cached, one into the writer's buffer when not)."""
    got = _host_items((t,), max_bytes)
    if got is None:
        return None
    item = got[0]
    if len(item) == 5 and not strided:
        t = t.detach().contiguous()
        item = (t.data_ptr(), item[1], item[2], t.shape)
    return item, t


def _general(t, max_bytes, hashed):
    """The label of one tensor off the fast path: ``label:-`` when it cannot be hashed (or
    ``max_bytes`` is None: scratch), else the label, with what to fingerprint appended to
    ``hashed``: its host view (:mod:`bitexact._digest`), or the tensor itself when it is
    fingerprinted on its device (the caller fingerprints them together, :func:`_fingerprints`).
    A DTensor is labelled by its local shard (the wrapper has no bytes of its own); another
    tensor without storage of its own, ``label:-``."""
    kind = None
    local = getattr(t, "to_local", None)
    if local is not None:
        t = local()
    try:
        if max_bytes is None or t.is_meta or t.numel() * t.element_size() > max_bytes:
            raise ValueError
        strided = t.layout == _digest._torch_strided()  # else sparse: no data_ptr, made
        if strided and not t.data_ptr() and t.nbytes:  # dense by _prepare
            raise ValueError
        if strided and device.fingerprinted_there(t):
            if device.capturing():  # a CUDA graph's op: no values until it is replayed
                raise ValueError
            _digest._torch_dtypes.get(t.dtype) or _digest._torch_dtype(t.dtype)  # a TypeError
            kind, v = "device", t
        else:
            kind, v = _digest._prepare(t)
    except (TypeError, ValueError, RuntimeError):
        pass
    label = _head(t)
    if kind in ("host", "device"):
        hashed.append(v)
        return label
    return label + ":-"


def _fingerprints(hashed, nat, waiting=None):
    """The fingerprints of what :func:`_general` appended to ``hashed``: host views by the
    native module (one call), device tensors on their devices (one copy back per device), or
    with ``waiting`` (a record), :data:`bitexact._trace.device.LATER` in their place, for the
    record to fill in once their values reach the host (:func:`bitexact._trace.device.fill`):
    the program's thread does not wait for the device."""
    on_host = [isinstance(h, _digest._Host) for h in hashed]
    host = iter(nat.trace_fingerprints([h.args() for h, k in zip(hashed, on_host) if k]))
    there = [h for h, k in zip(hashed, on_host) if not k]
    if there and waiting is not None:
        there = iter(device.defer_fingerprints(waiting, there))
    else:
        there = iter(_fingerprint.fingerprints(there) if there else ())
    return [next(host) if k else next(there) for k in on_host]


def _rows(shape, rows):
    """``rows`` when a tensor of ``shape`` is labelled by row slices (its first dimension a
    positive multiple of ``rows`` > 1), else 1."""
    if rows > 1 and len(shape) >= 1 and shape[0] >= rows and shape[0] % rows == 0:
        return rows
    return 1


def _head(t):
    """``dtype[d0,d1,...]`` of a tensor, as :func:`_general` names it (``dtype[?]`` for one
    without a shape: a strided nested tensor): a complex tensor as what is hashed, its real
    view (``complex64[3]`` is ``f32[3,2]``: real then imaginary, as :mod:`bitexact._digest`
    hashes it); a dtype bitexact has no name for, by torch's name (``qint8[3]``)."""
    try:
        name, is_complex = _digest._torch_dtypes.get(t.dtype) or _digest._torch_dtype(t.dtype)
    except TypeError:
        name, is_complex = str(t.dtype).replace("torch.", ""), False
    dims = [str(d) for d in _shape(t)]
    if is_complex:
        dims.append("2")
    return "%s[%s]" % (name, ",".join(dims))


def _shape(t):
    """``t.shape``, or ``("?",)`` for a tensor that has none (a strided nested tensor)."""
    try:
        return t.shape
    except RuntimeError:
        return ("?",)


def _general_rows(t, n, max_bytes, hosts, slow, i):
    """The row-slice digests of a general-path tensor (``n`` slices): a list with a digest for
    each device slice and None for each host slice (appended to ``hosts``, and its place to
    ``slow``); None when the tensor cannot be hashed (it is then labelled whole, ``:-``)."""
    try:
        if t.is_meta or t.numel() * t.element_size() > max_bytes:
            return None
    except (TypeError, RuntimeError):
        return None
    step = t.shape[0] // n
    mark, places, digests = len(hosts), [], []
    for k in range(n):
        label = _general(t[k * step:(k + 1) * step], max_bytes, hosts)
        if label.endswith(":-"):
            del hosts[mark:]
            return None
        if len(hosts) > mark + len(places):
            places.append(((i, k), label))
            digests.append(None)
        else:
            digests.append(label.rpartition(":")[2])
    slow.extend(places)
    return digests


def _all_fast(tensors, max_bytes):
    """The fast-path items of ``tensors`` (views as they lie, owned by the tensors themselves),
    or None unless every one takes the fast path (then none is on a device: nothing to stage):
    :func:`describe`'s all-host lane (the tests replace it to compare with sorting)."""
    return _host_items(tensors, max_bytes)


def _host_items(tensors, max_bytes):
    """:func:`_all_fast`, and :func:`_fast` of one tensor: one loop without a call per tensor
    (it runs for nearly every tensor traced)."""
    items = []
    try:
        for t in tensors:
            name = _plain(t) if t.is_cpu else None
            if name is None:
                return None
            nbytes = t.nbytes
            if nbytes > max_bytes:
                return None
            ptr = t.data_ptr()
            if not ptr and nbytes:  # a wrapper without storage of its own (DTensor)
                return None
            if t.is_contiguous():
                items.append((ptr, nbytes, name, t.shape))
            else:
                items.append((ptr, nbytes, name, t.shape, t.stride()))
    except (TypeError, RuntimeError):  # no bitexact dtype; a tensor without storage
        return None
    return items


# places (see _sort) of an op's first tensors when all take the fast path: built once, never
# changed (shared by every thread); an op with more tensors builds its own.
_IDENTITY = tuple(tuple((i, None) for i in range(n)) for n in range(33))


def _identity(n):
    """``places`` of ``n`` tensors that all take the fast path (see :func:`_sort`)."""
    return _IDENTITY[n] if n < len(_IDENTITY) else [(i, None) for i in range(n)]


def _sort(tensors, given, scratch, max_bytes, rows, snapshot, sketch_from):
    """:func:`describe`'s tensors sorted by how they are hashed: ``(out, sliced, fast, places,
    owners, slow, hosts, on_device)``. ``out``: the labels known now (general path, scratch);
    ``fast``/``places``/``owners``: the host fast path's items, their ``(position, row slice or
    None)`` and the tensors owning their bytes (copied when ``snapshot``, for a tensor that
    ``given`` still holds, i.e. was not staged); ``slow``/``hosts``: general-path host tensors
    and their views; ``sliced``: position -> [dtype or None, each row slice's digest];
    ``on_device``: positions (from ``sketch_from`` on) hashed on their device, to sketch there."""
    out = [None] * len(tensors)
    strided = rows == 1 and not snapshot  # row slices and copies need contiguous bytes
    sliced = {}  # position -> [dtype or None, digest of each row slice]
    fast, places, owners, slow, hosts, on_device = [], [], [], [], [], []
    for i, t in enumerate(tensors):
        hit = None
        if i not in scratch:
            try:
                hit = _fast(t, max_bytes, strided)
            except (TypeError, RuntimeError):  # no bitexact dtype; a tensor without storage
                hit = None
        if hit is not None:
            (ptr, nbytes, name, shape, *_), owner = hit
            if snapshot and tensors[i] is given[i]:
                owner = owner.clone()
                ptr = owner.data_ptr()
                hit = (ptr, nbytes, name, shape), owner
            owners.append(owner)
            n = _rows(shape, rows)
            if n == 1:
                fast.append(hit[0])
                places.append((i, None))
                continue
            step, sub = nbytes // n, (shape[0] // n,) + tuple(shape[1:])
            fast.extend((ptr + k * step, step, name, sub) for k in range(n))
            places.extend((i, k) for k in range(n))
            sliced[i] = [None, [None] * n]
        elif i in scratch:
            out[i] = _general(t, None, hosts)
        else:
            n = _rows(_shape(t), rows) if rows > 1 else 1
            digests = _general_rows(t, n, max_bytes, hosts, slow, i) if n > 1 else None
            if digests is not None:
                sliced[i] = [None, digests]
                continue
            mark = len(hosts)
            label = _general(t, max_bytes, hosts)
            if len(hosts) > mark:
                slow.append(((i, None), label))
                there = not isinstance(hosts[-1], _digest._Host)
                if there and sketch_from is not None and i >= sketch_from:
                    on_device.append(i)  # fingerprinted on its device: sketched there
            out[i] = label
    return out, sliced, fast, places, owners, slow, hosts, on_device


def describe(tensors, state, scratch=(), sketch_from=None, rec=None, snapshot=False):
    """``["f32[2,3]:<digest>", ...]`` for the tensors (``scratch``: positions recorded by dtype
    and shape only), hashed together by the native module.

    With ``sketch_from`` = k, returns ``(labels, sketches)``: the float64 sketch text of each
    tensor from position k on (``src/trace/sketch.rs``; ``""`` for a tensor without one: not a
    float, not on the host's fast path, labelled by row slices, or :data:`SKETCH` off).

    With ``state.rows`` = n > 1 (``$BITEXACT_TRACE_ROWS``: the larger-batch run of ``bitexact
    run --vary batch``), a hashable tensor whose first dimension d0 is a multiple of n is
    labelled ``f32[8,4]/n:<d1>,...,<dn>``: its whole shape, then the digests of its n
    contiguous row slices ``t[k*d0/n:(k+1)*d0/n]``, each hashed as the tensor it is (shape
    ``[d0/n, ...]``), so slice k compares with the whole result of the smaller-batch run's call
    that held those requests. A host tensor's slices are parts of its buffer, hashed (and
    cached) like any tensor in the op's one native call.

    With ``rec`` (the :class:`bitexact._trace.state.Record` being written) whose ``later`` is a
    list (the native writer's; not with row slices), a fast-path tensor's label is
    :data:`HOLE`: its ``(ptr, nbytes, dtype, shape)`` is appended to ``rec.later`` (for
    ``TraceWriter.write``) and the tensor that owns the bytes to ``rec.keep``; the sketches are
    then, for each tensor from ``sketch_from`` on, its index in ``rec.later``, or -1, or its
    text (a device tensor's, see :func:`bitexact._trace.device.device_sketches`; None without
    :data:`SKETCH`). Then staged device tensors (:func:`bitexact._trace.device.staged`) may
    still be on their way to the host: ``(events, nbytes)`` pairs in ``rec.waits`` say what to
    wait for before ``TraceWriter.write`` reads them. A device tensor fingerprinted and
    sketched where it lives leaves :data:`bitexact._trace.device.LATER` marks instead of its
    label and sketch, and its values in ``rec.fills``, which
    :func:`bitexact._trace.device.fill` puts in after the wait. When the record waits (or
    ``rec.held``: a CUDA graph is being captured, and it waits for the capture to end), its
    host tensors are copied first, since they may change before they are read; with
    ``snapshot``, whenever the writer hashes them later (tensors about to be written in place)."""
    later = rec.later if rec is not None else None
    held = rec is not None and rec.held  # a CUDA graph being captured: the record waits
    nat = _digest.native()
    rows = getattr(state, "rows", 1)
    waiting = rec if later is not None and rows == 1 else None  # the writer hashes, later
    n = len(tensors)
    fast = (_all_fast(tensors, state.max_bytes)  # (a record already waiting copies its own)
            if rows == 1 and not scratch and not held and not snapshot
            and not (waiting is not None and waiting.waits) else None)
    if fast is not None:  # the common case: all plain host tensors (none to stage, no sorting)
        out, sliced, places, owners, slow, hosts, on_device = (
            [None] * n, {}, _identity(n), tensors, (), (), ())
    else:
        deferred = waiting.waits if waiting is not None else None
        given, tensors = tensors, device.staged(tensors, scratch, state.max_bytes,
                                                      deferred)
        # The record waits (for staged copies on their way, for values computed on a device,
        # or while a CUDA graph is captured), and the host tensors it names may change before
        # then (an in-place op, `.data` swapped by `module.cuda()`): copied.
        snapshot = snapshot or bool(deferred) or held or (deferred is not None and any(
            device.fingerprinted_there(t) for t in tensors))
        out, sliced, fast, places, owners, slow, hosts, on_device = _sort(
            tensors, given, scratch, state.max_bytes, rows, snapshot,
            sketch_from if sketch_from is not None and SKETCH else None)
    sketches = None if sketch_from is None else [""] * (n - sketch_from)
    if waiting is not None:  # the TraceWriter hashes them: holes, and where
        base = len(later)
        later += fast
        rec.keep += owners
        if not SKETCH:
            sketches = None
        if len(places) == n:  # all of them, in order (_identity)
            out = [HOLE] * n
            if sketches is not None:
                sketches = list(range(base + sketch_from, base + n))
        else:
            sketches = None if sketches is None else [-1] * len(sketches)
            for j, (i, _) in enumerate(places):
                out[i] = HOLE
                if sketches is not None and i >= sketch_from:
                    sketches[i - sketch_from] = base + j
        fast = ()
    if on_device and rows == 1:
        there = [tensors[i] for i in on_device]
        made = (device.defer_sketches(waiting, there) if waiting is not None
                else device.device_sketches(there))
        for i, text in zip(on_device, made):
            sketches[i - sketch_from] = text
    if fast and sketches is not None and SKETCH and rows == 1:
        labels, made = nat.trace_digests(fast, CACHE, [i >= sketch_from for i, _ in places])
        for (i, _), text in zip(places, made):
            if i >= sketch_from:
                sketches[i - sketch_from] = text
    elif fast:
        labels = nat.trace_digests(fast, CACHE)
    if fast:
        for (i, k), label in zip(places, labels):
            if k is None:
                out[i] = label
            else:
                sliced[i][0] = label.partition("[")[0]
                sliced[i][1][k] = label.rpartition(":")[2]
    if hosts or sliced:
        _finish(out, sliced, slow, hosts, tensors, nat, waiting)
    return out if sketch_from is None else (out, sketches)


def _finish(out, sliced, slow, hosts, tensors, nat, waiting=None):
    """Fills in ``out`` (see :func:`_sort`): the general-path host tensors' labels, hashed in
    one native call, and each row-sliced tensor's ``dtype[shape]/n:<d1>,...,<dn>``; with
    ``waiting`` (a :class:`bitexact._trace.state.Record`), device tensors' fingerprints are
    left for the record to fill in (:func:`_fingerprints`)."""
    if hosts:
        for ((i, k), label), d in zip(slow, _fingerprints(hosts, nat, waiting)):
            if k is None:
                out[i] = "%s:%s" % (label, d)
            else:
                sliced[i][1][k] = d
    for i, (name, digests) in sliced.items():
        head = _head(tensors[i])
        if name is not None:  # the native module's name of the dtype
            head = name + head[head.index("["):]
        out[i] = "%s/%d:%s" % (head, len(digests), ",".join(digests))


def labels_now(state, tensors, carrier, hold=False):
    """The labels of ``tensors`` as their bytes are now, before an op or a module's forward
    that may change them: host tensors hashed on the calling thread (one native call for plain
    ones). Where the writer hashes later (``state.deferred``), what the record of the op then
    takes over is appended to ``carrier``'s (a :class:`bitexact._trace.state.Record`) ``later``,
    ``keep``, ``waits`` and ``fills``: plain host tensors are held by the writer
    (``TraceWriter.hold``: the digest it has, or is still making for the op that just wrote
    the tensor, or made now), once per tensor; a device tensor's values are made or copied on
    its stream without waiting (host tensors among them copied). ``hold``: plain host tensors
    held also where the program's thread hashes (:func:`bitexact._trace.hooks._held_labels`)."""
    if not tensors:
        return []
    items = _all_fast(tensors, state.max_bytes) if state.rows == 1 else None
    if items is None and state.deferred and device.capturing():  # (labelled :-)
        return describe(tensors, state)
    if not state.deferred and not (hold and items is not None):
        return _digest.native().trace_digests(items, CACHE) if items is not None \
            else describe(tensors, state)
    if carrier.later is None:
        carrier.later, carrier.keep, carrier.waits, carrier.fills = [], [], [], []
    if items is not None:  # plain host tensors (the common case)
        carrier.later += [state.writer.hold(items, CACHE)] * len(items)
        return [HOLE] * len(items)
    return describe(tensors, state, rec=carrier, snapshot=True)
