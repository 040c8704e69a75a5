#!/usr/bin/env bash
# The torch-dependent tests (Rust and pytest) once under each torch CPU capability this CPU can
# run: ATEN_CPU_CAPABILITY=default, avx2, and avx512 where present (issue 48). Each makes torch
# pick other vectorized kernels, as another machine would; oneDNN's ISA is capped to match
# (ONEDNN_MAX_CPU_ISA), so its convolutions and RNNs change too. A test that assumes which op,
# tensor or step a machine's kernels make differ first fails here on the machine where it was
# written, instead of on the next contributor's. Not part of every CI run (it runs the torch
# tests three times); run it before resolving a change to a test that names an op, and after
# any change to the tracer's explanations. Why: docs/contributing/testing.md.
#
#   bash ci/any-cpu.sh                  # every capability this CPU offers
#   bash ci/any-cpu.sh avx2             # one of them
#   BITEXACT_ANY_CPU_PYTEST_ARGS="-x" bash ci/any-cpu.sh   # extra pytest arguments
#
# First builds and installs this checkout's package into the venv ci/python.sh makes
# (`BITEXACT_PYTEST=0 bash ci/python.sh`), so the tests run against this tree.
# Prints each capability's time and result; exits 1 when any capability failed, 2 on bad usage.
set -uo pipefail
cd "$(dirname "$0")/.."

flags="$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)"
has() { for f in "$@"; do [[ " $flags " == *" $f "* ]] || return 1; done; }
offered=(default)
has avx2 fma && offered+=(avx2)
has avx512f avx512bw avx512vl avx512dq && offered+=(avx512)
caps=("$@")
[ ${#caps[@]} -gt 0 ] || caps=("${offered[@]}")
for cap in "${caps[@]}"; do
    case " ${offered[*]} " in
        *" $cap "*) ;;
        *) echo "ci/any-cpu.sh: capability '$cap' is not one this CPU offers (${offered[*]})" >&2; exit 2 ;;
    esac
done

cache="$HOME/.cache/bitexact"
BITEXACT_PYTEST=0 bash ci/python.sh >/dev/null || { echo "ci/any-cpu.sh: ci/python.sh failed" >&2; exit 1; }
py="$(cat "$cache/python-path")"
"$py" -c 'import torch' 2>/dev/null || { echo "ci/any-cpu.sh: no torch in $py" >&2; exit 1; }

# The Rust test binaries that run torch programs, and the pytest files that import torch.
mapfile -t rust < <(grep -lwE 'torch|tracer_python' tests/*.rs | xargs -n1 basename | sed 's/\.rs$//')
mapfile -t pyfiles < <(grep -lw 'torch' python/tests/test_*.py)
targets=()
for t in "${rust[@]}"; do targets+=(--test "$t"); done
echo "ci/any-cpu.sh: capabilities ${caps[*]}; Rust tests: ${rust[*]}; pytest files: ${#pyfiles[@]}"
cargo build --quiet --tests "${targets[@]}" || exit 1

declare -A isa=([default]=SSE41 [avx2]=AVX2 [avx512]=AVX512_CORE)
failed=()
for cap in "${caps[@]}"; do
    export ATEN_CPU_CAPABILITY="$cap" ONEDNN_MAX_CPU_ISA="${isa[$cap]}"
    got="$("$py" -c 'import torch; print(torch.backends.cpu.get_cpu_capability())')"
    echo "== ATEN_CPU_CAPABILITY=$cap ONEDNN_MAX_CPU_ISA=${isa[$cap]}: torch reports $got"
    t0=$SECONDS
    ok=1
    BITEXACT_SKIP_LOG="$(mktemp)"
    export BITEXACT_SKIP_LOG
    cargo test --quiet "${targets[@]}" || ok=0
    # shellcheck disable=SC2086
    "$py" -m pytest -q -rs -p no:cacheprovider ${BITEXACT_ANY_CPU_PYTEST_ARGS:-} "${pyfiles[@]}" || ok=0
    echo "== $cap: Rust tests skipped:"
    sort -u "$BITEXACT_SKIP_LOG" | sed 's/^bitexact: /  /'
    rm -f "$BITEXACT_SKIP_LOG"
    if [ "$ok" = 1 ]; then
        echo "== $cap: passed in $((SECONDS - t0)) s"
    else
        echo "== $cap: FAILED in $((SECONDS - t0)) s"
        failed+=("$cap")
    fi
done
unset ATEN_CPU_CAPABILITY ONEDNN_MAX_CPU_ISA
if [ ${#failed[@]} -gt 0 ]; then
    echo "ci/any-cpu.sh: failed under: ${failed[*]}"
    exit 1
fi
echo "ci/any-cpu.sh: passed under: ${caps[*]}"
