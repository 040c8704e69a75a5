"""The generator a random op of the op tracer (:mod:`bitexact._trace`) draws from, and its
state before the call: a record's ``"gen"`` field, ``"<who>|<digest>"``.

An op that draws random numbers is deterministic given its generator's state: two runs whose
op has identical inputs and another output, and whose generator states before the call
differ, were seeded differently (or drew from it outside the traced ops), which is not a
nondeterministic kernel. ``bitexact`` reads the field to tell the two apart
(``src/trace.rs``).

- **Which ops**: those whose schema takes a ``Generator`` (``aten::bernoulli_.float``,
  ``aten::randn.generator``, ``aten::normal_``, ``aten::multinomial``, ...) and those that
  draw from the default generator without one (:data:`RANDOM`: ``aten::randint``,
  ``aten::randperm``, ``aten::native_dropout``, ...).
- **Which generator**: the one passed (``generator=``), else the default generator of the
  op's device: the first tensor argument's, else its ``device=`` argument's, else torch's
  default device.
- **Who**: ``torch's default CPU generator``, ``torch's default CUDA generator 0``, or a
  generator the program made, named by the module attribute that holds it when a traced
  module does (``Classifier.noise's torch.Generator``: the one in the same state), else
  ``a torch.Generator (cpu)``.
- **Digest**: SHA-256 (first 16 hex digits) of ``get_state()``'s bytes: the CPU generator's
  5 KB Mersenne Twister state, a CUDA generator's seed and offset (read on the host, no
  synchronization).
"""

import hashlib

# Ops that draw from the default generator and take none in their schema (names without the
# overload).
RANDOM = frozenset([
    "aten::rand", "aten::rand_like", "aten::randn", "aten::randn_like", "aten::randint",
    "aten::randint_like", "aten::randperm", "aten::native_dropout", "aten::_fused_dropout",
    "aten::dropout", "aten::feature_dropout", "aten::alpha_dropout", "aten::rrelu",
    "aten::rrelu_with_noise", "aten::poisson", "aten::binomial", "aten::_standard_gamma",
    "aten::_sample_dirichlet",
])

# The generators the traced modules hold (:func:`_holders`), with the module count they were
# looked for at.
_held = {}


def spec(func, name):
    """Where ``func`` (an op overload named ``name``) takes its generator: ``(position,
    argument name)``, ``(None, None)`` for a random op that takes none, or None for an op that
    draws no random numbers."""
    for i, a in enumerate(func._schema.arguments):
        if "Generator" in str(a.type):
            return i, a.name
    return (None, None) if name.partition(".")[0] in RANDOM else None


def before(torch, where, args, kwargs, tracker):
    """The ``"gen"`` field of a random op called with ``args`` and ``kwargs`` (``where``: its
    :func:`spec`), read before it runs; None when the generator cannot be read."""
    at, name = where
    g = kwargs.get(name) if name is not None else None
    if g is None and at is not None and at < len(args):
        g = args[at]
    try:
        who = None
        if g is None:
            g, who = _default(torch, args, kwargs)
        data = _bytes(g)
        if who is None:
            who = _name(torch, g, data, tracker)
        return "%s|%s" % (who, hashlib.sha256(data).hexdigest()[:16])
    except Exception:
        return None


def _bytes(g):
    state = g.get_state()
    return state.numpy().tobytes() if hasattr(state, "numpy") else bytes(state)


def _default(torch, args, kwargs):
    """The default generator of the op's device, and its name."""
    device = next((a.device for a in args if isinstance(a, torch.Tensor)), None)
    if device is None:
        device = kwargs.get("device")
    if device is None:
        get = getattr(torch, "get_default_device", None)
        device = get() if get is not None else "cpu"
    device = torch.device(device)
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return torch.cuda.default_generators[index], \
            "torch's default CUDA generator %d" % index
    return torch.default_generator, "torch's default %s generator" % device.type.upper()


def _name(torch, g, data, tracker):
    """A generator the program made, named by the traced module attribute holding it: the
    one whose state is ``g``'s (an op receives a new Python object for the same generator, so
    identity cannot tell)."""
    for label, held in _holders(torch, tracker):
        if held.device == g.device and _bytes(held) == data:
            return label
    return "a torch.Generator (%s)" % g.device


def _holders(torch, tracker):
    """``[(label, generator)]``: the generators held as attributes of the traced modules,
    looked for again when more modules have been named."""
    named = tracker.named_modules()
    if _held.get("count") != len(named):
        found = [("%s.%s's torch.Generator" % (mod_name, attr), v)
                 for mod, mod_name in named for attr, v in vars(mod).items()
                 if isinstance(v, torch.Generator)]
        _held.update(count=len(named), found=found)
    return _held["found"]
