#!/bin/bash
# The GPU suite of docs/gpu-results.md in one go, for a machine with an NVIDIA GPU, torch with
# CUDA and pytest, but no Rust: everything bitexact is built beforehand on another machine.
#
#   PYTHON=venv/bin/python ci/gpu-check.sh pack   # here (Rust, maturin): builds .gpu/ (ignored)
#   ci/gpu-check.sh           # there, in the checkout with .gpu/ copied in: writes $OUT/
#   ci/gpu-check.sh tracer    # there: only the tracer's steps (pytest, a traced run, the bench)
#
# .gpu/ holds `bitexact` and the `--test it` binary (stripped), the wheel and the path the test
# binary was built to find `bitexact` at. Output: $OUT/gpu.log (everything, step by step, with
# exit codes), report-all.json, bench-gpu.json. Each step has its own time limit; a failing step
# is logged and the next one runs.
set -u
cd "$(dirname "$0")/.."

if [ "${1:-}" = pack ]; then
    set -e
    # BITEXACT_GPU_PROFILE=test packs the test profile's binaries (what `cargo test` built:
    # minutes quicker than release on a small machine); the wheel is a release build always.
    rel=(--release) dir=release
    if [ "${BITEXACT_GPU_PROFILE:-release}" = test ]; then rel=() dir=debug; fi
    rm -rf .gpu && mkdir .gpu
    test_bin=$(cargo test "${rel[@]}" --test it --no-run --message-format=json 2>/dev/null \
        | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "it" and m.get("executable"):
        print(m["executable"])')
    strip -o .gpu/bitexact "target/$dir/bitexact"
    strip -o .gpu/cuda-test "$test_bin"
    echo "$PWD/target/$dir/bitexact" > .gpu/built-bin-path
    (cd python && "${PYTHON:-python3}" -m maturin build --release --quiet --out ../.gpu)
    ls -la .gpu
    exit 0
fi

OUT=${OUT:-/tmp/bitexact-gpu}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu.log") 2>&1
export PYTHONUNBUFFERED=1

step() {  # step SECONDS NAME COMMAND...
    local limit=$1 name=$2 t0 rc
    shift 2
    echo
    echo "=== $name ($(date +%T))"
    t0=$(date +%s%N)
    timeout "$limit" "$@"
    rc=$?
    echo "=== $name: exit $rc, $(( ($(date +%s%N) - t0) / 1000000 )) ms"
}

step 30 platform sh -c 'nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv;
    python3 -c "import torch; print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, torch.cuda.get_device_name())"; nproc'

python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu/*.whl || exit 2
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
built=$(cat .gpu/built-bin-path)
mkdir -p "$(dirname "$built")" && cp .gpu/bitexact "$built"
chmod +x .gpu/bitexact .gpu/cuda-test

step 300 "cargo test --test it cuda::" .gpu/cuda-test cuda:: --nocapture --test-threads=1
if [ "${1:-}" != tracer ]; then
step 240 "report --backend all" .gpu/bitexact report --backend all
step 240 "report --backend all (json)" .gpu/bitexact report --backend all --format json --out "$OUT/report-all.json"
step 240 "report --backend cuda --deterministic off --runs 8" \
    .gpu/bitexact report --backend cuda --deterministic off --runs 8
step 120 "report --backend cuda --benchmark on (algorithms)" sh -c \
    '.gpu/bitexact report --backend cuda --benchmark on --format json | python3 -c "import json,sys; r=json.load(sys.stdin); print(json.dumps([c.get(\"algorithms\") for c in r[\"cases\"] if c.get(\"algorithms\")][:6]))"'
fi
step 180 "pytest: CUDA tensors, device sketches" python3 -m pytest -q -rs -p no:cacheprovider \
    python/tests/test_native.py -k cuda python/tests/test_device_sketch.py python/tests/test_fingerprint.py
if [ "${1:-}" != tracer ]; then
step 120 "digest of a 1 GiB CUDA tensor" python3 -c '
import time, torch, bitexact
x = torch.randn(1 << 28, device="cuda")
bitexact.digest(x); torch.cuda.synchronize()
t0 = time.perf_counter(); d = bitexact.digest(x); torch.cuda.synchronize(); t = time.perf_counter() - t0
t1 = time.perf_counter(); h = bitexact.digest(x.cpu()); c = time.perf_counter() - t1
print("device %.1f GB/s, via x.cpu() %.1f GB/s, equal %s" % (x.nbytes / t / 1e9, x.nbytes / c / 1e9, d == h))'
step 240 "run train_torch.py --resume-at 10" bitexact run -- python3 examples/python/train_torch.py --resume-at 10
step 180 "run --trace ops cuda_atomics.py" bitexact run --runs 3 --trace ops -- python3 examples/python/cuda_atomics.py
fi
step 120 "trace fingerprints on the device: kernel, torch ops, SHA-256" sh -c \
    'python3 benches/fingerprint_cuda.py > "$0/fingerprint-cuda.json"; rc=$?; cat "$0/fingerprint-cuda.json"; exit $rc' "$OUT"
step 240 "compiled MLP on the GPU: the first divergent Triton kernel" sh -c \
    'BITEXACT_TEST_DEVICE=cuda bitexact run --trace ops --format json -- python3 tests/fixtures/programs/compiled_mlp.py > "$0/compiled-mlp-cuda.json"; rc=$?
    python3 -c "import json,sys; c=json.load(open(sys.argv[1]))[\"cases\"][0]; d=c.get(\"divergence\") or {}; print(c[\"verdict\"]); print(d.get(\"explanation\")); print(json.dumps(d.get(\"kernel\"), indent=1))" "$0/compiled-mlp-cuda.json"; exit $rc' "$OUT"
step 300 "tracer bench, nanoGPT on the GPU" sh -c \
    'BITEXACT_BENCH_DEVICE=cuda python3 benches/op_trace.py 10 nanogpt nanogpt_eval > "$0/bench-gpu.json"; rc=$?; cat "$0/bench-gpu.json"; exit $rc' "$OUT"
step 300 "tracer bench, compute-bound GPT (8 layers, 1024 wide, 512 context: activations > 256 MB)" sh -c \
    'BITEXACT_BENCH_MODES=floor,modules,ops,ops_sync,ops_torchfp,debugmode BITEXACT_BENCH_GPT=8,16,1024,512,16 BITEXACT_BENCH_DEVICE=cuda python3 benches/op_trace.py 5 nanogpt > "$0/bench-gpu-wide.json"; rc=$?; cat "$0/bench-gpu-wide.json"; exit $rc' "$OUT"
step 180 "run --trace ops --deterministic off cuda_atomics.py" \
    bitexact run --runs 3 --deterministic off --trace ops -- python3 examples/python/cuda_atomics.py
echo "=== done ($(date +%T))"
