"""Distributed runs (bitexact._dist): a rank launched by torchrun (``RANK`` and ``WORLD_SIZE``
set) writes under ``$BITEXACT_OUT/rank<R>/``; torchrun's agent is never claimed for seeding or
tracing; the first process of each rank claims, its children do not."""

import os
import sys

import bitexact
from bitexact import _dist


def test_a_rank_writes_under_its_own_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("BITEXACT_OUT", str(tmp_path))
    assert _dist.rank() is None
    assert bitexact.out_dir() == str(tmp_path)
    monkeypatch.setenv("RANK", "1")
    assert _dist.rank() is None, "RANK without WORLD_SIZE is not a torch.distributed launch"
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert _dist.rank() == 1
    assert bitexact.out_dir() == str(tmp_path / "rank1")
    monkeypatch.setattr(bitexact._outputs, "_steps_written", {})
    path = bitexact.step(0, loss=[1.5])
    assert path == str(tmp_path / "rank1" / "step_0000.safetensors")
    assert (tmp_path / "rank1" / ".bitexact-memory.jsonl").is_file()
    assert (tmp_path / "rank1" / ".bitexact-platform.json").is_file()
    # Each rank numbers its own steps: rank 0's step 0 is not a repeat of rank 1's.
    monkeypatch.setenv("RANK", "0")
    assert bitexact.step(0, loss=[1.5]) == str(tmp_path / "rank0" / "step_0000.safetensors")


def test_torchrun_is_a_launcher_and_never_claims(monkeypatch):
    for argv in (["/venv/bin/python", "/venv/bin/torchrun", "--nproc-per-node", "2", "t.py"],
                 ["python", "-m", "torch.distributed.run", "t.py"]):
        monkeypatch.setattr(sys, "orig_argv", argv, raising=False)
        assert _dist.is_launcher(), argv
        assert not _dist.claim("BITEXACT_TRACE_OWNER")
        assert "BITEXACT_TRACE_OWNER" not in os.environ
    monkeypatch.setattr(sys, "orig_argv", ["python", "-u", "train.py"], raising=False)
    assert not _dist.is_launcher()


def test_the_first_process_of_each_rank_claims(monkeypatch):
    monkeypatch.setattr(sys, "orig_argv", ["python", "train.py"], raising=False)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert _dist.claim("BITEXACT_SEEDED")
    assert _dist.claim("BITEXACT_SEEDED"), "the same process asking again"
    held = os.environ["BITEXACT_SEEDED"]
    assert held == "%d:1" % os.getpid()
    # A child of that rank (a DataLoader worker) inherits the claim under another pid.
    monkeypatch.setenv("BITEXACT_SEEDED", "999999:1")
    assert not _dist.claim("BITEXACT_SEEDED")
    # A process of another rank started below a claimed one (a launcher that claimed) claims.
    monkeypatch.setenv("RANK", "0")
    assert _dist.claim("BITEXACT_SEEDED")
