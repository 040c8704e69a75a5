"""Sketches of tensors hashed on their device (bitexact._trace_digest.device_sketch: float64
torch ops where the tensor lives, one copy to the host): the same sketch as the host's native
one for the same values (the norm to its last bits), and records of device tensors carry them,
from the program's thread and from the background writer alike. Without a GPU here, the torch
ops run on CPU tensors and the tracer's device path is taken by telling it a host tensor is a
device tensor; the ops are the same on a GPU."""

import json

import pytest

torch = pytest.importorskip("torch")
from bitexact import _digest  # noqa: E402

pytestmark = pytest.mark.skipif(_digest._native is None, reason="needs bitexact._native")

from bitexact import _trace_digest  # noqa: E402
from conftest import traced  # noqa: E402


def native_sketch(t):
    t = t.contiguous()
    name = _digest._torch_dtype(t.dtype)[0]
    labels, sketches = _digest.native().trace_digests(
        [(t.data_ptr(), t.nbytes, name, list(t.shape))], False, [True])
    return sketches[0]


def same(a, b):
    """Equal sketches: the norm to 1e-12 relative, everything else exactly."""
    (na, ra), (nb, rb) = a.split(",", 1), b.split(",", 1)
    return ra == rb and abs(float(na) - float(nb)) <= 1e-12 * max(abs(float(na)), 1.0)


def values(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, generator=g, dtype=torch.float64) * 3


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16,
                                   getattr(torch, "float8_e4m3fn", None)])
@pytest.mark.parametrize("n", [0, 1, 3, 8, 100, 12345])
def test_a_device_sketch_is_the_host_sketch(dtype, n):
    if dtype is None:
        pytest.skip("this torch has no float8_e4m3fn")
    t = values(n).to(dtype)
    if n >= 8:  # non-finite values are counted and left out of the norm and the magnitude
        t[1] = float("nan")
        t[n // 2] = float("inf")
    got, want = _trace_digest.device_sketch(t), native_sketch(t)
    assert same(got, want), (got, want)
    assert got.count(";" if dtype != torch.float64 else "|") == 1


def test_integers_have_no_sketch():
    assert _trace_digest.device_sketch(torch.arange(5)) == ""
    assert _trace_digest.device_sketch(torch.ones(3, dtype=torch.bool)) == ""


def test_a_sketch_text_is_checked_before_the_writer_takes_it(tmp_path):
    writer = _digest.native().TraceWriter(str(tmp_path / "w.jsonl"))
    with pytest.raises(ValueError, match="sketch marks"):
        writer.write('{"a":1\1}\n', [], True, ['1e0","x'])  # would break the JSON
    writer.write('{"a":1\1}\n', [], True, ["1e0,1e0,0;1e0"])
    writer.close()
    assert json.loads((tmp_path / "w.jsonl").read_text()) == {"a": 1, "sk": ["1e0,1e0,0;1e0"]}


def program():
    torch.manual_seed(0)
    layer = torch.nn.Linear(16, 8)
    x = torch.randn(4, 16)
    y = torch.nn.functional.layer_norm(layer(x), (8,))
    (y.square().mean() * 2).backward()


@pytest.mark.parametrize("background", [False, True])
def test_records_of_device_tensors_carry_their_sketches(tmp_path, monkeypatch, background):
    monkeypatch.setattr(_trace_digest, "BACKGROUND", background)

    def run(name):
        return [json.loads(line) for line in traced(tmp_path / name, program).splitlines()]

    host = run("host.jsonl")
    # Every tensor "on a device": the general path, digests from the device (here the same
    # canonical digest, computed through bitexact.digest), sketches from device_sketch.
    prepare = _digest._prepare

    def as_device(x, dtype=None, shape=None):
        kind, v = prepare(x, dtype, shape)
        return ("device", _digest.native().digest_ptr(*v.args())) if kind == "host" else (kind, v)

    monkeypatch.setattr(_trace_digest, "_fast", lambda t, max_bytes: None)
    monkeypatch.setattr(_digest, "_prepare", as_device)
    device = run("device.jsonl")
    assert [r["out"] for r in device] == [r["out"] for r in host]
    sketched = [(a["sk"], b["sk"]) for a, b in zip(host, device) if "sk" in a]
    assert len(sketched) > 10 and all("sk" in b for b in device if any(
        o.startswith("f32") for o in b["out"]))
    for a, b in sketched:
        assert len(a) == len(b) and all(x == y == "" or same(x, y) for x, y in zip(a, b))
