#!/usr/bin/env bash
# The wheel on a machine without Rust: installs the wheel ci/python.sh built
# (~/.cache/bitexact/wheel-path) into a fresh venv with cargo and rustc off PATH, then, with the
# installed command only:
# - `bitexact --version`;
# - `bitexact run -- python examples/python/train_numpy.py` exits 0;
# - `bitexact.digest` of a tensor equals the digest `bitexact run` reports for it in a file.
set -euo pipefail
cd "$(dirname "$0")/.."
cache="$HOME/.cache/bitexact"
wheel="$(cat "$cache/wheel-path")"
fresh="$cache/wheel-check"
rm -rf "$fresh"

# PATH without any directory holding cargo or rustc.
path=""
IFS=: read -ra dirs <<<"$PATH"
for d in "${dirs[@]}"; do
    if [ -n "$d" ] && [ ! -e "$d/cargo" ] && [ ! -e "$d/rustc" ]; then path="$path${path:+:}$d"; fi
done
export PATH="$path"
unset CARGO_HOME RUSTUP_HOME CARGO_TARGET_DIR
if command -v cargo >/dev/null || command -v rustc >/dev/null; then
    echo "ci/wheel.sh: cargo or rustc still on PATH" >&2
    exit 1
fi

pipq=(--quiet --disable-pip-version-check)
export PIP_ROOT_USER_ACTION=ignore
if python3 -m venv "$fresh" >/dev/null 2>&1 && "$fresh/bin/python" -m pip --version >/dev/null 2>&1; then
    py="$fresh/bin/python"
    bin="$fresh/bin/bitexact"
    "$py" -m pip install "${pipq[@]}" --only-binary :all: "$wheel" numpy
else
    rm -rf "$fresh"
    python3 -m pip install "${pipq[@]}" --only-binary :all: --target "$fresh" "$wheel" numpy
    export PYTHONPATH="$fresh"
    py="$(command -v python3)"
    bin="$fresh/bin/bitexact"
fi

echo "ci/wheel.sh: $("$bin" --version) from $wheel, cargo and rustc off PATH"
"$bin" run --runs 2 -- "$py" examples/python/train_numpy.py >"$fresh/report.txt" || {
    cat "$fresh/report.txt"
    echo "ci/wheel.sh: bitexact run of the numpy example failed" >&2
    exit 1
}
tail -n 1 "$fresh/report.txt"

script='import os, numpy as np
np.save(os.path.join(os.environ["BITEXACT_OUT"], "x.npy"), np.linspace(-1, 1, 300_000, dtype=np.float32).reshape(600, 500))'
from_run="$("$bin" run --format json -- "$py" -c "$script" |
    "$py" -c 'import json, sys; print(json.load(sys.stdin)["cases"][0]["digests"]["x.npy"])')"
from_python="$("$py" -c 'import bitexact, numpy as np
print(bitexact.digest(np.linspace(-1, 1, 300_000, dtype=np.float32).reshape(600, 500)))')"
if [ "$from_run" != "$from_python" ]; then
    echo "ci/wheel.sh: bitexact.digest $from_python != bitexact run $from_run" >&2
    exit 1
fi
echo "ci/wheel.sh: bitexact.digest == bitexact run digest ($from_python)"
