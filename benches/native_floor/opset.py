"""Does torch's RecordFunction observer (the tracer's observer driver,
``bitexact._trace.observer``: issue 47's route to a traced step within 2x) see the ops
bitexact's dispatch mode records? ``python benches/native_floor/opset.py [WORKLOAD...]`` runs
one step of each workload of ``benches/op_trace.py`` (default: classifier, nanogpt,
nanogpt_eval) under each driver (``--trace ops``) and prints, per workload, both record
counts and every difference between the two op streams as a unified diff, then the ops only
one of them has (autograd's gradient accumulation: ``add`` under a dispatch mode, ``add_``
without). Exit status 0 either way: a design check, not a test
(``python/tests/test_trace_observer.py`` is the test).

The observer's rule (``python/bitexact/_trace/observer.cpp``): an op
(``RecordScope::FUNCTION``) is seen when no CompositeImplicitAutograd kernel decomposes it
above autograd and no op it sees is running in that thread (the ops an op's kernel calls run
below the dispatch mode, which never sees them).
"""

import difflib
import importlib.util
import json
import os
import sys
import tempfile
from collections import Counter

import bitexact._trace as tracer

HERE = os.path.dirname(os.path.abspath(__file__))


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def traced(step, tmp, driver):
    path = os.path.join(tmp, driver + ".jsonl")
    tracer.start(path, level="ops", driver=driver)
    try:
        step()
    finally:
        tracer.stop()
    with open(path) as f:
        return [json.loads(line)["op"] for line in f]


def main():
    work = load("op_trace", os.path.join(HERE, "..", "op_trace.py")).workloads()
    tmp = tempfile.mkdtemp(prefix="bitexact-opset-")
    for name in sys.argv[1:] or ["classifier", "nanogpt", "nanogpt_eval"]:
        step = work[name]
        step()
        step()
        python, native = traced(step, tmp, "mode"), traced(step, tmp, "observer")
        print("%s: %d records through the dispatch mode, %d through the observer" %
              (name, len(python), len(native)))
        for line in difflib.unified_diff(python, native, "mode", "observer", lineterm="", n=1):
            print("  " + line)
        print("  only the dispatch mode's: %s" % dict(Counter(python) - Counter(native)))
        print("  only the observer's: %s" % dict(Counter(native) - Counter(python)))


if __name__ == "__main__":
    main()
