"""The op tracer's fast digests (bitexact._trace.digest, the native trace_digests cache) and
record lines (bitexact._trace.record): a tensor changed between two ops, by any means, is hashed
again; traces with the cache, without it, hashed on the program's thread or the background
writer's, and through the general path with json.dumps records (what the tracer wrote before)
are byte for byte the same."""

import ctypes
import json
import os
import types

import pytest

torch = pytest.importorskip("torch")
from bitexact import _digest  # noqa: E402

pytestmark = pytest.mark.skipif(_digest._native is None, reason="needs bitexact._native")

import bitexact  # noqa: E402
from bitexact import _trace  # noqa: E402
from bitexact import _protocol  # noqa: E402
from bitexact._trace import digest as _trace_digest  # noqa: E402
from bitexact._trace import record as _trace_record  # noqa: E402
from bitexact._fingerprint import fingerprint  # noqa: E402


from conftest import no_host_lanes, records, trace, traced  # noqa: E402,F401  (the shared trace fixture)


def _set(x):
    x.set_(torch.full((4,), 7.0))


def _assign_data(x):
    x.data = torch.full((4,), 7.0)


def _untraced(x):
    with _trace.paused():
        x.add_(1)


MUTATIONS = {
    "in place": lambda x: x.add_(1),
    "through a view": lambda x: x[1:].mul_(3),
    "through a reshaped view": lambda x: x.view(2, 2).mul_(3),
    "through .data": lambda x: x.data.add_(1),
    "through numpy": lambda x: x.numpy().__setitem__(0, 5.0),
    "by set_": _set,
    "by assigning .data": _assign_data,
    "untraced (paused)": _untraced,
    "through a raw pointer": lambda x: ctypes.memset(x.data_ptr(), 0, 8),
}


@pytest.mark.parametrize("how", list(MUTATIONS))
def test_a_tensor_changed_between_two_ops_is_hashed_again(trace, how):
    _trace.start(trace)
    x = torch.ones(4)  # hashed as aten::ones' result: in the cache
    x * 2  # hashed as an input: from the cache
    MUTATIONS[how](x)
    x * 2
    _trace.stop()
    muls = [r["in"][0] for r in records(trace) if r["op"] == "aten::mul.Tensor"]
    assert muls[0] == "f32[4]:" + fingerprint(torch.ones(4))
    assert muls[-1] == "f32[4]:" + fingerprint(x)
    assert muls[-1] != muls[0]


def test_an_unchanged_tensor_keeps_its_digest(trace):
    _trace.start(trace)
    x = torch.arange(6.0).reshape(2, 3)
    for _ in range(3):
        x * 2
    x.t() * 2  # a non-contiguous view: hashed in logical order
    _trace.stop()
    muls = [r["in"][0] for r in records(trace) if r["op"] == "aten::mul.Tensor"]
    assert muls[:3] == ["f32[2,3]:" + fingerprint(x)] * 3
    assert muls[3] == "f32[3,2]:" + fingerprint(x.t().contiguous())


VIEWS = {
    "transposed": lambda b: b.t(),
    "every other column": lambda b: b[:, ::2],
    "a broadcast row": lambda b: b[:1].expand(5, 6),
    "permuted 3-d": lambda b: b.reshape(2, 3, 5).permute(2, 0, 1),
    "bf16 transposed": lambda b: b.to(torch.bfloat16).t(),
    "one column": lambda b: b[:, 2],
}


@pytest.mark.parametrize("background", [True, False])
@pytest.mark.parametrize("view", list(VIEWS))
def test_a_view_that_is_not_contiguous_is_hashed_as_its_elements(
        trace, monkeypatch, view, background):
    """Views are handed to the native side as they lie (strides, no copy): their labels are
    the digests of their elements in row-major order, a change to the base through another
    view is seen, and an unchanged view keeps its digest."""
    monkeypatch.setattr(_trace_digest, "BACKGROUND", background)
    base = torch.arange(30.0).reshape(5, 6)
    v = VIEWS[view](base)
    assert not v.is_contiguous()
    _trace.start(trace)
    v * 2
    v * 2
    base.view(-1)[8] += 100.0  # [1, 2]: in every view above but the row and the bf16 copy
    v * 2
    _trace.stop()
    got = [r["in"][0] for r in records(trace) if r["op"] == "aten::mul.Tensor"]
    head = got[0].split(":")[0]
    before = fingerprint(VIEWS[view](torch.arange(30.0).reshape(5, 6)).contiguous())
    assert got[:2] == ["%s:%s" % (head, before)] * 2
    assert got[2] == "%s:%s" % (head, fingerprint(v.contiguous()))
    assert (got[2] != got[0]) == (view not in ("a broadcast row", "bf16 transposed"))


