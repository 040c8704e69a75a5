"""Would a RecordFunction observer (a C++ op tracer, issue 47's route to a traced step within 2x)
see the ops bitexact's tracer records? ``python benches/native_floor/opset.py [WORKLOAD...]``
runs one step of each workload of ``benches/op_trace.py`` (default: classifier, nanogpt,
nanogpt_eval) twice: under bitexact's tracer (``--trace ops``: a ``TorchDispatchMode``), reading
the ops of its records, and under ``observer.cpp``'s ``names`` mode, whose ops then go through
the tracer's own filter (``bitexact._trace.calls.op``: views, aliases, allocations and collectives
are not records). Prints, per workload, both counts and every difference as a unified diff of
the two op streams, then the ops only one of them has. Exit status 0 either way: a design
check, not a test.

The observer's rule: an op (``RecordScope::FUNCTION``) is seen when no CompositeImplicitAutograd
kernel decomposes it above autograd and no op it sees is running in that thread (the ops an
op's kernel calls run below the dispatch mode, which never sees them).
"""

import ctypes
import difflib
import importlib.util
import json
import os
import sys
import tempfile
from collections import Counter

import torch

import bitexact._trace as tracer
from bitexact._trace import calls

HERE = os.path.dirname(os.path.abspath(__file__))


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def recorded(name):
    """Whether bitexact's tracer records an op named ``name`` (``aten::add.Tensor``)."""
    ns, rest = name.split("::", 1)
    base, _, overload = rest.partition(".")
    func = getattr(getattr(getattr(torch.ops, ns), base), overload or "default")
    kind = calls.op(func)[1]
    return isinstance(kind, str)


def traced(step, tmp):
    path = os.path.join(tmp, "t.jsonl")
    tracer.start(path, level="ops")
    try:
        step()
    finally:
        tracer.stop()
    with open(path) as f:
        return [json.loads(line)["op"] for line in f]


def observed(so, step):
    so.observer_start_names()
    try:
        step()
    finally:
        so.observer_stop()
    names = [so.observer_name(i).decode() for i in range(so.observer_names())]
    return [n for n in names if recorded(n)]


def main():
    bench = load("op_trace", os.path.join(HERE, "..", "op_trace.py"))
    run = load("native_floor", os.path.join(HERE, "run.py"))
    work = bench.workloads()
    tmp = tempfile.mkdtemp(prefix="bitexact-opset-")
    so = run.build(tmp)
    so.observer_names.restype = ctypes.c_size_t
    so.observer_name.restype = ctypes.c_char_p
    so.observer_name.argtypes = [ctypes.c_size_t]
    for name in sys.argv[1:] or ["classifier", "nanogpt", "nanogpt_eval"]:
        step = work[name]
        step()
        step()
        python, native = traced(step, tmp), observed(so, step)
        print("%s: %d records by bitexact's tracer, %d ops by the observer" %
              (name, len(python), len(native)))
        for line in difflib.unified_diff(python, native, "tracer", "observer", lineterm="", n=1):
            print("  " + line)
        print("  only the tracer's: %s" % dict(Counter(python) - Counter(native)))
        print("  only the observer's: %s" % dict(Counter(native) - Counter(python)))


if __name__ == "__main__":
    main()
