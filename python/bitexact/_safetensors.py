"""A dependency-free safetensors writer (and a small reader used by the tests).

Format (https://github.com/huggingface/safetensors):

* 8 bytes: ``N``, the header length, unsigned little-endian 64-bit;
* ``N`` bytes: a UTF-8 JSON object ``{name: {"dtype", "shape", "data_offsets": [begin, end]}}``
  (plus an optional ``"__metadata__"`` object of string to string), padded at the end with
  spaces so that ``8 + N`` is a multiple of 8;
* the data: every tensor's raw little-endian row-major bytes, ``data_offsets`` counted from
  the start of the data section.

This module converts numpy arrays, torch tensors, Python scalars and (nested) lists into
``(dtype, shape, bytes)`` triples without any float conversion: bf16 and f16 keep their bits.
"""

import ctypes
import json
import struct
import sys

from . import _protocol

__all__ = ["encode", "serialize", "parse"]

# Element sizes of the safetensors dtype names this module writes: bitexact's dtypes
# (``_protocol.DTYPES``, from ``src/protocol.rs``).
ITEMSIZE = {st: size for _, st, size, _, _ in _protocol.DTYPES}

# numpy (kind, itemsize) -> safetensors dtype.
_NUMPY_KINDS = {
    ("b", 1): "BOOL",
    ("u", 1): "U8", ("u", 2): "U16", ("u", 4): "U32", ("u", 8): "U64",
    ("i", 1): "I8", ("i", 2): "I16", ("i", 4): "I32", ("i", 8): "I64",
    ("f", 2): "F16", ("f", 4): "F32", ("f", 8): "F64",
}
# Extension dtypes (ml_dtypes, as used by JAX) recognised by name.
_NUMPY_NAMES = {"bfloat16": "BF16", "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2"}

# torch dtype name (str(dtype) without "torch.") -> (safetensors dtype, same-size int view).
_INT_VIEW = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}
_TORCH = {torch: (st, _INT_VIEW[size]) for _, st, size, torch, _ in _protocol.DTYPES}


def _byteswap(data, itemsize):
    """Reverses the byte order of every ``itemsize``-byte element of ``data``."""
    if itemsize == 1:
        return bytes(data)
    src = bytes(data)
    out = bytearray(len(src))
    for j in range(itemsize):
        out[j::itemsize] = src[itemsize - 1 - j::itemsize]
    return bytes(out)


def _is_torch_tensor(x):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _encode_torch(t):
    """(dtype, shape, bytes) of a torch tensor, on CPU, contiguous, bits unchanged."""
    name = str(t.dtype).replace("torch.", "")
    if name not in _TORCH:
        raise TypeError("bitexact.dump: torch dtype %s has no safetensors equivalent" % t.dtype)
    st_dtype, _ = _TORCH[name]
    t = t.detach()
    if getattr(t, "is_conj", None) and t.is_conj():  # torch >= 1.10
        t = t.resolve_conj()
    if getattr(t, "is_neg", None) and t.is_neg():  # torch >= 1.11: lazy negation views
        t = t.resolve_neg()
    if getattr(t, "is_sparse", False):
        t = t.to_dense()
    t = t.cpu().contiguous()
    shape = list(t.shape)
    nbytes = t.numel() * ITEMSIZE[st_dtype]
    # Copy the raw storage bytes: no dtype conversion, so bf16/f16/f8 keep their exact bits and
    # numpy is not needed.
    data = ctypes.string_at(t.data_ptr(), nbytes) if nbytes else b""
    if sys.byteorder == "big":
        data = _byteswap(data, ITEMSIZE[st_dtype])
    return st_dtype, shape, data


def _encode_numpy(a):
    """(dtype, shape, bytes) of a numpy array: little-endian, C order."""
    import numpy as np

    dt = a.dtype
    st_dtype = _NUMPY_NAMES.get(dt.name) or _NUMPY_KINDS.get((dt.kind, dt.itemsize))
    if st_dtype is None:
        raise TypeError(
            "bitexact.dump: numpy dtype %s has no safetensors equivalent "
            "(supported: bool, int8..int64, uint8..uint64, float16/32/64, bfloat16)" % dt
        )
    if dt.byteorder == ">" or (dt.byteorder == "=" and sys.byteorder == "big"):
        a = a.astype(dt.newbyteorder("<"))
    # tobytes(order="C") copies any strided view in row-major order (np.ascontiguousarray
    # would turn a 0-d array into shape [1]).
    return st_dtype, list(a.shape), a.tobytes(order="C")


