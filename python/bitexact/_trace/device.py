"""Device tensors in op traces (:mod:`bitexact._trace.digest`): fingerprinted and sketched on
their device, or, when tiny, staged to the host.

A device tensor's label is its trace fingerprint (``docs/concepts/fingerprint.md``), computed
where it lives by :func:`bitexact._fingerprint.start` (on CUDA, one launch of bitexact's
kernel for all of an op's tensors): their lane sums come to the host, 16 bytes each, and no
tensor is copied to the host whole. Its float64 sketch is made there too
(:func:`start_sketches`). With the background writer, the program's thread does not wait for
either: both are copied to pinned host memory on the device's stream, and the record waits
for them with other records' staged copies (:func:`defer_fingerprints`,
:func:`defer_sketches`, :func:`fill`); without it, they are read at once
(:func:`device_sketches`, :func:`bitexact._fingerprint.fingerprints`).

CUDA tensors of at most :data:`STAGE_MAX` bytes (biases, norms' weights, a small model's
activations) are staged instead (:func:`staged`): all of an op's are copied into one pinned
host buffer on their streams, with one wait, and then take the host's fast path (cache,
background writer, sketches from the same bytes as a CPU run's): for a small tensor, a copy
costs less than the kernel launches of a fingerprint and a sketch (on an H200 a traced nanoGPT
step spent 0.6 ms per record hashing and sketching each small device tensor by itself,
docs/gpu-results.md).
Both give the same label for the same bytes.
"""

import sys

from .. import _digest, _protocol
from .._digest import plain_name as _plain

# The largest device tensor staged to the host to be fingerprinted there; larger ones are
# fingerprinted on their device, and only 16 bytes each come back. On an H200
# (docs/gpu-results.md), a launch-bound nanoGPT step traced 11.5x untraced with its tensors
# (all under 1 MiB) staged against 15.6x fingerprinted and sketched on the device (64 KiB
# here then), when a record's device work was waited for by itself (it now waits with the
# staged copies: not yet measured on a GPU). Tensors of MiBs (a wide model's weights, in
# lists of a hundred for the optimizer) cost more to copy over PCIe than to fingerprint where
# they are.
STAGE_MAX = 1 << 20


def fingerprinted_there(t):
    """Whether ``t``'s fingerprint is computed on its device
    (:func:`bitexact._fingerprint.fingerprints`) rather than by the native module on the host
    (tests make it take host tensors)."""
    return not t.is_cpu


def capturing():
    """Whether the current CUDA stream is being captured into a CUDA graph: its ops run only
    when the graph is replayed, so their tensors have no values to fingerprint yet (and nothing
    may wait for the stream)."""
    torch = sys.modules.get("torch")
    return (torch is not None and torch.cuda.is_initialized()
            and torch.cuda.is_current_stream_capturing())


def on_device(t):
    """Whether :func:`staged` copies ``t`` to the host (tests make it take host tensors)."""
    return t.is_cuda


def any_on_device():
    """Whether any tensor can be on a CUDA device: CUDA is initialized in this process (so a
    CPU-only program's records skip :func:`staged`; tests make it say yes)."""
    torch = sys.modules.get("torch")
    return torch is not None and torch.cuda.is_initialized()


def staged(tensors, scratch, max_bytes, waits=None):
    """``tensors``, with each CUDA tensor of a fast-path dtype and at most :data:`STAGE_MAX`
    (and ``max_bytes``) bytes replaced by its host copy. The copies go into one pinned buffer
    (torch's caching host allocator) at 64-byte aligned offsets, each queued on its device's
    current stream after the work that made it; then :func:`_ready` waits for them, or with
    ``waits`` (a list) records an event per device there instead, for the caller to wait on
    before the bytes are read. Unchanged when none qualifies or a stream is being captured
    into a CUDA graph (no waiting there)."""
    if not any_on_device():
        return tensors
    picks, total = [], 0
    limit = min(max_bytes, STAGE_MAX)
    for i, t in enumerate(tensors):
        try:
            if i in scratch or not on_device(t) or _plain(t) is None or t.nbytes > limit:
                continue
        except (TypeError, ValueError, RuntimeError, AttributeError):
            continue  # not a tensor bitexact hashes: the general path says so
        picks.append((i, t, total))
        total += (t.nbytes + 63) & ~63
    if not picks:
        return tensors
    import torch

    cuda = torch.cuda.is_available()
    if cuda and capturing():
        return tensors
    host = torch.empty(total, dtype=torch.uint8, pin_memory=cuda)
    out, devices = list(tensors), set()
    for i, t, at in picks:
        dst = host[at:at + t.nbytes]
        if t.nbytes:
            flat = t.detach().contiguous().reshape(-1).view(torch.uint8)
            dst.copy_(flat, non_blocking=True)
        out[i] = dst.view(t.dtype).view(t.shape)
        devices.add(t.device)
    _ready(devices, waits, total)
    return out


# Ops whose result is a host value read from a device tensor (``.item()``, ``torch.equal``)
# without a host tensor among their results.
_HOST_READS = frozenset(("aten::_local_scalar_dense", "aten::equal"))


