#!/usr/bin/env bash
# The README's test command: every test, Python and Rust, on a machine without a GPU.
# 1. `cargo test --no-run` (and the same for the bindings crate) compiles the Rust tests in
#    the background while
# 2. ci/python.sh makes the venv under ~/.cache/bitexact/ (numpy, safetensors, pytest,
#    maturin, torch when it installs), builds this checkout's package (a release build, which
#    does not wait on the debug one) and installs it, and runs pytest over python/tests.
# 3. `cargo test`: the unit tests, the integration tests (one binary, tests/it/, plus
#    tests/counted/ for the tests that measure heap memory and tests/architecture.rs), the
#    example's tests and the doctests. Its `bitexact run` and Python-package tests use that venv
#    (~/.cache/bitexact/python-path).
# 4. `cargo test -p bitexact-python`: the bindings crate's unit tests (the trace writer's copy
#    pool); its Python-facing behaviour is tested by pytest in step 2.
# With CI=true nothing is written (a snapshot mismatch fails with the case, the tensors and
# what differs in the platform fingerprint), and a test whose tool is missing (torch,
# Chromium, g++, torchrun) fails instead of skipping: BITEXACT_REQUIRE_TOOLS=1.
# Every Rust test that skipped (a missing tool outside CI, or a premise that does not hold on
# this machine's kernels) appends its line to $BITEXACT_SKIP_LOG; the summary at the end lists
# them, as pytest's -rs does for the Python tests. Each part's time is printed.
set -euo pipefail
cd "$(dirname "$0")/.."
BITEXACT_SKIP_LOG="$(mktemp)"
export BITEXACT_SKIP_LOG
if [ "${CI:-}" = true ]; then export BITEXACT_REQUIRE_TOOLS=1; fi
build_log="$(mktemp)"
builder=""
summary() {
    # The background build is its own process group (setsid): stopped with its rustc children.
    if [ -n "$builder" ]; then kill -- "-$builder" 2>/dev/null || true; fi
    local n
    n=$(sort -u "$BITEXACT_SKIP_LOG" | grep -c . || true)
    echo "ci/test.sh: $n Rust test(s) skipped"
    sort -u "$BITEXACT_SKIP_LOG" | sed 's/^bitexact: /  /'
    rm -f "$BITEXACT_SKIP_LOG" "$build_log"
}
trap summary EXIT
timed() {
    local t0=$SECONDS
    "$@"
    echo "ci/test.sh: \`$*\` took $((SECONDS - t0)) s"
}
t0=$SECONDS
setsid sh -c 'cargo test --no-run && cargo test -p bitexact-python --no-run' >"$build_log" 2>&1 &
builder=$!
timed bash ci/python.sh
status=0
wait "$builder" || status=$?
builder=""
if [ "$status" -ne 0 ]; then
    cat "$build_log"
    echo "ci/test.sh: compiling the Rust tests (\`cargo test --no-run\`) failed" >&2
    exit "$status"
fi
echo "ci/test.sh: \`cargo test --no-run\` done $((SECONDS - t0)) s after it started (beside ci/python.sh)"
# Three test threads on CI's two cores: the integration tests wait on programs, timeouts and
# kills a quarter of the time at two threads (vmstat); a third fills that. $RUST_TEST_THREADS
# set by the caller wins.
export RUST_TEST_THREADS="${RUST_TEST_THREADS:-3}"
timed cargo test
timed cargo test -p bitexact-python
