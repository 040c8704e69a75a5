"""The helper without numpy or torch: seeding `random`, dumping Python values, step()."""

import json
import os
import struct
import subprocess
import sys

SCRIPT = r"""
import sys
sys.modules["numpy"] = None   # makes `import numpy` raise ImportError
sys.modules["torch"] = None
sys.path.insert(0, sys.argv[1])
import random
import bitexact
assert bitexact.seed_everything() == 4
a = random.random()
bitexact.seed_everything()
assert random.random() == a
bitexact.worker_init_fn(1)
bitexact.dump("sub/py", i=[[1, 2], [3, 4]], f=[0.5, -2.0], b=[True, False], s=3)
bitexact.step(2, loss=0.25)
print(a)
"""


def test_works_without_numpy_or_torch(tmp_path):
    src = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, BITEXACT_OUT=str(tmp_path), BITEXACT_SEED="4")
    subprocess.run([sys.executable, "-c", SCRIPT, src], env=env, check=True,
                   stdout=subprocess.PIPE)
    blob = (tmp_path / "sub" / "py.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    assert header["i"]["dtype"] == "I64" and header["i"]["shape"] == [2, 2]
    b, e = header["i"]["data_offsets"]
    assert data[b:e] == struct.pack("<4q", 1, 2, 3, 4)
    b, e = header["f"]["data_offsets"]
    assert header["f"]["dtype"] == "F64" and data[b:e] == struct.pack("<2d", 0.5, -2.0)
    b, e = header["b"]["data_offsets"]
    assert header["b"]["dtype"] == "BOOL" and data[b:e] == b"\x01\x00"
    assert header["s"]["shape"] == []
    assert (tmp_path / "step_0002.safetensors").is_file()
    row = json.loads((tmp_path / ".bitexact-memory.jsonl").read_text())
    assert row["step"] == 2 and row["torch_cuda_allocated"] is None
    info = json.loads((tmp_path / ".bitexact-platform.json").read_text())
    assert info["python"]
