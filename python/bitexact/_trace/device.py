"""Device tensors in op traces (:mod:`bitexact._trace.digest`): fingerprinted and sketched on
their device, or, when tiny, staged to the host.

A device tensor's label is its trace fingerprint (``docs/concepts/fingerprint.md``), computed
where it lives by :func:`bitexact._fingerprint.fingerprints` (on CUDA, one launch of
bitexact's kernel for all of an op's tensors): their lane sums come to the host, 16 bytes
each, and no tensor is copied to the host whole. Its float64 sketch is made there too
(:func:`device_sketches`).

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
# here then): a record's staged copies wait with 63 others, its device work waits by itself.
# Tensors of MiBs (a wide model's weights, in lists of a hundred for the optimizer) cost more
# to copy over PCIe than to fingerprint where they are.
STAGE_MAX = 1 << 20


def fingerprinted_there(t):
    """Whether ``t``'s fingerprint is computed on its device
    (:func:`bitexact._fingerprint.fingerprints`) rather than by the native module on the host
    (tests make it take host tensors)."""
    return not t.is_cpu


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
    if cuda and torch.cuda.is_current_stream_capturing():
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


# bitexact's floating-point dtypes, the ones with a sketch (``_protocol.DTYPES``).
_FLOATS = frozenset(name for name, _, _, _, is_float in _protocol.DTYPES if is_float)


def device_sketch(t):
    """The sketch text of one tensor that is not on the host (:func:`device_sketches`)."""
    return device_sketches([t])[0]


def device_sketches(tensors):
    """The sketch texts of tensors that are not on the host (``src/trace/sketch.rs``'s format,
    ``""`` for a dtype that is not floating point), computed on their devices with float64
    torch ops: the norm and largest magnitude of the finite elements, the count of others, and
    the elements at the sketch's fixed positions, brought to the host in one copy per device
    for all of them. A tensor with non-finite elements (rare) then has its norm and magnitude
    made again over its finite ones, with a copy of its own. The same values as the host's
    sketch of the same bytes, but for the norm's last bits (another summation order): far
    below any noise threshold, and never looked at when the digests are equal."""
    import torch

    out, parts, names = [""] * len(tensors), {}, {}
    for i, t in enumerate(tensors):
        try:
            name = (_digest._torch_dtypes.get(t.dtype) or _digest._torch_dtype(t.dtype))[0]
        except (TypeError, ValueError):  # a dtype bitexact does not hash
            continue
        if name in _FLOATS:
            names[i] = name
            parts.setdefault(t.device, []).append((i, _sketch_values(t)))
    for group in parts.values():
        host = torch.cat([v for _, v in group]).cpu().tolist()
        at = 0
        for i, v in group:
            h = host[at:at + v.numel()]
            at += v.numel()
            if h[2]:  # non-finite elements: the norm and magnitude of the finite ones
                h[:2] = _finite_norms(tensors[i])
            out[i] = _digest.native().sketch_text(names[i], h[0], h[1], int(h[2]), h[3:])
    return out


def _sketch_values(t):
    """The float64 values of ``t``'s sketch, on its device: the norm and largest magnitude of
    all its elements (those of the finite ones when all are finite), the count of non-finite
    elements, then the elements at the sketch's positions. Two reductions and a count over
    the tensor."""
    import torch

    x = t.detach().reshape(-1)
    n = x.numel()
    if n == 0:
        return torch.zeros(3, dtype=torch.float64, device=x.device)
    if x.dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        x = x.to(torch.float64)  # float8: torch's reductions do not take it
    norms = [torch.linalg.vector_norm(x, ord, dtype=torch.float64) for ord in (2, float("inf"))]
    bad = x.numel() - torch.isfinite(x).sum()
    at = torch.tensor(_protocol.sketch_positions(n), dtype=torch.long, device=x.device)
    return torch.cat([torch.stack(norms + [bad.to(torch.float64)]),
                      x.index_select(0, at).to(torch.float64)])


def _finite_norms(t):
    """The norm and largest magnitude of ``t``'s finite elements, in float64, on the host."""
    import torch

    f = t.detach().reshape(-1).to(torch.float64)
    kept = torch.where(torch.isfinite(f), f, torch.zeros((), dtype=f.dtype, device=f.device))
    return torch.stack([kept.square().sum().sqrt(), kept.abs().amax()]).cpu().tolist()
