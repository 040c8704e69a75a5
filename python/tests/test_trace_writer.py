"""The op tracer's background writer (the native TraceWriter, bitexact._trace.digest.background):
traces byte for byte those of the synchronous path (sketches included), digests of the bytes an
op saw even when the program changes them right after, every record written at exit and at
``os._exit``, forked children left alone, malformed records refused."""

import ctypes
import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
from bitexact import _digest  # noqa: E402

pytestmark = pytest.mark.skipif(_digest._native is None, reason="needs bitexact._native")

import bitexact  # noqa: E402
from bitexact import _trace  # noqa: E402
from bitexact._trace import digest as _trace_digest  # noqa: E402
from bitexact._fingerprint import fingerprint  # noqa: E402
from conftest import records, run_alone, traced  # noqa: E402


@pytest.fixture
def trace(tmp_path, monkeypatch):
    monkeypatch.setattr(_trace_digest, "BACKGROUND", True)  # whatever the cores
    path = str(tmp_path / "t.jsonl")
    yield path
    _trace.stop()


def chain():
    """Results read by the next op while their digests may still be computed, tensors changed
    in place, read twice in one op, over the writer's parallel threshold, views with strides."""
    x = torch.ones(1 << 18)
    for i in range(20):
        y = x * x
        x.add_(y[:1].sum())
        x = torch.cat([x[1:], x[:1]]) if i % 3 else x + 1
    big = torch.arange(3 << 18, dtype=torch.float32)
    (big * 2, big + 1, big.t())
    kept = big.reshape(3, -1).t().clone()  # a result with strides: copied as it lies, gathered
    assert not kept.is_contiguous()  # and sketched on the writer's thread
    kept[::2] * 2  # a view spanning twice its bytes and more: gathered on the program's thread
    m = torch.zeros(1 << 18)
    for _ in range(3):  # an optimizer's chain: each op reads what the op before it just wrote,
        m.mul_(0.9).addcmul_(x, x, value=0.1).sqrt_()  # held while the writer hashes it
    kept.t().mul_(2)  # a strided view held
    m.addcmul_(m, x)  # what it writes and an input that aliases it, held one after the other
    ctypes.memset(m.data_ptr(), 0, 8)  # changed where no op ran: a held copy, not a digest
    m.add_(1)
    with pytest.raises(RuntimeError):
        m.add_(torch.ones(3))  # raises after its values were held: they are given back


@pytest.mark.parametrize("cache", [True, False])
def test_background_and_synchronous_traces_are_the_same(tmp_path, monkeypatch, cache):
    monkeypatch.setattr(_trace_digest, "CACHE", cache)

    def run(name, background):
        monkeypatch.setattr(_trace_digest, "BACKGROUND", background)
        return traced(tmp_path / name, chain)

    background = run("background.jsonl", True)
    assert background == run("synchronous.jsonl", False)
    assert background.count(b"\n") > 60 and b"\0" not in background and b"\1" not in background
    assert b'"sk":["' in background  # the float results' sketches, made on the writer's thread


def test_a_tensor_changed_right_after_an_op_keeps_the_digest_the_op_made(trace):
    _trace.start(trace)
    x = torch.arange(1 << 18, dtype=torch.float32)
    y = x * 2
    ctypes.memset(y.data_ptr(), 0, y.nbytes)  # untraced, before the digest could be computed
    y.data.fill_(5.0)
    y * 1
    _trace.stop()
    muls = [r for r in records(trace) if r["op"] == "aten::mul.Tensor"]
    want = torch.arange(1 << 18, dtype=torch.float32) * 2
    assert muls[0]["out"] == ["f32[262144]:" + fingerprint(want)]
    assert muls[1]["in"][0] == "f32[262144]:" + fingerprint(torch.full((1 << 18,), 5.0))


def test_a_record_needs_a_hole_per_tensor(tmp_path):
    writer = _digest.native().TraceWriter(str(tmp_path / "w.jsonl"))
    t = torch.ones(2)
    with pytest.raises(ValueError, match="holes"):
        writer.write("{}\n", [(t.data_ptr(), t.nbytes, "f32", [2])])
    with pytest.raises(ValueError, match="sketch marks"):
        writer.write('["\0"]\n', [(t.data_ptr(), t.nbytes, "f32", [2])], True, [0])
    with pytest.raises(ValueError, match="sketch marks"):
        writer.write('["\0"]\1\n', [(t.data_ptr(), t.nbytes, "f32", [2])], True, [1])
    writer.write('["\0"]\n', [(t.data_ptr(), t.nbytes, "f32", [2])])
    writer.close()
    writer.close()
    writer.write("[]\n", [])  # closed: nothing
    want = '["f32[2]:%s"]\n' % fingerprint(t)
    assert (tmp_path / "w.jsonl").read_text() == want


