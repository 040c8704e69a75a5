#!/usr/bin/env bash
# The README's test command: every test, Python and Rust, on a machine without a GPU.
# 1. `cargo test --no-run` (and the same for the bindings crate) compiles the Rust tests in
#    the background while
# 2. ci/python.sh (BITEXACT_PYTEST=0) makes the venv under ~/.cache/bitexact/ (numpy,
#    safetensors, pytest, maturin, torch when it installs), builds this checkout's package (a
#    release build, compiled incrementally) and installs it.
# 3. pytest over python/tests runs in the background (its output is printed when it ends)
#    while the Rust tests compile and run: the machine's cores stay busy instead of waiting on
#    one pytest process.
# 4. `cargo test`: the unit tests, the integration tests (one binary, tests/it/, plus
#    tests/counted/ for the tests that measure heap memory and tests/architecture.rs), the
#    example's tests and the doctests. Its `bitexact run` and Python-package tests use that venv
#    (~/.cache/bitexact/python-path).
# 5. `cargo test -p bitexact-python`: the bindings crate's unit tests (the trace writer's copy
#    pool, the native lane's JSON quoting); its Python-facing behaviour is tested by pytest in
#    step 3.
# The script fails when any of them fails, after all have run.
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
# Inductor's compiled kernels (torch.compile's on-disk cache, /tmp/torchinductor_$USER by
# default) are kept with the venv, so the tests of compiled models compile each graph once per
# machine rather than once per fresh /tmp. In a directory named by a hash of the programs they
# compile: a cached graph keeps the source lines it was compiled from (which the tests check),
# and Inductor's cache key leaves them out. Only the current directory is kept.
if [ -z "${TORCHINDUCTOR_CACHE_DIR:-}" ]; then
    inductor="$HOME/.cache/bitexact/torchinductor"
    key="$(cat tests/fixtures/programs/*.py benches/nanogpt.py | sha256sum | cut -c1-16)"
    mkdir -p "$inductor"
    find "$inductor" -mindepth 1 -maxdepth 1 ! -name "$key" -exec rm -rf {} +
    export TORCHINDUCTOR_CACHE_DIR="$inductor/$key"
fi
if [ "${CI:-}" = true ]; then export BITEXACT_REQUIRE_TOOLS=1; fi
build_log="$(mktemp)"
builder=""
pytest_log="$(mktemp)"
pytester=""
summary() {
    # The background jobs are process groups of their own (setsid): stopped with their children.
    if [ -n "$builder" ]; then kill -- "-$builder" 2>/dev/null || true; fi
    if [ -n "$pytester" ]; then kill -- "-$pytester" 2>/dev/null || true; fi
    local n
    n=$(sort -u "$BITEXACT_SKIP_LOG" | grep -c . || true)
    echo "ci/test.sh: $n Rust test(s) skipped"
    sort -u "$BITEXACT_SKIP_LOG" | sed 's/^bitexact: /  /'
    rm -f "$BITEXACT_SKIP_LOG" "$build_log" "$pytest_log"
}
trap summary EXIT
# Runs a command and prints its time; returns its status (called as `timed cmd || rc=$?`, where
# `set -e` does not apply inside, a status left to the `echo` would pass any failure).
timed() {
    local t0=$SECONDS rc=0
    "$@" || rc=$?
    echo "ci/test.sh: \`$*\` took $((SECONDS - t0)) s"
    return "$rc"
}
t0=$SECONDS
setsid sh -c 'cargo test --no-run && cargo test -p bitexact-python --no-run' >"$build_log" 2>&1 &
builder=$!
timed env BITEXACT_PYTEST=0 bash ci/python.sh
py="$(cat "$HOME/.cache/bitexact/python-path")"
# The op tracer's observer (how `--trace ops` reaches ops on a machine without a GPU), compiled
# for this torch once, here, rather than by the first traced programs of pytest and cargo test at
# the same time. A failure is not fatal here: the tests that need it say why.
timed "$py" -c "from bitexact._trace import observer; observer.library()" || true
p0=$SECONDS
# pytest exit status 5 (no tests collected) fails too: python/tests always has tests.
setsid sh -c '"$1" -m pytest -q -rs -p no:cacheprovider python/tests >"$2" 2>&1; echo "$?" >>"$2"' \
    sh "$py" "$pytest_log" &
pytester=$!
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
rust=0
timed cargo test || rust=$?
if [ "$rust" -eq 0 ]; then timed cargo test -p bitexact-python || rust=$?; fi
wait "$pytester" || true
pytester=""
pytest_status="$(tail -n 1 "$pytest_log")"
echo "ci/test.sh: pytest (python/tests), beside the Rust tests, ended $((SECONDS - p0)) s after it started:"
sed '$d' "$pytest_log"
if [ "$pytest_status" = 5 ]; then
    echo "ci/test.sh: pytest collected no tests in python/tests" >&2
fi
if [ "$pytest_status" != 0 ]; then
    echo "ci/test.sh: pytest failed (exit $pytest_status)" >&2
    exit 1
fi
exit "$rust"
