#!/usr/bin/env bash
# Every CI check in order: lint, tests, report against the snapshots, and the PTX compile of
# the CUDA kernels when ci/ptx.sh exists.
set -euo pipefail
cd "$(dirname "$0")"
bash lint.sh
bash test.sh
bash snapshots.sh
if [ -f ptx.sh ]; then bash ptx.sh; fi
