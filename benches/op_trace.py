"""Timings for benches/op_trace.rs (run by it; prints one JSON object). Workloads:

- ``classifier``: one training step of the small transformer classifier of
  examples/python/ops_trace.py;
- ``nanogpt``: one training iteration of a nanoGPT-sized GPT (benches/nanogpt.py: 2 layers, 64
  wide, AdamW, gradient clipping), and ``nanogpt_eval``: one of its no-grad eval forwards;
- ``in_place_chain`` (CPU only): chains of in-place ops, each reading what the one before wrote
  (:func:`in_place_chain`);
- ``module_calls`` (CPU only): a no-grad forward through 20 ``Linear(4, 4)`` in a
  ``Sequential`` (:func:`module_calls`): what each module call costs where bytes cost nothing.

Each under these modes, in one process, interleaved in rounds (every mode runs a few steps per
round, so drift of the machine hits all modes alike); the median step time over all rounds, and
the median CPU time of the process per step (``<mode>_cpu``: steadier than the wall time on a
busy machine; with one torch thread it is the work itself), of the program's thread
(``<mode>_thread``: without the background writer's) and the wall time per step of a round
including the wait for the trace at its end (``<mode>_drained``: what a background writer
that falls behind costs; the round's timed steps plus ``stop()``, over their number):

- ``untraced``: the plain step;
- ``floor``: a ``TorchDispatchMode`` that only calls the op: the cost of intercepting every op,
  which any op tracer in Python pays;
- ``modules``: ``bitexact._trace`` at ``level="modules"`` (``bitexact run --trace modules``);
  ``modules_floor``: global module and optimizer hooks that do nothing (:class:`ModuleFloor`),
  the floor any module tracer in Python pays; ``modules_hooks``: bitexact's module hooks and
  tracker with no tensor labelled and no record written, and ``modules_inputs``: with each
  forward's own state and arguments labelled too, but no record (no output copied): where
  ``modules``' cost goes (:func:`module_parts`);
- ``ops``: ``bitexact._trace`` (``bitexact run --trace ops``): canonical, order-aware SHA-256
  digests of every op's inputs and outputs, module, source line, each result's float64 sketch
  and the op's non-tensor arguments, written to a JSONL trace, hashed on the background
  writer's thread where torch leaves a core free (``_trace_digest.background()``);
  ``ops_sync`` / ``modules_sync``: digests on the program's thread; ``ops_nosketch`` and
  ``ops_sync_nosketch``: as ``ops`` and ``ops_sync`` without sketches and arguments
  (``_trace_digest.SKETCH`` off), to measure their cost; ``ops_observer`` and
  ``ops_sync_observer``: as ``ops`` and ``ops_sync`` through the observer driver (torch's
  RecordFunction callbacks instead of a dispatch mode, ``bitexact._trace.observer``; on the
  CPU only, where it can be compiled, else ``observer_error`` says why);
- ``debugmode`` / ``debugmode_inputs``: torch's DebugMode with
  ``log_tensor_hashes(hash_fn="hash_tensor")`` (the cheaper of its hashes, an order-blind XOR;
  outputs only, its default), and with ``hash_inputs=True`` too (what bitexact records).

Also the records per step of ``ops`` and ``modules`` and the ``ops`` trace's bytes per step.
``python benches/op_trace.py [REPS] [WORKLOAD...]``: REPS steps per mode (default 20).
``BITEXACT_BENCH_DEVICE=cuda`` runs the nanoGPT workloads on the GPU (each step ends with
``torch.cuda.synchronize()``, so a step's time includes its kernels), with two more modes
there: ``ops_torchfp``, device tensors fingerprinted by torch's int64 ops instead of bitexact's
kernel (``_fingerprint.KERNEL`` off), and ``ops_stage16m``, device tensors of up to 16 MiB
staged to the host instead of fingerprinted on the device (``_trace.device.STAGE_MAX``).
``$BITEXACT_BENCH_MODES`` (comma-separated) runs only the modes it names, and ``untraced``.
"""

import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import bitexact._trace as tracer
import bitexact._trace.device as _trace_device
import bitexact._trace.digest as _trace_digest
from bitexact._trace import observer as _observer
from bitexact import _fingerprint

HERE = os.path.dirname(os.path.abspath(__file__))
DEVICE = os.environ.get("BITEXACT_BENCH_DEVICE", "cpu")
STAGE_MAX = _trace_device.STAGE_MAX
ROUNDS, WARMUP = 5, 2


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def classifier():
    example = load("ops_trace", os.path.join(HERE, "..", "examples", "python", "ops_trace.py"))
    torch.manual_seed(0)
    model = example.Classifier(50, 32, 4, False, False)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 50, (16, 12), generator=g)
    y = torch.randint(0, 4, (16,), generator=g)

    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    return step


