"""``--trace modules`` (``bitexact._trace.hooks.module_hooks``): its short lane for a module's
and a gradient's record (``hooks._lane``: native, or its Python) writes byte for byte what the
general path (``state.emit``) writes, whoever hashes and with or without sketches; a
parameter's name is the one ``model.named_parameters()`` gives it, whatever order the modules
run in; a step given a closure records the gradients its closure made; arguments are read as
received, keyword ones too; a module record names its own state among its inputs; sparse
gradients and dataclass outputs are recorded."""

import dataclasses
import json
import sys
import threading

import pytest

torch = pytest.importorskip("torch")
from bitexact import _digest  # noqa: E402

pytestmark = pytest.mark.skipif(_digest._native is None, reason="needs bitexact._native")

from bitexact._trace import digest as _trace_digest  # noqa: E402
from bitexact._trace import hooks, plain  # noqa: E402
from conftest import traced  # noqa: E402


class Pair(torch.nn.Module):
    """Returns a tuple, takes a tensor by keyword, holds a persistent and a non-persistent
    buffer, and a parameter replaced between steps."""

    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(3))
        self.register_buffer("shift", torch.full((3,), 0.5))
        self.register_buffer("cache", torch.zeros(3), persistent=False)

    def forward(self, x, bias):
        return x * self.scale + self.shift + bias, x.sum()


class Magnitude(torch.nn.Module):
    """Takes a complex tensor (off the fast path: labelled at once) and returns a real one."""

    def forward(self, z):
        return z.abs()


@dataclasses.dataclass
class Halves:
    """A dataclass output."""

    low: torch.Tensor
    high: torch.Tensor
    count: int = 2


class Split(torch.nn.Module):
    """Returns a dataclass."""

    def forward(self, x):
        return Halves(x.clamp(max=0), x.clamp(min=0))


