"""Timings for benches/python_digest.rs (run by it; prints one JSON object).

- digest_1g: bitexact.digest of a 1 GiB torch CPU tensor (float32), best of REPS;
- hashlib_1g: hashlib.sha256(t.numpy().tobytes()).hexdigest() of the same tensor, best of REPS;
- tiny_loop: 100 000 tiny tensors (4 float32 each), one bitexact.digest call each;
- tiny_batch: the same through one bitexact.digests(**tensors) call.
"""

import hashlib
import json
import sys
import time

import bitexact

REPS = int(sys.argv[1]) if len(sys.argv) > 1 else 3


def best(f):
    times = []
    for _ in range(REPS):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return min(times)


import torch  # noqa: E402

n = (1 << 30) // 4
t = torch.empty(n, dtype=torch.float32)
t.view(torch.int32).copy_(torch.arange(n, dtype=torch.int32) * 2654435761)  # not sparse
out = {"bytes": n * 4}
out["digest_1g"] = best(lambda: bitexact.digest(t))
out["hashlib_1g"] = best(lambda: hashlib.sha256(t.numpy().tobytes()).hexdigest())
del t
tiny = {"t%d" % i: torch.full((4,), float(i)) for i in range(100_000)}
values = list(tiny.values())
out["tiny_loop"] = best(lambda: [bitexact.digest(v) for v in values])
out["tiny_batch"] = best(lambda: bitexact.digests(**tiny))
print(json.dumps(out))
