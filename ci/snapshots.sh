#!/usr/bin/env bash
# The main report with every deterministic case compared against its committed snapshot under
# snapshots/ (exit 1 on any nondeterministic case or snapshot-mismatch). Runs in CI mode, so
# nothing is ever written.
set -euo pipefail
cd "$(dirname "$0")/.."
CI="${CI:-true}" cargo run --release -- report --snapshots snapshots/
