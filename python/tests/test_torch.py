"""torch tensors in dump() (bits kept for bf16/f16), and seed_everything()/worker_init_fn() with
torch. Skipped when torch is not installed."""

import json
import struct

import pytest

import bitexact

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

# Bit patterns that a float round trip would change or lose: -0, subnormals, NaN payloads,
# infinities, the largest finite values.
BITS16 = [0x0000, 0x8000, 0x0001, 0x8001, 0x7FC1, 0xFFC3, 0x7F80, 0xFF80, 0x7F7F, 0x3F80, 0x7E01,
          0x7C00, 0xFC00, 0x7BFF, 0x03FF, 0x7E00]


def read(path):
    blob = open(path, "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    return json.loads(blob[8:8 + n]), blob[8 + n:]


@pytest.fixture
def restore_torch():
    """Puts back torch's global determinism settings and thread count after a test."""
    saved = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic,
             torch.backends.cudnn.benchmark, torch.get_num_threads())
    yield
    torch.use_deterministic_algorithms(saved[0])
    torch.backends.cudnn.deterministic = saved[1]
    torch.backends.cudnn.benchmark = saved[2]
    torch.set_num_threads(saved[3])


@pytest.mark.parametrize("dtype,name", [(torch.bfloat16, "BF16"), (torch.float16, "F16")])
def test_half_types_keep_their_bits(out, dtype, name):
    raw = torch.tensor([b - 0x10000 if b >= 0x8000 else b for b in BITS16], dtype=torch.int16)
    t = raw.view(dtype).reshape(4, 4)
    header, data = read(bitexact.dump("h", x=t))
    assert header["x"]["dtype"] == name
    assert header["x"]["shape"] == [4, 4]
    assert data == struct.pack("<16H", *BITS16)


def test_half_types_with_the_safetensors_package(out):
    st = pytest.importorskip("safetensors.torch")
    raw = torch.tensor([b - 0x10000 if b >= 0x8000 else b for b in BITS16], dtype=torch.int16)
    tensors = {"bf": raw.view(torch.bfloat16), "f16": raw.view(torch.float16).reshape(2, 8),
               "f32": torch.randn(3, 5), "i64": torch.arange(6), "b": torch.tensor([True, False]),
               "u8": torch.arange(4, dtype=torch.uint8), "f64": torch.randn(2, dtype=torch.float64),
               "scalar": torch.tensor(2.5)}
    loaded = st.load_file(bitexact.dump("st", **tensors))
    for k, v in tensors.items():
        assert loaded[k].dtype == v.dtype, k
        assert loaded[k].shape == v.shape, k
        if v.dtype in (torch.bfloat16, torch.float16):
            assert torch.equal(loaded[k].view(torch.int16), v.view(torch.int16)), k
        else:
            assert torch.equal(loaded[k], v), k


def test_non_contiguous_grad_and_views(out):
    w = torch.randn(4, 6, requires_grad=True)
    t = w.t()[::2]
    header, data = read(bitexact.dump("v", w=t, neg=torch.arange(3.0)._neg_view()))
    want = t.detach().contiguous().numpy().tobytes()
    b, e = header["w"]["data_offsets"]
    assert header["w"]["shape"] == [3, 4]
    assert data[b:e] == want
    b, e = header["neg"]["data_offsets"]
    assert data[b:e] == np.array([-0.0, -1.0, -2.0], np.float32).tobytes()


def test_torch_and_numpy_give_the_same_bytes(out):
    a = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    p1 = bitexact.dump("np", x=a)
    p2 = bitexact.dump("pt", x=torch.from_numpy(a))
    assert open(p1, "rb").read() == open(p2, "rb").read()


def test_seed_everything_sets_torch_controls(monkeypatch, restore_torch):
    monkeypatch.setenv("BITEXACT_SEED", "77")
    monkeypatch.setenv("BITEXACT_THREADS", "1")
    assert bitexact.seed_everything() == 77
    assert torch.initial_seed() == 77
    a = torch.rand(4)
    assert torch.are_deterministic_algorithms_enabled()
    assert torch.backends.cudnn.deterministic
    assert not torch.backends.cudnn.benchmark
    assert torch.get_num_threads() == 1
    det = getattr(torch.utils, "deterministic", None)
    if det is not None and hasattr(det, "fill_uninitialized_memory"):
        assert det.fill_uninitialized_memory
    bitexact.seed_everything()
    assert torch.equal(torch.rand(4), a)
    monkeypatch.setenv("BITEXACT_DETERMINISTIC", "0")
    monkeypatch.setenv("BITEXACT_BENCHMARK", "1")
    bitexact.seed_everything()
    assert not torch.are_deterministic_algorithms_enabled()
    assert not torch.backends.cudnn.deterministic
    assert torch.backends.cudnn.benchmark


def test_worker_init_fn_in_a_dataloader(restore_torch):
    from torch.utils.data import DataLoader, Dataset

    class Noise(Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            import random

            return torch.tensor([float(i), torch.rand(()).item(), float(np.random.rand()),
                                 random.random()])

    def load():
        bitexact.seed_everything(5)
        g = torch.Generator().manual_seed(5)
        dl = DataLoader(Noise(), batch_size=2, num_workers=2, generator=g, shuffle=True,
                        worker_init_fn=bitexact.worker_init_fn, multiprocessing_context="fork")
        return torch.cat([b for b in dl])

    a, b = load(), load()
    assert torch.equal(a, b)
    # Every sample's numpy and random draws differ (workers do not share a stream).
    assert len(set(a[:, 2].tolist())) == 8
    assert len(set(a[:, 3].tolist())) == 8


def test_step_records_cuda_memory_only_when_cuda_is_up(out):
    bitexact.step(0, x=torch.zeros(2))
    row = json.loads((out / ".bitexact-memory.jsonl").read_text())
    if torch.cuda.is_initialized():
        assert isinstance(row["torch_cuda_allocated"], int)
    else:
        assert row["torch_cuda_allocated"] is None
    info = json.loads((out / ".bitexact-platform.json").read_text())
    assert info["torch"] == torch.__version__
    assert info["torch_num_threads"] == torch.get_num_threads()
    assert info["cuda"] == torch.version.cuda