def test_values_held_before_an_op_are_what_its_record_shows(tmp_path):
    writer = _digest.native().TraceWriter(str(tmp_path / "w.jsonl"))
    t = torch.arange(1 << 12, dtype=torch.float32)
    item = (t.data_ptr(), t.nbytes, "f32", [t.numel()])
    was = fingerprint(t)
    held = writer.hold([item, item], False)
    assert len(held) == 2
    ctypes.memset(t.data_ptr(), 0, t.nbytes)  # written after the hold: the held values stay
    writer.write('["\0","\0","\0"]\n', [held, item, held])
    assert len(held) == 0
    with pytest.raises(ValueError, match="more times than were held"):
        writer.write('["\0"]\n', [held])
    writer.close()
    label = "f32[%d]:" % t.numel()
    want = '["%s%s","%s%s","%s%s"]\n' % (label, was, label, fingerprint(t), label, was)
    assert (tmp_path / "w.jsonl").read_text() == want


HELD_BETWEEN = """
import sys, torch, bitexact._digest as d
writer = d.native().TraceWriter(sys.argv[1])
t = torch.arange(1 << 12, dtype=torch.float32)
item = (t.data_ptr(), t.nbytes, "f32", [t.numel()])
held = writer.hold([item])  # a miss: copied for the writer
writer.write('["\\0"]\\n', [item])  # a record queued in between reads the same bytes
writer.write('["\\0"]\\n', [held])
writer.write('["\\0"]\\n', [item])  # after it: the held copy's entry is a hit
writer.close()
"""


def test_a_record_queued_between_a_hold_and_its_record_never_waits_for_it(tmp_path):
    """A held copy is filed in the digest cache with its record, not at the hold: a record
    queued in between that read the same bytes and waited for the held copy's digest would
    wait for a record behind it, and the writer would never finish."""
    path = tmp_path / "w.jsonl"
    run_alone(HELD_BETWEEN, str(path))
    t = torch.arange(1 << 12, dtype=torch.float32)
    assert path.read_text() == '["f32[%d]:%s"]\n' % (t.numel(), fingerprint(t)) * 3


FORK_RESTART = """
import os, sys, torch, bitexact, bitexact._trace as t, bitexact._trace.digest as d
torch.set_num_threads(1)  # OpenMP's threads are gone in a forked child
d.BACKGROUND = True
big = torch.ones(1 << 22)
bitexact.digest(big)  # the parallel pool started in the parent: its threads are not the child's
t.start(sys.argv[1] + ".parent")
ms = [torch.ones(1 << 20) for _ in range(20)]
for m in ms:
    m.mul_(0.9)  # 80 MiB of results: the writer is still hashing the last ones at the fork
pid = os.fork()
if pid == 0:  # a child that traces on its own: its parent's unfinished digests are not its own
    t.stop()
    t.start(sys.argv[1])
    ms[-1].add_(1)  # held before the op
    ms[-1] + 1  # read by an op
    t.stop()
    bitexact.digest(big)
    os._exit(0)
assert os.waitpid(pid, 0)[1] == 0
t.stop()
"""


def test_a_forked_child_that_traces_never_waits_for_its_parent_s_digests(tmp_path):
    """Nor for its parent's threads: a child hashes a large tensor in a pool of its own."""
    path = tmp_path / "child.jsonl"
    run_alone(FORK_RESTART, str(path))
    ops = [json.loads(line)["op"] for line in path.read_text().splitlines()]
    assert ops == ["aten::add_.Tensor", "aten::add.Tensor"]


CHILD_EXITS = """
import atexit, os, sys, threading, time, torch, bitexact._trace as t, bitexact._trace.digest as d
torch.set_num_threads(1)  # OpenMP's threads are gone in a forked child
d.BACKGROUND = True
t.start(sys.argv[1])
atexit.register(t.stop)  # as bitexact run --trace installs it
done = False

def work():  # a thread of the parent's in traced ops, holding the tracer's lock at times
    b = torch.randn(1 << 20)
    while not done:
        b.mul_(1.0001)

th = threading.Thread(target=work)
th.start()
time.sleep(0.2)
for _ in range(6):
    pid = os.fork()
    if pid == 0:
        sys.exit(0)  # the interpreter's exit: atexit, so the tracer's stop, in the child
    if not waited(pid):
        done = True
        sys.exit("a forked child hung at exit")
done = True
th.join()
"""


