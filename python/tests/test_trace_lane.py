"""The op tracer's native lane (``bitexact._native.Lane``, ``crates/bitexact-python/src/
trace_lane.rs``): the records it makes, of ops that write nothing and of in-place ops that read
and write their ``self``, hashed by the background writer or on the program's thread, are byte
for byte those of the Python lane and of the general path it replaces
(``bitexact._trace.plain``), whatever the arguments, module names, source files and threads;
whatever it does not handle takes the general path."""

import json
import os
import struct
import sys
import threading

import pytest

torch = pytest.importorskip("torch")
from bitexact import _digest  # noqa: E402

pytestmark = pytest.mark.skipif(_digest._native is None, reason="needs bitexact._native")

from bitexact._trace import digest as _trace_digest  # noqa: E402
from bitexact._trace import plain  # noqa: E402
from conftest import traced  # noqa: E402


class Odd(torch.nn.Module):
    """Module names JSON must escape: quotes, a backslash, letters outside ASCII."""

    def __init__(self):
        super().__init__()
        self.add_module('q"uo\\te', torch.nn.Linear(4, 3))
        self.add_module("ünï€😀", torch.nn.LayerNorm(3))

    def forward(self, x):
        return self.get_submodule("ünï€😀")(self.get_submodule('q"uo\\te')(x))


def program():
    """Out-of-place and in-place ops with every kind of argument the lane writes itself or
    asks Python for, results it must refuse, an aliased in-place op, lists, and a thread."""
    torch.manual_seed(0)
    a = torch.randn(6, 4)
    Odd()(a).sum().backward()
    a.sum(dim=[0], keepdim=True, dtype=torch.float64)  # a list, a bool, a dtype
    torch.nn.functional.dropout(a, 0.0, True)  # a float, a bool
    a.to(torch.bfloat16, memory_format=torch.contiguous_format) * 2.5
    torch.cat([a, a.t().t()], 0)  # a list of tensors
    torch.stack((a, a), dim=1).transpose(0, 1).contiguous()
    a.t() @ a  # strided inputs
    torch.addmm(torch.ones(6), a, a.t())  # a linear layer's op
    torch.addmm(torch.zeros(6, 6), a, a.t(), beta=0)  # self not read: the general path
    c = torch.ones(6, 6)
    c.addmm_(a, a.t(), beta=0.5).addmm_(a, a.t(), beta=0)
    torch.zeros(0, 3) + 1  # empty
    torch.tensor(3.5) * a[2, 2]  # 0-dimensional
    torch.view_as_real(torch.randn(3, dtype=torch.complex64) * 2)  # complex: general path
    (a > 0).int().cumsum(0)
    m = torch.zeros(6, 4)
    for _ in range(2):  # an optimizer's chain: positional and keyword scalars
        m.mul_(0.9).addcmul_(a, a, value=0.1).lerp_(a, 0.5).sqrt_()
        m.add_(a, alpha=-1e-3).clamp_(min=-1.0, max=1.0)
    m.addcmul_(m, a)  # aliased: the general path
    m.t().mul_(2)  # a strided self
    m.add_(torch.ones(6, 4, dtype=torch.float64).to(torch.float32))
    torch._foreach_mul_([m, a.clone()], 2.0)  # a list: the general path
    with pytest.raises(RuntimeError):
        m.add_(torch.ones(3))  # raises after its self was held
    done = []
    t = threading.Thread(target=lambda: done.append(a * 3 + 1), name='worker "é"')
    t.start()
    t.join()
    assert done


def lane_calls(fn, lane):
    """``fn()``, and how many times it called each method of ``lane`` (counted by a profile
    function: a wrapper's frame would be a frame of the program's own to the lane)."""
    calls = {}

    def profile(frame, event, arg):
        if event == "c_call" and getattr(arg, "__self__", None) is lane:
            calls[arg.__name__] = calls.get(arg.__name__, 0) + 1

    sys.setprofile(profile)
    try:
        return fn(), calls
    finally:
        sys.setprofile(None)


