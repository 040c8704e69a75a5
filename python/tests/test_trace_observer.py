"""The op tracer's observer driver (``bitexact._trace.observer``: torch's RecordFunction
callbacks in place of a ``TorchDispatchMode``) writes the dispatch mode's records byte for byte,
hashed by the background writer or on the program's thread, but where torch computes in place
without a dispatch mode and out of place under one (autograd's gradient accumulation: ``add_``
under the observer, ``add`` under the mode; the same tensors). A compiler it cannot run, or a
driver that does not exist, is named before tracing starts. Collectives are recorded as the
dispatch mode records them."""

import json
import os

import pytest

torch = pytest.importorskip("torch")
from torch.utils.checkpoint import checkpoint  # noqa: E402
from bitexact import _digest  # noqa: E402

pytestmark = pytest.mark.skipif(_digest._native is None, reason="needs bitexact._native")

from bitexact import _trace  # noqa: E402
from bitexact._trace import digest as _trace_digest  # noqa: E402
from bitexact._trace import observer, plain  # noqa: E402
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


class Doubled(torch.autograd.Function):
    """Doubles; its backward adds in place, after a backward of its own (reentrant: there
    autograd accumulates a gradient, inside the outer backward's node)."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        with torch.enable_grad():
            a = grad.detach().requires_grad_()
            (inner,) = torch.autograd.grad((a * 2 + a * 3).sum(), a)
        return grad.mul(2).add_(inner.mul(0))


def training():
    """Three AdamW steps of two residual blocks with dropout and :class:`Doubled` (the second
    block checkpointed in the last: a reentrant backward; gradients kept at zero before it), a
    seeded generator's noise, an ``out=`` op and an aliased in-place op, then the native lane's
    program."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(Block(), Block())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    for step in range(3):
        x = torch.randn(4, 8, generator=g)
        if step < 2:
            y = model(x)
        else:
            y = checkpoint(model[1], model[0](x), use_reentrant=True)
        Doubled.apply(y).square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=step == 0)
    out = torch.empty(4, 8)
    torch.add(x, 1.5, out=out)
    out.add_(out)
    lane_program()


def in_place(op):
    """The in-place variant's name of ``op`` (``aten::add.Tensor`` -> ``aten::add_.Tensor``)."""
    name, dot, overload = op.partition(".")
    return name + "_" + dot + overload


def same_but_in_place(mode, observed):
    """Asserts the traces' records are equal but where the observer's op is the in-place
    variant of the mode's (the same tensors); returns those ops' (name, phase)."""
    a, b = mode.decode().splitlines(), observed.decode().splitlines()
    assert len(a) == len(b)
    differ = []
    for x, y in zip(a, b):
        if x != y:
            rx, ry = json.loads(x), json.loads(y)
            assert ry["op"] == in_place(rx["op"]), (x, y)
            ry["op"] = rx["op"]
            assert rx == ry
            differ.append((rx["op"], rx["phase"]))
    return differ


@pytest.mark.parametrize("background", [True, False])
def test_the_observer_records_what_the_dispatch_mode_records(tmp_path, monkeypatch, built,
                                                             background):
    monkeypatch.setattr(_trace_digest, "BACKGROUND", background)
    mode = traced(tmp_path / "mode.jsonl", training, driver="mode")
    described, held, record, hold = [], [], plain.record, plain.hold
    scope = {"record": record, "hold": hold, "described": described, "held": held}
    exec(compile("def counting(*args):\n"  # a "<...>" file: a frame the source walk skips
                 "    described.append(args[8] is not None)\n"
                 "    return record(*args)\n"
                 "def holding(*args):\n"
                 "    held.append(args[6] is not None)\n"
                 "    return hold(*args)\n", "<counting>", "exec"), scope)
    monkeypatch.setattr(plain, "record", scope["counting"])
    monkeypatch.setattr(plain, "hold", scope["holding"])
    observed = traced(tmp_path / "observer.jsonl", training, driver="observer")
    # autograd's gradient accumulations only (in place without a dispatch mode)
    assert same_but_in_place(mode, observed) == [("aten::add.Tensor", "backward")] * 5
    rows = [json.loads(line) for line in observed.decode().splitlines()]
    # The observer read the tensors of every op that writes nothing, and of every in-place op
    # that reads its self only, itself (host tensors all).
    assert len(described) >= 100 and all(described), described
    assert len(held) >= 50 and all(held), held
    monkeypatch.setattr(plain, "record", record)
    monkeypatch.setattr(plain, "hold", hold)
    monkeypatch.setenv(_trace.DRIVER_ENV, "observer")
    assert traced(tmp_path / "env.jsonl", training) == observed
    monkeypatch.delenv(_trace.DRIVER_ENV)
    assert traced(tmp_path / "auto.jsonl", training) == observed  # the default: auto
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
    with pytest.raises(ValueError, match="BITEXACT_TRACE_DRIVER must be auto, mode or observer, "
                                         "not 'observr'"):
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
    mode = traced(tmp_path / "mode.jsonl", collectives, driver="mode")
    assert traced(tmp_path / "observer.jsonl", collectives, driver="observer") == mode
    ops = [json.loads(line)["op"] for line in mode.decode().splitlines()]
    assert {"c10d::allreduce_", "c10d::broadcast_", "c10d::allgather_"} <= set(ops), ops


