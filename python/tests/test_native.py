"""The installed package's native face: bitexact.digest/digests against what `bitexact run`
computes from files with the same values, and the `bitexact` console script against the
standalone binary's contract (exit codes, stop signals, no orphans, children re-run through
`python -m bitexact`).

These need the installed package (ci/python.sh builds the wheel and installs it); a source
checkout without the native module skips them, saying so."""

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time

import pytest

import bitexact
from bitexact import _digest

pytestmark = pytest.mark.skipif(
    _digest._native is None,
    reason="bitexact._native is not built (source checkout): %s" % _digest._native_error,
)

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bitexact")


def command():
    """The console script installed beside this interpreter."""
    exe = os.path.join(sysconfig.get_path("scripts"), "bitexact")
    if not os.path.exists(exe):
        exe = shutil.which("bitexact")
    assert exe, "the bitexact console script is not installed"
    return exe


def run_json(tmp_path, script):
    """`bitexact run --format json -- python -c SCRIPT`: the case report."""
    out = subprocess.run(
        [command(), "run", "--format", "json", "--", sys.executable, "-c", script],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=str(tmp_path), timeout=300,
    )
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    return json.loads(out.stdout)["cases"][0]


def test_installed_python_files_are_this_checkout():
    """pytest imports the installed package; it must not be a stale build of other sources."""
    installed = os.path.dirname(os.path.abspath(bitexact.__file__))
    if os.path.samefile(installed, SRC):
        pytest.skip("imported from the source tree")
    for where, dirs, files in os.walk(SRC):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in sorted(f for f in files if f.endswith(".py")):
            name = os.path.relpath(os.path.join(where, name), SRC)
            with open(os.path.join(SRC, name), "rb") as a, open(os.path.join(installed, name), "rb") as b:
                assert a.read() == b.read(), "installed %s differs from python/bitexact/%s: reinstall" % (name, name)


NUMPY_FILES = r"""
import os, numpy as np
out = os.environ["BITEXACT_OUT"]
rng = np.random.default_rng(7)
arrays = {
    "f32": rng.standard_normal((3, 5)).astype(np.float32),
    "f64_0d": np.array(2.5),
    "f16": rng.standard_normal(17).astype(np.float16),
    "i64_empty": np.zeros((0, 4), np.int64),
    "u8": rng.integers(0, 255, (4, 4), dtype=np.uint8),
    "bool": rng.integers(0, 2, 9).astype(bool),
    "i16_be": rng.integers(-999, 999, 6).astype(">i2"),
    "f32_fortran": np.asfortranarray(rng.standard_normal((4, 3)).astype(np.float32)),
    "c64": (rng.standard_normal(5) + 1j * rng.standard_normal(5)).astype(np.complex64),
    "big": rng.standard_normal(700_000).astype(np.float32),  # 2.8 MB: chunked digest
}
for name, a in arrays.items():
    np.save(os.path.join(out, name + ".npy"), a)
np.savez(os.path.join(out, "zipped.npz"), **arrays)
"""


def test_numpy_digests_equal_bitexact_run_on_the_same_files(tmp_path):
    np = pytest.importorskip("numpy")
    case = run_json(tmp_path, NUMPY_FILES)
    assert case["verdict"] == "deterministic"
    got = case["digests"]
    ns = {}
    exec(NUMPY_FILES.replace('os.environ["BITEXACT_OUT"]', repr(str(tmp_path))), ns)
    arrays = ns["arrays"]
    for name, a in arrays.items():
        assert bitexact.digest(a) == got[name + ".npy"], name
        assert bitexact.digest(a) == got["zipped.npz:" + name], name
    many = bitexact.digests(**arrays)
    assert list(many) == list(arrays)
    assert all(many[n] == got[n + ".npy"] for n in arrays)
    # A strided view is made contiguous first: same digest as its copy.
    view = arrays["big"][::2]
    assert not view.flags.c_contiguous
    assert bitexact.digest(view) == bitexact.digest(view.copy())
    # Digests see every bit: one flipped bit, -0.0 vs 0.0, shapes and dtypes all differ.
    a = arrays["f32"].copy()
    a.view(np.uint32)[1, 2] ^= 1
    assert bitexact.digest(a) != got["f32.npy"]
    assert bitexact.digest(np.array([0.0])) != bitexact.digest(np.array([-0.0]))
    assert bitexact.digest(arrays["f32"].reshape(5, 3)) != got["f32.npy"]
    assert bitexact.digest(arrays["f32"].view(np.int32)) != got["f32.npy"]


