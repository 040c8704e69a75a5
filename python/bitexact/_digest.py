"""Canonical digests from Python: :func:`digest` and :func:`digests`.

The digest is bitexact's canonical tensor digest (SHA-256 over a header of format version,
dtype tag, rank and dimensions, then the row-major little-endian bytes; tensors over 1 MiB as
1 MiB chunks hashed in parallel and the chunk digests hashed), computed by the Rust crate in
the native module ``bitexact._native``: the same code ``bitexact run`` hashes files with, so a
tensor hashed here and the same values written by :func:`bitexact.dump` (or ``np.save``,
``safetensors``) and hashed by ``bitexact run`` give one digest. There is no second
implementation in Python: without the native module these functions raise ``ImportError``.

What is hashed, and how it crosses over:

* numpy arrays, torch tensors and anything with ``__array_interface__`` or ``__dlpack__``:
  the address and length of their memory (``__array_interface__``, ``data_ptr()``), no copy;
  the GIL is released while hashing. A non-contiguous array or tensor is made contiguous
  (C order) first, a big-endian numpy array little-endian; both copy.
* dtypes: bool, int8..int64, uint8..uint64, float16/32/64, bfloat16, float8_e4m3fn and
  float8_e5m2 (torch, or ml_dtypes' numpy types). Complex arrays are hashed as their real view
  (a trailing dimension of 2, real then imaginary), as ``bitexact run`` reads complex ``.npy``.
* CUDA tensors of at least :data:`DEVICE_DIGEST_MIN` bytes on device 0, when the CUDA backend
  is usable (``cuda_status()`` is ``None``): the chunks are hashed on the GPU by bitexact's
  SHA-256 kernel in the primary context torch uses, on torch's current stream (so after the
  work queued there); only the chunk digests come back. Any other device tensor is copied to
  the host first.
* ``bytes``-like data with ``dtype=`` (a name such as ``"f32"``, ``"bf16"``, ``"F8_E4M3"``, or a
  numpy/torch dtype) and ``shape=`` (default: one dimension).
* Python numbers and nested lists: as :func:`bitexact.dump` stores them (bool, int64 or
  float64).
"""

import gc
import sys

from . import _protocol, _safetensors

try:
    from . import _native
except ImportError as _e:  # a source checkout on PYTHONPATH, or a pure-Python copy
    _native = None
    _native_error = str(_e)
else:
    _native_error = None

# safetensors dtype name (what dump() writes) -> bitexact dtype name (``_protocol.DTYPES``).
_ST_TO_NAME = {st: name for name, st, _, _, _ in _protocol.DTYPES}
_NAMES = set(_ST_TO_NAME.values())
_NAME_SIZE = {name: _safetensors.ITEMSIZE[st] for st, name in _ST_TO_NAME.items()}
_TORCH_COMPLEX = {"complex64": "f32", "complex128": "f64"}
_NUMPY_COMPLEX = {8: "f32", 16: "f64"}


def native():
    """The native module ``bitexact._native``; ``ImportError`` saying how to get it if absent."""
    if _native is None:
        raise ImportError(
            "bitexact.digest needs bitexact's native module (bitexact._native), which this "
            "copy of the package lacks (%s). It comes with the installed package: "
            "`pip install bitexact-harness`, or `pip install ./python` from a bitexact checkout "
            "(builds with a Rust toolchain). dump() and step() work without it." % _native_error
        )
    return _native


def cuda_status():
    """``None`` when CUDA tensors are hashed on the device, else the reason they are not."""
    return native().cuda_status()


def _dtype_name(dtype):
    """bitexact's name for ``dtype``: a bitexact or safetensors name, or a numpy/torch dtype."""
    s = str(dtype).replace("torch.", "")
    if s in _NAMES:
        return s
    if s.upper() in _ST_TO_NAME:
        return _ST_TO_NAME[s.upper()]
    if s in _safetensors._TORCH:
        return _ST_TO_NAME[_safetensors._TORCH[s][0]]
    if s in _safetensors._NUMPY_NAMES:
        return _ST_TO_NAME[_safetensors._NUMPY_NAMES[s]]
    np = sys.modules.get("numpy")
    if np is not None:
        try:
            dt = np.dtype(dtype)
        except TypeError:
            dt = None
        if dt is not None and (dt.kind, dt.itemsize) in _safetensors._NUMPY_KINDS:
            return _ST_TO_NAME[_safetensors._NUMPY_KINDS[(dt.kind, dt.itemsize)]]
    raise TypeError("bitexact.digest: unknown dtype %r (one of: %s)" % (dtype, ", ".join(sorted(_NAMES))))


