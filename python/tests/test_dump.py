"""dump()/step(): the safetensors bytes, parsed back by hand (and by the safetensors package
when installed), the no-op outside bitexact, the memory line and the platform file."""

import json
import os
import struct

import pytest

import bitexact
from bitexact import _safetensors

np = pytest.importorskip("numpy")

NUMPY_DTYPES = {
    "bool": "BOOL",
    "int8": "I8", "int16": "I16", "int32": "I32", "int64": "I64",
    "uint8": "U8", "uint16": "U16", "uint32": "U32", "uint64": "U64",
    "float16": "F16", "float32": "F32", "float64": "F64",
}


def read_by_hand(path):
    """Parses a safetensors file without any library: returns (header, padding bytes, data)."""
    blob = open(path, "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    raw = blob[8:8 + n]
    header = json.loads(raw.decode("utf-8"))
    stripped = raw.rstrip(b" ")
    return header, raw[len(stripped):], blob[8 + n:], n


def sample(dtype):
    """A 2x3 array of ``dtype`` that includes the type's extremes."""
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return np.array([[True, False, True], [False, False, True]])
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return np.array([[info.min, info.max, 0], [1, 2, info.max - 1]], dtype=dt)
    return np.array([[-0.0, 1.5, np.inf], [-np.inf, np.finfo(dt).tiny, np.finfo(dt).max]], dtype=dt)


@pytest.mark.parametrize("dtype", sorted(NUMPY_DTYPES))
def test_every_numpy_dtype_round_trips_by_hand(out, dtype):
    a = sample(dtype)
    path = bitexact.dump("t", x=a)
    assert path == os.path.join(str(out), "t.safetensors")
    header, pad, data, n = read_by_hand(path)
    assert (8 + n) % 8 == 0
    assert set(pad) <= {0x20}
    assert header == {"x": {"dtype": NUMPY_DTYPES[dtype], "shape": [2, 3],
                            "data_offsets": [0, a.nbytes]}}
    assert data == a.astype(a.dtype.newbyteorder("<")).tobytes()
    back = np.frombuffer(data, dtype=a.dtype.newbyteorder("<")).reshape(2, 3)
    assert np.array_equal(back, a)


def test_several_tensors_sorted_with_contiguous_offsets(out):
    tensors = {"b": np.arange(3, dtype=np.float32), "a": np.ones((2, 2), np.int64),
               "fc1.weight": np.zeros(5, np.uint8)}
    header, _, data, _ = read_by_hand(bitexact.dump("multi", **tensors))
    assert list(header) == ["a", "b", "fc1.weight"]
    pos = 0
    for name in ["a", "b", "fc1.weight"]:
        begin, end = header[name]["data_offsets"]
        assert begin == pos
        assert data[begin:end] == tensors[name].tobytes()
        pos = end
    assert pos == len(data)
    # The strict reader agrees.
    _, parsed = _safetensors.parse(open(os.path.join(str(out), "multi.safetensors"), "rb").read())
    assert parsed["b"] == ("F32", [3], tensors["b"].tobytes())


def test_same_tensors_give_same_bytes_whatever_the_argument_order(out):
    a, b = np.arange(4.0), np.arange(3, dtype=np.int32)
    p1 = bitexact.dump("one", a=a, b=b)
    p2 = bitexact.dump("two", b=b, a=a)
    assert open(p1, "rb").read() == open(p2, "rb").read()


def test_safetensors_package_reads_every_numpy_dtype(out):
    st = pytest.importorskip("safetensors.numpy")
    tensors = {d: sample(d) for d in NUMPY_DTYPES}
    tensors["scalar"] = np.array(3.25, dtype=np.float32)
    tensors["empty"] = np.zeros((0, 4), dtype=np.int16)
    loaded = st.load_file(bitexact.dump("all", **tensors))
    assert sorted(loaded) == sorted(tensors)
    for k, v in tensors.items():
        assert loaded[k].dtype == v.dtype, k
        assert loaded[k].shape == v.shape, k
        assert loaded[k].tobytes() == v.tobytes(), k


@pytest.mark.parametrize("dtype", [">i2", ">u4", ">i8", ">f2", ">f4", ">f8"])
def test_big_endian_input_is_stored_little_endian(out, dtype):
    big = np.arange(6, dtype=dtype).reshape(3, 2) - (0 if "u" in dtype else 2)
    little = big.astype(np.dtype(dtype).newbyteorder("<"))
    header, _, data, _ = read_by_hand(bitexact.dump("be", x=big))
    assert data == little.tobytes()
    assert header["x"]["shape"] == [3, 2]


def test_non_contiguous_arrays_are_written_in_c_order(out):
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    view = base.T[::2]
    assert not view.flags.c_contiguous
    header, _, data, _ = read_by_hand(bitexact.dump("nc", x=view))
    assert header["x"]["shape"] == list(view.shape)
    assert data == np.ascontiguousarray(view).tobytes()


def test_scalars_lists_and_zero_sized(out):
    header, _, data, _ = read_by_hand(bitexact.dump(
        "py", i=7, f=0.5, b=True, l=[[1, 2], [3, 4]], fl=[1, 2.5], e=np.zeros((0, 3), np.float32),
        s=np.float32(2.0), nested=[np.float32(1), np.float32(2)]))
    assert header["i"] == {"dtype": "I64", "shape": [], "data_offsets": header["i"]["data_offsets"]}
    assert header["f"]["dtype"] == "F64" and header["f"]["shape"] == []
    assert header["b"]["dtype"] == "BOOL"
    assert header["l"]["dtype"] == "I64" and header["l"]["shape"] == [2, 2]
    assert header["fl"]["dtype"] == "F64"
    assert header["e"]["shape"] == [0, 3]
    b, e = header["e"]["data_offsets"]
    assert b == e
    assert header["s"]["dtype"] == "F32" and header["s"]["shape"] == []
    assert header["nested"]["dtype"] == "F32" and header["nested"]["shape"] == [2]
    lb, le = header["l"]["data_offsets"]
    assert data[lb:le] == struct.pack("<4q", 1, 2, 3, 4)


def test_python_values_encode_the_same_with_and_without_numpy():
    for v in [3, -1.25, True, [1, 2, 3], [[0.5, 1.0], [2.0, 3.0]], [True, False], [1, 2.0]]:
        assert _safetensors._encode_python(v) == _safetensors._encode_numpy(np.asarray(v)), v


def test_ragged_lists_and_unsupported_dtypes_raise(out):
    with pytest.raises(ValueError):
        bitexact.dump("bad", x=[[1, 2], [3]])
    with pytest.raises(TypeError):
        bitexact.dump("bad", x=np.zeros(2, np.complex64))
    with pytest.raises(TypeError):
        bitexact.dump("bad", x=np.array(["a"]))
    assert not (out / "bad.safetensors").exists()


def test_names_subdirectories_and_suffix(out):
    p = bitexact.dump("epoch_1/step_0002", w=np.ones(2))
    assert p == os.path.join(str(out), "epoch_1", "step_0002.safetensors")
    assert os.path.isfile(p)
    q = bitexact.dump("final.safetensors", w=np.ones(2))
    assert q == os.path.join(str(out), "final.safetensors")
    for bad in ["../escape", "/abs/path", "a/../../b", ".bitexact-x"]:
        with pytest.raises(ValueError):
            bitexact.dump(bad, w=np.ones(1))
    # A tensor may be called "name" or "i": the first parameter is positional-only.
    bitexact.dump("kw", name=np.ones(1), i=np.zeros(1))
    bitexact.step(0, name=np.ones(1), i=np.zeros(1))


def test_no_op_outside_bitexact(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert not bitexact.active()
    assert bitexact.out_dir() is None
    assert bitexact.dump("x", a=np.ones(3)) is None
    assert bitexact.step(1, a=np.ones(3)) is None
    assert bitexact.write_platform() is None
    assert os.listdir(str(tmp_path)) == []


def test_step_writes_tensors_and_a_memory_line(out):
    assert bitexact.active()
    p = bitexact.step(3, w=np.arange(4, dtype=np.float32))
    assert p == os.path.join(str(out), "step_0003.safetensors")
    bitexact.step(12, w=np.arange(4, dtype=np.float32))
    assert (out / "step_0012.safetensors").is_file()
    lines = (out / ".bitexact-memory.jsonl").read_text().splitlines()
    assert len(lines) == 2
    rows = [json.loads(line) for line in lines]
    assert [r["step"] for r in rows] == [3, 12]
    for r in rows:
        assert set(r) == {"step", "rss_bytes", "torch_cuda_allocated"}
        assert isinstance(r["rss_bytes"], int) and r["rss_bytes"] > 1 << 20
        assert r["torch_cuda_allocated"] is None or isinstance(r["torch_cuda_allocated"], int)


def test_platform_file_written_once_on_first_dump(out):
    bitexact.dump("a", x=np.ones(1))
    path = out / ".bitexact-platform.json"
    info = json.loads(path.read_text())
    import platform

    assert info["python"] == platform.python_version()
    assert info["numpy"] == np.__version__
    assert "torch" in info
    os.remove(str(path))
    bitexact.dump("b", x=np.ones(1))
    assert not path.exists()  # once per process
    assert bitexact.write_platform() == str(path)  # explicit call rewrites it
    assert path.exists()
    names = sorted(os.listdir(str(out)))
    assert names == [".bitexact-platform.json", "a.safetensors", "b.safetensors"]


def test_a_repeated_step_index_is_an_error_not_an_overwrite(out):
    # The README's loop inside an epoch loop: the second epoch's step 0 must not silently
    # replace the first epoch's.
    bitexact.step(0, w=np.zeros(2))
    bitexact.step(1, w=np.zeros(2))
    with pytest.raises(ValueError, match=r"step 0 was already written.*epoch \* len\(loader\)"):
        bitexact.step(0, w=np.ones(2))
    header, _, _, _ = read_by_hand(str(out / "step_0000.safetensors"))
    assert header["w"]["dtype"] == "F64"
    assert np.frombuffer(read_by_hand(str(out / "step_0000.safetensors"))[2], "<f8").tolist() == [0, 0]


def test_none_values_are_skipped_with_a_warning_naming_them(out):
    with pytest.warns(UserWarning, match=r"step_0005: 'fc.bias' is None"):
        p = bitexact.step(5, **{"fc.weight": np.ones(2), "fc.bias": None})
    header, _, _, _ = read_by_hand(p)
    assert set(header) - {"__metadata__"} == {"fc.weight"}


def test_the_platform_file_records_the_seed_used(out, monkeypatch):
    monkeypatch.setattr(bitexact._outputs, "_platform_written", False)
    bitexact.seed_everything(1234, torch=False)
    bitexact.dump("a", x=np.ones(1))
    info = json.loads((out / ".bitexact-platform.json").read_text())
    assert info["seed"] == 1234
    assert isinstance(info["seed_everything_seconds"], float)


def test_the_tracer_records_the_platform_unless_the_script_did(out, monkeypatch):
    from bitexact import _outputs, _seed

    monkeypatch.setattr(_outputs, "_platform_written", False)
    path = out / ".bitexact-platform.json"
    # When tracing starts: written, but not as the script's own (dump writes it again, seeded).
    assert _outputs.record_platform() == str(path)
    assert json.loads(path.read_text())["seed"] is None and not _outputs._platform_written
    monkeypatch.setattr(_seed, "_last_seed", 7)
    bitexact.dump("a", x=np.ones(1))
    assert json.loads(path.read_text())["seed"] == 7 and _outputs._platform_written
    # At exit: the script's file is kept; a cleared one is written again.
    path.write_text("{}")
    assert _outputs.record_platform(at_exit=True) is None
    assert path.read_text() == "{}"
    os.remove(str(path))
    assert _outputs.record_platform(at_exit=True) == str(path)
    assert json.loads(path.read_text())["seed"] == 7
    # A script that never wrote it: the exit rewrites the start's record.
    monkeypatch.setattr(_outputs, "_platform_written", False)
    path.write_text("{}")
    assert _outputs.record_platform(at_exit=True) == str(path)
    assert "python" in json.loads(path.read_text())
    monkeypatch.delenv("BITEXACT_OUT")
    assert _outputs.record_platform() is None