def test_bytes_and_python_values(tmp_path):
    np = pytest.importorskip("numpy")
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    d = bitexact.digest(a)
    assert bitexact.digest(a.tobytes(), dtype="f32", shape=(3, 4)) == d
    assert bitexact.digest(bytearray(a.tobytes()), dtype="F32", shape=[3, 4]) == d
    assert bitexact.digest(memoryview(a.tobytes()), dtype=np.float32, shape=[3, 4]) == d
    assert bitexact.digest(a.tobytes(), dtype="f32") == bitexact.digest(a.reshape(-1))
    # Python values hash as dump() stores them.
    case = run_json(tmp_path, "import bitexact; bitexact.dump('v', i=[[1, 2], [3, 4]], f=0.5, b=[True])")
    assert bitexact.digest([[1, 2], [3, 4]]) == case["digests"]["v.safetensors:i"]
    assert bitexact.digest(0.5) == case["digests"]["v.safetensors:f"]
    assert bitexact.digest([True]) == case["digests"]["v.safetensors:b"]


@pytest.mark.parametrize("bad, words", [
    (lambda: bitexact.digest(b"abc", dtype="f32"), "whole number"),
    (lambda: bitexact.digest(b"abcd", dtype="f32", shape=[2]), "4 bytes do not hold a f32 tensor of shape [2]"),
    (lambda: bitexact.digest(b"abcd"), "need dtype="),
    (lambda: bitexact.digest(b"abcd", dtype="f31"), "unknown dtype"),
    (lambda: bitexact.digest(object()), "cannot hash object"),
    (lambda: bitexact.digest([1, "x"]), "cannot store 'x'"),
])
def test_bad_input_is_named(bad, words):
    with pytest.raises((TypeError, ValueError)) as e:
        bad()
    assert words in str(e.value)


TORCH_FILES = r"""
import os, torch, bitexact
torch.manual_seed(3)
x = torch.randn(6, 5)
tensors = {
    "f32": x, "bf16": x.to(torch.bfloat16), "f16": x.half(), "f64": x.double(),
    "f8e4m3": x.to(torch.float8_e4m3fn), "f8e5m2": x.to(torch.float8_e5m2),
    "i64": torch.arange(7), "bool": x > 0, "u8": torch.arange(9, dtype=torch.uint8),
    "t": x.t(), "scalar": torch.tensor(1.5), "big": torch.randn(300_000),
}
bitexact.dump("torch", **tensors)
"""


def test_torch_digests_equal_bitexact_run_on_dumped_files(tmp_path):
    torch = pytest.importorskip("torch")
    case = run_json(tmp_path, TORCH_FILES)
    got = case["digests"]
    ns = {}
    old = os.environ.pop("BITEXACT_OUT", None)
    try:
        exec(TORCH_FILES, ns)  # dump() is a no-op outside bitexact
    finally:
        if old is not None:
            os.environ["BITEXACT_OUT"] = old
    tensors = ns["tensors"]
    assert not tensors["t"].is_contiguous()
    for name, t in tensors.items():
        assert bitexact.digest(t) == got["torch.safetensors:" + name], name
    assert bitexact.digests(**tensors) == {n: got["torch.safetensors:" + n] for n in tensors}
    # Gradients and views: detached, same bits.
    w = tensors["f32"].clone().requires_grad_()
    assert bitexact.digest(w) == got["torch.safetensors:f32"]
    # Complex: the real view, as for numpy.
    np = pytest.importorskip("numpy")
    c = torch.randn(4, dtype=torch.complex64)
    assert bitexact.digest(c) == bitexact.digest(c.numpy())


