"""The state record of ``bitexact run --vary resume`` (:mod:`bitexact._resume_state`), started
the way ``bitexact run`` starts it: the injected ``sitecustomize`` (a copy of
``_sitecustomize.py`` beside a link to this package, first on ``PYTHONPATH``) with
``BITEXACT_STATE=1``. examples/python/train_resume.py runs uninterrupted, stopped right after its
first checkpoint (step 4), resumed correctly (``BITEXACT_RESUME_STEP=4``), and resumed with each
``--forget PIECE`` (one process, the recorder installed per resume as sitecustomize would); the
records of the first step after the checkpoint name exactly the pieces each forgot."""

import json
import os
import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("numpy")

import bitexact  # noqa: E402
from bitexact import _digest, _protocol, _resume_state  # noqa: E402

pytestmark = pytest.mark.skipif(_digest._native is None, reason="needs the native module")

PACKAGE = os.path.dirname(os.path.abspath(bitexact.__file__))
EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples",
                       "python", "train_resume.py")
STATE = _protocol.STATE_FILE_PREFIX + "0.jsonl"
DATA = _resume_state.DATA_PIECE
BN = ["buffer 1.running_mean", "buffer 1.running_var"]
# What each --forget makes differ at step 4, the first step after the checkpoint (besides the
# optimizer's per-parameter pieces, which a forgotten optimizer does not have yet).
FORGOTTEN = {
    "torch-rng": ["torch's CPU generator", DATA],  # and the dropout masks: the gradients
    "numpy-rng": ["numpy's global generator", DATA] + BN,  # the noise reaches BatchNorm too
    "python-rng": ["Python's random"],  # its feature masks happen to agree at step 4
    "scheduler": ["StepLR: _last_lr", "StepLR: _step_count", "StepLR: last_epoch"],
    "optimizer": ["AdamW group 0: lr", "AdamW: parameters with state"],
    "scaler": ["GradScaler: scale", DATA],
    "data-position": [DATA] + BN,  # the generator is as at a fresh epoch 0's end: agrees
    "batchnorm": BN + ["buffer 1.num_batches_tracked"],
}
# The recorder installed for each resume in one process (as sitecustomize installs it).
DRIVER = """
import gc, importlib.util, os, shutil, sys
import torch
from bitexact import _resume_state
example, src, into, start = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
spec = importlib.util.spec_from_file_location("train_resume", example)
ex = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ex)
for piece in sys.argv[5:]:
    out = os.path.join(into, piece)
    shutil.copytree(src, out)
    os.environ["BITEXACT_OUT"] = out
    gc.collect()  # the last resume's objects are not this one's roots
    _resume_state.install(out=out, rank=0, start=start)
    ex.main(["--resume", "--forget", piece])
    _resume_state.uninstall()
"""
# Finds torch's spec (imports nothing: the finder stays), then runs the example.
FIND_THEN_RUN = """
import importlib.util, runpy, sys
assert importlib.util.find_spec("torch") is not None and "torch" not in sys.modules
sys.argv = [sys.argv[1]] + sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""
NUMPY_ONLY = """
import atexit, importlib.util, sys
import numpy as np
assert importlib.util.find_spec("torch") is not None
def check():
    print("clean" if "torch" not in sys.modules and "bitexact" not in sys.modules else "dirty")
atexit.register(check)
w = np.random.default_rng(0).normal(size=(8, 8))
for _ in range(20):
    w -= 0.1 * (w @ w.T @ w) / 64
np.save(sys.argv[1], w)
"""


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("BITEXACT_")}
    env.update(OMP_NUM_THREADS="1", PYTHONHASHSEED="0", **extra)
    return env


def _injected(tmp, out, args, state="1", **extra):
    """Runs ``python args`` as `bitexact run` would with the state recorder injected; returns
    stdout and the records of its injected sitecustomize."""
    inject = tmp / ("inject-" + os.path.basename(str(out)))
    inject.mkdir()
    shutil.copy(os.path.join(PACKAGE, "_sitecustomize.py"), str(inject / "sitecustomize.py"))
    os.symlink(PACKAGE, str(inject / "bitexact"))
    path = os.pathsep.join([str(inject), os.path.dirname(PACKAGE)])
    env = _env(PYTHONPATH=path, BITEXACT_OUT=str(out), BITEXACT_STATE=state, **extra)
    done = subprocess.run([sys.executable] + args, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, check=False)
    assert done.returncode == 0, done.stderr.decode()
    made = inject / _protocol.TRACER_RECORDS_FILE
    events = [json.loads(line) for line in open(str(made))] if made.exists() else []
    return done.stdout.decode(), events


def records(out):
    with open(os.path.join(str(out), STATE)) as f:
        return [json.loads(line) for line in f]


def at(out, step):
    """``{name: piece}`` of the record of ``step``."""
    found = [r for r in records(out) if r["step"] == step]
    assert len(found) == 1, [r["step"] for r in records(out)]
    return {p["name"]: p for p in found[0]["pieces"]}


def differing(a, b):
    """The names of the pieces that differ between two records (or that only one has)."""
    return sorted(n for n in set(a) | set(b)
                  if n not in a or n not in b or a[n]["digest"] != b[n]["digest"])


def final(out):
    with open(os.path.join(str(out), "final.safetensors"), "rb") as f:
        return f.read()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The example uninterrupted (without the recorder and with it, through a find_spec first),
    stopped after its first checkpoint, resumed correctly, and resumed forgetting each piece."""
    tmp = tmp_path_factory.mktemp("resume")
    d = {k: tmp / k for k in ("plain", "full", "stopped", "resumed", "forgot")}
    _injected(tmp, d["plain"], [EXAMPLE], state="0")
    _, d["events"] = _injected(tmp, d["full"], ["-c", FIND_THEN_RUN, EXAMPLE])
    _injected(tmp, d["stopped"], [EXAMPLE, "--stop-after-checkpoint", "1"])
    shutil.copytree(str(d["stopped"]), str(d["resumed"]))
    _injected(tmp, d["resumed"], [EXAMPLE, "--resume"], BITEXACT_RESUME_STEP="4")
    d["forgot"].mkdir()
    subprocess.run([sys.executable, "-c", DRIVER, EXAMPLE, str(d["stopped"]), str(d["forgot"]),
                    "4"] + list(FORGOTTEN),
                   env=_env(PYTHONPATH=os.path.dirname(PACKAGE)), check=True)
    return d


