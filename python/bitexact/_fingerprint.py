"""The 128-bit fingerprint of op-trace labels (``docs/concepts/fingerprint.md``), computed on a
tensor's own device with torch's int64 ops: :func:`fingerprint`. :func:`oracle` is the
definition in plain Python integers (slow; the tests check every other path against it).

::

    mix(x) = splitmix64's finalizer (mod 2^64, logical shifts)
    acc_L  = sum_i mix(w_i ^ ((i + 1) * M_L))  mod 2^64     w_i: the i-th little-endian u64 of
    fp_L   = mix(acc_L ^ ((nbytes + 1) * M_L))                the canonical bytes, zero-padded

The hex text is ``fp_0`` then ``fp_1``, 16 digits each. The native module computes the same
value on the host (``src/fingerprint.rs``). On a device, the lanes' sums are reduced there and
only their 16 bytes come to the host, where the last mix is made:

- CUDA tensors on device 0, where bitexact's CUDA backend is usable (``cuda_status()`` is
  None): by its kernel ``kernels/fingerprint.cu``, one launch for all of an op's tensors, on
  torch's current stream (:data:`KERNEL`).
- Any other device tensor: by torch's int64 ops (about thirty launches a tensor). The words
  are a view of the tensor's bytes (a padded copy only when their count is not a multiple of
  8, or the view is not contiguous). int64 multiplications and sums wrap modulo 2^64 on CPU
  and CUDA, and a logical shift is an arithmetic one with the sign bits masked off.
"""

import sys

M = (0x9E3779B97F4A7C15, 0xD1B54A32D192ED03)
_C1, _C2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
_MASK = (1 << 64) - 1

# Words per slice of a large tensor: bounds the temporaries (three int64 buffers this long,
# 32 MiB each).
SLICE_WORDS = 1 << 22

# Whether CUDA tensors on device 0 are fingerprinted by bitexact's kernel where it is usable
# (else by torch's int64 ops; the benchmark turns it off to compare the two).
KERNEL = True

# Why the kernel could not be used, once it failed (then torch's ops are used for the rest of
# the process, and the reason was printed once).
kernel_error = None


def mix(x):
    """splitmix64's finalizer of a u64 given as a Python int."""
    x ^= x >> 30
    x = (x * _C1) & _MASK
    x ^= x >> 27
    x = (x * _C2) & _MASK
    return x ^ (x >> 31)


def finish(acc, nbytes):
    """The hex fingerprint from the lanes' sums ``acc`` (u64 ints) of ``nbytes`` bytes."""
    return "".join("%016x" % mix(a ^ (((nbytes + 1) * m) & _MASK)) for a, m in zip(acc, M))


