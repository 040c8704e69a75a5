"""The digests of an op trace's records: :func:`describe` labels an op's tensors as records show
them (``f32[2,3]:<first 32 hex digits of the canonical digest>``), with one native call per op.

Host tensors of bitexact's dtypes (the common case) take the fast path: their address, length,
dtype and shape go to ``_native.trace_digests``, which hashes them together and formats the
labels, with a cache of digests checked against the bytes (see ``src/python/trace.rs``): a
tensor that an earlier op made or read and that is unchanged since (most of an op's inputs)
costs an XXH3-128 of its bytes instead of a SHA-256. Whether a digest is reused depends on the
bytes only, never on PyTorch's version counter, tensor identity or the ops the tracer saw, so a
write that those miss (through ``.data``, a view, numpy sharing the memory, an extension's raw
pointer) is hashed again. :data:`CACHE` turns the cache off (the tests compare traces with and
without it).

Everything else takes the general path of :mod:`bitexact._digest` (device tensors: hashed on the
GPU; complex, conjugate and negative views, sparse tensors), and a tensor that cannot be hashed
(a meta tensor, one over ``BITEXACT_TRACE_MAX_BYTES``, an RNN workspace, an unknown dtype) is
labelled ``dtype[shape]:-``.
"""

from . import _digest

DIGEST_HEX = 32

# Whether _native.trace_digests may reuse a digest whose bytes are unchanged (see above).
CACHE = True


_strided = []  # [torch.strided], once torch is imported


def _fast(t, max_bytes):
    """``(ptr, nbytes, dtype name, shape)`` of a host tensor of a bitexact dtype, with the
    tensor that owns the bytes; None for the general path."""
    name, is_complex = _digest._torch_dtypes.get(t.dtype) or _digest._torch_dtype(t.dtype)
    if not _strided:
        _strided.append(_digest._torch_strided())
    if is_complex or not t.is_cpu or t.layout is not _strided[0] or t.is_conj() or t.is_neg():
        return None
    nbytes = t.nbytes
    if nbytes > max_bytes:
        return None
    if not t.is_contiguous():
        t = t.detach().contiguous()
    return (t.data_ptr(), nbytes, name, t.shape), t


def _general(t, max_bytes, hashed):
    """The label of one tensor through :mod:`bitexact._digest`: ``label:digest`` for a device
    tensor, ``label:-`` when it cannot be hashed (or ``max_bytes`` is None: scratch), else the
    label, with its host view appended to ``hashed`` (the caller hashes those together)."""
    kind = None
    try:
        if max_bytes is None or t.is_meta or t.numel() * t.element_size() > max_bytes:
            raise ValueError
        kind, v = _digest._prepare(t)
    except (TypeError, ValueError, RuntimeError):
        pass
    name = _digest._torch_dtypes.get(t.dtype, (str(t.dtype).replace("torch.", ""), False))[0]
    label = "%s[%s]" % (name, ",".join(str(d) for d in t.shape))
    if kind == "host":
        hashed.append(v)
        return label
    if kind == "device":
        return "%s:%s" % (label, v[:DIGEST_HEX])
    return label + ":-"


def describe(tensors, state, scratch=()):
    """``["f32[2,3]:<digest>", ...]`` for the tensors (``scratch``: positions recorded by dtype
    and shape only), hashed together by the native module."""
    nat = _digest.native()
    out = [None] * len(tensors)
    fast, owners, slow, hosts = [], [], [], []
    for i, t in enumerate(tensors):
        hit = None
        if i not in scratch:
            try:
                hit = _fast(t, state.max_bytes)
            except (TypeError, RuntimeError):  # no bitexact dtype; a tensor without storage
                hit = None
        if hit is not None:
            fast.append(hit[0])
            owners.append((i, hit[1]))
        elif i in scratch:
            out[i] = _general(t, None, hosts)
        else:
            n = len(hosts)
            label = _general(t, state.max_bytes, hosts)
            if len(hosts) > n:
                slow.append((i, label))
            out[i] = label
    if fast:
        for (i, _), label in zip(owners, nat.trace_digests(fast, CACHE)):
            out[i] = label
    if hosts:
        for (i, label), d in zip(slow, nat.digests_ptr([h.args() for h in hosts])):
            out[i] = "%s:%s" % (label, d[:DIGEST_HEX])
    return out
