#!/usr/bin/env bash
# Brings the stable build checkout ~/.cache/bitexact/checkout to this clone's commit and prints
# its path; fails (printing why to stderr) when it should not be used. `.ci/run` builds and
# tests there under CI=true.
#
# Why: cargo keys a crate's compiled artifacts by the path of its sources and decides what to
# rebuild by their modification times. A fresh clone at a new path rebuilds bitexact's own
# crates from nothing (about 4 minutes of CI's 2 cores) even with a warm target directory; a
# CI runner's checkout path never changes (GitHub's is always /home/runner/work/<repo>/<repo>),
# and this gives a clone the same. `git checkout` rewrites only the files that differ between
# the two commits, so the others keep their times and cargo rebuilds what changed.
#
# The checkout holds exactly this clone's commit: every untracked or ignored file is removed
# (`git clean -ffdx`); the build directory and the venv are outside it. Refused, so that the
# caller builds in place, when this clone has uncommitted changes (they would be left out) or
# is not a git clone.
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
work="$HOME/.cache/bitexact/checkout"
if ! git -C "$src" rev-parse --verify -q HEAD >/dev/null 2>&1; then
    echo "ci/checkout.sh: $src is not a git clone: building in place" >&2
    exit 1
fi
if [ -n "$(git -C "$src" status --porcelain)" ]; then
    echo "ci/checkout.sh: $src has uncommitted changes: building in place" >&2
    exit 1
fi
if [ "$work" = "$src" ]; then
    echo "$work"
    exit 0
fi
if ! git -C "$work" rev-parse --git-dir >/dev/null 2>&1; then
    rm -rf "$work"
    git init -q "$work"
fi
git -C "$work" fetch -q --no-tags --depth=1 "file://$src" HEAD
git -C "$work" checkout -q -f --detach FETCH_HEAD
git -C "$work" clean -q -ffdx
if [ "$(git -C "$work" rev-parse HEAD)" != "$(git -C "$src" rev-parse HEAD)" ]; then
    echo "ci/checkout.sh: $work did not reach $src's commit: building in place" >&2
    exit 1
fi
echo "$work"