def test_sitecustomize_records_every_step_before_it_without_changing_the_result(runs):
    assert [e["event"] for e in runs["events"]] == ["state"]
    assert final(runs["full"]) == final(runs["plain"])  # recording changed nothing
    recs = records(runs["full"])
    assert [r["step"] for r in recs] == list(range(12)) and {r["rank"] for r in recs} == {0}
    kinds = {"generator", "optimizer", "scheduler", "scaler", "parameter", "buffer", "data",
             "other"}
    for r in recs:
        for p in r["pieces"]:
            assert p["kind"] in kinds and len(p["digest"]) == 32, p
    # Full at the first step and after each checkpoint (every 4 steps), light at the others.
    assert [r["heavy"] for r in recs] == [s % 4 == 0 for s in range(12)]
    for step in (0, 4):
        pieces = at(runs["full"], step)
        for name in ("torch's CPU generator", "numpy's global generator", "Python's random",
                     "AdamW group 0: lr", "StepLR: last_epoch", "GradScaler: scale",
                     "DataLoader: generator", "parameter 0.weight", "buffer 1.running_mean",
                     DATA):
            assert name in pieces, (step, name)
        # Before the step: the scheduler has stepped `step` times, AdamW `step` times.
        assert pieces["StepLR: last_epoch"]["value"] == str(step)
        assert pieces["AdamW: parameters with state"]["value"] == ("0" if step == 0 else "6")
    assert at(runs["full"], 4)["AdamW: 0.weight step"]["value"] == "4.0"
    assert "AdamW: 0.weight exp_avg" not in at(runs["full"], 0)
    assert at(runs["full"], 4)["AdamW: 0.weight exp_avg"]["kind"] == "optimizer"
    assert "AdamW: 0.weight exp_avg" not in at(runs["full"], 5)


def test_a_correct_resume_records_what_the_uninterrupted_run_did(runs):
    assert [r["step"] for r in records(runs["stopped"])] == [0, 1, 2, 3]
    # The resumed launch numbers its steps from BITEXACT_RESUME_STEP, after the killed ones.
    assert [r["step"] for r in records(runs["resumed"])] == list(range(12))
    for step in range(4, 12):
        assert differing(at(runs["full"], step), at(runs["resumed"], step)) == [], step
    assert final(runs["resumed"]) == final(runs["full"])


@pytest.mark.parametrize("piece", sorted(FORGOTTEN))
def test_each_forgotten_piece_is_named_at_the_first_step_after_the_checkpoint(runs, piece):
    full, resumed = at(runs["full"], 4), at(runs["forgot"] / piece, 4)
    expected = set(FORGOTTEN[piece])
    if piece == "optimizer":  # a fresh AdamW has no state yet: those pieces are absent
        expected |= {n for n in full if n.startswith("AdamW: ")}
    assert differing(full, resumed) == sorted(expected)
    assert final(runs["forgot"] / piece) != final(runs["full"])
    shown = {"scheduler": ("StepLR: last_epoch", "4", "0"),
             "optimizer": ("AdamW: parameters with state", "6", "0"),
             "scaler": ("GradScaler: scale", "2304.0", "1024.0"),
             "batchnorm": ("buffer 1.num_batches_tracked", "5", "1")}.get(piece)
    if shown:
        name, a, b = shown
        assert (full[name]["value"], resumed[name]["value"]) == (a, b)
        assert full[name]["hint"].startswith("not restored: save and load ")