def test_cuda_tensors_hash_on_the_device_or_skip_visibly():
    torch = pytest.importorskip("torch")
    why = bitexact.cuda_status()
    if why is not None or not torch.cuda.is_available():
        pytest.skip("no CUDA device for the device digest: %s" % (why or "torch sees no GPU"))
    for n in (10, 3_000_000, 20_000_003):  # host copies (one chunk, many), the device kernel
        x = torch.randn(n, device="cuda")
        assert bitexact.digest(x) == bitexact.digest(x.cpu())


def test_without_the_native_module_digest_says_how_to_install(tmp_path):
    """A pure-Python copy (source tree on PYTHONPATH, no _native): dump works, digest and the
    command say how to install."""
    root = tmp_path / "pure"
    shutil.copytree(SRC, str(root / "bitexact"), ignore=shutil.ignore_patterns("_native*", "__pycache__"))
    script = (
        "import sys; sys.path.insert(0, %r)\n"
        "import bitexact\n"
        "assert bitexact._digest._native is None\n"
        "bitexact.dump('x', a=[1, 2])\n"
        "try:\n    bitexact.digest([1])\nexcept ImportError as e:\n    print(e)\n" % str(root)
    )
    env = dict(os.environ, BITEXACT_OUT=str(tmp_path))
    out = subprocess.run([sys.executable, "-S", "-c", script], env=env, stdout=subprocess.PIPE,
                         check=True).stdout.decode()
    assert "pip install bitexact-harness" in out and "dump() and step() work without it" in out
    assert (tmp_path / "x.safetensors").exists()
    cli = subprocess.run([sys.executable, "-S", "-c",
                          "import sys; sys.path.insert(0, %r); import runpy; "
                          "runpy.run_module('bitexact', run_name='__main__')" % str(root), "--version"],
                         stderr=subprocess.PIPE)
    assert cli.returncode == 2 and b"pip install bitexact-harness" in cli.stderr


# ----------------------------------------------------------------------------- the command

def test_exit_codes_are_the_binarys(tmp_path):
    exe = command()
    r = subprocess.run([exe, "--version"], stdout=subprocess.PIPE)
    assert r.returncode == 0 and r.stdout.decode().startswith("bitexact ")
    assert subprocess.run([exe, "bogus"], stderr=subprocess.PIPE).returncode == 2
    assert subprocess.run([exe, "report", "--filter", "no-such-case"], stderr=subprocess.PIPE).returncode == 2
    same = "import os; open(os.environ['BITEXACT_OUT'] + '/x.bin', 'w').write('same')"
    differ = "import os; open(os.environ['BITEXACT_OUT'] + '/x.bin', 'w').write(os.environ['BITEXACT_RUN'])"
    assert subprocess.run([exe, "run", "--", sys.executable, "-c", same], stdout=subprocess.PIPE).returncode == 0
    r = subprocess.run([exe, "run", "--", sys.executable, "-c", differ], stdout=subprocess.PIPE)
    assert r.returncode == 1 and b"first divergence: x.bin" in r.stdout
    r = subprocess.run([exe, "run", "--", sys.executable, "-c", "raise SystemExit(3)"], stdout=subprocess.PIPE)
    assert r.returncode == 1 and b"#0 exit 3" in r.stdout


