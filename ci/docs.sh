#!/usr/bin/env bash
# The documentation site (mkdocs.yml, docs/): `mkdocs build --strict`, so a broken link or
# anchor, a page missing from the nav or a nav entry without a page fails CI. The site is built
# into a temporary directory and removed. mkdocs-material is installed into the CI venv by
# ci/python.sh (run before this, by ci/test.sh); its python is read from
# ~/.cache/bitexact/python-path. The generated reference pages are checked for staleness by
# `cargo test --test it docs_reference::`, not here.
set -euo pipefail
cd "$(dirname "$0")/.."
py="$(cat "$HOME/.cache/bitexact/python-path" 2>/dev/null || echo python3)"
site="$(mktemp -d)"
trap 'rm -rf "$site"' EXIT
start=$SECONDS
NO_MKDOCS_2_WARNING=1 "$py" -m mkdocs build --strict --quiet --site-dir "$site"
echo "ci/docs.sh: mkdocs build --strict passed in $((SECONDS - start))s"
