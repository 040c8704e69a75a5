"""Sketches of tensors hashed on their device (bitexact._trace.device.device_sketch: float64
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

from bitexact._trace import device as _trace_device  # noqa: E402
from bitexact._trace import digest as _trace_digest  # noqa: E402
from conftest import no_host_lanes, traced  # noqa: E402


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


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16,
                                   getattr(torch, "float8_e4m3fn", None)])
@pytest.mark.parametrize("n", [0, 1, 3, 8, 100, 12345])
def test_a_device_sketch_is_the_host_sketch(dtype, n, device):
    if dtype is None:
        pytest.skip("this torch has no float8_e4m3fn")
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device: the same torch ops ran on the CPU above")
    t = values(n).to(dtype)
    if n >= 8:  # non-finite values are counted and left out of the norm and the magnitude
        t[1] = float("nan")
        t[n // 2] = float("inf")
    got, want = _trace_device.device_sketch(t.to(device)), native_sketch(t)
    assert same(got, want), (got, want)
    assert got.count(";" if dtype != torch.float64 else "|") == 1


@pytest.mark.parametrize("finite", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16,
                                   getattr(torch, "float8_e4m3fn", None)])
def test_a_large_tensor_is_sketched_a_slice_at_a_time_with_the_same_values(monkeypatch, dtype,
                                                                           finite):
    """A tensor of more than SKETCH_SLICE elements is reduced a slice at a time (temporaries of
    a slice's size, not the tensor's): the same sketch as the host's, non-finite elements
    counted and left out."""
    if dtype is None:
        pytest.skip("this torch has no float8_e4m3fn")
    monkeypatch.setattr(_trace_device, "SKETCH_SLICE", 100)
    t = values(1234, 5).to(dtype)
    t[7], t[640], t[1233] = float("nan"), float("inf"), float("-inf")
    parts, done = _trace_device.start_sketches([t], finite=finite)
    got, want = done([p.tolist() for p in parts])[0], native_sketch(t)
    assert same(got, want), (got, want)
    u = values(1000, 6).to(dtype)  # all finite
    assert same(_trace_device.device_sketch(u), native_sketch(u))


def test_integers_have_no_sketch():
    assert _trace_device.device_sketch(torch.arange(5)) == ""
    assert _trace_device.device_sketch(torch.ones(3, dtype=torch.bool)) == ""


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
    # Every tensor "on a device": the general path, fingerprints from torch ops where the
    # tensor lives (bitexact._fingerprint, here on the CPU), sketches from device_sketch.
    fingerprinted = []
    monkeypatch.setattr(_trace_device, "start_sketches", counted(
        _trace_device.start_sketches, fingerprinted))
    all_on_device(monkeypatch)
    device = run("device.jsonl")
    assert len(fingerprinted) > 10
    assert [r["out"] for r in device] == [r["out"] for r in host]
    same_sketches(host, device)


def same_sketches(host, device):
    """The records ``device`` carry the sketches of ``host`` (the norms to 1e-12), and every
    one with a float32 result has some."""
    sketched = [(a["sk"], b["sk"]) for a, b in zip(host, device) if "sk" in a]
    assert len(sketched) > 10 and all("sk" in b for b in device if any(
        o.startswith("f32") for o in b["out"]))
    for a, b in sketched:
        assert len(a) == len(b) and all(x == y == "" or same(x, y) for x, y in zip(a, b))


def counted(f, calls):
    """``f``, appending its arguments to ``calls`` at each call."""
    def count(*args, **kwargs):
        calls.append(args)
        return f(*args, **kwargs)
    return count


def all_on_device(monkeypatch):
    """Makes the tracer take every host tensor for a device tensor that is fingerprinted and
    sketched where it lives (here by torch's ops on the CPU): the general path, and no record
    takes the all-host shortcut."""
    monkeypatch.setattr(_trace_digest, "_fast", lambda t, max_bytes, strided=False: None)
    no_host_lanes(monkeypatch)
    monkeypatch.setattr(_trace_device, "fingerprinted_there", lambda t: True)


def on_device(monkeypatch, which):
    """Makes the tracer take the host tensors ``which`` picks for device tensors: CUDA is
    initialized, they are staged, and no record takes the all-host shortcut
    (``_trace_digest._all_fast``, which a real device tensor fails by ``is_cpu``)."""
    monkeypatch.setattr(_trace_device, "any_on_device", lambda: True)
    monkeypatch.setattr(_trace_device, "on_device", which)
    no_host_lanes(monkeypatch)


@pytest.mark.parametrize("background", [False, True])
def test_staged_tensors_give_the_host_trace_byte_for_byte(tmp_path, monkeypatch, background):
    """Device tensors staged to the host (_trace_device.staged) take the host's path: here
    every host tensor is staged as a device tensor would be (copied into one buffer first),
    and the trace is the unstaged one, byte for byte."""
    monkeypatch.setattr(_trace_digest, "BACKGROUND", background)
    host = traced(tmp_path / "host.jsonl", program)
    copies = []
    staged = _trace_device.staged

    def counting(tensors, scratch, max_bytes, waits=None):
        out = staged(tensors, scratch, max_bytes, waits)
        copies.extend(a.data_ptr() != b.data_ptr() for a, b in zip(out, tensors)
                      if isinstance(a, torch.Tensor) and a.numel())
        return out

    on_device(monkeypatch, lambda t: True)
    monkeypatch.setattr(_trace_device, "staged", counting)
    assert traced(tmp_path / "staged.jsonl", program) == host
    assert len(copies) > 20 and all(copies)


def test_staging_leaves_what_it_cannot_copy(monkeypatch):
    monkeypatch.setattr(_trace_device, "any_on_device", lambda: True)
    monkeypatch.setattr(_trace_device, "on_device", lambda t: True)
    big, scratch, z = torch.ones(100), torch.ones(3), torch.ones(2, dtype=torch.complex64)
    ok = torch.arange(6.0).reshape(2, 3).t()  # not contiguous: staged as its contiguous copy
    out = _trace_device.staged([big, scratch, z, ok, torch.ones(0, 2)], {1}, 256)
    assert out[0] is big and out[1] is scratch and out[2] is z
    assert torch.equal(out[3], ok) and out[3].is_contiguous() and out[3].shape == (3, 2)
    assert out[4].shape == (0, 2)
    nothing = [big, scratch]
    assert _trace_device.staged(nothing, {1}, 256) is nothing


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_a_cuda_program_traces_the_same_staged_or_hashed_on_the_device(tmp_path, monkeypatch):
    def gpu_program():
        torch.manual_seed(0)
        layer = torch.nn.Linear(16, 8).cuda()
        x = torch.randn(4, 16, device="cuda")
        y = torch.nn.functional.layer_norm(layer(x), (8,))
        (y.square().mean() * 2).backward()

    staged = [json.loads(line) for line in traced(tmp_path / "s.jsonl", gpu_program).splitlines()]
    monkeypatch.setattr(_trace_device, "STAGE_MAX", -1)
    device = [json.loads(line) for line in traced(tmp_path / "d.jsonl", gpu_program).splitlines()]
    assert len(staged) == len(device) > 10
    for a, b in zip(staged, device):
        assert (a["in"], a["out"]) == (b["in"], b["out"])
        assert all(x == y == "" or same(x, y) for x, y in zip(a.get("sk", []), b.get("sk", [])))


class _Copy:
    """A stand-in for a CUDA event: the staged bytes arrive when it is waited for."""

    def __init__(self, pairs):
        self.pairs, self.waited = pairs, False

    def synchronize(self):
        for dst, src in self.pairs:
            dst.copy_(src)
        self.waited = True


def mutating():
    """Host tensors beside "device" ones (2-D) change right after the ops that read them."""
    program()
    w, b = torch.ones(4, 4), torch.zeros(4)
    for _ in range(3):
        y = torch.add(w, b)
        b.add_(1)
        w.data = y * 2  # as module.cuda() swaps a parameter's storage


@pytest.mark.parametrize("where", ["all", "2-D"])
def test_records_wait_for_their_staged_copies_and_keep_their_order(tmp_path, monkeypatch, where):
    """With the background writer, staged copies are waited for every PENDING_RECORDS records
    (and at stop), not per op: here a staged tensor's bytes are garbage until its "event" is
    waited for, so a record written before the wait would show in the trace. With only 2-D
    tensors "on the device", a waiting record's host tensors change before it is written
    (unless copied when the op ran)."""
    from bitexact._trace import state as _trace_state

    monkeypatch.setattr(_trace_digest, "BACKGROUND", True)
    host = traced(tmp_path / "host.jsonl", mutating)
    staged, events = _trace_device.staged, []

    def late(tensors, scratch, max_bytes, waits=None):
        out = staged(tensors, scratch, max_bytes, waits)
        if waits is None:
            return out
        pairs = [(o, o.clone()) for o, t in zip(out, tensors) if o is not t and o.numel()]
        for o, _ in pairs:
            o.reshape(-1).view(torch.uint8).fill_(0xAB)
        events.append(_Copy(pairs))
        waits.append(([events[-1]], 1))
        return out

    on_device(monkeypatch, (lambda t: True) if where == "all" else (lambda t: t.dim() == 2))
    monkeypatch.setattr(_trace_device, "staged", late)
    monkeypatch.setattr(_trace_state, "PENDING_RECORDS", 7)
    assert traced(tmp_path / "staged.jsonl", mutating) == host
    assert len(events) > 10 and all(e.waited for e in events)


def test_an_op_that_brings_device_data_to_the_host_writes_the_waiting_records(tmp_path,
                                                                              monkeypatch):
    """A record waiting for its staged copies is written as soon as an op brings device data
    to the host (``.cpu()``, ``.item()``): the program may write that to a file next, and a run
    stopped early for the file must have the records of the ops that made it. Here 2-D tensors
    are "on the device", so ``sum(0)`` of one is such an op."""
    import bitexact._trace as tracer
    from bitexact._trace import state as _trace_state

    monkeypatch.setattr(_trace_digest, "BACKGROUND", True)
    staged, events = _trace_device.staged, []

    def late(tensors, scratch, max_bytes, waits=None):
        out = staged(tensors, scratch, max_bytes, waits)
        if waits is not None:
            events.append(_Copy([]))
            waits.append(([events[-1]], 1))
        return out

    on_device(monkeypatch, lambda t: t.dim() == 2)
    monkeypatch.setattr(_trace_device, "staged", late)
    monkeypatch.setattr(_trace_state, "PENDING_RECORDS", 1000)
    tracer.start(str(tmp_path / "t.jsonl"))
    try:
        w = torch.ones(4, 4)
        y = torch.mul(w, 2)
        z = torch.add(y, w)
        assert len(tracer._state.pending) == 3 and not any(e.waited for e in events)
        z.sum(0)
        assert tracer._state.pending == [] and len(events) == 4
        assert all(e.waited for e in events)
        torch.mul(z, 3)
        assert len(tracer._state.pending) == 1
    finally:
        tracer.stop()
    ops = [json.loads(line)["op"] for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert ops == ["aten::ones", "aten::mul.Tensor", "aten::add.Tensor",
                   "aten::sum.dim_IntList", "aten::mul.Tensor"]


def test_what_brings_device_data_to_the_host(monkeypatch):
    dev, host = torch.ones(2, 2), torch.ones(2)
    monkeypatch.setattr(_trace_device, "on_device", lambda t: t.dim() == 2)
    reaches = _trace_device.reaches_host
    assert reaches("aten::_to_copy", [dev], [host], "dtype=float32")
    assert reaches("aten::copy_", [host, dev], [host], "")
    assert reaches("aten::_local_scalar_dense", [dev], [], "")  # .item()
    assert not reaches("aten::_to_copy", [dev], [host], "non_blocking=True")  # not waited for
    assert not reaches("aten::mul.Tensor", [dev, dev], [dev], "")
    assert not reaches("aten::_to_copy", [host], [dev], "")


def test_sketches_of_several_device_tensors_are_each_ones_own():
    """All of an op's device tensors are sketched with one copy back; each gets its own sketch,
    a tensor with non-finite elements too (its norm made again over the finite ones)."""
    a, b, c = values(100, 1), values(50, 2), values(7, 3).to(torch.float32)
    b[3], b[10] = float("nan"), float("-inf")
    ints = torch.arange(4)
    got = _trace_device.device_sketches([a, b, ints, c])
    want = [native_sketch(a), native_sketch(b), "", native_sketch(c)]
    assert got[2] == "" and all(same(g, w) for g, w in zip(got, want) if w), (got, want)
    assert [_trace_device.device_sketch(t) for t in (a, b, ints, c)] == got


def two_d_on_device(monkeypatch):
    """Makes the tracer take 2-D host tensors for device tensors fingerprinted and sketched
    where they live; others stay on the host's fast path (records mix the two)."""
    fast = _trace_digest._fast
    monkeypatch.setattr(_trace_digest, "_fast", lambda t, max_bytes, strided=False: (
        None if t.dim() == 2 else fast(t, max_bytes, strided)))
    no_host_lanes(monkeypatch)
    monkeypatch.setattr(_trace_device, "fingerprinted_there", lambda t: t.dim() == 2)


def changing():
    """mutating(), then "device" tensors with non-finite elements (their sketches leave them
    out) that change right after the ops that made them, beside host ones that change too."""
    mutating()
    w, b = torch.ones(4, 4), torch.zeros(4)
    w[0, 0], w[1, 1] = float("nan"), float("inf")
    for _ in range(3):
        y = torch.add(w, b)
        y.mul_(3)
        b.add_(1)


def late_copies(monkeypatch, events, event=None):
    """Makes each deferred copy to the host hold garbage until its "event" is waited for."""
    to_host = _trace_device._to_host

    def late(parts, waits):
        out = to_host(parts, waits)
        pairs = [(h, h.clone()) for h in out]
        for h, _ in pairs:
            h.view(torch.uint8).fill_(0xAB)
        events.append((event or _Copy)(pairs))
        waits.append(([events[-1]], 1))
        return out

    monkeypatch.setattr(_trace_device, "_to_host", late)


@pytest.mark.parametrize("where", ["all", "2-D"])
def test_device_values_reach_the_record_after_its_wait_without_the_program_waiting(
        tmp_path, monkeypatch, where):
    """With the background writer, a device tensor's fingerprint and sketch are computed on its
    device and copied to the host without waiting (_trace_device.defer_fingerprints and
    defer_sketches): the record waits for them with the others, every PENDING_RECORDS records.
    Here the host copies hold garbage until their "event" is waited for, and the tensors (host
    and "device" ones, some with non-finite elements) change right after the ops that read or
    made them (changing()), so a value read before the wait, a device tensor read again at the
    wait or a host tensor of the record not copied when the op ran would show in the trace; and
    no fingerprint or sketch is brought to the host on the program's thread (device_sketches,
    fingerprints)."""
    from bitexact import _fingerprint
    from bitexact._trace import state as _trace_state

    monkeypatch.setattr(_trace_digest, "BACKGROUND", True)
    host = [json.loads(line) for line in traced(tmp_path / "host.jsonl", changing).splitlines()]
    events = []

    def waited(*args):
        raise AssertionError("a device value brought to the host on the program's thread")

    late_copies(monkeypatch, events)
    monkeypatch.setattr(_trace_device, "device_sketches", waited)
    monkeypatch.setattr(_fingerprint, "fingerprints", waited)
    all_on_device(monkeypatch) if where == "all" else two_d_on_device(monkeypatch)
    monkeypatch.setattr(_trace_state, "PENDING_RECORDS", 7)
    device = [json.loads(line) for line in
              traced(tmp_path / "device.jsonl", changing).splitlines()]
    assert len(events) > 20 and all(e.waited for e in events)
    assert [(r["in"], r["out"]) for r in device] == [(r["in"], r["out"]) for r in host]
    same_sketches(host, device)


def test_records_made_while_a_cuda_graph_is_captured_wait_for_its_end(tmp_path, monkeypatch):
    """While a CUDA graph is captured nothing may wait for the device (an event's synchronize
    is illegal then): records made before it that still wait, and those made during it (their
    device tensors labelled :-, their host tensors copied), are written in order after it."""
    from bitexact._trace import state as _trace_state

    capture = [False]

    class Strict(_Copy):
        def synchronize(self):
            assert not capture[0], "waited for the device while a CUDA graph was captured"
            super().synchronize()

    def program():
        w, b = torch.ones(4, 4), torch.zeros(4)
        y = torch.add(w, b)  # waits for its device values
        capture[0] = True
        torch.mul(y, 2)  # in the graph: not hashed
        torch.mul(b, 2)  # a host tensor: hashed, after a copy
        b.add_(1)  # changes it before the capture ends
        capture[0] = False
        torch.sub(b, 1)  # after the capture: every record is written

    monkeypatch.setattr(_trace_digest, "BACKGROUND", True)
    host = [json.loads(line) for line in traced(tmp_path / "host.jsonl", program).splitlines()]
    events = []
    late_copies(monkeypatch, events, Strict)
    two_d_on_device(monkeypatch)
    monkeypatch.setattr(_trace_device, "capturing", lambda: capture[0])
    monkeypatch.setattr(_trace_state, "PENDING_RECORDS", 1000)
    device = [json.loads(line) for line in traced(tmp_path / "d.jsonl", program).splitlines()]
    assert [r["op"] for r in device] == [r["op"] for r in host]
    assert events and all(e.waited for e in events)
    for a, b in zip(host, device):
        for x, y in zip(a["in"] + a["out"], b["in"] + b["out"]):
            assert y == x or (y.endswith(":-") and y.startswith("f32[4,4]")), (a, b)
    muls = [r for r in device if r["op"] == "aten::mul.Tensor"]
    assert muls[0]["in"][0].endswith(":-") and not muls[1]["in"][0].endswith(":-")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_a_cuda_graph_is_captured_and_replayed_under_the_tracer(tmp_path, monkeypatch):
    """On a GPU, with records still waiting for their device values when the capture starts:
    nothing waits for the device during torch.cuda.graph's capture (that would invalidate it),
    the captured ops' device tensors are labelled :-, the replay gives the eager result, and
    the records after it have fingerprints again."""
    monkeypatch.setattr(_trace_digest, "BACKGROUND", True)
    monkeypatch.setattr(_trace_device, "STAGE_MAX", -1)  # every device value deferred

    def gpu_program():
        torch.manual_seed(0)
        x = torch.randn(256, 256, device="cuda")
        w = torch.randn(256, 256, device="cuda")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # the warm-up torch.cuda.graph's docs ask for
            eager = torch.relu(x @ w)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = torch.relu(x @ w)
        graph.replay()
        assert torch.equal(out, eager)
        torch.mul(out, 2).sum().item()

    records = [json.loads(line)
               for line in traced(tmp_path / "g.jsonl", gpu_program).splitlines()]
    ops = [r["op"] for r in records]
    assert ops.count("aten::mm") == 2 and ops.count("aten::relu") == 2, ops
    first, second = (i for i, op in enumerate(ops) if op == "aten::mm")
    assert not any(x.endswith(":-") for x in records[first]["in"] + records[first]["out"])
    assert all(x.endswith(":-") for x in records[second]["in"] + records[second]["out"])
    after = records[ops.index("aten::mul.Tensor")]
    assert not any(x.endswith(":-") for x in after["in"] + after["out"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("stage_max", [None, -1])
def test_a_cuda_in_place_op_reads_what_it_writes_before_it(tmp_path, monkeypatch, stage_max):
    """On a GPU, with the background writer: the label an in-place op gives the tensor it
    writes, made on the device before the op without waiting (staged, or with ``stage_max``
    -1 fingerprinted there), is the label of the op before it that made those bytes, and the
    records equal those of the same program on the host (exact values: the same bits)."""
    monkeypatch.setattr(_trace_digest, "BACKGROUND", True)
    if stage_max is not None:
        monkeypatch.setattr(_trace_device, "STAGE_MAX", stage_max)

    def program(device):
        def run():
            x = torch.arange(4096.0, device=device).reshape(64, 64)
            for _ in range(3):
                x.mul_(1.5).add_(x)  # each reads what the one before wrote
            x.sum().item()
        return run

    host = [json.loads(line) for line in
            traced(tmp_path / "h.jsonl", program("cpu")).splitlines()]
    gpu = [json.loads(line) for line in
           traced(tmp_path / "g.jsonl", program("cuda")).splitlines()]
    chain = [r for r in gpu if r["op"] in ("aten::mul_.Tensor", "aten::add_.Tensor")]
    assert len(chain) == 6
    for made, used in zip(chain, chain[1:]):
        assert used["in"][0] == made["out"][0], (made, used)
    # (up to the sum, whose order of addition differs between the devices)
    assert [(r["op"], r["in"], r["out"]) for r in gpu][:7] == [(r["op"], r["in"], r["out"])
                                                               for r in host][:7]


def test_a_device_value_mark_never_reaches_the_trace(tmp_path):
    writer = _digest.native().TraceWriter(str(tmp_path / "w.jsonl"))
    with pytest.raises(ValueError, match="not filled in"):
        writer.write('{"in":["f32[2]:\2"]}\n', [], True, None)
    writer.close()
    with pytest.raises(RuntimeError, match="2 marks for 1 device fingerprints"):
        _trace_device.fill("\2,\2", None, [([], lambda values: ["x"], True, 1)])


def test_a_deferred_sketch_leaves_non_finite_elements_out_without_reading_the_tensor_again():
    t = values(64, 4)
    t[5], t[9] = float("nan"), float("inf")
    parts, done = _trace_device.start_sketches([t, torch.arange(3)], finite=True)
    values_then = [p.tolist() for p in parts]
    t.fill_(7.0)  # changed before the values arrive: not read again
    got = done(values_then)
    t[5], t[9] = float("nan"), float("inf")
    assert got[1] == ""
    assert not same(got[0], native_sketch(t))
    t.copy_(values(64, 4))
    t[5], t[9] = float("nan"), float("inf")
    assert same(got[0], native_sketch(t)), (got[0], native_sketch(t))


@pytest.mark.parametrize("background", [False, True])
def test_device_tensors_of_a_cuda_graph_being_captured_are_not_hashed(tmp_path, monkeypatch,
                                                                      background):
    """While a stream is captured into a CUDA graph its ops only record work, so their device
    tensors have no values yet: they are labelled dtype[shape]:- (nothing is fingerprinted,
    sketched or waited for), not with whatever memory holds."""
    from bitexact import _fingerprint

    def never(*args, **kwargs):
        raise AssertionError("a tensor of a graph being captured was fingerprinted or sketched")

    monkeypatch.setattr(_trace_digest, "BACKGROUND", background)
    all_on_device(monkeypatch)
    monkeypatch.setattr(_trace_device, "capturing", lambda: True)
    monkeypatch.setattr(_fingerprint, "start", never)
    monkeypatch.setattr(_trace_device, "start_sketches", never)
    records = [json.loads(line) for line in traced(tmp_path / "t.jsonl", program).splitlines()]
    labels = [label for r in records for label in r["in"] + r["out"]]
    assert len(records) > 10 and all(label.endswith(":-") for label in labels), labels
    assert not any(r.get("sk") for r in records)
