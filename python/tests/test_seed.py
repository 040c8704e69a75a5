"""seed_everything(), worker_seed(), worker_init_fn() and pool_initializer()."""

import hashlib
import multiprocessing
import os
import random
import struct

import pytest

import bitexact

np = pytest.importorskip("numpy")


def draws():
    return random.random(), np.random.rand(3).tobytes()


def test_seed_everything_is_reproducible_for_random_and_numpy():
    assert bitexact.seed_everything(123, torch=False) == 123
    first = draws()
    bitexact.seed_everything(123, torch=False)
    assert draws() == first
    bitexact.seed_everything(124, torch=False)
    assert draws() != first


def test_seed_comes_from_the_environment_else_zero(monkeypatch):
    assert bitexact.seed_everything(torch=False) == 0
    zero = draws()
    monkeypatch.setenv("BITEXACT_SEED", "42")
    assert bitexact.seed_everything(torch=False) == 42
    env = draws()
    bitexact.seed_everything(42, torch=False)
    assert draws() == env != zero
    monkeypatch.setenv("BITEXACT_SEED", "18446744073709551615")  # u64 max
    assert bitexact.seed_everything(torch=False) == 2**64 - 1
    monkeypatch.setenv("BITEXACT_SEED", "x1")
    with pytest.raises(ValueError):
        bitexact.seed_everything(torch=False)


def test_cublas_workspace_config(monkeypatch):
    bitexact.seed_everything(torch=False)
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    bitexact.seed_everything(torch=False)
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG")
    monkeypatch.setenv("BITEXACT_DETERMINISTIC", "0")
    bitexact.seed_everything(torch=False)
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ


def test_worker_seed_matches_the_documented_mix():
    for seed, wid, salt in [(0, 0, 0), (7, 3, 0), (2**64 - 1, 2, 99)]:
        words = struct.pack("<QQQ", seed, wid, salt)
        want = int.from_bytes(hashlib.sha256(b"bitexact-worker" + words).digest()[:8], "little")
        assert bitexact.worker_seed(wid, seed=seed, salt=salt) == want


def test_worker_seeds_distinct_per_worker_and_reproducible(monkeypatch):
    seeds = [bitexact.worker_seed(w) for w in range(256)]
    assert len(set(seeds)) == 256
    assert seeds == [bitexact.worker_seed(w) for w in range(256)]
    assert seeds == [bitexact.worker_seed(w, seed=0) for w in range(256)]
    monkeypatch.setenv("BITEXACT_SEED", "5")
    assert bitexact.worker_seed(0) == bitexact.worker_seed(0, seed=5) != seeds[0]
    bitexact.seed_everything(9, torch=False)  # the seed_everything seed wins over the env
    assert bitexact.worker_seed(0) == bitexact.worker_seed(0, seed=9)
    assert bitexact.worker_seed(0, salt=1) != bitexact.worker_seed(0)


def test_worker_init_fn_seeds_random_and_numpy():
    bitexact.seed_everything(3, torch=False)
    out = {}
    for wid in [0, 1, 2, 1]:
        s = bitexact.worker_init_fn(wid)
        assert s == bitexact.worker_seed(wid, seed=3)
        d = draws()
        if wid in out:
            assert out[wid] == d
        out[wid] = d
    assert len({out[0], out[1], out[2]}) == 3


def _task(index):
    rng = np.random.default_rng(bitexact.worker_seed(index))
    return rng.standard_normal(4).tobytes()


def test_pool_per_task_streams_match_in_process_results():
    bitexact.seed_everything(11, torch=False)
    want = [_task(i) for i in range(8)]
    ctx = multiprocessing.get_context("fork") if hasattr(os, "fork") else multiprocessing
    with ctx.Pool(2, initializer=bitexact.pool_initializer) as pool:
        got = pool.map(_task, range(8), chunksize=1)
    assert got == want
    assert len(set(got)) == 8


def test_pool_initializer_seeds_from_the_pool_index():
    # In the main process (no pool identity) the index is 0: same stream as worker_init_fn(0).
    bitexact.seed_everything(1, torch=False)
    assert bitexact.pool_initializer() == bitexact.worker_seed(0)
    a = draws()
    bitexact.worker_init_fn(0)
    assert draws() == a
    assert bitexact.pool_initializer(seed=2) == bitexact.worker_seed(0, seed=2)