def test_a_numpy_only_program_never_imports_torch(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    stdout, events = _injected(tmp_path, out, ["-c", NUMPY_ONLY, str(out / "w.npy")])
    assert stdout.strip() == "clean" and events == []
    assert not (out / STATE).exists()


@pytest.fixture
def recorder_gone():
    yield
    _resume_state.uninstall()


def _train(model, opt, steps, other=None):
    for _ in range(steps):
        model(torch.ones(3, 4)).sum().backward()
        opt.step()
        if other is not None:
            other.step()


def test_steps_count_the_first_optimizer_and_every_root_module_is_named(tmp_path,
                                                                      recorder_gone):
    import copy

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    ema = copy.deepcopy(model)  # another root of the same class: "Sequential."
    head = torch.nn.Linear(4, 1)
    opt = torch.optim.AdamW(model.parameters())
    other = torch.optim.SGD(head.parameters(), lr=0.5, momentum=0.9)
    _resume_state.install(out=str(tmp_path), rank=0, start=3, heavy=(5, 5))
    _train(model, opt, 3, other)
    recs = records(tmp_path)
    assert [r["step"] for r in recs] == [3, 4, 5]
    last = {p["name"]: p for p in recs[-1]["pieces"]}
    assert last["SGD group 0: momentum"]["value"] == "0.9"
    assert "AdamW: 0.weight exp_avg" in last and "SGD: parameters with state" in last
    for name in ("parameter 0.weight", "buffer 1.running_var", "parameter Sequential.0.weight",
                 "parameter Linear.weight"):
        assert name in last, sorted(last)


def test_a_light_step_leaves_the_heavy_pieces_out(tmp_path, recorder_gone):
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.Adam(model.parameters())
    _resume_state.install(out=str(tmp_path), rank=0, start=0, heavy=(1, 1))
    _train(model, opt, 2)
    light, heavy = records(tmp_path)
    assert (light["heavy"], heavy["heavy"]) == (False, True)
    light, heavy = ({p["name"] for p in r["pieces"]} for r in (light, heavy))
    assert "torch's CPU generator" in light and "Adam group 0: lr" in light
    assert "Adam: parameters with state" in light
    assert not any(n.startswith("parameter ") for n in light) and DATA not in light
    assert "Adam: weight step" not in light  # no per-parameter piece, one-element or not
    assert {"parameter weight", "Adam: weight exp_avg", "Adam: weight step", DATA} <= heavy


def test_a_record_is_full_at_the_first_step_and_after_each_checkpoint_write(
        tmp_path, recorder_gone, monkeypatch):
    monkeypatch.delenv(_protocol.STATE_STEPS_ENV, raising=False)
    monkeypatch.delenv(_protocol.STATE_CHECKPOINT_ENV, raising=False)
    out = tmp_path / "out"
    out.mkdir()
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.Adam(model.parameters())
    _resume_state.install(out=str(out), rank=0, start=0)

    def tmp_then_rename():
        torch.save(model.state_dict(), str(out / "model.ckpt.tmp"))  # a temporary name
        os.replace(str(out / "model.ckpt.tmp"), str(out / "model.ckpt"))

    def log():
        with open(out / "log.txt", "a") as f:
            f.write("loss\n")
        torch.save(model.state_dict(), str(tmp_path / "ckpt.pt"))  # outside $BITEXACT_OUT
        with open(out / "model.ckpt", "rb") as f:  # read, not written
            f.read()

    between = [lambda: torch.save(model.state_dict(), str(out / "ckpt.pt")), None,
               tmp_then_rename, log, lambda: os.makedirs(str(out / "checkpoint-5")), None]
    _train(model, opt, 1)
    for write in between:
        if write is not None:
            write()
        _train(model, opt, 1)
    full = [r["heavy"] for r in records(out)]
    assert full == [True, True, False, True, False, True, False], full


def test_a_checkpoint_path_is_named_as_bitexact_names_it(tmp_path):
    out = str(tmp_path)
    is_ckpt = _resume_state.is_checkpoint
    assert is_ckpt(os.path.join(out, "run", "ckpt_500.pt"), out)
    assert is_ckpt(os.path.join(out, "checkpoint-500", "optimizer.pt"), out)
    assert is_ckpt(os.path.join(out, "Checkpoints").encode(), out)
    assert not is_ckpt(os.path.join(out, "ckpt.pt.tmp"), out)
    assert not is_ckpt(os.path.join(out, "tmp-checkpoint-500", "w.pt"), out)
    assert not is_ckpt(os.path.join(out, "step_0001.npy"), out)
    assert not is_ckpt(os.path.join(out, "..", "ckpt.pt"), out)
    assert is_ckpt(os.path.join(out, "state", "model_3.safetensors"), out, "model_*")
    assert not is_ckpt(os.path.join(out, "ckpt.pt"), out, "model_*")
    assert is_ckpt(os.path.join(out, "c-3", "gauss.npy"), out, "c-*/gauss.npy")
    assert not is_ckpt(os.path.join(out, "c-3", "w.npy"), out, "c-*/gauss.npy")


def test_a_failed_write_never_reaches_the_program(tmp_path, capsys, recorder_gone):
    (tmp_path / STATE).mkdir()  # the record's path is a directory: every write fails
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    _resume_state.install(out=str(tmp_path), rank=0, start=0)
    _train(model, opt, 3)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("bitexact: state record: "), err