def oracle(data):
    """The fingerprint of ``data`` (bytes: a tensor's canonical bytes), by the definition."""
    data = bytes(data)
    padded = data + b"\0" * (-len(data) % 8)
    acc = [0, 0]
    for i in range(len(padded) // 8):
        w = int.from_bytes(padded[8 * i:8 * i + 8], "little")
        for lane in (0, 1):
            acc[lane] = (acc[lane] + mix(w ^ (((i + 1) * M[lane]) & _MASK))) & _MASK
    return finish(acc, len(data))


def _signed(x):
    """A u64 as the int64 with the same bits."""
    return x - (1 << 64) if x >= 1 << 63 else x


_SM, _SC1, _SC2 = tuple(_signed(m) for m in M), _signed(_C1), _signed(_C2)


def _flat(t):
    """``t``'s canonical bytes' tensor on its device: conjugate and negative bits resolved,
    complex numbers as pairs of reals, contiguous, one dimension."""
    import torch

    t = t.detach()
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    if t.is_complex():
        t = torch.view_as_real(t)
    return t.contiguous().view(-1)


def words(t):
    """``(int64 words, nbytes)`` of a tensor's canonical bytes, on its device: a view of its
    memory when it is contiguous and its byte count a multiple of 8, else a zero-padded copy."""
    import torch

    flat = _flat(t)
    nbytes = flat.numel() * flat.element_size()
    raw = flat.view(torch.uint8)
    if nbytes % 8 == 0 and raw.data_ptr() % 8 == 0:
        try:
            return raw.view(torch.int64), nbytes
        except RuntimeError:  # a storage offset that is not a whole word
            pass
    out = torch.zeros((nbytes + 7) // 8, dtype=torch.int64, device=t.device)
    out.view(torch.uint8)[:nbytes].copy_(raw)
    return out, nbytes


def _mix_(x, tmp):
    """splitmix64's finalizer of every element of the int64 tensor ``x``, in place."""
    import torch

    for shift, mul in ((30, _SC1), (27, _SC2), (31, None)):
        torch.bitwise_right_shift(x, shift, out=tmp)
        tmp.bitwise_and_((1 << (64 - shift)) - 1)  # logical: the sign's copies masked off
        x.bitwise_xor_(tmp)
        if mul is not None:
            x.mul_(mul)


def device_sums(w):
    """The two lanes' sums of the int64 words ``w`` (word 0 first), as one int64 tensor of 2
    elements on their device."""
    import torch

    dev = w.device
    acc = torch.zeros(2, dtype=torch.int64, device=dev)
    n = w.numel()
    step = min(n, SLICE_WORDS)
    if step == 0:
        return acc
    idx = torch.empty(step, dtype=torch.int64, device=dev)
    x = torch.empty(step, dtype=torch.int64, device=dev)
    tmp = torch.empty(step, dtype=torch.int64, device=dev)
    for at in range(0, n, step):
        k = min(step, n - at)
        i, xs, ts, ws = idx[:k], x[:k], tmp[:k], w[at:at + k]
        torch.arange(at + 1, at + k + 1, dtype=torch.int64, device=dev, out=i)
        for lane in (0, 1):
            torch.mul(i, _SM[lane], out=xs)
            xs.bitwise_xor_(ws)
            _mix_(xs, ts)
            acc[lane] += xs.sum()
    return acc


def start(tensors):
    """Starts the fingerprints of torch ``tensors`` (any device) on their devices, without
    waiting for them: returns ``(parts, done)``. ``parts`` are int64 tensors on the devices,
    the lanes' sums of the tensors (two each; one part for bitexact's kernel's, one per device
    for torch's ops'); ``done(values)``, given each part's values as a list of ints (in the
    order of ``parts``), gives the 32-hex-digit fingerprints of ``tensors`` in order. Copying
    the parts to the host is the caller's: at once (:func:`fingerprints`), or later, with
    other records' (:mod:`bitexact._trace.device`)."""
    import torch

    places = [None] * len(tensors)  # (part, pair in it, nbytes) of each tensor
    parts = []
    rest = range(len(tensors))
    launched = _by_kernel(tensors) if KERNEL else None
    if launched is not None:
        picks, sums, sizes = launched
        for j, (i, n) in enumerate(zip(picks, sizes)):
            places[i] = (0, j, n)
        parts.append(sums)
        picked = set(picks)
        rest = [i for i in rest if i not in picked]
    groups = {}
    for i in rest:
        w, nbytes = words(tensors[i])
        groups.setdefault(w.device, []).append((i, device_sums(w), nbytes))
    for group in groups.values():
        for j, (i, _, n) in enumerate(group):
            places[i] = (len(parts), j, n)
        parts.append(torch.cat([s for _, s, _ in group]))

    def done(values):
        return [finish([a & _MASK for a in values[p][2 * j:2 * j + 2]], n)
                for p, j, n in places]

    return parts, done


def fingerprints(tensors):
    """The 32-hex-digit fingerprints of torch ``tensors`` (any device), computed on their
    devices (:func:`start`): the lanes' sums of all of them that share a device come to the
    host in one copy (16 bytes a tensor), and the last mix of each is made here."""
    parts, done = start(tensors)
    return done([p.cpu().tolist() for p in parts])


def _by_kernel(tensors):
    """Launches bitexact's kernel over the CUDA tensors on device 0 among ``tensors``, all of
    them in one launch on torch's current stream, when the CUDA backend is usable: returns
    ``(picks, sums, sizes)``, their indices, their lanes' sums (an int64 tensor on the device,
    two a tensor, filled once the stream gets there) and their canonical byte counts; None
    when there are none or the kernel cannot be used (torch's ops then). Torch's current device
    is device 0 for the call and the caller's again after it (the native side makes device 0's
    context current)."""
    global kernel_error
    from . import _digest

    picks = [i for i, t in enumerate(tensors) if _digest.on_cuda_device_0(t)]
    if not picks or kernel_error is not None:
        return None
    import torch

    dev = tensors[picks[0]].device
    try:
        with torch.cuda.device(dev):
            got = _launch_kernel([tensors[i] for i in picks], dev)
    except (RuntimeError, ImportError, AttributeError) as e:
        # A native module without the kernel, or a failed launch: torch's ops from now on.
        kernel_error = str(e)
        print("bitexact: trace fingerprints of CUDA tensors use torch's int64 ops: %s" % e,
              file=sys.stderr)
        return None
    if got is None:  # no usable CUDA backend here (no NVRTC, say): torch's ops, quietly
        return None
    return (picks,) + got


def _launch_kernel(tensors, dev):
    """``(sums, sizes)`` of CUDA ``tensors`` on device ``dev`` (0) by bitexact's kernel: one
    launch on torch's current stream, not waited for; the list of addresses and the sums in
    torch's memory (the caching allocator keeps them for the stream's work). None when
    bitexact's CUDA backend is not usable here (``cuda_status()``)."""
    import torch

    from . import _digest

    nat = _digest.native()
    if nat.cuda_status() is not None:
        return None
    flats = [_flat(t) for t in tensors]
    sizes = [f.numel() * f.element_size() for f in flats]
    listed = [v for f, n in zip(flats, sizes) for v in (f.data_ptr(), n)]
    items = torch.tensor(listed, dtype=torch.int64).pin_memory().to(dev, non_blocking=True)
    sums = torch.zeros(len(listed), dtype=torch.int64, device=dev)
    stream = torch.cuda.current_stream(dev).cuda_stream
    nat.trace_fingerprint_sums_cuda(items.data_ptr(), len(flats), (max(sizes) + 7) // 8,
                                    sums.data_ptr(), stream)
    return sums, sizes


def fingerprint(t):
    """The 32-hex-digit fingerprint of a torch tensor, computed on its device (16 bytes come
    back to the host)."""
    return fingerprints([t])[0]


def canonical_bytes(t):
    """A tensor's canonical bytes, on the host (for :func:`oracle` in tests)."""
    w, nbytes = words(t)
    return w.cpu().numpy().tobytes()[:nbytes]
