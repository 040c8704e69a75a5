#!/usr/bin/env bash
# Every CI check in order: lint; headless Chromium for the HTML report test (ci/browser.sh, never
# fails); the test command (ci/test.sh: the Python package built and tested, then `cargo test`);
# the built wheel installed where no Rust toolchain is (ci/wheel.sh); the documentation site
# (ci/docs.sh: mkdocs build --strict); the report against the snapshots; and the PTX compile of
# the CUDA kernels.
set -euo pipefail
cd "$(dirname "$0")"
bash lint.sh
bash browser.sh
bash test.sh
bash wheel.sh
bash docs.sh
bash snapshots.sh
if [ -f ptx.sh ]; then bash ptx.sh; fi
