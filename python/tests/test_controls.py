"""controls(), workers(), threads(), dataloader_kwargs() and the record of what was read."""

import json

import pytest

import bitexact


def _records(out):
    path = out / ".bitexact-controls.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_workers_reads_the_environment_and_records_it(out, monkeypatch):
    assert bitexact.workers(2) == 2  # unset: the script's own default, nothing recorded
    assert _records(out) == []
    monkeypatch.setenv("BITEXACT_WORKERS", "3")
    assert bitexact.workers(2) == 3
    assert bitexact.workers(2) == 3
    recs = _records(out)
    assert [(r["control"], r["value"]) for r in recs] == [("workers", 3)], "once per process"
    monkeypatch.setenv("BITEXACT_WORKERS", "x")
    with pytest.raises(ValueError, match="BITEXACT_WORKERS"):
        bitexact.workers()


def test_controls_reads_every_control(out, monkeypatch):
    monkeypatch.setenv("BITEXACT_SEED", "9")
    monkeypatch.setenv("BITEXACT_WORKERS", "1")
    monkeypatch.setenv("BITEXACT_THREADS", "2")
    monkeypatch.setenv("BITEXACT_DETERMINISTIC", "0")
    c = bitexact.controls()
    assert c == {"seed": 9, "deterministic": False, "benchmark": False, "workers": 1, "threads": 2}
    assert {r["control"] for r in _records(out)} == {
        "seed", "deterministic", "benchmark", "workers", "threads"}


def test_seed_everything_records_the_seed_only_when_it_takes_bitexacts(out, monkeypatch):
    monkeypatch.setattr(bitexact._controls, "_recorded", set())
    bitexact.seed_everything(1337, torch=False)
    assert "seed" not in {r["control"] for r in _records(out)}
    bitexact.seed_everything(torch=False)
    assert "seed" in {r["control"] for r in _records(out)}


def test_nothing_is_recorded_outside_bitexact(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BITEXACT_WORKERS", "3")
    assert bitexact.workers() == 3
    assert list(tmp_path.iterdir()) == []


def test_dataloader_kwargs_follow_the_controls(out, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("BITEXACT_WORKERS", "2")
    monkeypatch.setenv("BITEXACT_SEED", "5")
    kw = bitexact.dataloader_kwargs(num_workers=4)
    assert kw["num_workers"] == 2 and kw["worker_init_fn"] is bitexact.worker_init_fn
    again = bitexact.dataloader_kwargs()
    assert torch.equal(torch.randperm(50, generator=kw["generator"]),
                       torch.randperm(50, generator=again["generator"]))
    assert {r["control"] for r in _records(out)} == {"workers", "seed"}
    monkeypatch.delenv("BITEXACT_WORKERS")
    assert bitexact.dataloader_kwargs(num_workers=4)["num_workers"] == 4
