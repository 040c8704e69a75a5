"""Which arguments an op writes (in place or through ``out=``) and which of those it reads
first, for the op tracer (:mod:`bitexact._trace`): a written tensor is a result, hashed after
the op; one the op also reads is hashed before it too (:func:`read_before`), as its first
inputs, so a tensor changed where no traced op ran (numpy, ``.data``, a DataLoader) shows as
a differing input, not as a nondeterministic op. A tensor an op never reads (an overwritten
or partly written one: :data:`OVERWRITES`; ``self`` of a ``beta=0`` product:
:func:`ignores_self`) is never hashed as an input: it may be memory never written, whose bytes
would make identical runs differ."""

from . import digest
from . import state as ts

# In-place ops that do not read the tensor they write, or read only part of it, whose other
# part may be memory never written (``torch.empty(n).index_put_(...)``): its value before the
# op is not one of their inputs (hashed, uninitialized bytes would make identical runs differ).
# ``src/trace/program.rs`` lists the partial writes among them (PARTIAL_WRITES): their records
# hide a value they read.
OVERWRITES = frozenset(
    "aten::" + n for n in (
        "fill_", "zero_", "copy_", "_copy_from", "uniform_", "normal_", "bernoulli_", "random_",
        "exponential_", "cauchy_", "log_normal_", "geometric_", "_philox_normal_",
        "_philox_uniform_", "_philox_randint_", "_fill_mem_eff_dropout_mask_",
        "copy_sparse_to_sparse_", "index_put_", "_index_put_impl_", "index_fill_",
        "index_copy_", "index_reduce_", "masked_fill_", "masked_scatter_", "scatter_",
        "scatter_reduce_", "put_", "_foreach_copy_", "_foreach_zero_", "detach_"))

# Written arguments other than ``self`` that an op reads, by op: an optimizer's state and
# gradients, a batch norm's running statistics. Any other written argument is a result only
# (``rrelu_with_noise``'s ``noise``, ``_fused_sgd_``'s momentum buffers on its first step and an
# attention's ``out`` are made by ``torch.empty_like``: never read).
READS_TOO = {
    "aten::_fused_adam_": ("grads", "exp_avgs", "exp_avg_sqs", "max_exp_avg_sqs"),
    "aten::_fused_adamw_": ("grads", "exp_avgs", "exp_avg_sqs", "max_exp_avg_sqs"),
    "aten::_fused_sgd_": ("grads",),
    "aten::_fused_adagrad_": ("grads", "state_sums"),
    "aten::_native_batch_norm_legit": ("running_mean", "running_var"),
    "aten::_batch_norm_with_update": ("running_mean", "running_var"),
    "aten::cudnn_batch_norm": ("running_mean", "running_var"),
    "aten::miopen_batch_norm": ("running_mean", "running_var"),
}


