#!/usr/bin/env bash
# The README's test command: unit, integration, snapshot and example tests (no GPU needed).
# With CI=true nothing is written: a snapshot mismatch fails with the case, the tensors and
# what differs in the platform fingerprint.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test
