"""Device tensors in op traces (:mod:`bitexact._trace.digest`): fingerprinted and sketched on
their device, or, when tiny, staged to the host.

A device tensor's label is its trace fingerprint (``docs/concepts/fingerprint.md``), computed
where it lives by :func:`bitexact._fingerprint.fingerprints` (torch int64 ops): all of
an op's device tensors' lane sums come to the host in one copy of 16 bytes each, and no tensor
is copied to the host whole. Its float64 sketch is made there too (:func:`device_sketch`).

CUDA tensors of at most :data:`STAGE_MAX` bytes (biases, norms' weights, scalars) are staged
instead (:func:`staged`): all of an op's are copied into one pinned host buffer on their
streams, with one wait, and then take the host's fast path (cache, background writer,
sketches from the same bytes as a CPU run's): for a few KiB, a copy costs less than the
kernel launches of a fingerprint and a sketch (on an H200 a traced nanoGPT step spent 0.6 ms
per record hashing and sketching each small device tensor by itself, docs/gpu-results.md).
Both give the same label for the same bytes.
"""

import sys

from .. import _digest, _protocol
from .._digest import plain_name as _plain

# The largest device tensor staged to the host to be fingerprinted there; larger ones are
# fingerprinted on their device, and only 16 bytes each come back.
STAGE_MAX = 64 << 10


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
    """The sketch text of a tensor that is not on the host (``src/trace/sketch.rs``'s format,
    ``""`` for a dtype that is not floating point), computed on its device with float64 torch
    ops: the norm and largest magnitude of the finite elements, the count of others, and the
    elements at the sketch's fixed positions, brought to the host in one copy. The same values
    as the host's sketch of the same bytes, but for the norm's last bits (another summation
    order): far below any noise threshold, and never looked at when the digests are equal."""
    import torch

    try:
        name = (_digest._torch_dtypes.get(t.dtype) or _digest._torch_dtype(t.dtype))[0]
    except (TypeError, ValueError):  # a dtype bitexact does not hash
        return ""
    if name not in _FLOATS:
        return ""
    x = t.detach().reshape(-1)
    n = x.numel()
    f = x.to(torch.float64)
    finite = torch.isfinite(f)
    zero = torch.zeros((), dtype=torch.float64, device=f.device)
    kept = torch.where(finite, f, zero)
    parts = [kept.square().sum().sqrt(), kept.abs().amax() if n else zero,
             (~finite).sum().to(torch.float64)]
    at = torch.tensor(_protocol.sketch_positions(n), dtype=torch.long, device=f.device)
    host = torch.cat([torch.stack(parts), f.index_select(0, at)]).cpu().tolist()
    return _digest.native().sketch_text(name, host[0], host[1], int(host[2]), host[3:])
