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
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/python.sh
cargo test
cargo test -p bitexact-python