def written_args(func, name):
    """``(written, read)``: positions and names of the arguments ``func`` (named ``name``)
    writes (``Tensor(a!)``: in-place ``self``, ``out=``), results hashed after the op, and of
    those it also reads, hashed before the op too (its first inputs): an in-place ``self``
    unless the op overwrites it (:data:`OVERWRITES`), and the arguments :data:`READS_TOO`
    names; never ``out=``."""
    written, read = set(), set()
    base = name.partition(".")[0]
    reads = ("self",) if base not in OVERWRITES else ()
    reads += READS_TOO.get(base, ())
    for i, a in enumerate(func._schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            written.update((i, a.name))
            if a.name in reads and not a.is_out:
                read.update((i, a.name))
    return (SELF if written == SELF else written), (SELF if read == SELF else read)


SELF = frozenset((0, "self"))  # what most in-place ops read and write


def read_before(state, stream, op, written, read, args, kwargs, tensor_type):
    """The tensors an op that writes ``written`` reads and writes (``read``, see
    :func:`written_args`), hashed before it runs (their bytes are about to change), as a
    :class:`bitexact._trace.state.Record` whose ``described_ins`` are their labels; and when
    another input is a written tensor (``x.add_(x)``, ``torch.mul(x, 3, out=x)``), all its
    other inputs too (``others``: their labels, as they were read). None when the op is not
    recorded or there is nothing to hash before it. What tells an op whose written tensor
    already differed (changed where no traced op ran: numpy, ``.data``, a DataLoader) from one
    that computed differently.

    Host tensors are hashed on the program's thread, or, where the writer hashes later
    (``state.deferred``), held by it; a device tensor's values are then computed or copied on
    its stream before the op and the record carries them (``later``, ``keep``, ``waits``,
    ``fills``): the program does not wait for the device
    (:func:`bitexact._trace.digest.labels_now`). In a run that captures an op
    (``state.capture``), that op's written tensors are also copied as they were (``snaps``),
    for its replay."""
    if not ts.in_steps(state, stream) or ts.skipped(state, op):
        return None
    first = args[0] if args else None
    if read is SELF and isinstance(first, tensor_type):  # add_, mul_, ...: no walk
        tensors = [] if kwargs and ignores_self(op, kwargs) else [first]
    elif read:
        tensors = tensors_at(args, kwargs, read, tensor_type)
    else:
        tensors = []
    others = _aliased_inputs(written, args, kwargs, tensor_type)
    capturing = state.capture is not None and state.capture[5] == op  # (see state._is_capture)
    if not tensors and others is None and not capturing:
        return None
    before = ts.Record(op, "", "", tensors, ())
    if capturing:  # what it read, and what it writes as the op found it (an ``out=``
        # argument, a partly written tensor): copied, never hashed, so the replay starts from
        # the same bytes
        kept = tensors_at(args, kwargs, written, tensor_type) + tensors + (others or [])
        before.snaps = {id(t): t.detach().clone() for t in kept}
    before.described_ins = digest.labels_now(state, tensors, before)
    if others is not None:
        before.others = digest.labels_now(state, others, before)
    return before


def tensors_at(args, kwargs, keys, tensor_type, among=True):
    """The tensors of the call's arguments whose position or name is in ``keys`` (``among``)
    or not, in argument order."""
    return ts.collect_tensors([a for i, a in enumerate(args) if (i in keys) == among]
                              + [v for k, v in kwargs.items() if (k in keys) == among],
                              tensor_type, [])


def _aliased_inputs(written, args, kwargs, tensor_type):
    """The op's inputs (tensor arguments it does not write), when one of them holds the bytes
    of a tensor it writes (the same tensor, or a view at the same address: torch refuses
    partial overlaps); else None."""
    inputs = None
    if written is SELF and args and isinstance(args[0], tensor_type):  # add_: no walk
        rest = (*args[1:], *kwargs.values())
        if not any(isinstance(a, (list, tuple)) for a in rest):  # (else: the walk below)
            inputs = [a for a in rest if isinstance(a, tensor_type)]
            targets = args[:1]
    if inputs is None:
        inputs = tensors_at(args, kwargs, written, tensor_type, among=False)
        targets = tensors_at(args, kwargs, written, tensor_type)
    if not inputs:
        return None
    try:
        places = {t.data_ptr() for t in targets if t.numel()}
        if any(t.numel() and t.data_ptr() in places for t in inputs):
            return inputs
    except RuntimeError:  # a tensor without storage: nothing to alias
        pass
    return None


# Ops ``self + alpha * product`` scaled by ``beta``: with ``beta=0`` they never read ``self``
# (``torch.baddbmm(torch.empty(...), q, k, beta=0)``: attention scores into a fresh buffer).
BETA_OPS = frozenset("aten::" + n for n in (
    "addmm", "addmm_", "baddbmm", "baddbmm_", "addbmm", "addbmm_", "addmv", "addmv_", "addr",
    "addr_", "_addmm_activation"))


def ignores_self(op, kwargs):
    """Whether the op ``op`` does not read its ``self`` (one of :data:`BETA_OPS` with
    ``beta=0``)."""
    return kwargs.get("beta", 1) == 0 and op.partition(".")[0] in BETA_OPS


def scratch_arg(func, op, args, kwargs):
    """The tensor argument of ``func`` that is scratch memory
    (:data:`bitexact._trace.state.SCRATCH_ARGS`: an RNN workspace its backward reads), or that
    it does not read (``self`` of :func:`ignores_self`), or None."""
    if args and ignores_self(op, kwargs):
        return args[0]
    name = ts.SCRATCH_ARGS.get(op.partition(".")[0])
    if name is None:
        return None
    if name in kwargs:
        return kwargs[name]
    names = [a.name for a in func._schema.arguments]
    i = names.index(name) if name in names else len(args)
    return args[i] if i < len(args) else None