@pytest.mark.parametrize("sketch", [True, False])
def test_the_native_lane_writes_what_the_python_lane_and_the_general_path_write(
        tmp_path, monkeypatch, sketch):
    monkeypatch.setattr(_trace_digest, "BACKGROUND", True)
    monkeypatch.setattr(_trace_digest, "SKETCH", sketch)
    native, calls = lane_calls(lambda: traced(tmp_path / "native.jsonl", program), plain._lane())
    assert calls["record"] >= 30 and calls["hold_self"] >= 10
    monkeypatch.setattr(_trace_digest, "BACKGROUND", False)  # hashed on the program's thread
    now, calls = lane_calls(lambda: traced(tmp_path / "now.jsonl", program), plain._lane())
    assert now == native and calls["record"] >= 30 and calls["hold_self"] >= 10
    monkeypatch.setattr(plain, "NATIVE", False)
    assert traced(tmp_path / "general.jsonl", program) == native  # every record: the general path
    monkeypatch.setattr(_trace_digest, "BACKGROUND", True)
    assert traced(tmp_path / "python.jsonl", program) == native
    rows = [json.loads(line) for line in native.splitlines()]
    assert any(r["module"].endswith("ünï€😀") for r in rows)
    assert any(r.get("thread") == 'worker "é"#0' for r in rows)
    if sketch:
        assert any(r["op"] == "aten::addcmul_" and r.get("args") == "value=0.1" for r in rows)
    here = os.path.basename(__file__) + ":"
    assert sum(here in r["src"] for r in rows) > 40


@pytest.mark.parametrize("background", [True, False])
def test_the_native_lane_asks_the_general_path_for_what_it_does_not_handle(
        tmp_path, monkeypatch, background):
    """A record the lane refuses after its op ran (a result off the host's fast path) is
    written by the general path with the value the lane held, whoever hashes."""
    monkeypatch.setattr(_trace_digest, "BACKGROUND", background)

    lane = plain._lane()
    # An in-place op's record refused, as for a result too large or on a device; the others
    # passed on. Compiled from a "<...>" file name: a frame the lane's source walk skips.
    scope = {"lane": lane}
    exec(compile("def refusing(*args):\n"
                 "    return False if len(args) == 8 else lane.record(*args)\n",
                 "<refusing lane>", "exec"), scope)
    refusing = scope["refusing"]
    wrapper = type("Refusing", (), {"record": staticmethod(refusing),
                                    "hold_self": staticmethod(lane.hold_self)})
    monkeypatch.setattr(plain, "_lanes", [wrapper])
    refused = traced(tmp_path / "refused.jsonl", program)
    monkeypatch.setattr(plain, "NATIVE", False)
    assert traced(tmp_path / "python.jsonl", program) == refused


def test_a_native_lane_refuses_what_is_not_its_own(tmp_path, monkeypatch):
    """No native writer, arguments that are not a tuple and a dict, a tensor too large: False
    or None, nothing written."""
    lane = plain._lane()
    state = type("State", (), {"writer": None, "max_bytes": 1 << 20})()
    a = torch.ones(3)
    add = torch.ops.aten.add.Tensor
    assert lane.record(state, None, add, "aten::add.Tensor", (a, a), {}, a) is False
    state.writer = _digest.native().TraceWriter(str(tmp_path / "w.jsonl"))
    assert lane.record(state, None, add, "aten::add.Tensor", [a, a], {}, a) is False
    state.max_bytes = 4
    assert lane.record(state, None, add, "aten::add.Tensor", (a, a), {}, a) is False
    assert lane.hold_self(state, add, "aten::add_.Tensor", (a, a), {}) is None
    state.max_bytes = 1 << 20
    assert lane.hold_self(state, add, "aten::add_.Tensor", (a, [a]), {}) is None  # a list
    assert lane.hold_self(state, add, "aten::add_.Tensor", (a, a), {}) is None  # aliased
    assert lane.hold_self(state, add, "aten::add_.Tensor", (3, a), {}) is None  # no self
    assert len(lane.hold_self(state, add, "aten::add_.Tensor", (a, a[:0]), {})) == 1
    state.writer.close()
    assert (tmp_path / "w.jsonl").read_bytes() == b""


