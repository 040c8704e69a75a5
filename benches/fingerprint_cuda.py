"""Trace fingerprints of CUDA tensors (docs/concepts/fingerprint.md), three ways on the same
tensors, against SHA-256 on the device (bitexact's canonical digest, the baseline): bitexact's
kernel (``kernels/fingerprint.cu``, one launch for a list of tensors), torch's int64 ops
(``_fingerprint.KERNEL`` off, about thirty launches a tensor) and, for scale, a device-to-device
copy of the same bytes. Prints one JSON object: for each size, the best of 5 times in seconds,
GB/s and the ratio to SHA-256, and whether every path gave the host's value.

``python benches/fingerprint_cuda.py`` on a machine with a CUDA GPU (ci/gpu-check.sh runs it).
"""

import json
import time

import torch

import bitexact
from bitexact import _digest, _fingerprint


def best(f, reps=5):
    """The value of ``f()`` and its best time over ``reps`` calls, the GPU synchronized."""
    v = f()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        v = f()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return v, min(times)


def host_fingerprint(t):
    h = t.cpu()
    name = _digest._torch_dtype(h.dtype)[0]
    return _digest.native().trace_fingerprints([(h.data_ptr(), h.nbytes, name, [h.numel()])])[0]


def by_torch_ops(tensors):
    _fingerprint.KERNEL = False
    try:
        return _fingerprint.fingerprints(tensors)
    finally:
        _fingerprint.KERNEL = True


def measure(count, numel):
    """``count`` float32 tensors of ``numel`` elements each, fingerprinted together."""
    xs = [torch.randn(numel, device="cuda") for _ in range(count)]
    nbytes = sum(x.nbytes for x in xs)
    kernel, tk = best(lambda: _fingerprint.fingerprints(xs))
    ops, to = best(lambda: by_torch_ops(xs))
    _, ts = best(lambda: [bitexact.digest(x) for x in xs])
    _, tc = best(lambda: [x.clone() for x in xs])
    want = [host_fingerprint(x) for x in xs]
    row = {"tensors": count, "bytes_each": xs[0].nbytes, "equal_to_host": kernel == want == ops,
           "kernel_error": _fingerprint.kernel_error}
    for name, t in (("kernel", tk), ("torch_ops", to), ("sha256", ts), ("copy", tc)):
        row[name] = {"s": t, "GB/s": nbytes / t / 1e9, "x_sha256": t / ts}
    return row


def main():
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "cuda_status": _digest.native().cuda_status()}
    out["rows"] = [measure(1, 1 << 26), measure(1, 1 << 22), measure(8, 1 << 16),
                   measure(100, 1 << 20)]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
