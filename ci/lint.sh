#!/usr/bin/env bash
# Formatting and lints (warnings are errors). Installs the components if the toolchain lacks them.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! cargo fmt --version >/dev/null 2>&1; then rustup component add rustfmt; fi
if ! cargo clippy --version >/dev/null 2>&1; then rustup component add clippy; fi
cargo fmt --all --check
cargo clippy --all-targets -- -D warnings
# The Python package's native module, its own crate in the workspace (crates/bitexact-python).
cargo clippy -p bitexact-python --all-targets -- -D warnings
