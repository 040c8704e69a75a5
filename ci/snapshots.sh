#!/usr/bin/env bash
# The main report with every deterministic case compared against its committed snapshot under
# snapshots/ (exit 1 on any nondeterministic case or snapshot-mismatch). Runs in CI mode, so
# nothing is ever written.
# The release binary is built and run (`cargo run --release`), unless BITEXACT_SNAPSHOT_PYTHON
# names a Python whose installed bitexact package was built from this checkout: ci/all.sh
# passes the venv ci/python.sh just installed the wheel into, whose `python -m bitexact` is the
# same optimized build, so CI compiles it once.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${BITEXACT_SNAPSHOT_PYTHON:-}" ]; then
    echo "ci/snapshots.sh: the optimized build of the installed wheel ($BITEXACT_SNAPSHOT_PYTHON -m bitexact)"
    CI="${CI:-true}" "$BITEXACT_SNAPSHOT_PYTHON" -m bitexact report --snapshots snapshots/
else
    CI="${CI:-true}" cargo run --release -- report --snapshots snapshots/
fi