class _Host:
    """A host tensor ready to hash: its address, length, dtype name and shape, plus the object
    that owns the memory (kept alive until the digest is computed)."""

    __slots__ = ("ptr", "nbytes", "dtype", "shape", "owner")

    def __init__(self, ptr, nbytes, dtype, shape, owner):
        self.ptr, self.nbytes, self.dtype, self.shape, self.owner = ptr, nbytes, dtype, shape, owner

    def args(self):
        return (self.ptr, self.nbytes, self.dtype, self.shape)


def _from_numpy(a):
    dt = a.dtype
    if dt.byteorder == ">" or (dt.byteorder == "=" and sys.byteorder == "big"):
        a = a.astype(dt.newbyteorder("<"))
    if not a.flags.c_contiguous:
        a = a.copy(order="C")  # np.ascontiguousarray would make a 0-d array 1-d
    if dt.kind == "c" and dt.itemsize in _NUMPY_COMPLEX:
        # The real view: (real, imaginary) in a trailing dimension, as `bitexact run` reads
        # complex .npy files (torch.view_as_real).
        name = _NUMPY_COMPLEX[dt.itemsize]
        a = a.reshape(-1).view("<f%d" % (dt.itemsize // 2)).reshape(a.shape + (2,))
    else:
        st = _safetensors._NUMPY_NAMES.get(dt.name) or _safetensors._NUMPY_KINDS.get(
            (dt.kind, dt.itemsize))
        if st is None:
            raise TypeError("bitexact.digest: numpy dtype %s has no bitexact dtype" % dt)
        name = _ST_TO_NAME[st]
    ptr = a.__array_interface__["data"][0]
    return _Host(ptr, a.nbytes, name, list(a.shape), a)


# torch dtype -> (bitexact name, complex?), filled on first use of each dtype.
_torch_dtypes = {}


def _torch_dtype(dtype):
    hit = _torch_dtypes.get(dtype)
    if hit is None:
        s = str(dtype).replace("torch.", "")
        if s in _TORCH_COMPLEX:
            hit = (_TORCH_COMPLEX[s], True)
        elif s in _safetensors._TORCH:
            hit = (_ST_TO_NAME[_safetensors._TORCH[s][0]], False)
        else:
            raise TypeError("bitexact.digest: torch dtype %s has no bitexact dtype" % dtype)
        _torch_dtypes[dtype] = hit
    return hit


def _from_torch(t):
    """``(host view, None)`` of a tensor in host memory, or ``(None, (tensor, dtype name))``
    for one on a device. Fast path first: op traces hash many small tensors."""
    name, is_complex = _torch_dtype(t.dtype)
    if t.requires_grad:
        t = t.detach()
    if t.is_conj():  # lazy conjugate / negative views (torch >= 1.10 / 1.11)
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    if t.layout != _torch_strided():
        t = t.to_dense()
    if is_complex:
        import torch

        t = torch.view_as_real(t.contiguous())
    if not t.is_cpu:
        return None, (t, name)
    if not t.is_contiguous():
        t = t.contiguous()
    if sys.byteorder == "big":
        raise TypeError("bitexact.digest: big-endian hosts are not supported for torch tensors")
    return _Host(t.data_ptr(), t.numel() * t.element_size(), name, list(t.shape), t), None


def _torch_strided():
    return sys.modules["torch"].strided


_strided = []  # [torch.strided], once torch is imported


def plain_name(t):
    """The bitexact dtype name of a dense tensor that is neither complex nor a lazy conjugate
    or negative view (the bytes in memory are its values), else None: what the op tracer
    hashes by address (:mod:`bitexact._trace.digest`, :mod:`bitexact._trace.device`). Raises
    TypeError for a dtype bitexact does not hash."""
    name, is_complex = _torch_dtypes.get(t.dtype) or _torch_dtype(t.dtype)
    if not _strided:
        _strided.append(_torch_strided())
    # No is_conj(): only a complex tensor can carry the conjugate bit (torch asserts it), and
    # a real one can carry the negative bit (``z.conj().imag``).
    if is_complex or t.layout is not _strided[0] or t.is_neg():
        return None
    return name


# The smallest CUDA tensor hashed on the device. The kernel hashes each 1 MiB chunk with one
# GPU thread, about 45 ms a chunk whatever their number (an H200, docs/gpu-results.md: 16 MB in
# 46.8 ms, 256 MB in 67 ms, 1 GiB at 15.9 GB/s), while a host copy and the host's hashing
# take about 1 ms per 1.4 MB: below this size the copy wins (100 tensors of 4 MB took 4.2 s
# on the device).
DEVICE_DIGEST_MIN = 64 << 20


def on_cuda_device_0(t):
    """Whether torch tensor ``t`` is on CUDA device 0, the device bitexact's CUDA backend
    (its SHA-256 and fingerprint kernels) works on, in the primary context torch uses."""
    return t.is_cuda and (t.device.index or 0) == 0


def _cuda_digest(t, name):
    """Digest of a device tensor: on the GPU when bitexact's CUDA backend is usable, the tensor
    is on device 0 and has at least :data:`DEVICE_DIGEST_MIN` bytes, else through a host
    copy."""
    import torch

    t = t.contiguous()
    nat = native()
    if on_cuda_device_0(t) and t.nbytes >= DEVICE_DIGEST_MIN:
        # Torch's current device is the caller's again afterwards: the native side makes
        # device 0's context current.
        with torch.cuda.device(t.device):
            if nat.cuda_status() is None:
                # Hashed on torch's current stream, after the work torch queued there.
                stream = torch.cuda.current_stream(t.device).cuda_stream
                return nat.digest_cuda_ptr(t.data_ptr(), t.numel() * t.element_size(), name,
                                           list(t.shape), stream)
    host, _ = _from_torch(t.cpu())
    return nat.digest_ptr(*host.args())


def _bytes_host(data, dtype, shape):
    name = _dtype_name(dtype)
    view = memoryview(data).cast("B")
    size = _NAME_SIZE[name]
    if shape is None:
        if view.nbytes % size:
            raise ValueError("bitexact.digest: %d bytes are not a whole number of %s elements"
                             % (view.nbytes, name))
        shape = [view.nbytes // size]
    shape = [int(d) for d in shape]
    return name, shape, view


def _prepare(x, dtype=None, shape=None):
    """``("host", _Host)``, ``("bytes", (data, dtype, shape))`` or ``("device", digest)``."""
    if isinstance(x, (bytes, bytearray, memoryview)):
        if dtype is None:
            raise TypeError("bitexact.digest: bytes need dtype= (and shape=, default 1-d)")
        name, shape, view = _bytes_host(x, dtype, shape)
        return "bytes", (bytes(view) if not isinstance(x, bytes) else x, name, shape)
    if dtype is not None or shape is not None:
        raise TypeError("bitexact.digest: dtype= and shape= apply to bytes only")
    if _safetensors._is_torch_tensor(x):
        host, device = _from_torch(x)
        if device is not None:
            return "device", _cuda_digest(*device)
        return "host", host
    np = sys.modules.get("numpy")
    if np is not None and isinstance(x, np.ndarray):
        return "host", _from_numpy(x)
    if isinstance(x, (bool, int, float, list, tuple)):
        st, shape, data = _safetensors._encode_python(x)
        return "bytes", (data, _ST_TO_NAME[st], shape)
    if hasattr(x, "__array_interface__") or hasattr(x, "__dlpack__"):
        import numpy as np

        a = np.asarray(x) if hasattr(x, "__array_interface__") else np.from_dlpack(x)
        return "host", _from_numpy(a)
    raise TypeError("bitexact.digest: cannot hash %s (a numpy array, torch tensor, bytes with "
                    "dtype=, or Python numbers)" % type(x).__name__)


def digest(x, *, dtype=None, shape=None):
    """The canonical hex digest of ``x``: a numpy array, a torch tensor (CPU or CUDA), Python
    numbers or nested lists, or bytes with ``dtype=`` and ``shape=``. Equal to the digest
    ``bitexact run`` reports for the same values in a file, and to the Rust ``Tensor`` digest."""
    nat = native()
    kind, v = _prepare(x, dtype, shape)
    if kind == "host":
        return nat.digest_ptr(*v.args())
    if kind == "bytes":
        return nat.digest_bytes(*v)
    return v


def digests(**tensors):
    """``{name: digest(value)}`` for every keyword argument; host tensors are hashed together
    in parallel with one release of the GIL."""
    nat = native()
    out, hosts = {}, []
    # Preparing many tensors makes many short-lived objects while all of them stay referenced:
    # the cyclic GC would rescan the growing list over and over (2x the time at 100 000).
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        prepared = [(name, _prepare(value)) for name, value in tensors.items()]
    finally:
        if was_enabled:
            gc.enable()
    for name, (kind, v) in prepared:
        if kind == "host":
            hosts.append((name, v))
        elif kind == "bytes":
            out[name] = nat.digest_bytes(*v)
        else:
            out[name] = v
    for (name, _), d in zip(hosts, nat.digests_ptr([h.args() for _, h in hosts])):
        out[name] = d
    return {name: out[name] for name in tensors}
