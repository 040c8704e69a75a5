"""The state record's cost (``bitexact run --vary resume`` records, at every
optimizer step, the digests of the state a bit-exact resume needs; goal ≤ 5 % of a step): one
training iteration of the nanoGPT-sized GPT of ``benches/nanogpt.py`` (AdamW over two groups,
gradient clipping), without and with the recorder (:mod:`bitexact._resume_state`), interleaved
in rounds as ``benches/op_trace.py`` does:

* ``state``: the recorder as a run gets it (``AUTO``): a full record at the launch's first step
  and after each checkpoint write (this loop writes none), a light one (generators,
  param-group values, schedulers, scalers, loaders) at every other step;
* ``state_full``: a full record at every step (``BITEXACT_STATE_STEPS=0..``; what every step
  cost before the records were light), the per-tensor pieces included.

Medians of wall and process CPU time per step (the CPU time counts the native hash's threads
too), and of one full record alone (``record``: building and writing one line, every tensor's
digest already cached, i.e. the Python side's cost) and its bytes.

``OMP_NUM_THREADS=1 python benches/resume_state.py [REPS]`` (default 40 steps per mode); prints
one JSON object.
"""

import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time

import torch

import bitexact._resume_state as state

HERE = os.path.dirname(os.path.abspath(__file__))
ROUNDS, WARMUP = 5, 2


def workload():
    spec = importlib.util.spec_from_file_location("nanogpt", os.path.join(HERE, "nanogpt.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Workload("cpu")


MODES = {"untraced": None, "state": state.AUTO, "state_full": (0, float("inf"))}


def measure(work, reps, tmp):
    times = {m: [] for m in MODES}
    cpu = {m: [] for m in MODES}
    per_round = max(1, reps // ROUNDS)
    for r in range(ROUNDS):
        for mode, heavy in MODES.items():
            out = os.path.join(tmp, "%s%d" % (mode, r))
            os.makedirs(out)
            rec = state.install(out=out, rank=0, start=0, heavy=heavy) \
                if mode != "untraced" else None
            for i in range(WARMUP + per_round):
                t0, c0 = time.perf_counter(), time.process_time()
                work.train()
                if i >= WARMUP:
                    times[mode].append(time.perf_counter() - t0)
                    cpu[mode].append(time.process_time() - c0)
            if rec is not None:
                state.uninstall()
    out = {m: statistics.median(t) for m, t in times.items()}
    out.update({m + "_cpu": statistics.median(t) for m, t in cpu.items()})
    return out


def record_alone(work, reps, tmp):
    """Median wall and CPU seconds of one record (made and written) outside the step."""
    rec = state.install(out=tmp, rank=0, start=0, heavy=(0, float("inf")))
    work.train()  # the first record finds the modules (a one-time scan)
    wall, cpu = [], []
    for _ in range(reps):
        t0, c0 = time.perf_counter(), time.process_time()
        line = rec.line(0)
        state._append(rec.path, line)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    state.uninstall()
    return {"record": statistics.median(wall), "record_cpu": statistics.median(cpu),
            "record_bytes": len(line.encode()), "pieces": line.count('"name"')}


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    work = workload()
    with tempfile.TemporaryDirectory() as tmp:
        out = measure(work, reps, tmp)
        out.update(record_alone(work, reps, tmp))
    for mode in ("state", "state_full"):
        out[mode + "_over_untraced"] = out[mode] / out["untraced"]
        out[mode + "_over_untraced_cpu"] = out[mode + "_cpu"] / out["untraced_cpu"]
    out["record_over_step_cpu"] = out["record_cpu"] / out["untraced_cpu"]
    out.update(threads=torch.get_num_threads(), torch=torch.__version__, reps=reps)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
