# Written by `bitexact run --trace ops` into a private directory put first on the program's
# PYTHONPATH (the Rust binary embeds this file): starts bitexact's op tracer in this Python
# process (bitexact._trace), then runs the `sitecustomize` module this one shadows, if any.
import os
import sys


def _bitexact_trace():
    try:
        import bitexact._trace
    except ImportError as e:
        sys.stderr.write(
            "bitexact: --trace ops: this Python cannot import the bitexact package (%s); install "
            "it where the program runs: pip install bitexact-harness\n" % e
        )
        return
    try:
        bitexact._trace.install_from_env()
    except ImportError as e:
        sys.stderr.write("bitexact: --trace ops: no op trace for this Python (%s)\n" % e)


def _bitexact_chain():
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)


_bitexact_trace()
_bitexact_chain()
