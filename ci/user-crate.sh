#!/usr/bin/env bash
# Optional check, not part of CI: the example user crate (examples/user_crate) and the Rust
# tests guide's example built out of tree, as a user builds them (bitexact as the only
# dev-dependency, the crate's own target directory, under `CARGO_TARGET_TMPDIR`). It builds
# bitexact a second time (minutes). CI compiles and runs the same code inside the integration
# test binary instead (tests/it/user_examples.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --test it -- --ignored --exact user_examples::out_of_tree_build --nocapture