class Tied(torch.nn.Module):
    """An embedding tied to the output layer, modules run out of their registration order
    (``head``, registered last, holding the embedding's weight, runs first), and a module that
    writes its argument in place (``ReLU(inplace=True)``)."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(5, 3)
        self.blocks = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU(inplace=True),
                                          torch.nn.Dropout(0.0), torch.nn.LayerNorm(3))
        self.pair = Pair()
        self.head = torch.nn.Linear(3, 5, bias=False)
        self.head.weight = self.emb.weight
        self.magnitude = Magnitude()
        self.split = Split()

    def forward(self, idx):
        early = self.head(torch.ones(3))  # head first: its weight is the embedding's
        x = self.emb(idx)
        y, s = self.pair(self.blocks(x), bias=torch.full((3,), self.bias))
        halves = self.split(y)
        return early.mean() + self.head(halves.high).mean() + s \
            + self.magnitude(torch.complex(y, y)).sum()


def program(bias=0.25):
    """Three training steps of :class:`Tied` (an optimizer step between them), the second
    with a parameter replaced, a forward in a thread, and a module that returns nothing."""
    torch.manual_seed(0)
    model = Tied()
    model.bias = bias
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    idx = torch.tensor([[0, 1, 2, 3], [4, 3, 2, 1]])
    for step in range(3):
        if step == 1:
            model.pair.scale = torch.nn.Parameter(torch.full((3,), 2.0))
            opt.add_param_group({"params": [model.pair.scale]})
        opt.zero_grad()
        model(idx).backward()
        opt.step()
    nothing = torch.nn.Identity()
    nothing.forward = lambda x: None
    nothing(idx)
    done = []
    t = threading.Thread(target=lambda: done.append(model(idx)), name="worker")
    t.start()
    t.join()
    assert done


def lane_calls(fn):
    """``fn()``, and how many times ``hooks._lane`` wrote a record (in any thread)."""
    taken = []

    def profile(frame, event, arg):
        if event == "return" and frame.f_code is hooks._lane.__code__ and arg:
            taken.append(1)

    sys.setprofile(profile)
    threading.setprofile(profile)
    try:
        return fn(), len(taken)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)


@pytest.mark.parametrize("sketch", [True, False])
def test_the_module_lane_writes_what_the_general_path_writes(tmp_path, monkeypatch, sketch):
    monkeypatch.setattr(_trace_digest, "BACKGROUND", True)
    monkeypatch.setattr(_trace_digest, "SKETCH", sketch)
    run = lambda name: traced(tmp_path / name, program, level="modules")  # noqa: E731
    lane, taken = lane_calls(lambda: run("lane.jsonl"))
    rows = [json.loads(line) for line in lane.splitlines()]
    outputs = [r for r in rows if r["op"] == "module output"]
    grads = [r for r in rows if r["op"] == "parameter grad"]
    assert len(outputs) >= 20 and len(grads) >= 10
    # every record took the lane but those with a complex input (labelled at once)
    short = len([r for r in rows if r["module"] != "Tied.magnitude"])
    assert taken == short < len(rows)
    monkeypatch.setattr(plain, "NATIVE", False)  # the lane's Python
    python, taken = lane_calls(lambda: run("python.jsonl"))
    assert taken == short and python == lane
    monkeypatch.setattr(plain, "NATIVE", True)
    monkeypatch.setattr(hooks, "LANE", False)
    general, taken = lane_calls(lambda: run("general.jsonl"))
    assert taken == 0 and general == lane
    monkeypatch.setattr(_trace_digest, "BACKGROUND", False)  # hashed on the program's thread
    general_now, taken = lane_calls(lambda: run("general_now.jsonl"))
    assert taken == 0 and general_now == lane
    monkeypatch.setattr(hooks, "LANE", True)
    now, taken = lane_calls(lambda: run("now.jsonl"))
    assert taken == short and now == lane  # the native lane hashes them itself
    monkeypatch.setattr(plain, "NATIVE", False)  # the lane's Python: the background writer's
    python_now, taken = lane_calls(lambda: run("python_now.jsonl"))
    assert taken == 0 and python_now == lane  # only: the general path, its held made labels
    assert any(r.get("thread") == "worker#0" for r in rows)
    assert any(not r["out"] for r in outputs)  # the module that returned nothing
    assert any("sk" in r for r in outputs) == sketch


def test_a_parameter_is_named_as_named_parameters_names_it(tmp_path):
    rows = [json.loads(line) for line in
            traced(tmp_path / "t.jsonl", program, level="modules").splitlines()]
    grads = {}
    for r in rows:
        if r["op"] == "parameter grad":
            grads.setdefault(r["step"], []).append(r["module"])
    expected = ["Tied." + n for n, _ in Tied().named_parameters()]
    assert "Tied.head.weight" not in expected  # tied: the embedding's name
    assert grads[0] == expected
    # The replaced parameter: named by its module, as the one it replaced, in the optimizer's
    # order (its new group last; the old one, now without a gradient, not recorded).
    assert grads[1] == [n for n in expected if n != "Tied.pair.scale"] + ["Tied.pair.scale"]


def test_a_module_record_names_its_own_state_and_numbers_its_call(tmp_path):
    """A module record's ``"own"`` names its first inputs that are the module's own
    parameters and persistent buffers (``bitexact diff-trace`` names them, and tells them
    apart from its arguments; ``"late"`` counts the last, labelled after its forward), and its
    ``"entered"`` its call's number among its thread's module calls, in the
    order they began: a call is numbered before the calls it makes, though recorded after them
    (``diff-trace`` finds the enclosing call, and a call's callees, by it); a gradient's record
    has neither."""
    rows = [json.loads(line) for line in
            traced(tmp_path / "t.jsonl", program, level="modules").splitlines()]
    own, calls = {}, {}
    for r in rows:
        if r["op"] == "module output":
            own.setdefault(r["module"], set()).add(
                (tuple(r["own"]["params"]), tuple(r["own"]["buffers"])))
            calls.setdefault(r.get("thread", ""), []).append((r["module"], r["entered"]))
        else:
            assert "own" not in r and "entered" not in r
    linear = {(("weight", "bias"), ())}
    assert own["Tied.blocks.0"] == own["Tied.blocks.3"] == linear  # Linear, LayerNorm
    assert own["Tied.pair"] == {(("scale",), ("shift",))}  # the persistent buffer, not the cache
    assert own["Tied.head"] == own["Tied.emb"] == {(("weight",), ())}
    assert own["Tied"] == own["Tied.split"] == own["Tied.blocks.1"] == {((), ())}
    first = next(r for r in rows if r["module"] == "Tied.pair")
    assert len(first["in"]) == 2 + 2  # its state, then x and the keyword bias
    assert first["late"] == 1  # the keyword bias, labelled after its forward
    assert all("late" not in r for r in rows if r["module"] == "Tied.blocks.0")
    main = calls.pop("")
    end = [m for m, _ in main].index("Tied")  # the first forward's calls, Tied's last
    number = dict(main[:end + 1])
    assert number["Tied"] == 1 < min(n for _, n in main[:end])
    assert number["Tied.blocks"] < number["Tied.blocks.0"] < number["Tied.blocks.1"]
    (worker,) = calls.values()  # a thread numbers its own calls
    assert min(n for _, n in worker) == 1 and len(worker) == end + 1


def test_arguments_are_labelled_as_received_keyword_ones_too(tmp_path):
    """A forward's positional arguments are hashed as it receives them (the in-place ReLU's
    input is the linear layer's output, not what the ReLU made of it); a tensor passed by
    keyword is among the inputs, after the positional ones; a dataclass output's tensor
    fields are its outputs."""
    rows = [json.loads(line) for line in
            traced(tmp_path / "t.jsonl", program, level="modules").splitlines()]
    first = {}
    for r in rows:
        if r["step"] == 0 and r["op"] == "module output":
            first.setdefault(r["module"], r)
    linear, relu = first["Tied.blocks.0"], first["Tied.blocks.1"]
    assert relu["in"] == linear["out"] and relu["out"] != relu["in"]
    pair = first["Tied.pair"]  # scale, shift (its own), x, then bias by keyword
    assert len(pair["in"]) == 4 and pair["in"][2] == first["Tied.blocks"]["out"][0]
    assert pair["in"][3].startswith("f32[3]:")
    split = first["Tied.split"]  # a dataclass's two tensor fields
    assert len(split["out"]) == 2 and split["out"][0] != split["out"][1]
    other = [json.loads(line) for line in traced(tmp_path / "u.jsonl", lambda: program(0.5),
                                                 level="modules").splitlines()]
    moved = next(r for r in other if r["module"] == "Tied.pair")
    assert moved["in"][:3] == pair["in"][:3] and moved["in"][3] != pair["in"][3]


class Alone(torch.nn.Module):
    """One linear layer (a model trained, then dropped)."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 3)

    def forward(self, x):
        return self.fc(x).sum()


class Two(torch.nn.Module):
    """Two linear layers (a model made after :class:`Alone` was dropped)."""

    def __init__(self):
        super().__init__()
        self.enc, self.dec = torch.nn.Linear(3, 3), torch.nn.Linear(3, 3)

    def forward(self, x):
        return self.dec(self.enc(x)).sum()


def test_a_parameter_made_where_a_freed_one_was_is_named_by_its_own_model(tmp_path):
    """Models trained one after another in one process (a sweep): a parameter that Python
    places where a dropped model's was (the same ``id``) is named by its own model."""
    import gc

    ids = []  # of each model's parameters

    def made_where_one_was(cls):
        """A ``cls()`` with a parameter where a dropped model's was, if one of 100 tries
        (the others kept until then, so that each try is made in other memory) makes one."""
        dropped, tries = set().union(*ids), []
        for _ in range(100 if dropped else 1):
            tries.append(cls())
            if dropped & {id(p) for p in tries[-1].parameters()}:
                break
        return tries[-1]

    def run():
        torch.manual_seed(0)
        for cls in (Alone, Two, Alone, Two):
            model = made_where_one_was(cls)
            ids.append({id(p) for p in model.parameters()})
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            model(torch.randn(2, 3)).backward()
            opt.step()
            del model, opt
            gc.collect()

    rows = [json.loads(line) for line in
            traced(tmp_path / "t.jsonl", run, level="modules").splitlines()]
    names = [r["module"] for r in rows if r["op"] == "parameter grad"]
    one = ["Alone.fc.weight", "Alone.fc.bias"]
    two = ["Two.enc.weight", "Two.enc.bias", "Two.dec.weight", "Two.dec.bias"]
    assert names == (one + two) * 2
    if not any(ids[k] & ids[j] for k in range(4) for j in range(k)):
        pytest.skip("premise: no parameter was made where a dropped one was (no id reused)")


class Shared(torch.nn.Module):
    """A layer held by two parents (``a``, and ``b``'s first), and a part (``enc``) run
    alone, before the model first runs."""

    def __init__(self):
        super().__init__()
        layer = torch.nn.Linear(3, 3)
        self.enc = Alone()
        self.a, self.b = layer, torch.nn.Sequential(layer, torch.nn.Linear(3, 3))

    def forward(self, x):
        return self.b(self.a(x)).sum() + self.enc(x)


class Holder(torch.nn.Module):
    """A container whose own forward never runs: the program calls its part."""

    def __init__(self):
        super().__init__()
        self.c = torch.nn.Linear(3, 3)


def test_modules_are_named_by_their_first_path_and_a_part_run_alone_by_its_root(tmp_path):
    """Names are ``named_modules()``'s and ``named_parameters()``'s: a module two parents hold
    by the first path that reaches it; a part run alone before its model by its path from
    the module it was registered in (that of a container whose forward never runs too, and
    its parameters' gradients), then by the model's path, with every module below it; a
    module made before tracing began, by its class."""
    early = Alone()

    def run():
        torch.manual_seed(0)
        model = Shared()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        with torch.no_grad():
            model.enc(torch.randn(2, 3))  # a feature pass
            early(torch.randn(2, 3))
        for _ in range(2):
            opt.zero_grad()
            model(torch.randn(2, 3)).backward()
            opt.step()
        holder = Holder()
        opt = torch.optim.SGD(holder.parameters(), lr=0.1)
        holder.c(torch.randn(2, 3)).sum().backward()
        opt.step()

    rows = [json.loads(line) for line in
            traced(tmp_path / "t.jsonl", run, level="modules").splitlines()]
    model = Shared()
    grads = [r["module"] for r in rows if r["op"] == "parameter grad" and r["step"] == 0]
    assert grads == ["Shared." + n for n, _ in model.named_parameters()]
    outputs = [r["module"] for r in rows if r["op"] == "module output"]
    # alone, before the model ran; then made before tracing began
    assert outputs[:4] == ["Shared.enc.fc", "Shared.enc", "Alone.fc", "Alone"]
    named = {"Shared." + n if n else "Shared" for n, _ in model.named_modules()}
    assert set(outputs[4:-1]) == named and "Shared.b.0" not in named
    assert outputs[-1] == "Holder.c"
    assert [r["module"] for r in rows if r["op"] == "parameter grad"][-2:] == \
        ["Holder.c.weight", "Holder.c.bias"]


def test_a_sparse_gradient_is_labelled_by_its_values(tmp_path):
    """``Embedding(sparse=True)``'s gradient is hashed as its dense values: its label is the
    dense embedding's, and another loss gives another label."""
    def run(sparse, scale):
        def program():
            torch.manual_seed(0)
            emb = torch.nn.Embedding(5, 4, sparse=sparse)
            opt = torch.optim.SGD(emb.parameters(), lr=0.1)
            (emb(torch.tensor([0, 3])).sum() * scale).backward()
            opt.step()
        rows = [json.loads(line) for line in
                traced(tmp_path / ("%s%s.jsonl" % (sparse, scale)), program,
                       level="modules").splitlines()]
        return [r["out"] for r in rows if r["op"] == "parameter grad"]

    sparse = run(True, 1.0)
    assert sparse == run(False, 1.0) and sparse != run(True, 2.0)


def _grads(tmp_path, name, step):
    """The ``parameter grad`` records (step, name, gradient label) of three SGD steps of a small
    model, each made by ``step(model, opt, x)``, and for each, its parameter's label as its
    module's forward read it and as the record's input."""
    def run():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            step(model, opt, torch.randn(5, 4))

    rows = [json.loads(line) for line in
            traced(tmp_path / name, run, level="modules").splitlines()]
    grads = [r for r in rows if r["op"] == "parameter grad"]
    read = {}  # (step, parameter name) -> its label in its module's forward record
    for r in rows:
        if r["op"] == "module output" and r["module"] in ("Sequential.0", "Sequential.2"):
            for k, own in enumerate(("weight", "bias")):
                read[r["step"], "%s.%s" % (r["module"], own)] = r["in"][k]
    assert len(read) == 12, sorted(read)
    params = [(read[r["step"], r["module"]], r["in"][0]) for r in grads]
    return [(r["step"], r["module"], r["out"]) for r in grads], params


def test_a_step_given_a_closure_records_the_gradients_its_closure_made(tmp_path):
    """``opt.step(closure)`` (LBFGS's way, any optimizer's): the gradients are recorded after
    the step, so they are the ones the closure computed for it, as a step without one records
    them before; before the step they would be the previous step's (none at the first)."""
    def plain(model, opt, x):
        _loss(model, opt, x)
        opt.step()

    def closing(model, opt, x):
        opt.step(lambda: _loss(model, opt, x))

    def keyword(model, opt, x):
        opt.step(closure=lambda: _loss(model, opt, x))

    expected, params = _grads(tmp_path, "plain.jsonl", plain)
    assert [s for s, _, _ in expected] == [0] * 4 + [1] * 4 + [2] * 4
    # Without a closure, before the step: each gradient's input is its parameter as the
    # forward read it (the module record's own inputs come first: weight, bias).
    assert [p for _, p in params] == [m for m, _ in params]
    assert _grads(tmp_path, "closure.jsonl", closing)[0] == expected
    assert _grads(tmp_path, "keyword.jsonl", keyword)[0] == expected


def _loss(model, opt, x):
    """A closure's work: zeroes the gradients, computes the loss and its gradients."""
    opt.zero_grad()
    loss = model(x).square().sum()
    loss.backward()
    return loss
