"""Row-sliced trace labels ($BITEXACT_TRACE_ROWS, the larger-batch run of ``bitexact run --vary
batch``): a row-wise op's slice digests equal the batch-1 run's per-request digests, a
batch-variant matmul's do not, and the labels are made alike on every path of
:func:`bitexact._trace.digest.describe`."""

import types

import pytest

torch = pytest.importorskip("torch")
from bitexact import _digest  # noqa: E402

pytestmark = pytest.mark.skipif(_digest._native is None, reason="needs bitexact._native")

import bitexact  # noqa: E402
from bitexact import _trace  # noqa: E402
from bitexact._trace import digest as _trace_digest  # noqa: E402
from bitexact._fingerprint import fingerprint  # noqa: E402
from conftest import records  # noqa: E402

OPS = ("aten::native_layer_norm", "aten::mul.Tensor", "aten::mm")


def serve(batches, w):
    """A tiny model over each batch: layer norm, a scale, a (batch-variant) matmul."""
    for x in batches:
        y = torch.nn.functional.layer_norm(x, (x.shape[1],))
        torch.mm(y * 2, w)


def traced(path, batches, w):
    _trace.start(path)
    try:
        serve(batches, w)
    finally:
        _trace.stop()
    return {op: [r for r in records(path) if r["op"] == op] for op in OPS}


def digest_of(label):
    return label.rpartition(":")[2]


@pytest.fixture
def runs(tmp_path, monkeypatch):
    """The traces of 8 requests at batch 1 (rows unset) and at batch 8 (rows 8)."""
    torch.manual_seed(0)
    x, w = torch.randn(8, 512), torch.randn(512, 512)
    small = traced(str(tmp_path / "a.jsonl"), [x[r:r + 1] for r in range(8)], w)
    monkeypatch.setenv("BITEXACT_TRACE_ROWS", "8")
    large = traced(str(tmp_path / "b.jsonl"), [x], w)
    return small, large, x, w


def test_batch_1_records_whole_results(runs):
    small, _, x, _ = runs
    assert [len(small[op]) for op in OPS] == [8, 8, 8]
    ln = small["aten::native_layer_norm"]
    assert ln[3]["in"][0] == "f32[1,512]:" + fingerprint(x[3:4])
    assert all("/" not in label for rs in small.values() for r in rs for label in r["in"] + r["out"])


def test_a_row_wise_op_slices_match_the_batch_1_requests(runs):
    small, large, x, _ = runs
    for op in ("aten::native_layer_norm", "aten::mul.Tensor"):
        (rec,) = large[op]
        for pos, label in enumerate(rec["out"]):
            head, _, tail = label.partition(":")
            assert head.startswith("f32[8,") and head.endswith("]/8"), label
            whole = [digest_of(r["out"][pos]) for r in small[op]]
            assert tail.split(",") == whole, (op, pos)
    (ln,) = large["aten::native_layer_norm"]
    slices = ln["in"][0].partition(":")[2].split(",")
    assert slices == [fingerprint(x[r:r + 1]) for r in range(8)]


def test_a_batch_variant_matmul_has_a_differing_slice(runs):
    small, large, _, w = runs
    (mm,) = large["aten::mm"]
    ins = mm["in"][0].partition(":")[2].split(",")
    assert ins == [digest_of(r["in"][0]) for r in small["aten::mm"]]  # same inputs per request
    # The weight's first dimension (512) is a multiple of 8 too: sliced, not comparable whole.
    assert mm["in"][1].startswith("f32[512,512]/8:")
    assert small["aten::mm"][0]["in"][1] == "f32[512,512]:" + fingerprint(w)
    outs = mm["out"][0].partition(":")[2].split(",")
    whole = [digest_of(r["out"][0]) for r in small["aten::mm"]]
    assert len(outs) == 8 and outs != whole  # measured: gemv (M=1) vs gemm (M=8) differ here


@pytest.mark.parametrize("cache", [True, False])
def test_slices_are_labelled_alike_on_every_path(monkeypatch, cache):
    """Fast path (contiguous, a transposed copy), general path (complex), not sliced (first
    dimension not a multiple, 0-d, over max_bytes, scratch): each slice digest is the label of
    the slice hashed alone."""
    monkeypatch.setattr(_trace_digest, "CACHE", cache)
    torch.manual_seed(1)
    tensors = [
        torch.randn(8, 3),
        torch.randn(3, 8).t(),
        torch.randn(4, 2, dtype=torch.complex64),
        torch.randn(6, 3),
        torch.tensor(2.0),
        torch.randn(64, 64),
        torch.randn(4, 3),
    ]
    state = types.SimpleNamespace(max_bytes=1 << 12, rows=4)
    one = types.SimpleNamespace(max_bytes=1 << 12, rows=1)
    labels = _trace_digest.describe(tensors, state, scratch={6})
    plain = _trace_digest.describe(tensors, one, scratch={6})
    for i in (0, 1, 2):
        t = tensors[i]
        head, _, tail = labels[i].partition(":")
        assert head == plain[i].partition(":")[0] + "/4"
        step = t.shape[0] // 4
        alone = [_trace_digest.describe([t[k * step:(k + 1) * step]], one)[0] for k in range(4)]
        assert tail.split(",") == [digest_of(a) for a in alone]
        assert all(not a.endswith(":-") for a in alone)
    assert labels[3:] == plain[3:]
    assert labels[5] == "f32[64,64]:-" and labels[6] == "f32[4,3]:-"
    # Hashing again (from the cache when on) gives the same labels.
    assert _trace_digest.describe(tensors, state, scratch={6}) == labels


def test_rows_must_be_positive(tmp_path, monkeypatch):
    monkeypatch.setenv("BITEXACT_TRACE_ROWS", "0")
    with pytest.raises(ValueError, match="BITEXACT_TRACE_ROWS"):
        _trace.start(str(tmp_path / "t.jsonl"))
    monkeypatch.setenv("BITEXACT_TRACE_ROWS", "1")
    _trace.start(str(tmp_path / "t.jsonl"))
    try:
        torch.ones(8, 2) * 3
    finally:
        _trace.stop()
    (mul,) = [r for r in records(str(tmp_path / "t.jsonl")) if r["op"] == "aten::mul.Tensor"]
    assert mul["out"][0].startswith("f32[8,2]:") and "/" not in mul["out"][0]


def test_row_slices_fingerprinted_on_the_device_are_the_hosts(tmp_path, monkeypatch):
    """Tensors fingerprinted where they live (bitexact._trace.device.fingerprints; here the
    torch ops run on the CPU tensors the tracer is told are on a device) get the same row-slice
    labels as the host's native path."""
    from bitexact._trace import device as _trace_device

    torch.manual_seed(0)
    x, w = torch.randn(8, 64), torch.randn(64, 64)
    monkeypatch.setenv("BITEXACT_TRACE_ROWS", "8")
    host = traced(str(tmp_path / "h.jsonl"), [x], w)
    monkeypatch.setattr(_trace_digest, "_fast", lambda t, max_bytes, strided=False: None)
    monkeypatch.setattr(_trace_device, "fingerprinted_there", lambda t: True)
    there = traced(str(tmp_path / "d.jsonl"), [x], w)
    labels = [(r["in"], r["out"]) for op in OPS for r in host[op]]
    assert labels == [(r["in"], r["out"]) for op in OPS for r in there[op]]
    assert sum("/8:" in label for ins, outs in labels for label in ins + outs) >= 4
