#!/usr/bin/env bash
# The README's test command: every test, Python and Rust, on a machine without a GPU.
# 1. ci/python.sh: the venv under ~/.cache/bitexact/ (numpy, safetensors, pytest, maturin,
#    torch when it installs), the package built from this checkout and installed, and pytest
#    over python/tests.
# 2. `cargo test`: unit, integration, snapshot and example tests. Its `bitexact run` and
#    Python-package tests use that venv (~/.cache/bitexact/python-path).
# 3. `cargo test -p bitexact-python`: the bindings crate's unit tests (the trace writer's copy
#    pool); its Python-facing behaviour is tested by pytest in step 1.
# With CI=true nothing is written: a snapshot mismatch fails with the case, the tensors and
# what differs in the platform fingerprint.
# Every Rust test that skipped (a missing tool, or a premise that does not hold on this
# machine's kernels) appends its line to $BITEXACT_SKIP_LOG; the summary at the end lists them,
# as pytest's -rs does for the Python tests. Each part's time is printed.
set -euo pipefail
cd "$(dirname "$0")/.."
BITEXACT_SKIP_LOG="$(mktemp)"
export BITEXACT_SKIP_LOG
summary() {
    local n
    n=$(sort -u "$BITEXACT_SKIP_LOG" | grep -c . || true)
    echo "ci/test.sh: $n Rust test(s) skipped"
    sort -u "$BITEXACT_SKIP_LOG" | sed 's/^bitexact: /  /'
    rm -f "$BITEXACT_SKIP_LOG"
}
trap summary EXIT
timed() {
    local t0=$SECONDS
    "$@"
    echo "ci/test.sh: \`$*\` took $((SECONDS - t0)) s"
}
timed bash ci/python.sh
timed cargo test
timed cargo test -p bitexact-python