def reaches_host(op, ins, outs, args):
    """Whether the op ``op`` (its tensors ``ins`` and ``outs``, its other arguments ``args`` as
    :func:`bitexact._trace.record.arguments` writes them) brought device data to the host and
    waited for it: a device tensor among its inputs and a host tensor among its results
    (``.cpu()``, ``.to("cpu")``, a host tensor's ``copy_`` from a device one) unless the copy
    was ``non_blocking=True`` (the program has not waited, and must not wait here), or a value
    read off a device tensor (``.item()``)."""
    if not any(on_device(t) for t in ins):
        return False
    if op in _HOST_READS:
        return True
    return "non_blocking=True" not in (args or "") and any(not on_device(t) for t in outs)


def _ready(devices, waits, nbytes):
    """Waits for the copies :func:`staged` queued on each device's current stream, or (with
    ``waits``) appends ``(events, nbytes)``: an event per device, recorded after them, and the
    bytes staged."""
    import torch

    streams = [torch.cuda.current_stream(d) for d in devices if d.type == "cuda"]
    if waits is None:
        for stream in streams:
            stream.synchronize()
    elif streams:
        events = [torch.cuda.Event() for _ in streams]
        for event, stream in zip(events, streams):
            event.record(stream)
        waits.append((events, nbytes))


# A record's mark for what comes from its device later (:func:`defer_fingerprints`,
# :func:`defer_sketches`): in its line, where a fingerprint goes; in its sketch slots, followed
# by the sketch's number. JSON escapes the byte inside any string, so a raw one is only ever
# such a mark, and :func:`fill` replaces every one before the record is written.
LATER = "\2"


def defer_fingerprints(rec, tensors):
    """Starts the fingerprints of device ``tensors`` for the record ``rec``
    (:func:`bitexact._fingerprint.start`) and queues their copy to the host without waiting
    (:func:`_to_host`): :data:`LATER` for each, which :func:`fill` replaces."""
    from .. import _fingerprint

    parts, done = _fingerprint.start(tensors)
    rec.fills.append((_to_host(parts, rec.waits), done, True, len(tensors)))
    return [LATER] * len(tensors)


def defer_sketches(rec, tensors):
    """Starts the sketches of device ``tensors`` for the record ``rec`` (:func:`start_sketches`
    of the finite elements: the tensors are not read again) and queues their copy to the host
    without waiting: their places in the record's sketch slots, which :func:`fill` replaces."""
    parts, done = start_sketches(tensors, finite=True)
    base = sum(n for _, _, is_label, n in rec.fills if not is_label)
    rec.fills.append((_to_host(parts, rec.waits), done, False, len(tensors)))
    return ["%s%d" % (LATER, base + k) for k in range(len(tensors))]


def fill(line, slots, fills):
    """The record's ``line`` and sketch ``slots`` with each :data:`LATER` mark replaced by what
    ``fills`` (:func:`defer_fingerprints`, :func:`defer_sketches`: host tensors, their copies
    finished) made: fingerprints in the line's order, sketch texts by their number."""
    labels, texts = [], []
    for hosts, done, is_label, *_ in fills:
        (labels if is_label else texts).extend(done([h.tolist() for h in hosts]))
    pieces = line.split(LATER)
    if len(pieces) != len(labels) + 1:
        raise RuntimeError("bitexact: a trace record with %d marks for %d device fingerprints"
                           % (len(pieces) - 1, len(labels)))
    if labels:
        line = "".join(p + t for p, t in zip(pieces, labels)) + pieces[-1]
    if texts and slots:
        slots = [texts[int(s[1:])] if isinstance(s, str) and s[:1] == LATER else s
                 for s in slots]
    return line, slots


def _to_host(parts, waits):
    """Host copies of the device tensors ``parts``: from a CUDA device queued on its current
    stream after the work that makes it (into pinned memory, without waiting), with an event
    per device appended to ``waits`` (:func:`_ready`) for the record to wait on; from any other
    device, made at once (no event to wait on there)."""
    import torch

    hosts, devices, nbytes = [], set(), 0
    for p in parts:
        host = torch.empty(p.shape, dtype=p.dtype, pin_memory=p.is_cuda)
        host.copy_(p, non_blocking=p.is_cuda)
        hosts.append(host)
        devices.add(p.device)
        nbytes += host.nbytes
    _ready(devices, waits, nbytes)
    return hosts


# bitexact's floating-point dtypes, the ones with a sketch (``_protocol.DTYPES``).
_FLOATS = frozenset(name for name, _, _, _, is_float in _protocol.DTYPES if is_float)


def device_sketch(t):
    """The sketch text of one tensor that is not on the host (:func:`device_sketches`)."""
    return device_sketches([t])[0]


