"""fp64 replay of a captured op call (bitexact._replay): the tracer's capture
(bitexact._trace.state.save) stores the call's arguments, and the replay rebuilds the call in
float64 and measures each side's output against it, in ULPs of the output's dtype."""

import json
import types

import pytest

torch = pytest.importorskip("torch")
from bitexact import _replay  # noqa: E402
from bitexact._trace import state as _trace_state  # noqa: E402

IDENTITY = [0, "", 0, "forward", "M.fc", "aten::sum.dim_IntList", 0]


def capture(tmp_path, monkeypatch, func, args, kwargs, written=frozenset(), out=None):
    """Saves the call as the tracer does, and returns the capture file's path."""
    monkeypatch.setenv("BITEXACT_OUT", str(tmp_path))
    ins = [a for i, a in enumerate(args) if i not in written and isinstance(a, torch.Tensor)]
    result = func(*args, **kwargs) if out is None else out
    state = types.SimpleNamespace(out_dir=str(tmp_path))
    _trace_state.save(state, ins, [result], IDENTITY, (func, args, kwargs, set(written)))
    return str(tmp_path / _trace_state.CAPTURE_FILE)


def test_a_reduction_replays_in_float64_and_a_rounded_result_is_off_by_ulps(tmp_path,
                                                                           monkeypatch):
    x = torch.randn(300, 700, generator=torch.Generator().manual_seed(0))
    path = capture(tmp_path, monkeypatch, torch.ops.aten.sum.dim_IntList, (x, [1]),
                   {"keepdim": True, "dtype": torch.float32})
    meta, tensors = _replay.read(path)
    assert json.loads(meta["identity"]) == IDENTITY
    assert json.loads(meta["call"])["kwargs"] == {"keepdim": True, "dtype": {"dtype": "float32"}}
    answer = _replay.compare([path, path])
    assert answer["op"] == "aten.sum.dim_IntList" and answer["inputs_identical"]
    (o,) = answer["outputs"]
    assert (o["dtype"], o["elements"]) == ("float32", 300)
    a, b = o["sides"]
    assert a == b
    # float32 sums of 700 terms are not all the float64 sum rounded (a sum near 0 is many of
    # its own ULPs off), yet close at the result's scale.
    assert a["max_ulp"] > 0 and a["exact"] < 300
    assert a["max_abs"] / o["scale"] < 1e-5
    want = (tensors["out0"].double() - x.double().sum(1, keepdim=True)).abs().max().item()
    assert a["max_abs"] == pytest.approx(want)


def test_the_correctly_rounded_result_is_0_ulp(tmp_path, monkeypatch):
    x = torch.randn(50, 40, generator=torch.Generator().manual_seed(1))
    y = torch.randn(40, 30, generator=torch.Generator().manual_seed(2))
    exact = (x.double() @ y.double()).float()
    path = capture(tmp_path, monkeypatch, torch.ops.aten.mm.default, (x, y), {}, out=exact)
    o = _replay.compare([path, path])["outputs"][0]
    assert o["sides"][0]["max_ulp"] == 0 and o["sides"][0]["exact"] == 1500


def test_an_in_place_op_captured_without_what_it_read_says_why_it_cannot_replay(
        tmp_path, monkeypatch, capsys):
    # (a capture by an older bitexact: the tracer keeps the earlier values, test_trace.py)
    x, y = torch.ones(4), torch.full((4,), 2.0)
    path = capture(tmp_path, monkeypatch, torch.ops.aten.mul_.Tensor, (x, y), {},
                   written={0, "self"})
    _replay.main([path, path])
    answer = json.loads(capsys.readouterr().out)
    assert "writes self, and the capture holds only its value after the op" in answer["error"]


def test_a_missing_capture_is_an_answer_not_a_traceback(tmp_path, capsys):
    _replay.main([str(tmp_path / "none"), str(tmp_path / "none")])
    assert "No such file" in json.loads(capsys.readouterr().out)["error"]
