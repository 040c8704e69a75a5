#!/usr/bin/env bash
# Every CI check in order: lint; the Python helper's venv and pytest (ci/python.sh, which also
# installs numpy and torch for the `bitexact run` integration tests); the README's test command
# `cargo test`; the report against the snapshots; and the PTX compile of the CUDA kernels.
set -euo pipefail
cd "$(dirname "$0")"
bash lint.sh
bash python.sh
bash test.sh
bash snapshots.sh
if [ -f ptx.sh ]; then bash ptx.sh; fi
