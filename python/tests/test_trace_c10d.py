"""Which tensors of a collective are this rank's inputs in an op trace (bitexact._trace.c10d):
receive buffers (all_gather's output list, a non-root broadcast, recv) never are, whatever the
op; checked against the installed torch's op schemas, and on a traced 1-process gloo group."""

import json

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
from bitexact._trace import c10d as _trace_c10d  # noqa: E402
from bitexact._fingerprint import fingerprint  # noqa: E402


class Group:
    """A stand-in process group: this process's rank in it."""

    def __init__(self, rank):
        self._rank = rank

    def rank(self):
        return self._rank


def call(op, rank=0, root=0):
    """``(func, args, kwargs, names)``: arguments for ``torch.ops.<ns>.<op>`` from its schema
    (keyword-only ones as keywords), each tensor argument a distinct tensor (``Tensor[]``: one,
    ``Tensor[][]``: one list of one; ``Tensor?``: ``None``), and ``names[id(tensor)]`` its
    argument's name."""
    func = getattr(getattr(torch.ops, op.split("::")[0]), op.split("::")[1]).default
    args, kwargs, names = [], {}, {}
    for a in func._schema.arguments:
        t = str(a.type)
        if t.rstrip("]").endswith("Tensor"):
            x = torch.zeros(1)
            names[id(x)] = a.name
            v = {"Tensor": x, "List[Tensor]": [x], "List[List[Tensor]]": [[x]]}.get(t)
        elif "ProcessGroup" in t or a.name == "group_name":
            v = Group(rank)
        elif a.name in ("root_rank", "src"):
            v = root
        elif t.startswith("List["):
            v = []
        elif t == "bool":
            v = False
        else:
            v = 0
        if a.kwarg_only:
            kwargs[a.name] = v
        else:
            args.append(v)
    return func, args, kwargs, names


def read(op, **kw):
    """The argument names whose tensors ``inputs`` says ``op`` reads."""
    func, args, kwargs, names = call(op, **kw)
    return [names[id(t)] for t in _trace_c10d.inputs(func, args, kwargs, torch.Tensor)]


@pytest.mark.parametrize("op, expected", [
    ("c10d::allreduce_", ["tensors"]),
    ("c10d::allreduce_coalesced_", ["tensors"]),
    ("c10d::allgather_", ["input_tensors"]),
    ("c10d::_allgather_base_", ["input_tensor"]),
    ("c10d::allgather_coalesced_", ["input_list"]),
    ("c10d::allgather_into_tensor_coalesced_", ["inputs"]),
    ("c10d::reduce_scatter_", ["input_tensors"]),
    ("c10d::_reduce_scatter_base_", ["input_tensor"]),
    ("c10d::reduce_scatter_tensor_coalesced_", ["inputs"]),
    ("c10d::gather_", ["input_tensors"]),
    ("c10d::gather_into_tensor_", ["input_tensor"]),
    ("c10d::scatter_", ["input_tensors"]),
    ("c10d::alltoall_", ["input_tensors"]),
    ("c10d::alltoall_base_", ["input"]),
    ("c10d::reduce_", ["tensors"]),
    ("c10d::send", ["tensors"]),
    ("c10d::recv_", []),
    ("c10d::recv_any_source_", []),
    ("c10d::barrier", []),
    ("c10d::monitored_barrier_", []),
    ("_c10d_functional::all_reduce", ["input"]),
    ("_c10d_functional::all_reduce_", ["input"]),
    ("_c10d_functional::all_gather_into_tensor_out", ["input"]),
    ("_c10d_functional::reduce_scatter_tensor", ["input"]),
    ("_c10d_functional::wait_tensor", []),
])
def test_the_inputs_of_each_collective(op, expected):
    pytest.importorskip("torch.distributed._functional_collectives")  # registers the ops
    ns, name = op.split("::")
    if not hasattr(getattr(torch.ops, ns), name):
        pytest.skip("%s is not in this torch" % op)
    assert read(op) == expected


def test_a_broadcast_reads_its_tensor_on_the_root_only():
    assert read("c10d::broadcast_", rank=1, root=1) == ["tensors"]
    assert read("c10d::broadcast_", rank=0, root=1) == []  # a receive buffer here
    pytest.importorskip("torch.distributed._functional_collectives")
    assert read("_c10d_functional::broadcast", rank=0, root=0) == ["input"]
    assert read("_c10d_functional::broadcast", rank=1, root=0) == []


def test_an_output_buffer_is_never_an_input_of_any_collective():
    """Every ``c10d::`` op of this torch, known or not: no argument named as an output buffer
    (``output*``, ``out``) is read."""
    pytest.importorskip("torch.distributed._functional_collectives")
    schemas = [s for s in torch._C._jit_get_all_schemas()
               if s.name.split("::")[0] in _trace_c10d.NAMESPACES and s.overload_name == ""]
    assert any(s.name == "c10d::allgather_" for s in schemas)
    for s in schemas:
        read_names = read(s.name, rank=0, root=0)
        assert not [n for n in read_names if _trace_c10d.is_output_buffer(n)], s


def test_an_unknown_collective_reads_what_is_not_an_output_buffer():
    schema = torch._C.parse_schema(
        "c10d::future_gather_(Tensor[][] output_lists, Tensor[] input_list, Tensor out, "
        "Tensor extra) -> Tensor")

    class Func:
        _schema = schema

    a, b, c, d = (torch.zeros(1) for _ in range(4))
    assert _trace_c10d.inputs(Func, [[[a]], [b], c, d], {}, torch.Tensor) == [b, d]


@pytest.fixture
def world_of_one(tmp_path):
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("no gloo")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_a_traced_all_gather_records_its_input_only(world_of_one, tmp_path):
    """What ``bitexact run --trace ops`` records for ``dist.all_gather`` and a broadcast from
    this rank: the gathered list (``torch.empty``: uninitialized bytes) is no input."""
    from bitexact import _digest, _trace

    if _digest._native is None:
        pytest.skip("needs bitexact._native")
    path = str(tmp_path / "t.jsonl")
    x = torch.arange(4.0)
    _trace.start(path)
    try:
        gathered = [torch.empty(4)]
        dist.all_gather(gathered, x)
        dist.broadcast(x, src=0)
    finally:
        _trace.stop()
    with open(path) as f:
        records = {r["op"]: r for r in map(json.loads, f)}
    digest = "f32[4]:" + fingerprint(x)
    assert records["c10d::allgather_"]["in"] == [digest]
    assert records["c10d::allgather_"]["out"] == [digest]
    assert records["c10d::broadcast_"]["in"] == [digest]  # rank 0 is the root
