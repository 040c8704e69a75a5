#!/usr/bin/env bash
# Every CI check in order, each part's time printed: lint; headless Chromium for the HTML report
# test (ci/browser.sh, never fails); the test command (ci/test.sh: the Python package built and
# tested, then `cargo test`); the built wheel installed where no Rust toolchain is
# (ci/wheel.sh); the documentation site (ci/docs.sh: mkdocs build --strict); the report against
# the snapshots; and the PTX compile of the CUDA kernels.
set -euo pipefail
cd "$(dirname "$0")"
start=$SECONDS
part() {
    local t0=$SECONDS
    bash "$1"
    echo "ci: $1 took $((SECONDS - t0)) s (all so far: $((SECONDS - start)) s)"
}
part lint.sh
part browser.sh
part test.sh
part wheel.sh
part docs.sh
part snapshots.sh
if [ -f ptx.sh ]; then part ptx.sh; fi