def in_place_chain():
    """Ten ``m.mul_(0.9).addcmul_(g, g, value=0.1).sqrt_()`` on 1 MiB tensors: each op reads,
    in place, what the op before it just wrote (an optimizer's state), so its earlier value is
    held by the background writer while the writer still hashes it (``TraceWriter.hold``)."""
    m, g = torch.zeros(1 << 18), torch.randn(1 << 18, generator=torch.Generator().manual_seed(0))

    def step():
        for _ in range(10):
            m.mul_(0.9).addcmul_(g, g, value=0.1).sqrt_()

    return step


def module_calls():
    """A no-grad forward through a ``Sequential`` of 20 ``Linear(4, 4)`` on a 2×4 batch: 21
    module calls whose tensors are a few floats, so that ``--trace modules``' cost per call is
    its hooks and records, not the bytes it reads (its modes' times over 21: per call)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(20)])
    x = torch.randn(2, 4)

    def step():
        with torch.no_grad():
            model(x)

    return step


def workloads():
    gpt = load("nanogpt", os.path.join(HERE, "nanogpt.py")).Workload(DEVICE)
    if DEVICE == "cpu":
        return {"classifier": classifier(), "nanogpt": gpt.train, "nanogpt_eval": gpt.eval,
                "in_place_chain": in_place_chain(), "module_calls": module_calls()}

    def synced(step):
        def run():
            step()
            torch.cuda.synchronize()
        return run

    return {"nanogpt": synced(gpt.train), "nanogpt_eval": synced(gpt.eval)}


class Floor(TorchDispatchMode):
    """Intercepts every op and only calls it."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class Mode:
    """How a mode is entered and left around a round of steps; ``lines``: trace records made
    in the last round (bitexact's modes)."""

    def __init__(self, enter=None, leave=None):
        self.enter, self.leave, self.lines = enter, leave, None


def bitexact_mode(level, tmp, stats, sketch=True, background=None, kernel=True,
                  stage_max=_trace_device.STAGE_MAX, driver="mode"):
    path = os.path.join(tmp, "%s%s%s%s%s%s.jsonl" % (level, sketch, background, kernel, stage_max,
                                                     driver))

    def enter():
        _trace_digest.SKETCH = sketch
        _trace_digest.BACKGROUND = background
        _fingerprint.KERNEL = kernel
        _trace_device.STAGE_MAX = stage_max
        tracer.start(path, level=level, driver=driver)

    def leave():
        tracer.stop()
        _trace_digest.SKETCH = True
        _trace_digest.BACKGROUND = None
        _fingerprint.KERNEL = True
        _trace_device.STAGE_MAX = STAGE_MAX
        with open(path) as f:
            stats["lines"] = sum(1 for _ in f)
        stats["bytes"] = os.path.getsize(path)

    return Mode(enter, leave)


class ModuleFloor:
    """Global module forward hooks and optimizer step hooks that do nothing, registered as
    ``--trace modules`` registers its own (a pre-hook, a hook given the keyword arguments, one
    called when a forward raises, a hook before and after each optimizer step): the floor any
    module tracer in Python pays (torch's module call takes its slower path with hooks)."""

    def __init__(self):
        self.handles = []

    def enter(self):
        from torch.nn.modules import module as nn_module
        import torch.optim.optimizer as optimizer

        self.handles = [
            nn_module.register_module_forward_pre_hook(lambda m, a: None),
            nn_module.register_module_forward_hook(lambda m, a, k, o: None, with_kwargs=True),
            nn_module.register_module_forward_hook(lambda m, a, o: None, always_call=True),
            optimizer.register_optimizer_step_pre_hook(lambda o, a, k: None),
            optimizer.register_optimizer_step_post_hook(lambda o, a, k: None)]

    def leave(self):
        for h in self.handles:
            h.remove()
        self.handles = []


def module_parts(tmp, stats, outputs):
    """``--trace modules`` with part of its work left out, to show where its cost goes (the
    records it writes are not a trace): its hooks and module tracker with no tensor labelled
    and no record written (``outputs`` False), or with each forward's own state and arguments
    labelled (hashed, or checked against the digest cache) but no record written, so no
    output copied (``outputs`` True). Replaces ``bitexact._trace.hooks._lane`` (and
    ``bitexact._trace.digest.labels_now``) while the mode runs."""
    from bitexact._trace import hooks as _hooks

    originals = (_hooks._lane, _trace_digest.labels_now)
    inner = bitexact_mode("modules", tmp, stats)

    def enter():
        _hooks._lane = lambda *args, **kwargs: True
        if not outputs:
            _trace_digest.labels_now = lambda state, tensors, carrier, **kwargs: []
        inner.enter()

    def leave():
        inner.leave()
        _hooks._lane, _trace_digest.labels_now = originals

    return Mode(enter, leave)


