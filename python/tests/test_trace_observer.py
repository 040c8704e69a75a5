"""The op tracer's observer driver (``bitexact._trace.observer``: torch's RecordFunction
callbacks in place of a ``TorchDispatchMode``) writes the dispatch mode's records byte for byte,
hashed by the background writer or on the program's thread, but for autograd's gradient
accumulation: in place (``aten::add_``) without a dispatch mode, out of place (``aten::add``)
under one, with the same tensors. A compiler it cannot run, or a driver that does not exist, is
named before tracing starts. Collectives are recorded as the dispatch mode records them."""

import json
import os

import pytest

torch = pytest.importorskip("torch")
from bitexact import _digest  # noqa: E402

pytestmark = pytest.mark.skipif(_digest._native is None, reason="needs bitexact._native")

from bitexact import _trace  # noqa: E402
from bitexact._trace import digest as _trace_digest  # noqa: E402
from bitexact._trace import observer  # noqa: E402
from conftest import traced  # noqa: E402
from test_trace_lane import program as lane_program  # noqa: E402


@pytest.fixture
def built():
    """The observer's library, built or loaded; a missing compiler skips, but fails in CI (a
    compiler that fails on the source always fails)."""
    try:
        observer.library()
    except observer.Unavailable as e:
        if os.environ.get("BITEXACT_REQUIRE_TOOLS") == "1" or "cannot run" not in str(e):
            raise
        pytest.skip(str(e))


class Block(torch.nn.Module):
    """A residual block: its input's gradient is accumulated from two paths."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.norm = torch.nn.LayerNorm(8)
        self.drop = torch.nn.Dropout(0.25)

    def forward(self, x):
        return x + self.drop(torch.nn.functional.gelu(self.norm(self.fc(x))))


def training():
    """Two AdamW steps of two residual blocks with dropout, a seeded generator's noise, an
    ``out=`` op and an aliased in-place op, then the native lane's program."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(Block(), Block())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    for _ in range(2):
        x = torch.randn(4, 8, generator=g)
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    out = torch.empty(4, 8)
    torch.add(x, 1.5, out=out)
    out.add_(out)
    lane_program()


def same_but_accumulation(mode, observed):
    """Asserts the traces' records are equal but for gradient accumulations (``add`` under the
    mode, ``add_`` under the observer, in a backward); returns how many those are."""
    a, b = mode.decode().splitlines(), observed.decode().splitlines()
    assert len(a) == len(b)
    accumulations = 0
    for x, y in zip(a, b):
        if x != y:
            rx, ry = json.loads(x), json.loads(y)
            assert (rx["op"], ry["op"], rx["phase"]) == ("aten::add.Tensor", "aten::add_.Tensor",
                                                         "backward"), (x, y)
            ry["op"] = rx["op"]
            assert rx == ry
            accumulations += 1
    return accumulations


@pytest.mark.parametrize("background", [True, False])
def test_the_observer_records_what_the_dispatch_mode_records(tmp_path, monkeypatch, built,
                                                             background):
    monkeypatch.setattr(_trace_digest, "BACKGROUND", background)
    mode = traced(tmp_path / "mode.jsonl", training)
    observed = traced(tmp_path / "observer.jsonl", training, driver="observer")
    # The second block's input (the first's needs no gradient), in each of two steps.
    assert same_but_accumulation(mode, observed) == 2
    monkeypatch.setenv(_trace.DRIVER_ENV, "observer")
    assert traced(tmp_path / "env.jsonl", training) == observed
    rows = [json.loads(line) for line in observed.decode().splitlines()]
    ops = {r["op"] for r in rows}
    assert {"aten::addmm", "aten::bernoulli_.float", "aten::randn.generator", "aten::add.out",
            "aten::addcmul_", "aten::native_layer_norm_backward"} <= ops, ops
    assert any(r.get("thread") == 'worker "é"#0' for r in rows)
    assert _trace._state is None


def test_a_compiler_that_cannot_run_is_named_before_tracing_starts(tmp_path, monkeypatch):
    monkeypatch.setattr(observer, "_lib", [])
    monkeypatch.setenv("BITEXACT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-c++"))
    with pytest.raises(_trace.Unavailable, match="cannot run the C\\+\\+ compiler .*no-such-c"):
        _trace.start(str(tmp_path / "t.jsonl"), driver="observer")
    assert _trace._state is None
    assert not (tmp_path / "t.jsonl").exists()


def test_a_driver_that_does_not_exist_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv(_trace.DRIVER_ENV, "observr")
    with pytest.raises(ValueError, match="BITEXACT_TRACE_DRIVER must be mode or observer, not "
                                         "'observr'"):
        _trace.start(str(tmp_path / "t.jsonl"))
    assert _trace._state is None


def collectives():
    """Collectives of a world of one (gloo): an all-reduce, a broadcast, an all-gather into
    uninitialized buffers, and ops on what they wrote."""
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        x = torch.arange(4.0)
        dist.all_reduce(x)
        dist.broadcast(x, src=0)
        gathered = [torch.empty(4)]
        dist.all_gather(gathered, x * 2)
        (gathered[0] + x).sum()
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("background", [True, False])
def test_the_observer_records_collectives_as_the_dispatch_mode_does(tmp_path, monkeypatch, built,
                                                                    background):
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("no gloo")
    monkeypatch.setattr(_trace_digest, "BACKGROUND", background)
    mode = traced(tmp_path / "mode.jsonl", collectives)
    assert traced(tmp_path / "observer.jsonl", collectives, driver="observer") == mode
    ops = [json.loads(line)["op"] for line in mode.decode().splitlines()]
    assert {"c10d::allreduce_", "c10d::broadcast_", "c10d::allgather_"} <= set(ops), ops


def test_a_machine_with_a_gpu_is_refused_by_the_observer(tmp_path, monkeypatch):
    """A backward's CUDA ops run on autograd's device threads, which the observer does not
    follow yet: their records would be missing."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(_trace.Unavailable, match="does not follow autograd's device threads "
                                                 "yet: unset it on a machine with a GPU"):
        _trace.start(str(tmp_path / "t.jsonl"), driver="observer")
    assert _trace._state is None


def test_an_error_in_the_tracer_leaves_the_program_running(tmp_path, monkeypatch, built):
    """An exception in a callback is reported as unraisable and its op goes unrecorded; the
    program's ops run as they would."""
    from bitexact._trace import calls

    def broken(*args):
        raise RuntimeError("planted")

    seen = []
    monkeypatch.setattr("sys.unraisablehook", lambda u: seen.append(str(u.exc_value)))
    monkeypatch.setattr(calls, "before", broken)
    x = torch.ones(3)

    def program():
        x.mul_(2)  # an in-place op: its before() raises
        return torch.add(x, 1)  # a plain op: recorded

    out = traced(tmp_path / "t.jsonl", program, driver="observer")
    assert x.tolist() == [2.0, 2.0, 2.0]
    assert "planted" in seen
    assert [json.loads(line)["op"] for line in out.decode().splitlines()] == ["aten::add.Tensor"]