def test_children_rerun_the_command_through_python(tmp_path):
    """--vary process starts `python -m bitexact __child` for each run."""
    r = subprocess.run([command(), "report", "--filter", "kernel/reduce_sum/small", "--vary", "process"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    assert r.returncode == 0, r.stdout.decode() + r.stderr.decode()
    assert b"1 deterministic" in r.stdout


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open("/proc/%d/stat" % pid) as f:
        return f.read().split(")")[-1].split()[0] != "Z"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_kills_the_run_and_exits_128_plus_signal(tmp_path, sig):
    pidfile = tmp_path / "pid"
    script = ("import os, time; open(%r, 'w').write(str(os.getpid())); time.sleep(120)" % str(pidfile))
    env = dict(os.environ, TMPDIR=str(tmp_path))
    p = subprocess.Popen([command(), "run", "--", sys.executable, "-c", script], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 60
    while not (pidfile.exists() and pidfile.read_text()) and time.time() < deadline:
        time.sleep(0.05)
    child = int(pidfile.read_text())
    p.send_signal(sig)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 128 + sig, err.decode()[-2000:]
    deadline = time.time() + 10
    while alive(child) and time.time() < deadline:
        time.sleep(0.05)
    assert not alive(child), "the program outlived the stopped bitexact"
    leftovers = [n for n in os.listdir(str(tmp_path)) if n != "pid"]
    assert leftovers == [], leftovers


GRANDCHILDREN = """
import os, sys, threading, time, torch, bitexact
torch.set_num_threads(1)  # OpenMP's threads are gone in a forked child
t = torch.arange(1 << 24, dtype=torch.float32)  # 64 MiB: hashed in parallel chunks
want = bitexact.digest(t)  # the parallel pool started here
for _ in range(6):
    child = os.fork()
    if child == 0:  # a child whose thread makes its first native call (its pool) as it forks
        th = threading.Thread(target=lambda: [bitexact.digest(t) for _ in range(3)])
        th.start()
        grandchild = os.fork()
        if grandchild == 0:
            os._exit(0 if bitexact.digest(t) == want else 3)
        for _ in range(100):
            done, status = os.waitpid(grandchild, os.WNOHANG)
            if done:
                break
            time.sleep(0.05)
        else:
            os.kill(grandchild, 9)
            os._exit(9)
        th.join()
        os._exit(0 if status == 0 else 8)
    status = os.waitpid(child, 0)[1]
    assert status == 0, "a child or grandchild hung or digested wrong: %d" % status
"""


@pytest.mark.skipif(_digest._native is None, reason="needs bitexact._native")
def test_forked_children_and_grandchildren_digest_in_pools_of_their_own():
    """rayon's pool has no threads in a forked child: each process forked since the module
    loaded makes its own, without a lock a fork could leave held, and digests as its parent."""
    from conftest import run_alone

    run_alone(GRANDCHILDREN)


CACHE_HELD = """
import os, sys, threading, time, torch
from bitexact import _digest
torch.set_num_threads(1)  # OpenMP's threads are gone in a forked child
nat = _digest.native()
writer = nat.TraceWriter(sys.argv[1])
done, writes = False, []

def write():  # new bytes each time: copied for the writer with the digest cache locked
    x = torch.zeros(1 << 23)
    while not done:
        x.add_(1)
        writer.write('["\\0"]\\n', [(x.data_ptr(), x.nbytes, "f32", [1 << 23])])
        writes.append(1)

th = threading.Thread(target=write, daemon=True)
th.start()
time.sleep(0.3)
t = torch.ones(4)
for _ in range(6):
    child = os.fork()
    if child == 0:  # a child that traces on its own thread: the cache is its own
        nat.trace_digests([(t.data_ptr(), t.nbytes, "f32", [4])], True)
        os._exit(0)
    if not waited(child):
        sys.exit("a forked child hung on the digest cache's lock")
assert th.is_alive() and len(writes) > 6, "the writing thread stopped"
done = True
th.join()
writer.close()
"""


@pytest.mark.skipif(_digest._native is None, reason="needs bitexact._native")
def test_a_forked_child_has_a_digest_cache_of_its_own(tmp_path):
    """A thread of the parent's may hold the digest cache's lock when the program forks (a
    record's copies are made under it): a forked child uses a cache of its own."""
    from conftest import run_alone

    run_alone(CACHE_HELD, str(tmp_path / "t.jsonl"), timeout=300)