def test_a_forked_child_exits_while_its_parent_s_threads_trace(tmp_path):
    """Its exit stops the tracer it inherited, whose lock a thread of the parent's may have
    held when it forked (that thread is not in the child): stopping there leaves it alone."""
    run_alone(CHILD_EXITS, str(tmp_path / "t.jsonl"), timeout=300)


EXIT = """
import atexit, os, sys, torch, bitexact._trace as t, bitexact._trace.digest as d
d.BACKGROUND = True
t.start(sys.argv[1])
atexit.register(t.stop)
x = torch.ones(1 << 16)
pid = os.fork()
if pid == 0:  # a forked child: not traced; stopping there leaves the parent's writer alone
    torch.ones(2) * 3  # small: OpenMP's threads are gone after a fork
    t.stop()
    os._exit(0)
assert os.waitpid(pid, 0)[1] == 0
for i in range(300):
    x = x + 1
"""


def test_every_record_is_written_at_exit_and_a_forked_child_leaves_the_writer_alone(tmp_path):
    path = str(tmp_path / "t.jsonl")
    run_alone(EXIT, path, timeout=300)
    rs = records(path)
    assert [r["op"] for r in rs] == ["aten::ones"] + ["aten::add.Tensor"] * 300
    assert rs[-1]["out"] == ["f32[65536]:" + fingerprint(torch.full((1 << 16,), 301.0))]


CHILD = """
import os, sys, torch
from bitexact import _digest
top = os.getpid()
writer = _digest.native().TraceWriter(sys.argv[1])
t = torch.ones(2)
item = [(t.data_ptr(), t.nbytes, "f32", [2])]
writer.write('["\\0"]\\n', item)
for _ in range(2):  # a child, and the child's child: the writer is the first process's only
    pid = os.fork()
    if pid:
        assert os.waitpid(pid, 0)[1] == 0
        break
    writer.write('["child\\0"]\\n', item)
    writer.close()
if os.getpid() != top:
    os._exit(0)
writer.write('["\\0"]\\n', item)
writer.close()
"""


def test_the_native_writer_does_nothing_in_a_forked_child(tmp_path):
    path = str(tmp_path / "w.jsonl")
    run_alone(CHILD, path, timeout=120)
    label = '["f32[2]:%s"]\n' % fingerprint(torch.ones(2))
    assert (tmp_path / "w.jsonl").read_text() == label * 2


DRAIN = """
import os, sys, torch, bitexact._trace as t, bitexact._trace.digest as d
d.BACKGROUND = True
t.start(sys.argv[1])
x = torch.ones(1 << 18)
for i in range(200):
    x = x + 1
sys.stdout.flush()
os._exit(3)  # no atexit: the tracer drains the writer first
"""


def test_os_exit_writes_every_queued_record(tmp_path):
    path = str(tmp_path / "t.jsonl")
    done = subprocess.run([sys.executable, "-c", DRAIN, path], timeout=300)
    assert done.returncode == 3
    rs = records(path)
    assert [r["op"] for r in rs] == ["aten::ones"] + ["aten::add.Tensor"] * 200
    last = torch.full((1 << 18,), 201.0)
    labels, sketches = _digest.native().trace_digests(
        [(last.data_ptr(), last.nbytes, "f32", [1 << 18])], False, [True])
    assert rs[-1]["out"] == labels and rs[-1]["sk"] == sketches
    assert labels[0] == "f32[262144]:" + fingerprint(last)


CHILD_TRAINS = """
import os, sys, threading, time, torch, bitexact._trace as t
torch.set_num_threads(1)  # OpenMP's threads are gone in a forked child
t.start(sys.argv[1])
state = t._state
locks = [state.lock, state.tracker._lock, state.tracker._grads._lock]
held, release = threading.Event(), threading.Event()

def hold():  # a thread of the parent's inside the tracer's locks when the program forks
    for lock in locks:
        lock.acquire()
    held.set()
    release.wait()
    for lock in locks:
        lock.release()

th = threading.Thread(target=hold, daemon=True)
th.start()
held.wait()
pid = os.fork()
if pid == 0:  # a fork pool's process that trains (Hogwild): module hooks, backward, a step
    m = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    m(torch.ones(1, 2)).sum().backward()
    opt.step()
    os._exit(0)
if not waited(pid):
    sys.exit("the forked child hung on a lock its parent's thread held")
release.set()
th.join()
t.stop()
"""


def test_a_forked_child_trains_while_its_parent_s_thread_holds_the_tracer_s_locks(tmp_path):
    """The module tracker's, its gradient hooks' and the state's locks are made anew in a
    forked child: the thread of the parent's that held one is not there to release it."""
    run_alone(CHILD_TRAINS, str(tmp_path / "t.jsonl"), timeout=300)