def device_sketches(tensors):
    """The sketch texts of tensors that are not on the host (``src/trace/sketch.rs``'s format,
    ``""`` for a dtype that is not floating point), computed on their devices with float64
    torch ops (:func:`start_sketches`): the norm and largest magnitude of the finite elements,
    the count of others, and the elements at the sketch's fixed positions, brought to the host
    in one copy per device for all of them. A tensor with non-finite elements (rare) then has
    its norm and magnitude made again over its finite ones, with a copy of its own. The same
    values as the host's sketch of the same bytes, but for the norm's last bits (another
    summation order): far below any noise threshold, and never looked at when the digests are
    equal."""
    parts, done = start_sketches(tensors)
    return done([p.cpu().tolist() for p in parts])


def start_sketches(tensors, finite=False):
    """Starts the sketches of ``tensors`` on their devices without waiting for them:
    ``(parts, done)``, float64 tensors on the devices (one per device) and ``done(values)``,
    which takes each part's values as a list (in order) and gives the sketch texts (see
    :func:`device_sketches`). With ``finite``, the norm and magnitude are those of the finite
    elements from the start (a pass more over a tensor), so that ``done`` never reads
    ``tensors`` again: they may have changed by the time the values arrive."""
    import torch

    names, places, groups = {}, {}, {}
    for i, t in enumerate(tensors):
        try:
            name = (_digest._torch_dtypes.get(t.dtype) or _digest._torch_dtype(t.dtype))[0]
        except (TypeError, ValueError):  # a dtype bitexact does not hash
            continue
        if name in _FLOATS:
            names[i] = name
            groups.setdefault(t.device, []).append((i, _sketch_values(t, finite)))
    parts = []
    for group in groups.values():
        at = 0
        for i, v in group:
            places[i] = (len(parts), at, at + v.numel())
            at += v.numel()
        parts.append(torch.cat([v for _, v in group]))

    count, again = len(tensors), None if finite else tensors

    def done(values):
        out = [""] * count
        for i, name in names.items():
            p, a, b = places[i]
            h = values[p][a:b]
            if h[2] and again is not None:  # non-finite elements: the finite ones' norms
                h[:2] = _finite_norms(again[i])
            out[i] = _digest.native().sketch_text(name, h[0], h[1], int(h[2]), h[3:])
        return out

    return parts, done


# Elements per slice of a large tensor's device sketch: bounds its temporaries (a mask, a copy
# with the non-finite elements zeroed, a float64 copy of a float8 tensor) to a few times this
# many bytes, where the whole tensor's would be as large as the tensor (logits of GBs).
SKETCH_SLICE = 1 << 24


def _sketch_values(t, finite=False):
    """The float64 values of ``t``'s sketch, on its device: the norm and largest magnitude of
    all its elements (those of the finite ones when all are finite, or with ``finite``), the
    count of non-finite elements, then the elements at the sketch's positions. Two reductions
    and a count over the tensor (and with ``finite``, a copy with the others zeroed), a slice
    of :data:`SKETCH_SLICE` elements at a time."""
    import torch

    x = t.detach().reshape(-1)
    n = x.numel()
    if n == 0:
        return torch.zeros(3, dtype=torch.float64, device=x.device)
    parts = [_reduce(x[a:a + SKETCH_SLICE], finite) for a in range(0, n, SKETCH_SLICE)]
    if len(parts) == 1:
        norm, largest, bad = parts[0]
    else:  # the norm of the slices' norms
        norm, largest, bad = (torch.stack(v) for v in zip(*parts))
        norm, largest, bad = torch.linalg.vector_norm(norm), largest.amax(), bad.sum()
    at = _positions(n, x.device)
    if x.dtype.itemsize == 1:  # float8: picked as bytes (index_select may not take it)
        samples = x.view(torch.uint8).index_select(0, at).view(x.dtype)
    else:
        samples = x.index_select(0, at)
    return torch.cat([torch.stack([norm, largest, bad.to(torch.float64)]),
                      samples.to(torch.float64)])


def _reduce(x, finite):
    """``(norm, largest magnitude, count of non-finite elements)`` of the 1-D tensor ``x`` as
    tensors on its device, the first two in float64 and over its finite elements with
    ``finite``."""
    import torch

    if x.dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        x = x.to(torch.float64)  # float8: torch's reductions do not take it
    ok = torch.isfinite(x)
    bad = x.numel() - ok.sum()
    kept = torch.where(ok, x, torch.zeros((), dtype=x.dtype, device=x.device)) if finite else x
    return (torch.linalg.vector_norm(kept, 2, dtype=torch.float64),
            torch.linalg.vector_norm(kept, float("inf"), dtype=torch.float64), bad)


# (element count, device) -> the sketch's positions as a long tensor there: made once, since a
# copy from the host's pageable memory waits for the device.
_at = {}


def _positions(n, dev):
    """The sketch's positions in a tensor of ``n`` elements, as a long tensor on ``dev``."""
    got = _at.get((n, dev))
    if got is None:
        import torch

        got = torch.tensor(_protocol.sketch_positions(n), dtype=torch.long, device=dev)
        if len(_at) < 1 << 12:  # full: not kept (a kept one may be read on another stream)
            _at[(n, dev)] = got
    return got


def _finite_norms(t):
    """The norm and largest magnitude of ``t``'s finite elements, in float64, on the host."""
    return _sketch_values(t, finite=True)[:2].cpu().tolist()