def test_a_machine_with_a_gpu_is_refused_by_the_observer(tmp_path, monkeypatch):
    """A backward's CUDA ops run on autograd's device threads, which the observer does not
    follow yet: their records would be missing. ``auto`` takes the dispatch mode there."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(_trace.Unavailable, match="does not follow autograd's device threads "
                                                 "yet: unset it on a machine with a GPU"):
        _trace.start(str(tmp_path / "t.jsonl"), driver="observer")
    assert _trace._state is None
    _trace.start(str(tmp_path / "t.jsonl"))
    try:
        assert not isinstance(_trace._active[0], _trace._Observing)
    finally:
        _trace.stop()
    if hasattr(torch, "accelerator"):  # another accelerator (Apple's MPS, Intel's XPU): the same
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
        monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
        _trace.start(str(tmp_path / "t.jsonl"))
        try:
            assert not isinstance(_trace._active[0], _trace._Observing)
        finally:
            _trace.stop()


def test_auto_takes_the_mode_where_the_observer_cannot_be_built_and_says_so_once(
        tmp_path, monkeypatch, capfd):
    """A compiler that cannot run: ``auto`` traces through the dispatch mode and says why, once
    per process; the failure is remembered, so the next start does not compile again (``observer``
    retries)."""
    monkeypatch.setattr(observer, "_lib", [])
    monkeypatch.setattr(observer, "_noted", [])
    monkeypatch.setenv("BITEXACT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-c++"))
    compiles, compile_ = [], observer._compile
    monkeypatch.setattr(observer, "_compile", lambda *a: compiles.append(1) or compile_(*a))

    def program():
        torch.ones(3).add_(1).mul(2)

    runs = [traced(tmp_path / ("t%d.jsonl" % i), program) for i in range(2)]
    assert runs[0] == runs[1] == traced(tmp_path / "mode.jsonl", program, driver="mode")
    err = capfd.readouterr().err
    assert err.count("bitexact: tracing through a dispatch mode, slower: cannot run the C++ "
                     "compiler") == 1, err
    assert "BITEXACT_TRACE_DRIVER=mode skips the observer" in err and len(compiles) == 1
    with pytest.raises(_trace.Unavailable, match="cannot run the C\\+\\+ compiler"):
        _trace.start(str(tmp_path / "t.jsonl"), driver="observer")
    assert len(compiles) == 2 and _trace._state is None
    (tmp_path / "file").write_text("")  # a cache directory that cannot be made
    monkeypatch.setenv("BITEXACT_CACHE_DIR", str(tmp_path / "file"))
    with pytest.raises(_trace.Unavailable, match="cannot write the observer's cache .*file"):
        _trace.start(str(tmp_path / "t.jsonl"), driver="observer")
    assert traced(tmp_path / "t2.jsonl", program) == runs[0]


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


@pytest.mark.filterwarnings("ignore::FutureWarning")  # torch.jit.wait, deprecated
def test_a_thread_that_never_ran_python_is_not_followed(tmp_path, monkeypatch, built):
    """A scripted fork's task runs on torch's interop threads, which never ran Python: the
    observer calls no Python there (no GIL taken on a thread its holder may wait for). Their
    ops go unrecorded, as autograd's device threads' (the dispatch mode's records follow the
    task: ``BITEXACT_TRACE_DRIVER=mode`` for a program that forks TorchScript tasks)."""
    import threading

    threads, plain_call = [], _trace._observed_plain
    monkeypatch.setattr(_trace, "_observed_plain",
                        lambda *a: threads.append(threading.current_thread()) or plain_call(*a))

    @torch.jit.script
    def work(x):
        return x * 2 + 1

    @torch.jit.script
    def outer(x):
        return torch.jit.wait(torch.jit.fork(work, x)) + x

    def program():
        for _ in range(3):
            outer(torch.ones(1000))

    traced(tmp_path / "t.jsonl", program, driver="observer")
    assert threads and set(threads) == {threading.main_thread()}, threads
