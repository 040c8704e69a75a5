"""Timings for benches/batch_trace.rs (run by it; prints one JSON object): the cost of
`bitexact run --vary batch --trace ops` on examples/python/batch_invariance.py (a small causal
LM serving 16 prompts), in one process, modes interleaved in rounds:

- ``untraced_1`` / ``untraced_8``: serving every prompt at batch size 1 / 8, untraced;
- ``traced_1`` / ``traced_8``: the same under ``bitexact._trace`` (``--trace ops``);
- ``rows_8``: batch size 8 traced with row slices (``rows=8``: what the larger-batch run of a
  traced batch check records).

Medians of wall and process CPU time. ``python benches/batch_trace.py [REPS]``.
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

HERE = os.path.dirname(os.path.abspath(__file__))
ROUNDS = 5


def example():
    path = os.path.join(HERE, "..", "examples", "python", "batch_invariance.py")
    spec = importlib.util.spec_from_file_location("batch_invariance", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    ex = example()
    torch.manual_seed(0)
    model = ex.Model().eval()
    prompts = torch.randint(0, ex.VOCAB, (ex.REQUESTS, ex.PROMPT),
                            generator=torch.Generator().manual_seed(1))

    def serve(batch):
        with torch.no_grad():
            for start in range(0, ex.REQUESTS, batch):
                model(prompts[start:start + batch])

    modes = {
        "untraced_1": (1, None),
        "untraced_8": (8, None),
        "traced_1": (1, 1),
        "traced_8": (8, 1),
        "rows_8": (8, 8),
    }
    wall = {m: [] for m in modes}
    cpu = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(ROUNDS):
            for name, (batch, rows) in modes.items():
                if rows is not None:
                    tracer.start(os.path.join(tmp, name + ".jsonl"), rows=rows)
                for i in range(1 + max(1, reps // ROUNDS)):
                    t0, c0 = time.perf_counter(), time.process_time()
                    serve(batch)
                    if i:  # the first is a warm-up
                        wall[name].append(time.perf_counter() - t0)
                        cpu[name].append(time.process_time() - c0)
                if rows is not None:
                    tracer.stop()
    out = {"threads": torch.get_num_threads(), "torch": torch.__version__}
    out.update({m: statistics.median(t) for m, t in wall.items()})
    out.update({m + "_cpu": statistics.median(t) for m, t in cpu.items()})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
