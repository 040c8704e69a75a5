"""Timings for benches/op_trace.rs (run by it; prints one JSON object): one training step of the
small transformer classifier of examples/python/ops_trace.py (the same model and inputs for every
mode), median of REPS steps after warm-up, in one process:

- untraced: the plain step;
- debugmode: torch's DebugMode with ``log_tensor_hashes(hash_fn="hash_tensor")`` (the cheaper of
  its hashes, an order-blind XOR; outputs only, its default), and debugmode_inputs with
  ``hash_inputs=True`` too (what bitexact records);
- bitexact: ``bitexact._trace`` (what ``bitexact run --trace ops`` injects): canonical,
  order-aware SHA-256 digests of every op's inputs and outputs, module, source line, written to
  a JSONL trace. Also the trace's bytes and op calls per step.
"""

import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time

import torch

import bitexact._trace as tracer

REPS = int(sys.argv[1]) if len(sys.argv) > 1 else 20
HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location(
    "ops_trace", os.path.join(HERE, "..", "examples", "python", "ops_trace.py"))
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)

torch.manual_seed(0)
model = example.Classifier(50, 32, 4, False, False)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
g = torch.Generator().manual_seed(0)
x = torch.randint(0, 50, (16, 12), generator=g)
y = torch.randint(0, 4, (16,), generator=g)


def step():
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()


def timed(enter=None, leave=None):
    times = []
    for i in range(REPS + 3):
        if enter:
            enter()
        t0 = time.perf_counter()
        step()
        dt = time.perf_counter() - t0
        if leave:
            leave()
        if i >= 3:
            times.append(dt)
    return statistics.median(times)


out = {"reps": REPS, "untraced": timed()}

try:
    from torch.utils._debug_mode import DebugMode

    holder = {}

    def dm_enter(inputs):
        holder["dm"] = DebugMode()
        holder["hash"] = DebugMode.log_tensor_hashes(hash_fn="hash_tensor", hash_inputs=inputs)
        holder["dm"].__enter__()
        holder["hash"].__enter__()

    def dm_leave():
        holder["hash"].__exit__(None, None, None)
        holder["dm"].__exit__(None, None, None)

    out["debugmode"] = timed(lambda: dm_enter(False), dm_leave)
    out["debugmode_inputs"] = timed(lambda: dm_enter(True), dm_leave)
except (ImportError, AttributeError, TypeError) as e:
    out["debugmode_error"] = str(e)

with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "trace.jsonl")
    tracer.start(path)
    out["bitexact"] = timed()
    tracer.stop()
    size = os.path.getsize(path)
    with open(path) as f:
        calls = sum(1 for _ in f)
    steps = REPS + 3
    out["trace_bytes_per_step"] = size / steps
    out["ops_per_step"] = calls / steps
print(json.dumps(out))
