# Written by `bitexact run --trace ops|modules` or `--seed-everything` into a private directory
# put first on the program's PYTHONPATH (the Rust binary embeds this file): seeds this Python
# process with bitexact.seed_everything() when asked ($BITEXACT_SEED_EVERYTHING=1, the first
# process of each rank only), starts bitexact's op tracer (bitexact._trace) when asked ($BITEXACT_TRACE),
# then runs the `sitecustomize` module this one shadows, if any.
import os
import sys


def _bitexact_trace():
    if not os.environ.get("BITEXACT_TRACE") and os.environ.get("BITEXACT_SEED_EVERYTHING") != "1":
        return
    try:
        import bitexact._trace
    except ImportError as e:
        sys.stderr.write(
            "bitexact: --trace / --seed-everything: this Python cannot import the bitexact "
            "package (%s); install it where the program runs: pip install bitexact-harness\n" % e
        )
        return
    from bitexact import _dist

    # Once per rank, in its first process (child processes keep their own seeding); never in
    # a torch.distributed launcher (torchrun's agent computes nothing).
    if os.environ.get("BITEXACT_SEED_EVERYTHING") == "1" and _dist.claim("BITEXACT_SEEDED"):
        import bitexact

        bitexact.seed_everything()
    if not os.environ.get("BITEXACT_TRACE"):
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
