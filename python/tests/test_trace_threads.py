"""The op tracer with threads and activation checkpointing: each thread the program starts is
its own stream (label, step, occurrence numbers), a thread's module never leaks into another's,
and recomputed forwards are recorded under their own module in phase ``recompute``."""

import threading

import pytest

torch = pytest.importorskip("torch")
from bitexact import _digest  # noqa: E402

pytestmark = pytest.mark.skipif(_digest._native is None, reason="needs bitexact._native")

from bitexact import _trace  # noqa: E402
from torch.utils.checkpoint import checkpoint  # noqa: E402


from conftest import records, trace  # noqa: E402,F401  (the shared trace fixture)


def run_thread(target, **kw):
    t = threading.Thread(target=target, **kw)
    t.start()
    t.join()


def side_ops():
    torch.ones(2).mul(3)


class EMA(threading.Thread):
    def run(self):
        side_ops()


def test_each_thread_is_its_own_stream_with_a_stable_label(trace):
    _trace.start(trace)
    run_thread(side_ops)
    run_thread(side_ops)
    run_thread(side_ops, name="metrics")
    t = EMA()
    t.start()
    t.join()

    def nested():
        run_thread(side_ops)

    run_thread(nested, name="pool")
    torch.zeros(1).add(1)
    _trace.stop()
    ops = [(r.get("thread", ""), r["op"]) for r in records(trace)
           if r["op"] in ("aten::mul.Tensor", "aten::add.Tensor")]
    assert ops == [("side_ops#0", "aten::mul.Tensor"), ("side_ops#1", "aten::mul.Tensor"),
                   ("metrics#0", "aten::mul.Tensor"), ("EMA#0", "aten::mul.Tensor"),
                   ("pool#0/side_ops#0", "aten::mul.Tensor"), ("", "aten::add.Tensor")]
    assert "thread" not in records(trace)[-1]  # the main stream's records have no field


def test_a_thread_keeps_the_step_it_started_at_and_counts_its_own(trace):
    net = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    _trace.start(trace)
    opt.step()
    started, go = threading.Event(), threading.Event()

    def ema():
        started.set()
        go.wait()
        side_ops()  # after the main thread's second step: still step 1 here

    t = threading.Thread(target=ema, name="ema")
    t.start()
    started.wait()
    opt.step()
    go.set()
    t.join()
    _trace.stop()
    (mul,) = [r for r in records(trace) if r["op"] == "aten::mul.Tensor"]
    assert (mul["thread"], mul["step"]) == ("ema#0", 1)


def test_threads_started_while_paused_are_not_traced(trace):
    _trace.start(trace)
    with _trace.paused():
        t = threading.Thread(target=side_ops)
        t.start()
    t.join()
    _trace.stop()
    assert not [r for r in records(trace) if r["op"] == "aten::mul.Tensor"]


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(2, 2)

    def forward(self, x):
        return self.fc(x)


def test_an_op_is_not_given_the_module_another_thread_is_in(trace):
    inside, done = threading.Event(), threading.Event()

    class Waits(torch.nn.Module):
        def forward(self, x):
            inside.set()
            done.wait()
            return x * 2

    _trace.start(trace)
    t = threading.Thread(target=Waits(), args=(torch.ones(2),), name="side")
    t.start()
    inside.wait()
    torch.ones(2).add(1)  # the side thread is inside Waits.forward now
    done.set()
    t.join()
    _trace.stop()
    by_op = {r["op"]: r for r in records(trace)}
    assert by_op["aten::add.Tensor"]["module"] == ""
    assert (by_op["aten::mul.Tensor"]["module"], by_op["aten::mul.Tensor"]["thread"]) == (
        "Waits", "side#0")


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.drop = torch.nn.Dropout(0.0)

    def forward(self, x):
        return self.drop(torch.relu(self.fc(x)))


class Deep(torch.nn.Module):
    def __init__(self, reentrant):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block() for _ in range(4))
        self.reentrant = reentrant

    def forward(self, x):
        for b in self.blocks:
            x = checkpoint(b, x, use_reentrant=self.reentrant)
        return x


@pytest.mark.parametrize("reentrant", [False, True])
def test_recomputed_ops_carry_their_module_in_phase_recompute(trace, reentrant):
    torch.manual_seed(0)
    net = Deep(reentrant)
    x = torch.randn(2, 4, requires_grad=True)
    _trace.start(trace)
    net(x).sum().backward()
    _trace.stop()
    addmm = [(r["phase"], r["module"]) for r in records(trace) if r["op"] == "aten::addmm"]
    fcs = ["Deep.blocks.%d.fc" % i for i in range(4)]
    assert addmm == [("forward", m) for m in fcs] + [("recompute", m) for m in reversed(fcs)]
    back = {r["module"] for r in records(trace) if r["phase"] == "backward"}
    assert "Deep.blocks.3.fc" in back or reentrant  # reentrant: a nested backward


def test_module_level_records_recomputed_module_outputs(tmp_path):
    path = str(tmp_path / "m.jsonl")
    torch.manual_seed(0)
    net = Deep(False)
    x = torch.randn(2, 4, requires_grad=True)
    _trace.start(path, level="modules")
    try:
        net(x).sum().backward()
    finally:
        _trace.stop()
    outs = [(r["phase"], r["module"]) for r in records(path) if r["module"] == "Deep.blocks.3.fc"]
    assert outs == [("forward", "Deep.blocks.3.fc"), ("recompute", "Deep.blocks.3.fc")]
