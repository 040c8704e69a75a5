#!/usr/bin/env bash
# Formatting, lints and docs: `cargo fmt --check`; clippy with warnings denied on both crates
# (every target; `too_many_lines` is on at 80 lines a function, see clippy.toml); and rustdoc
# with warnings denied (broken intra-doc links, bad HTML), so the API docs build clean.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! cargo fmt --version >/dev/null 2>&1; then rustup component add rustfmt; fi
if ! cargo clippy --version >/dev/null 2>&1; then rustup component add clippy; fi
cargo fmt --all --check
cargo clippy --all-targets -- -D warnings
cargo clippy -p bitexact-python --all-targets -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --quiet
