"""The ``bitexact`` command of the Python package: the console script and ``python -m
bitexact`` both run the Rust command line (``bitexact._native.main``) in this process.

It behaves as the standalone binary does:

* the same code parses the arguments and runs, so output, reports and exit codes (0 / 1 / 2,
  128 + signal after a stop signal) are the binary's;
* Python's own signal dispositions are undone first: SIGINT goes back to its default (not
  ``KeyboardInterrupt``, which Python would only raise once the Rust code returned), and
  SIGXFSZ, which Python ignores, too. SIGPIPE stays ignored, as Rust's runtime has it in the
  binary; a program ``bitexact run`` starts gets it back at its default, as from the binary.
  ``bitexact run`` then installs its own SIGTERM / SIGINT / SIGHUP handling (kill every run's
  process group, remove the run directories, exit 128 + signal);
* ``bitexact run --trace`` gives the program's Python this package (whatever environment the
  program runs in: see ``src/program/tracer.rs``);
* children that re-run the command line (``--isolate``, ``--vary process``) start as
  ``python -m bitexact __child``;
* the process ends with ``os._exit`` once the report is written, as a Rust ``main`` returns:
  no Python finalization runs after it.
"""

import os
import signal
import sys


def main(argv=None):
    """Runs ``bitexact ARGS...`` (``argv`` defaults to ``sys.argv[1:]``) and exits with its
    exit code."""
    try:
        from . import _native
    except ImportError as e:
        sys.stderr.write(
            "error: the bitexact command needs the native module bitexact._native, which this "
            "copy of the package lacks (%s); install it with `pip install bitexact-harness` "
            "or `pip install ./python` from a checkout\n" % e
        )
        sys.exit(2)
    args = sys.argv[1:] if argv is None else list(argv)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if hasattr(signal, "SIGXFSZ"):
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    sys.stdout.flush()
    sys.stderr.flush()
    package = os.path.dirname(os.path.abspath(__file__))
    code = _native.main(["bitexact"] + args, sys.executable, package)
    os._exit(code)


if __name__ == "__main__":
    main()
