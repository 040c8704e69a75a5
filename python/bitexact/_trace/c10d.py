"""Collectives in an op trace (``c10d::allreduce_`` from ``dist.all_reduce`` and DDP's gradient
buckets, ``c10d::broadcast_``, functional collectives, ...): which of a collective's tensors
are this rank's **inputs**, hashed before the call, and its results, hashed after waiting.

A collective's receive buffers are not inputs: ``dist.all_gather`` hands the op a list of
``torch.empty`` tensors to fill, whose bytes before the call are whatever the allocator left
there. Hashed as inputs, they make two identical runs' records differ ("already received
different inputs") where nothing differed. The inputs are read from the op's schema
(``torch.ops.c10d.<op>.default._schema``), by argument name, not position:

* an argument named ``output``, ``output_tensor(s)``, ``output_lists``, ``outputs`` (the
  ``c10d::`` ops) or ``out`` (functional ``*_out``) is a buffer the op writes: never an input.
  So ``allgather_``, ``_allgather_base_``, ``allgather_coalesced_``,
  ``allgather_into_tensor_coalesced_``, ``gather_``, ``gather_into_tensor_``, ``scatter_``,
  ``reduce_scatter_``, ``_reduce_scatter_base_``, ``reduce_scatter_tensor_coalesced_``,
  ``alltoall_`` and ``alltoall_base_`` read only their ``input*`` arguments (``scatter_``'s are
  empty off the root, ``gather_``'s outputs empty off the root);
* ``allreduce_``, ``allreduce_coalesced_``, ``reduce_`` (every rank contributes) and ``send``
  read their ``tensors``;
* ``broadcast_`` (and functional ``broadcast``/``broadcast_``) reads its tensor on the root only
  (``root_rank``/``src``, a rank in the op's group, against this process's rank in that group);
  elsewhere the tensor is a receive buffer;
* ``recv_``, ``recv_any_source_`` and functional ``irecv`` read nothing (receive buffers), nor
  do ``barrier`` and ``monitored_barrier_`` (their tensor is a placeholder the op allocates
  uninitialized), nor functional ``wait_tensor(s)`` (tensors an earlier collective is still
  writing); functional ``batch_p2p_ops`` reads the tensors its ``op_list`` sends (``isend``);
* any other op of these namespaces (a new or unknown collective): every tensor argument not
  named as an output buffer (the rule above), so an output list is never hashed as an input.

The results are what the op returns, hashed after waiting for its ``Work``.
"""

from . import state as ts

# Namespaces of torch.distributed's collectives (``dist.all_reduce``, DDP's gradient buckets:
# ``c10d::allreduce_``; functional collectives: ``_c10d_functional::all_reduce``).
NAMESPACES = ("c10d", "_c10d_functional")

# Ops (schema names) whose tensor arguments are never this rank's contribution.
_NO_INPUTS = frozenset((
    "c10d::recv_", "c10d::recv_any_source_", "c10d::barrier", "c10d::monitored_barrier_",
    "_c10d_functional::irecv", "_c10d_functional::wait_tensor",
    "_c10d_functional::wait_tensors",
))
# Ops whose tensor is an input on the root only: op -> (root argument, group argument).
_ROOT_ONLY = {
    "c10d::broadcast_": ("root_rank", "process_group"),
    "_c10d_functional::broadcast": ("src", "group_name"),
    "_c10d_functional::broadcast_": ("src", "group_name"),
}


def is_output_buffer(name):
    """Whether a collective's argument named ``name`` is a buffer it writes (``output``,
    ``output_tensor``, ``output_tensors``, ``output_lists``, ``outputs``, ``out``)."""
    return name == "out" or name.startswith("output")


def _bound(func, args, kwargs):
    """``[(argument name, value)]`` for the call, in schema order."""
    bound = []
    for i, a in enumerate(func._schema.arguments):
        if i < len(args):
            bound.append((a.name, args[i]))
        elif a.name in kwargs:
            bound.append((a.name, kwargs[a.name]))
    return bound


def _group_rank(group):
    """This process's rank in ``group`` (a boxed ``ProcessGroup``, a ``ProcessGroup`` or a
    group name), or ``None`` when it cannot be told."""
    try:
        import torch.distributed as dist

        if isinstance(group, str):
            group = dist.distributed_c10d._resolve_process_group(group)
        elif not callable(getattr(group, "rank", None)):
            group = dist.ProcessGroup.unbox(group)
        return group.rank()
    except Exception:  # no such group, an unboxable object: not the root, as far as we know
        return None


def inputs(func, args, kwargs, tensor_type):
    """The tensors collective ``func`` reads from this rank (its contribution), by the rules of
    the module docs."""
    op = func._schema.name
    if op in _NO_INPUTS:
        return []
    bound = _bound(func, args, kwargs)
    named = dict(bound)
    if op in _ROOT_ONLY:
        root_arg, group_arg = _ROOT_ONLY[op]
        if _group_rank(named.get(group_arg)) != named.get(root_arg):
            return []
        tensors = ts.collect_tensors(named.get("tensors", named.get("input")), tensor_type, [])
        which = named.get("root_tensor", 0)  # c10d: the one of the root's tensors that is sent
        return tensors[which:which + 1] if 0 <= which < len(tensors) else tensors
    if op == "_c10d_functional::batch_p2p_ops":
        sends = [t for kind, t in zip(named.get("op_list", ()), named.get("tensors", ()))
                 if kind == "isend"]
        return ts.collect_tensors(sends, tensor_type, [])
    out = []
    for name, value in bound:
        if not is_output_buffer(name):
            ts.collect_tensors(value, tensor_type, out)
    return out


def before(state, stream, func, args, kwargs, tensor_type):
    """Before collective ``func`` runs: its inputs (:func:`inputs`) hashed now (``c10d`` ops
    write their tensors in place without saying so in their schema). Returns the token
    :func:`after` takes, or None where it is not recorded (a step not traced, a skipped op)."""
    op = func.name()
    if not ts.in_steps(state, stream) or ts.skipped(state, op):
        return None
    ins = inputs(func, args, kwargs, tensor_type)
    return (state, stream, func, op, ins, ts.describe(ins, state), tensor_type)


def after(token, result):
    """Records the collective :func:`before` returned ``token`` for: after waiting for its
    ``Work``, its results (what the rank received). Functional collectives return tensors
    still being written: their results are recorded by dtype and shape only (the op that waits
    for them shows the values). Waiting early changes when the program blocks, never what it
    computes."""
    state, stream, func, op, ins, described, tensor_type = token
    parts = result if isinstance(result, (tuple, list)) else (result,)
    for r in parts:
        if not isinstance(r, tensor_type) and hasattr(r, "wait"):
            r.wait()
    outs = ts.collect_tensors(result, tensor_type, [])
    scratch = range(len(outs)) if func.namespace == "_c10d_functional" else ()
    phase, module = state.tracker.where()
    ts.emit(state, stream, ts.Record(op, phase, module, ins, outs, described, scratch))
