#!/usr/bin/env bash
# Compiles every kernels/*.cu to PTX with NVRTC, without a GPU (tests/it/kernels_ptx.rs).
# Installs NVRTC from its pip wheel (nvidia-cuda-nvrtc-cu12, ~217 MB) into a venv under
# ${BITEXACT_NVRTC_VENV:-~/.cache/bitexact/nvrtc-venv} once, then runs the test with
# BITEXACT_REQUIRE_NVRTC=1 so a kernel that does not compile fails CI.
# If the wheel cannot be installed at all (no network, no python3 venv), the test runs without
# NVRTC and prints a skip message instead of failing.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${BITEXACT_NVRTC_VENV:-$HOME/.cache/bitexact/nvrtc-venv}"
wheel="${BITEXACT_NVRTC_WHEEL:-nvidia-cuda-nvrtc-cu12}"
find_lib() {
    "$venv/bin/python" -c 'import nvidia.cuda_nvrtc as m; print(list(m.__path__)[0])' 2>/dev/null ||
        { [ -d "$venv-target/nvidia/cuda_nvrtc" ] && echo "$venv-target/nvidia/cuda_nvrtc"; }
}
if [ -z "${BITEXACT_NVRTC:-}" ]; then
    dir="$(find_lib || true)"
    if [ -z "$dir" ]; then
        if { [ -x "$venv/bin/python" ] || python3 -m venv "$venv"; } &&
            "$venv/bin/pip" install --quiet --disable-pip-version-check "$wheel"; then
            dir="$(find_lib || true)"
        elif python3 -m pip install --quiet --disable-pip-version-check \
            --target "$venv-target" "$wheel"; then
            # No venv module (Debian without python3-venv): a plain --target install.
            [ -d "$venv-target/nvidia/cuda_nvrtc" ] && dir="$venv-target/nvidia/cuda_nvrtc"
        fi
    fi
    if [ -n "$dir" ]; then
        export BITEXACT_NVRTC="$dir"
        export BITEXACT_REQUIRE_NVRTC=1
    else
        echo "ci/ptx.sh: could not install $wheel; kernels are NOT compiled (test will skip)" >&2
    fi
else
    export BITEXACT_REQUIRE_NVRTC=1
fi
echo "ci/ptx.sh: BITEXACT_NVRTC=${BITEXACT_NVRTC:-<none>}"
cargo test --test it kernels_ptx:: -- --nocapture