class Model(torch.nn.Module):
    """Embeddings, attention, a bf16 branch, a complex FFT, a bool mask: fast and general path
    tensors in the same ops."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(20, 16)
        self.layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
        self.head = torch.nn.Linear(16, 3)

    def forward(self, x):
        h = self.layer(self.embed(x))
        h = h + torch.fft.rfft(h, dim=1).abs().mean(dim=1, keepdim=True)
        h = h + h.to(torch.bfloat16).float() * (h > 0)
        return self.head(h.mean(dim=1))


def program():
    torch.manual_seed(0)
    model = Model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x = torch.randint(0, 20, (4, 6))
    y = torch.randint(0, 3, (4,))
    for _ in range(3):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    with torch.no_grad():
        model(x)


def _json_line(step, rank, phase, module, op, src, ins, outs, thread="", args="",
               sketches=(), gen=None, kernel=None, own=None, entered=None, late=None):
    record = {"v": _protocol.TRACE_RECORD_VERSION, "step": step, "rank": rank, "phase": phase,
              "module": module, "op": op, "src": src, "in": ins, "out": outs}
    if own is not None:
        record["own"] = json.loads(own)
    if entered is not None:
        record["entered"] = entered
    if late:
        record["late"] = late
    if args:
        record["args"] = args
    if gen:
        record["gen"] = gen
    if any(sketches):
        record["sk"] = list(sketches)
    if kernel is not None:
        record["kernel"] = kernel
    if thread:
        record["thread"] = thread
    return json.dumps(record, separators=(",", ":")) + "\n"


@pytest.mark.parametrize("level", ["ops", "modules"])
def test_traces_with_and_without_the_cache_and_the_general_path_are_the_same(
        tmp_path, monkeypatch, level):
    def run(name):
        return traced(tmp_path / name, program, level=level)

    monkeypatch.setattr(_trace_digest, "BACKGROUND", True)  # whatever the cores
    cached = run("cached.jsonl")
    monkeypatch.setattr(_trace_digest, "BACKGROUND", False)  # hashed on the program's thread
    synchronous = run("synchronous.jsonl")
    monkeypatch.setattr(_trace_digest, "BACKGROUND", True)
    monkeypatch.setattr(_trace_digest, "CACHE", False)
    uncached = run("uncached.jsonl")
    # What the tracer did before: every tensor through bitexact._digest, records by json.dumps.
    monkeypatch.setattr(_trace_digest, "BACKGROUND", False)
    monkeypatch.setattr(_trace_digest, "_fast", lambda t, max_bytes, strided=False: None)
    monkeypatch.setattr(_trace_record, "line", _json_line)
    general = run("general.jsonl")
    assert cached == synchronous == uncached
    # The general path makes no sketches (host tensors on the fast path have them).
    assert b'"sk":["' in cached

    def digests(trace):
        return [{k: v for k, v in json.loads(line).items() if k != "sk"}
                for line in trace.splitlines()]

    assert digests(cached) == digests(general)
    assert b'"op":"parameter grad"' in cached if level == "modules" else b'"op":"aten::' in cached
    if level == "ops":  # other dtypes; the FFT's complex result, through the general path
        assert b'"bf16[' in cached and b'"bool[' in cached and b'"op":"aten::_fft_r2c"' in cached


def _views_and_odd_tensors():
    torch.manual_seed(0)
    a = torch.arange(24.0).reshape(4, 6)
    a.t() @ a  # a transposed view into mm
    a[:, 1::2] * 2  # a strided slice with an offset
    torch.ones(3).expand(4, 3) + 1  # stride 0
    torch.zeros(0, 3) + 1
    torch.tensor(3.5) * a[2, 2]
    (a > 5).int().cumsum(0)
    torch.view_as_real(torch.randn(3, dtype=torch.complex64) * 2) + 1  # complex: general path
    q = a.clone()
    q.t().add_(1)
    q[::2].mul_(3)
    a.to(torch.bfloat16).t().contiguous()
    torch.randn(2, 3, 4) @ torch.randn(4, 5)
    torch.cat([a.t()] * 40)  # more tensors than _trace_digest._IDENTITY holds
    out, _ = torch.nn.LSTM(3, 4)(torch.randn(5, 2, 3))  # an RNN workspace (scratch)
    out.sum().backward()


@pytest.mark.parametrize("background", [False, True])
def test_the_all_host_lane_writes_what_sorting_each_tensor_writes(tmp_path, monkeypatch,
                                                                  background):
    """An op whose tensors are all plain host tensors skips sorting and staging
    (``_trace_digest._all_fast``, and the native lanes): the same trace, byte for byte, as with
    every op sorted."""
    monkeypatch.setattr(_trace_digest, "BACKGROUND", background)

    def both():
        program()
        _views_and_odd_tensors()

    lane = traced(tmp_path / "lane.jsonl", both)
    no_host_lanes(monkeypatch)
    assert traced(tmp_path / "sorted.jsonl", both) == lane
    (cat,) = [r for r in map(json.loads, lane.splitlines()) if r["op"] == "aten::cat"]
    assert len(cat["in"]) == 40 and all(x == cat["in"][0] for x in cat["in"])


def test_a_record_line_is_what_json_dumps_writes():
    args = (3, 1, "forward", 'Net."odd" name\\é\n', "aten::add.Tensor", "ü.py:7",
            ["f32[2,3]:" + "a" * 32, "i64[]:-"], [])
    assert _trace_record.line(*args) == _json_line(*args)
    assert json.loads(_trace_record.line(*args))["module"] == args[3]
    threaded = args + ('ema "x"#0',)
    assert _trace_record.line(*threaded) == _json_line(*threaded)
    noisy = threaded + ("eps=1e-05,dim=[-1]", ["1e0,1e0,0;1e0", ""])
    assert _trace_record.line(*noisy) == _json_line(*noisy)
    drawn = noisy + ("Net.noise's torch.Generator|" + "c" * 16,)
    assert _trace_record.line(*drawn) == _json_line(*drawn)
    assert json.loads(_trace_record.line(*drawn))["gen"].startswith("Net.noise's")
    # a module record's own state among its inputs, by name
    owned = drawn + (None, _trace_record.own(("weight", "é"), ("running_var",)))
    assert _trace_record.line(*owned) == _json_line(*owned)
    assert json.loads(_trace_record.line(*owned))["own"] == {
        "params": ["weight", "é"], "buffers": ["running_var"]}
    nested = owned + (3,)  # and its call's number among its thread's module calls
    assert _trace_record.line(*nested) == _json_line(*nested)
    assert json.loads(_trace_record.line(*nested))["entered"] == 3
    late = nested + (1,)  # and how many of its inputs were labelled after its forward
    assert _trace_record.line(*late) == _json_line(*late)
    assert json.loads(_trace_record.line(*late))["late"] == 1
    assert "late" not in json.loads(_trace_record.line(*nested[:-1], 3, 0))


def test_source_is_relative_to_the_directory_the_trace_started_in(trace, tmp_path, monkeypatch):
    here = os.path.dirname(os.path.abspath(__file__))
    monkeypatch.chdir(here)
    _trace.start(trace)
    torch.ones(2) * 2
    monkeypatch.chdir(tmp_path)  # a program that changes directory keeps its names
    torch.ones(2) * 3
    _trace.stop()
    monkeypatch.chdir(tmp_path)  # the next trace starts here: names from here on
    _trace.start(trace + ".2")
    torch.ones(2) * 4
    _trace.stop()
    srcs = [r["src"] for r in records(trace) + records(trace + ".2")
            if r["op"] == "aten::mul.Tensor"]
    assert srcs[0].startswith("test_trace_digest.py:")
    assert srcs[1].startswith("test_trace_digest.py:")
    assert srcs[2].startswith(os.path.join(here, "test_trace_digest.py:"))


def test_records_name_the_ops_non_tensor_arguments(trace):
    """What diff-trace names when an op's inputs are identical and its arguments are not:
    numbers, lists and dtypes by their schema names, a Python number passed for a tensor
    argument (an optimizer's ``mul_(beta)``) too; tensors and devices never."""
    x = torch.ones(4, 8)
    _trace.start(trace)
    x.mul_(0.99)
    torch.nn.functional.layer_norm(x, (8,), eps=1e-3)
    x.sum(dim=[-1], keepdim=True, dtype=torch.float64)
    torch.zeros(2, dtype=torch.float16, device="cpu")
    _trace.stop()
    args = {r["op"]: r.get("args", "") for r in records(trace)}
    assert args["aten::mul_.Tensor"] == "other=0.99"
    assert args["aten::native_layer_norm"] == "normalized_shape=[8],eps=0.001"
    assert args["aten::sum.dim_IntList"] == "dim=[-1],keepdim=True,dtype=float64"
    assert args["aten::zeros"] == "size=[2],dtype=float16"


def test_an_ops_arguments_text_for_each_kind_of_value():
    """``_trace_record.arguments`` (the records' ``"args"``), called directly: the numbers'
    fast path (floats by ``repr``, ints, bools) writes what the general one does for their
    subclasses, and every other kind of value is as documented."""
    import enum

    from bitexact._trace import record as _trace_record

    class Small(enum.IntEnum):
        ONE = 1

    class Half(float):
        pass

    aten, t = torch.ops.aten, torch.ones(2)

    def text(func, *args, **kwargs):
        return _trace_record.arguments(func, args, kwargs, torch.Tensor)

    assert text(aten.lerp_.Scalar, t, t, 0.1) == "weight=0.1"
    assert text(aten.lerp_.Scalar, t, t, Half(0.25)) == "weight=0.25"
    assert text(aten.mul_.Tensor, t, 1e-08) == "other=1e-08"
    assert text(aten.sum.dim_IntList, t, [0, -1], True) == "dim=[0,-1],keepdim=True"
    assert text(aten.add.Tensor, t, 3, alpha=Small.ONE) == "other=3,alpha=%s" % Small.ONE
    assert text(aten.cat.default, [t, t], 1) == "dim=1"  # a list of tensors: left out
    assert text(aten.stack.default, [t, 2.0], 0) == "tensors=[T,2.0],dim=0"
    assert text(aten.zeros.default, [2], dtype=torch.float16, layout=torch.strided,
                device=torch.device("cpu"), pin_memory=False) == "size=[2],dtype=float16"
    assert text(aten.sqrt.default, t) == ""
    assert text(aten.sqrt.default, t, 5) == "#1=5"  # past the schema's arguments
    gen = torch.Generator()
    assert text(aten.bernoulli_.float, t, 0.5, generator=gen) == "p=0.5,generator=<Generator>"


def test_a_complex_tensor_is_labelled_as_the_real_view_that_is_hashed(trace):
    """``complex64[3]`` is hashed as its real view (real then imaginary, as ``bitexact.digest``
    hashes it) and labelled as that view, ``f32[3,2]``; its ``abs`` is a real ``f32[3]``."""
    z = torch.complex(torch.arange(3.0), torch.arange(3.0) + 1)
    _trace.start(trace)
    z.abs()
    _trace.stop()
    (rec,) = [r for r in records(trace) if r["op"] == "aten::abs"]
    assert rec["in"] == ["f32[3,2]:" + fingerprint(torch.view_as_real(z))]
    assert rec["out"] == ["f32[3]:" + fingerprint(z.abs())]
    meta = _trace_digest.describe([torch.empty(3, dtype=torch.complex128, device="meta")],
                                  types.SimpleNamespace(max_bytes=1 << 12, rows=1))
    assert meta == ["f64[3,2]:-"]


def test_a_real_tensor_with_the_negative_bit_is_hashed_as_its_values(trace):
    """``z.conj().imag`` is a real view whose bytes are the negatives of its values (torch's
    negative bit): hashed as its values, never as its memory."""
    z = torch.complex(torch.arange(4.0), torch.arange(4.0) + 1)
    v = z.conj().imag
    assert v.is_neg() and not v.is_complex()
    want = "f32[4]:" + fingerprint(-(torch.arange(4.0) + 1))
    for driver in ("mode", "auto"):
        _trace.start(trace, driver=driver)
        v * 1
        observed = isinstance(_trace._active[0], _trace._Observing)
        _trace.stop()
        (mul,) = [r for r in records(trace) if r["op"] == "aten::mul.Tensor"]
        assert mul["in"][:1] == mul["out"] == [want]
        # torch resolves the bit before the op: a mode sees a clone of the view, then the op
        # (the observer sees the op, which resolves the bit inside)
        clones = [r for r in records(trace) if r["op"] == "aten::clone"]
        assert [(r["in"], r["out"]) for r in clones] == [([want], [want])] * (not observed)