def described(ins, outs):
    """The words the observer driver hands the lane for an op with tensors ``ins`` and
    ``outs`` (``observer.cpp``'s ``describe``)."""
    words = [len(ins), len(outs)]
    for t in ins + outs:
        contiguous = t.is_contiguous()
        words += [id(t.dtype), t.data_ptr(), t.dim() + (1 << 32 if contiguous else 0), *t.shape]
        words += [] if contiguous else list(t.stride())
    return struct.pack("%dq" % len(words), *words)


@pytest.mark.parametrize("background", [True, False])
def test_the_native_lane_takes_the_tensors_the_observer_read(tmp_path, monkeypatch,
                                                            background):
    """Given the op's tensors as words, the lane records those (not the Python tensors'), as
    strided or contiguous; words cut short, or of a dtype it has not met, it does not trust:
    it reads the Python tensors."""
    monkeypatch.setattr(_trace_digest, "BACKGROUND", background)
    a, b = torch.ones(4, 3), torch.arange(12.0).reshape(3, 4).t()
    alien = object()
    words = described([b, b], [b])
    given = {2: None,  # by the op's alpha: none, b's, cut short, of a dtype it has not met
             3: words,
             4: words[:-4],
             5: words.replace(struct.pack("q", id(b.dtype)), struct.pack("q", id(alien)), 1)}
    record = plain.record
    scope = {"record": record, "given": given}
    exec(compile("def giving(*args):\n"  # a "<...>" file: a frame the source walk skips
                 "    return record(*args[:8], given[args[5]['alpha']])\n",
                 "<giving>", "exec"), scope)
    monkeypatch.setattr(plain, "record", scope["giving"])
    out = traced(tmp_path / "t.jsonl", lambda: [torch.add(a, a, alpha=k) for k in given])
    rows = [json.loads(line) for line in out.decode().splitlines()]
    assert [r["args"] for r in rows] == ["alpha=%d" % k for k in given]
    ins = [r["in"] for r in rows]
    assert ins[0] == ins[2] == ins[3] == [ins[0][0]] * 2  # a, a: the Python tensors
    assert ins[1] == rows[1]["out"] * 2 != ins[0]  # b, b -> b: the words' tensors
    assert ins[1][0].startswith("f32[4,3]:")


@pytest.mark.parametrize("background", [True, False])
def test_the_in_place_lane_takes_the_tensors_the_observer_read(tmp_path, monkeypatch,
                                                              background):
    """An in-place op's words: held before it (``self`` first), and after it."""
    monkeypatch.setattr(_trace_digest, "BACKGROUND", background)
    b, c = torch.arange(12.0).reshape(3, 4).t(), torch.full((4, 3), 7.0)
    hold, finish = plain.hold, plain.finish
    scope = {"hold": hold, "finish": finish, "w": lambda: described([b, c], [b])}
    exec(compile("def holding(*args):\n"  # "<...>": frames the source walk skips
                 "    return hold(*args[:6], w() if args[5].get('alpha') == 3 else None)\n"
                 "def finishing(*args):\n"
                 "    return finish(*args[:10], w() if args[5].get('alpha') == 3 else None)\n",
                 "<giving>", "exec"), scope)
    monkeypatch.setattr(plain, "hold", scope["holding"])
    monkeypatch.setattr(plain, "finish", scope["finishing"])

    def program():
        for k in (2, 3):
            torch.ones(4, 3).add_(torch.ones(4, 3), alpha=k)

    rows = [json.loads(line) for line in traced(tmp_path / "t.jsonl", program).decode()
            .splitlines() if "add_" in line]
    assert [r["args"] for r in rows] == ["alpha=2", "alpha=3"]
    assert rows[0]["in"][0] == rows[0]["in"][1]  # ones, ones
    assert rows[1]["in"] == rows[1]["out"] + [rows[1]["in"][1]]  # b as held, c; b
    assert len({rows[0]["in"][0], *rows[1]["in"]}) == 3
