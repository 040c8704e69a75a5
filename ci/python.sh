#!/usr/bin/env bash
# The Python package (python/: the helper, the native module bitexact._native and the
# `bitexact` console script) and its tests: makes a venv at
# ${BITEXACT_PY_VENV:-~/.cache/bitexact/venv} (created once, then reused) with numpy,
# safetensors, pytest, maturin and mkdocs-material (ci/docs.sh), builds the wheel from this checkout with
# `maturin build --release` (incremental) into target/wheels/ (the file name is written to
# ~/.cache/bitexact/wheel-path for ci/wheel.sh), installs it, tries to add torch, and runs
# `pytest python/tests` against the installed package.
#
# - No venv module (Debian without python3-venv): the packages go to "<venv>-target" with
#   `pip install --target`, and "<venv>-python" is a wrapper script that runs python3 with them
#   on PYTHONPATH (the same fallback as ci/ptx.sh). The console script is then
#   "<venv>-target/bin/bitexact".
# - torch: `pip install torch` (PyPI's wheel brings the CUDA libraries, ~3 GB, about a minute
#   and a half here; BITEXACT_TORCH_INDEX=https://download.pytorch.org/whl/cpu for the small CPU
#   build; BITEXACT_SKIP_TORCH=1 to not try). When it cannot be installed the script prints
#   "skipped: torch could not be installed (<reason>)" and the torch tests skip.
# - The python with everything installed is printed and written to
#   ~/.cache/bitexact/python-path, for other scripts: "$(cat ~/.cache/bitexact/python-path)".
# - pytest exit status 5 (no tests collected) fails the script: python/tests always has tests.
#   BITEXACT_PYTEST=0 builds and installs without running it (ci/any-cpu.sh runs its own).
set -euo pipefail
cd "$(dirname "$0")/.."
cache="$HOME/.cache/bitexact"
venv="${BITEXACT_PY_VENV:-$cache/venv}"
mkdir -p "$cache"
pipq=(--quiet --disable-pip-version-check)
export PIP_ROOT_USER_ACTION=ignore  # CI containers run as root; older pips ignore the variable

if { "$venv/bin/python" -m pip --version >/dev/null 2>&1; } ||
    { rm -rf "$venv" && python3 -m venv "$venv" >/dev/null 2>&1 &&
        "$venv/bin/python" -m pip --version >/dev/null 2>&1; }; then
    py="$venv/bin/python"
    install() { "$py" -m pip install "${pipq[@]}" "$@"; }
else
    rm -rf "$venv"  # a half-made venv (created without pip)
    target="$venv-target"
    mkdir -p "$target"
    py="$venv-python"  # not inside $target: pip --target --upgrade replaces its bin/
    printf '#!/bin/sh\nPYTHONPATH="%s${PYTHONPATH:+:$PYTHONPATH}" exec %s "$@"\n' \
        "$target" "$(command -v python3)" >"$py"
    chmod +x "$py"
    install() { python3 -m pip install "${pipq[@]}" --upgrade --target "$target" "$@"; }
    echo "ci/python.sh: no usable venv module; installing with pip --target into $target"
fi

if ! "$py" -c 'import numpy, safetensors, pytest, xdist, maturin, mkdocs, material' 2>/dev/null; then
    install numpy safetensors pytest pytest-xdist 'maturin>=1.9.4,<2' 'mkdocs>=1.6,<2' 'mkdocs-material>=9.5,<10'
fi
# The package itself, built from this checkout (every time: it is what is being tested).
# maturin compiles the bindings crate and the library (release, target/release/) and packs
# them with python/bitexact/ into one abi3 wheel. Incrementally: cargo then recompiles the code
# units a change touched rather than the whole library (dependencies are never compiled
# incrementally, and keep their cached builds).
rm -f target/wheels/bitexact_harness-*.whl
(cd python && CARGO_PROFILE_RELEASE_INCREMENTAL=true \
    "$py" -m maturin build --release --quiet --out ../target/wheels)
wheel="$(ls target/wheels/bitexact_harness-*.whl)"
echo "$PWD/$wheel" >"$cache/wheel-path"
install --no-deps --force-reinstall "$wheel"
echo "ci/python.sh: installed $wheel"

if "$py" -c 'import torch' 2>/dev/null; then
    echo "ci/python.sh: torch $("$py" -c 'import torch; print(torch.__version__)') (already installed)"
elif [ -n "${BITEXACT_SKIP_TORCH:-}" ]; then
    echo "skipped: torch could not be installed (BITEXACT_SKIP_TORCH is set)"
else
    log="$(mktemp)"
    index=()
    if [ -n "${BITEXACT_TORCH_INDEX:-}" ]; then index=(--index-url "$BITEXACT_TORCH_INDEX"); fi
    if install "${index[@]}" torch >"$log" 2>&1 && "$py" -c 'import torch' 2>>"$log"; then
        echo "ci/python.sh: torch $("$py" -c 'import torch; print(torch.__version__)') installed"
    else
        reason="$(grep -v '^\s*$' "$log" | tail -n 1 | cut -c1-200)"
        echo "skipped: torch could not be installed (${reason:-pip failed})"
    fi
    rm -f "$log"
fi

# torch.compile's CPU backend (Inductor) builds C++ with g++ (or $CXX): the tests of compiled
# models need one. g++ is installed with apt-get when missing and possible (root, or sudo
# without a password); otherwise those tests say SKIPPED and why. Never fails the script.
if [ -z "${CXX:-}" ] && ! command -v g++ >/dev/null 2>&1; then
    sudo=()
    if [ "$(id -u)" -ne 0 ]; then sudo=(sudo -n); fi
    apt_get() { "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -qq "$@" >/dev/null 2>&1; }
    if command -v apt-get >/dev/null 2>&1 &&
        { apt_get install -y g++ || { apt_get update && apt_get install -y g++; }; }; then
        echo "ci/python.sh: installed g++ (torch.compile's CPU backend)"
    else
        echo "skipped: g++ could not be installed (the torch.compile tests skip)"
    fi
fi

echo "$py" >"$cache/python-path"
echo "ci/python.sh: python=$py (also in $cache/python-path)"

if [ "${BITEXACT_PYTEST:-1}" = 0 ]; then
    echo "ci/python.sh: pytest not run (BITEXACT_PYTEST=0)"
    exit 0
fi
status=0
"$py" -m pytest -q -rs -p no:cacheprovider python/tests || status=$?
if [ "$status" -eq 5 ]; then
    echo "ci/python.sh: pytest collected no tests in python/tests" >&2
fi
exit "$status"
