#!/usr/bin/env bash
# Every CI check in order: lint (fmt, clippy with functions capped at 80 lines, rustdoc with
# warnings denied); headless Chromium for the HTML report test (ci/browser.sh); the test
# command (ci/test.sh: the Python package built while the Rust tests compile, then pytest
# beside the Rust tests); the built wheel installed where no Rust toolchain is (ci/wheel.sh); the
# documentation site (ci/docs.sh: mkdocs build --strict); the report against the snapshots;
# and the PTX compile of the CUDA kernels. Each part's time is printed as it ends, and all of
# them again at the end.
#
# With CI=true the Rust build directory is `~/.cache/bitexact/target` (unless
# CARGO_TARGET_DIR is set), kept between runs like the venv: a fresh clone then compiles only
# bitexact's own crates, not its dependencies. It is emptied when it grows past 12 GiB.
set -euo pipefail
cd "$(dirname "$0")"
if [ "${CI:-}" = true ] && [ -z "${CARGO_TARGET_DIR:-}" ]; then
    export CARGO_TARGET_DIR="$HOME/.cache/bitexact/target"
    mkdir -p "$CARGO_TARGET_DIR"
    if [ "$(du -s -BG "$CARGO_TARGET_DIR" | cut -f1 | tr -d G)" -gt 12 ]; then
        echo "ci: $CARGO_TARGET_DIR is over 12 GiB: emptied"
        rm -rf "$CARGO_TARGET_DIR" && mkdir -p "$CARGO_TARGET_DIR"
    fi
fi
start=$SECONDS
times=()
part() {
    local t0=$SECONDS
    bash "$1"
    times+=("$(printf '%5d s  %s' $((SECONDS - t0)) "$1")")
    echo "ci: $1 took $((SECONDS - t0)) s (all so far: $((SECONDS - start)) s)"
}
part lint.sh
part browser.sh
part test.sh
part wheel.sh
part docs.sh
# The wheel ci/test.sh built and installed is this checkout's optimized build: no second one.
BITEXACT_SNAPSHOT_PYTHON="$(cat "$HOME/.cache/bitexact/python-path")"
export BITEXACT_SNAPSHOT_PYTHON
part snapshots.sh
if [ -f ptx.sh ]; then part ptx.sh; fi
echo "ci: every part, in seconds:"
printf '  %s\n' "${times[@]}"
printf '  %5d s  all\n' $((SECONDS - start))
