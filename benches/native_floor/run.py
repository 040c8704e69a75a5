"""Could an op tracer below Python meet issue 47's CPU goal (a traced nanoGPT step within 2x
untraced)? Compiles ``observer.cpp`` (a RecordFunction observer: torch's C++ callback at every
dispatched op) against the installed torch's headers with the system C++ compiler, and times a
nanoGPT training step (benches/nanogpt.py) in one process, modes interleaved in rounds:

- ``untraced``;
- ``floor``: a Python ``TorchDispatchMode`` that only calls each op (what bitexact's tracer, a
  dispatch mode, pays before it records anything);
- ``native_observe``: the C++ observer, counting ops only;
- ``native_hash``: the observer reading what a tracer must read (``observer.cpp`` says what);
- ``ops`` and ``ops_sync``: bitexact's tracer (``--trace ops``), hashing on its background
  writer's thread and on the program's.

``python benches/native_floor/run.py [STEPS] [ROUNDS]``; run it with ``OMP_NUM_THREADS=1`` as
the op bench is. Prints a table and the per-step op count and bytes the observer read. Needs
a C++20 compiler (``$CXX``, else ``c++``) and torch's headers (in torch's wheel); nothing else
of bitexact's build. An estimate for a design decision, not a test: no records are written.
"""

import ctypes
import importlib.util
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import bitexact._trace as tracer
import bitexact._trace.digest as trace_digest

HERE = os.path.dirname(os.path.abspath(__file__))


def build(out_dir):
    """The observer's shared library, compiled into ``out_dir``."""
    root = os.path.dirname(torch.__file__)
    lib = os.path.join(out_dir, "observer.so")
    # -march=native: the vector multiplies bitexact's own fingerprint picks at run time.
    cmd = [os.environ.get("CXX", "c++"), "-O3", "-march=native", "-DNDEBUG", "-std=c++20",
           "-shared", "-fPIC",
           "-D_GLIBCXX_USE_CXX11_ABI=%d" % int(torch._C._GLIBCXX_USE_CXX11_ABI),
           "-I" + os.path.join(root, "include"),
           "-I" + os.path.join(root, "include", "torch", "csrc", "api", "include"),
           "-I" + sysconfig.get_paths()["include"],
           os.path.join(HERE, "observer.cpp"), "-L" + os.path.join(root, "lib"), "-lc10",
           "-ltorch_cpu", "-Wl,-rpath," + os.path.join(root, "lib"), "-o", lib]
    subprocess.run(cmd, check=True)
    so = ctypes.CDLL(lib)
    for name in ("observer_ops", "observer_fingerprinted", "observer_checked"):
        getattr(so, name).restype = ctypes.c_uint64
    return so


class Floor(TorchDispatchMode):
    """Intercepts every op and only calls it."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    spec = importlib.util.spec_from_file_location(
        "nanogpt", os.path.join(HERE, "..", "nanogpt.py"))
    nanogpt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(nanogpt)
    work = nanogpt.Workload("cpu")
    tmp = tempfile.mkdtemp(prefix="bitexact-native-floor-")
    so = build(tmp)

    def timed():
        work.train()  # a step to settle in, untimed
        t, c = time.perf_counter(), time.process_time()
        for _ in range(steps):
            work.train()
        return (time.perf_counter() - t) / steps, (time.process_time() - c) / steps

    def floor():
        mode = Floor()
        mode.__enter__()
        try:
            return timed()
        finally:
            mode.__exit__(None, None, None)

    def native(hash_):
        def run():
            so.observer_start(hash_)
            try:
                return timed()
            finally:
                so.observer_stop()
        return run

    def ops(background):
        def run():
            trace_digest.BACKGROUND = background
            tracer.start(os.path.join(tmp, "t.jsonl"), level="ops")
            try:
                return timed()
            finally:
                tracer.stop()
                trace_digest.BACKGROUND = None
        return run

    modes = {"untraced": timed, "floor": floor, "native_observe": native(0),
             "native_hash": native(1), "ops": ops(True), "ops_sync": ops(False)}
    for _ in range(3):
        work.train()
    got = {name: [] for name in modes}
    for _ in range(rounds):
        for name, run in modes.items():
            got[name].append(run())
    before = so.observer_ops(), so.observer_fingerprinted(), so.observer_checked()
    so.observer_start(1)
    work.train()
    so.observer_stop()
    n, fp, ck = (a - b for a, b in zip((so.observer_ops(), so.observer_fingerprinted(),
                                        so.observer_checked()), before))
    print("observer, per step: %d ops; %.1f MB fingerprinted (leaf ops' outputs), %.1f MB "
          "checked (the inputs of the ops the program called)" % (n, fp / 1e6, ck / 1e6))
    wall = {k: statistics.median(x[0] for x in v) for k, v in got.items()}
    cpu = {k: statistics.median(x[1] for x in v) for k, v in got.items()}
    print("%-15s %9s %8s %8s" % ("mode", "step", "wall", "CPU"))
    for k in modes:
        print("%-15s %6.1f ms %7.2fx %7.2fx" % (k, wall[k] * 1e3, wall[k] / wall["untraced"],
                                               cpu[k] / cpu["untraced"]))


if __name__ == "__main__":
    main()