def _encode_python(x):
    """(dtype, shape, bytes) of a Python bool/int/float or a nested list/tuple of them,
    without numpy: all bools -> BOOL, all ints (bools count as ints) -> I64, otherwise (floats,
    a mix of ints and floats, or an empty list) -> F64."""
    shape = []
    probe = x
    while isinstance(probe, (list, tuple)):
        shape.append(len(probe))
        if not probe:
            break
        probe = probe[0]
    flat = []

    def walk(v, depth):
        if depth == len(shape):
            if isinstance(v, (list, tuple)):
                raise ValueError("bitexact.dump: ragged nested list")
            flat.append(v)
            return
        if not isinstance(v, (list, tuple)) or len(v) != shape[depth]:
            raise ValueError("bitexact.dump: ragged nested list")
        for item in v:
            walk(item, depth + 1)

    walk(x, 0)
    for v in flat:
        if not isinstance(v, (bool, int, float)):
            raise TypeError("bitexact.dump: cannot store %r (%s)" % (v, type(v).__name__))
    if flat and all(isinstance(v, bool) for v in flat):
        return "BOOL", shape, bytes(int(v) for v in flat)
    if flat and all(isinstance(v, int) for v in flat):
        return "I64", shape, struct.pack("<%dq" % len(flat), *flat)
    return "F64", shape, struct.pack("<%dd" % len(flat), *(float(v) for v in flat))


def encode(value):
    """Converts one value to ``(safetensors dtype, shape list, little-endian bytes)``.

    Accepts torch tensors (any device; bits preserved), numpy arrays and numpy scalars, objects
    with ``__array__`` (JAX, CuPy via ``.get()`` first, ...), Python scalars and nested lists.
    """
    if _is_torch_tensor(value):
        return _encode_torch(value)
    np = sys.modules.get("numpy")
    if np is None:
        try:
            import numpy as np  # noqa: F811
        except ImportError:
            np = None
    if np is not None:
        if isinstance(value, (np.ndarray, np.generic)) or hasattr(value, "__array__"):
            return _encode_numpy(np.asarray(value))
        if isinstance(value, (bool, int, float, list, tuple)):
            # Python's own types decide, as without numpy, so the bytes are the same either
            # way (and match numpy's choice on Linux): bools -> BOOL, ints -> I64, else F64.
            try:
                return _encode_python(value)
            except (TypeError, struct.error):
                pass  # numpy scalars inside a list, ints past 64 bits: numpy decides
        return _encode_numpy(np.asarray(value))
    return _encode_python(value)


def serialize(tensors, metadata=None):
    """The bytes of a safetensors file holding ``tensors`` (a mapping name -> value).

    Tensors are stored in sorted name order; ``metadata`` (str -> str) goes to ``__metadata__``.
    """
    header = {}
    chunks = []
    offset = 0
    for name in sorted(tensors):
        if not isinstance(name, str) or not name:
            raise ValueError("bitexact.dump: tensor names must be non-empty strings")
        if name == "__metadata__":
            raise ValueError("bitexact.dump: '__metadata__' is reserved")
        dtype, shape, data = encode(tensors[name])
        n = 1
        for d in shape:
            n *= d
        assert len(data) == n * ITEMSIZE[dtype], (name, dtype, shape, len(data))
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    if metadata:
        header = dict([("__metadata__", {str(k): str(v) for k, v in metadata.items()})] + list(header.items()))
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=True).encode("utf-8")
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)


def parse(blob):
    """Parses safetensors bytes into ``(header dict, {name: (dtype, shape, raw bytes)})``.

    A strict reader for tests and tools: checks the header length, that offsets are contiguous,
    in bounds, and match dtype and shape.
    """
    if len(blob) < 8:
        raise ValueError("safetensors: shorter than 8 bytes")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        raise ValueError("safetensors: header length %d past the end" % n)
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    out = {}
    spans = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        count = 1
        for d in info["shape"]:
            count *= d
        if end - begin != count * ITEMSIZE[info["dtype"]] or not 0 <= begin <= end <= len(data):
            raise ValueError("safetensors: bad data_offsets for %r" % name)
        spans.append((begin, end))
        out[name] = (info["dtype"], list(info["shape"]), bytes(data[begin:end]))
    spans.sort()
    pos = 0
    for begin, end in spans:
        if begin != pos:
            raise ValueError("safetensors: data section has a gap or overlap")
        pos = end
    if pos != len(data):
        raise ValueError("safetensors: trailing bytes after the last tensor")
    return header, out