def modes(tmp, stats):
    out = {"untraced": Mode()}
    floor = Floor()
    out["floor"] = Mode(floor.__enter__, lambda: floor.__exit__(None, None, None))
    module_floor = ModuleFloor()
    out["modules_floor"] = Mode(module_floor.enter, module_floor.leave)
    for name, outputs in (("modules_hooks", False), ("modules_inputs", True)):
        stats[name] = {}
        out[name] = module_parts(tmp, stats[name], outputs)
    for level in ("modules", "ops"):
        stats[level] = {}
        out[level] = bitexact_mode(level, tmp, stats[level])
        stats[level + "_sync"] = {}
        out[level + "_sync"] = bitexact_mode(level, tmp, stats[level + "_sync"], background=False)
    if DEVICE == "cpu":  # the observer does not see autograd's device threads yet
        try:
            _observer.library()
        except _observer.Unavailable as e:
            stats["observer_error"] = str(e)
        else:
            for name, background in (("ops_observer", None), ("ops_sync_observer", False)):
                stats[name] = {}
                out[name] = bitexact_mode("ops", tmp, stats[name], background=background,
                                          driver="observer")
    stats["ops_nosketch"] = {}
    out["ops_nosketch"] = bitexact_mode("ops", tmp, stats["ops_nosketch"], sketch=False)
    stats["ops_sync_nosketch"] = {}
    out["ops_sync_nosketch"] = bitexact_mode("ops", tmp, stats["ops_sync_nosketch"],
                                             sketch=False, background=False)
    if DEVICE == "cuda":
        stats["ops_torchfp"] = {}
        out["ops_torchfp"] = bitexact_mode("ops", tmp, stats["ops_torchfp"], kernel=False)
        stats["ops_stage16m"] = {}
        out["ops_stage16m"] = bitexact_mode("ops", tmp, stats["ops_stage16m"],
                                            stage_max=16 << 20)
    try:
        from torch.utils._debug_mode import DebugMode

        DebugMode.log_tensor_hashes  # noqa: B018  (torch too old: AttributeError)
    except (ImportError, AttributeError) as e:
        stats["debugmode_error"] = str(e)
        return out
    for name, inputs in (("debugmode", False), ("debugmode_inputs", True)):
        held = []

        def enter(inputs=inputs, held=held):
            held[:] = [DebugMode(), DebugMode.log_tensor_hashes(hash_fn="hash_tensor",
                                                                hash_inputs=inputs)]
            for cm in held:
                cm.__enter__()

        def leave(held=held):
            for cm in reversed(held):
                cm.__exit__(None, None, None)

        out[name] = Mode(enter, leave)
    return out


def chosen(ms):
    """``ms`` with only the modes ``$BITEXACT_BENCH_MODES`` names (comma-separated; all when it
    is unset), ``untraced`` always."""
    names = os.environ.get("BITEXACT_BENCH_MODES")
    if not names:
        return ms
    keep = {"untraced"} | set(names.split(","))
    return {name: mode for name, mode in ms.items() if name in keep}


def measure(step, reps, tmp):
    """Median seconds per step of every mode, records per step of bitexact's."""
    stats = {}
    ms = chosen(modes(tmp, stats))
    times = {name: [] for name in ms}
    cpu = {name: [] for name in ms}
    thread = {name: [] for name in ms}
    drained = {name: [] for name in ms}
    per_round = max(1, reps // ROUNDS)
    for _ in range(ROUNDS):
        for name, mode in ms.items():
            if mode.enter:
                mode.enter()
            for i in range(WARMUP + per_round):
                if i == WARMUP:
                    r0 = time.perf_counter()
                t0, c0, h0 = time.perf_counter(), time.process_time(), time.thread_time()
                step()
                if i >= WARMUP:
                    times[name].append(time.perf_counter() - t0)
                    cpu[name].append(time.process_time() - c0)
                    thread[name].append(time.thread_time() - h0)
            if mode.leave:
                mode.leave()
            drained[name].append((time.perf_counter() - r0) / per_round)
    out = {name: statistics.median(t) for name, t in times.items()}
    out.update({name + "_cpu": statistics.median(t) for name, t in cpu.items()})
    out.update({name + "_thread": statistics.median(t) for name, t in thread.items()})
    out.update({name + "_drained": statistics.median(t) for name, t in drained.items()})
    steps = WARMUP + per_round
    for level in ("modules", "ops"):
        if "lines" in stats[level]:
            out[level + "_records_per_step"] = stats[level]["lines"] / steps
    for name in ("ops", "ops_nosketch"):
        if "bytes" in stats[name]:
            out[name + "_trace_bytes_per_step"] = stats[name]["bytes"] / steps
    for name in ("debugmode_error", "observer_error"):
        if name in stats:
            out[name] = stats[name]
    return out


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    all_work = workloads()
    names = sys.argv[2:] or list(all_work)
    out = {"reps": reps, "threads": torch.get_num_threads(), "torch": torch.__version__,
           "device": DEVICE}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            out[name] = measure(all_work[name], reps, tmp)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
