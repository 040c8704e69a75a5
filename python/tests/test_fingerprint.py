"""The trace fingerprint (docs/concepts/fingerprint.md) on every path: the plain-integer oracle,
torch's int64 ops on the tensor's device (bitexact._fingerprint.fingerprint; here the CPU, the
same ops run on a GPU), bitexact's CUDA kernel (with a GPU) and the native module (src/fingerprint.rs), for every dtype bitexact
supports, odd byte counts, empty tensors and views that are not contiguous."""

import pytest

torch = pytest.importorskip("torch")
from bitexact import _digest  # noqa: E402
from bitexact import _fingerprint  # noqa: E402

pytestmark = pytest.mark.skipif(_digest._native is None, reason="needs bitexact._native")

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32,
          torch.int64, torch.uint8, torch.bool, torch.int8, torch.int16]
DTYPES += [getattr(torch, n) for n in ("uint16", "uint32", "uint64", "float8_e4m3fn",
                                       "float8_e5m2") if hasattr(torch, n)]


def values(n, dtype, seed=0):
    """``n`` values of ``dtype`` with every bit pattern likely (random bytes reinterpreted)."""
    g = torch.Generator().manual_seed(seed)
    size = torch.empty(0, dtype=dtype).element_size()
    raw = torch.randint(0, 256, (n * size,), dtype=torch.uint8, generator=g)
    if dtype == torch.bool:
        return raw % 2 == 1
    return raw.view(dtype)


def native(t):
    """The native module's fingerprint of a host tensor (its trace label's digits)."""
    c = t.contiguous()
    name = _digest._torch_dtype(c.dtype)[0]
    return _digest.native().trace_fingerprints([(c.data_ptr(), c.nbytes, name, list(c.shape))])[0]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [0, 1, 3, 7, 8, 9, 100, 1001])
def test_every_path_gives_the_oracles_value(dtype, n):
    t = values(n, dtype)
    want = _fingerprint.oracle(_fingerprint.canonical_bytes(t))
    assert want == _fingerprint.oracle(t.contiguous().view(torch.uint8).numpy().tobytes()
                                       if dtype != torch.bool else t.numpy().tobytes())
    assert _fingerprint.fingerprint(t) == want
    assert native(t) == want
    assert _digest.native().fingerprint_bytes(_fingerprint.canonical_bytes(t)) == want


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the same ops ran on CPU")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_a_cuda_tensor_has_its_host_copys_fingerprint(dtype):
    for n in (0, 5, 4099, (1 << 20) + 3):
        t = values(n, dtype, seed=n)
        want = native(t)
        assert _fingerprint.fingerprint(t.cuda()) == want
        assert _fingerprint.fingerprints([t.cuda(), t.cuda()[1:]]) == [want, native(t[1:])]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_the_fingerprint_kernel_gives_torch_ops_value_in_one_call(monkeypatch):
    status = _digest.native().cuda_status()
    if status is not None:
        pytest.skip("bitexact's CUDA backend is not usable here: %s" % status)
    host = [values(n, d, seed=n) for n, d in ((0, torch.float32), (5, torch.uint8),
                                              (4099, torch.bfloat16), ((1 << 21) + 3, torch.int8),
                                              (333, torch.float64))]
    tensors = [t.cuda() for t in host]
    tensors += [tensors[1][1:], tensors[2][::3], tensors[3][5:], host[4],
                torch._neg_view(tensors[4])]
    want = [native(t.cpu().resolve_neg()) for t in tensors]
    calls = []
    real = _digest.native().trace_fingerprint_sums_cuda
    monkeypatch.setattr(_digest.native(), "trace_fingerprint_sums_cuda",
                        lambda items, count, *rest: calls.append(count) or real(items, count, *rest))
    assert _fingerprint.fingerprints(tensors) == want
    assert calls == [9] and _fingerprint.kernel_error is None  # all CUDA tensors in one call
    monkeypatch.setattr(_fingerprint, "KERNEL", False)
    assert _fingerprint.fingerprints(tensors) == want
    assert calls == [9]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.uint8, torch.float64],
                         ids=str)
def test_views_that_are_not_contiguous_are_fingerprinted_as_their_copies(dtype):
    base = values(7 * 9, dtype, seed=1).reshape(7, 9)
    views = [base.t(), base[:, 1::2], base[1:], base[::3, 2:5], base.reshape(-1)[1:]]
    for v in views:
        want = _fingerprint.oracle(v.contiguous().view(torch.uint8).numpy().tobytes())
        assert _fingerprint.fingerprint(v) == want
        # The native module, handed the view as it lies (its strides), gathers its elements.
        name = _digest._torch_dtype(v.dtype)[0]
        item = (v.data_ptr(), v.nbytes, name, list(v.shape), list(v.stride()))
        assert _digest.native().trace_fingerprints([item])[0] == want


def test_order_padding_and_a_single_change_all_count():
    t = torch.arange(64, dtype=torch.float32)
    fp = _fingerprint.fingerprint
    assert fp(t) != fp(t.flip(0))
    assert fp(t) != fp(t.reshape(8, 8).t())
    u = t.clone()
    u[17] = -0.0 if t[17] == 0 else -t[17]
    a, b = fp(t), fp(u)
    assert a[:16] != b[:16] and a[16:] != b[16:]  # each lane changes
    assert _fingerprint.oracle(b"ab") != _fingerprint.oracle(b"ab\0")
    assert fp(torch.zeros(0)) != fp(torch.zeros(2))


def test_slices_of_a_large_tensor_sum_to_the_whole(monkeypatch):
    t = values(5000, torch.float32, seed=2)
    whole = _fingerprint.fingerprint(t)
    monkeypatch.setattr(_fingerprint, "SLICE_WORDS", 77)  # many slices, a ragged last one
    assert _fingerprint.fingerprint(t) == whole == native(t)
