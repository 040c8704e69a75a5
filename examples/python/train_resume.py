#!/usr/bin/env python3
"""PyTorch CPU training that checkpoints and resumes bit for bit: a bitexact example.

    bitexact run --vary resume --resume-with --resume -- python examples/python/train_resume.py

A small classifier with BatchNorm and Dropout, trained for ``--steps`` steps (default 12, over
three epochs) with AdamW, a StepLR schedule (the learning rate halves every 3 steps), a
GradScaler and a shuffling DataLoader with a seeded generator; each batch gets numpy noise
(``np.random.normal``) and a feature mask from Python's ``random``. Every ``--save-every K``
steps (default 4) it writes a checkpoint into ``$BITEXACT_OUT``; at the end it writes the
parameters and buffers to ``final.safetensors``. Without ``$BITEXACT_OUT`` it writes nothing.

A checkpoint holds everything a bit-exact resume needs: the model's state dict (parameters and
BatchNorm buffers), the optimizer's, the scheduler's and the scaler's, the torch, numpy and
Python generators' states, and the data position: epoch, batches read in it, and the loader
generator's state at the epoch's start (the resume sets it back, makes the epoch's iterator,
which draws the same permutation, and skips the batches read). ``--resume`` loads the latest
checkpoint in ``$BITEXACT_OUT`` (if any), restores it all and trains on to the same last step:
the result equals an uninterrupted run's bit for bit.

``--checkpoint-style``: ``file`` writes ``ckpt.pt``; ``rename`` writes ``ckpt.pt.tmp`` and
renames it to ``ckpt.pt``; ``dir`` writes a directory ``checkpoint-<step>/`` of several files
(``model.pt``, ``optimizer.pt``, ``scheduler.pt``, ``scaler.pt``, ``rng_state.pth``,
``trainer_state.json``) as Hugging Face's Trainer does, and trains on.

``--forget PIECE`` (repeatable) makes the resume skip restoring one piece, a bug users meet:
``torch-rng``, ``numpy-rng``, ``python-rng``, ``scheduler``, ``optimizer``, ``scaler``,
``data-position`` (reads from the start of a fresh epoch) or ``batchnorm`` (loads the
parameters but not the buffers). Each makes the resumed result differ.

``--stop-after-checkpoint N`` ends the process right after its Nth checkpoint (``os._exit``,
as a kill would), to try a resume by hand:

    BITEXACT_OUT=/tmp/a python train_resume.py
    BITEXACT_OUT=/tmp/b python train_resume.py --stop-after-checkpoint 1
    BITEXACT_OUT=/tmp/b python train_resume.py --resume
    cmp /tmp/a/final.safetensors /tmp/b/final.safetensors

Works without bitexact (``final`` is then written with safetensors, else ``torch.save``).
Prints nothing unless ``--verbose``.
"""

import argparse
import json
import os
import random
import re
import sys

try:
    import bitexact
except ImportError:  # not installed: the copy in this checkout (../../python), else none
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
    try:
        import bitexact
    except ImportError:
        bitexact = None

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

PIECES = ["torch-rng", "numpy-rng", "python-rng", "scheduler", "optimizer", "scaler",
          "data-position", "batchnorm"]
N, D, H, C, BATCH = 80, 8, 16, 3, 16
CKPT = "ckpt.pt"
CKPT_DIR = re.compile(r"^checkpoint-(\d+)$")


class Scaler:
    """A GradScaler stand-in for a torch without ``torch.amp.GradScaler("cpu")``: scales the
    loss, unscales the gradients, grows the scale every ``interval`` steps."""

    def __init__(self, scale, factor, interval):
        self.scale_, self.factor, self.interval, self.tracker = scale, factor, interval, 0

    def scale(self, loss):
        return loss * self.scale_

    def step(self, opt):
        for group in opt.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.grad.mul_(1.0 / self.scale_)
        opt.step()

    def update(self):
        self.tracker += 1
        if self.tracker == self.interval:
            self.scale_, self.tracker = self.scale_ * self.factor, 0

    def state_dict(self):
        return {"scale": self.scale_, "tracker": self.tracker}

    def load_state_dict(self, d):
        self.scale_, self.tracker = d["scale"], d["tracker"]


def make_scaler():
    # growth_factor 1.5, not a power of two: scaling and unscaling then round, so the scale's
    # value reaches the gradients (a power-of-two scale cancels exactly in float32, and a
    # forgotten scaler would change nothing on CPU).
    try:
        return torch.amp.GradScaler("cpu", init_scale=2.0 ** 10, growth_factor=1.5,
                                    growth_interval=2)
    except (AttributeError, TypeError, RuntimeError):
        return Scaler(2.0 ** 10, 1.5, 2)


def build(seed):
    """What every launch builds first, fresh or resumed: seeds, data, model, optimizer,
    scheduler, scaler, loader."""
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(N, D, generator=g)
    y = (x @ torch.randn(D, C, generator=g)).argmax(dim=1)
    model = nn.Sequential(nn.Linear(D, H), nn.BatchNorm1d(H), nn.ReLU(), nn.Dropout(0.2),
                          nn.Linear(H, C))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
    gen = torch.Generator().manual_seed(seed + 2)
    loader = DataLoader(TensorDataset(x, y), batch_size=BATCH, shuffle=True, generator=gen)
    return {"model": model, "opt": opt, "sched": sched, "scaler": make_scaler(), "gen": gen,
            "loader": loader}


def new_position():
    """The data position: epoch, batches read in it, the loader generator at its start."""
    return {"epoch": 0, "batch": 0, "gen_state": None}


def batches(t, pos):
    """The batches from ``pos`` on, forever, ``pos`` kept current."""
    while True:
        if pos["gen_state"] is None:
            pos["gen_state"] = t["gen"].get_state()  # a new epoch starts here
        else:
            t["gen"].set_state(pos["gen_state"])  # resuming inside an epoch: replay its start
        it = iter(t["loader"])  # draws the permutation from the loader's generator
        for _ in range(pos["batch"]):
            next(it)
        for xb, yb in it:
            pos["batch"] += 1
            yield xb, yb
        pos.update(epoch=pos["epoch"] + 1, batch=0, gen_state=None)


def augment(xb):
    """numpy noise and a feature mask from Python's random: both from global generators."""
    noise = torch.from_numpy(np.random.normal(0.0, 0.05, size=tuple(xb.shape)).astype(np.float32))
    mask = torch.tensor([float(random.random() < 0.9) for _ in range(D)])
    return (xb + noise) * mask


def train(t, pos, step, args, out):
    """Trains from ``step`` to ``args.steps``, checkpointing every ``args.save_every`` steps."""
    model, opt, sched, scaler = t["model"], t["opt"], t["sched"], t["scaler"]
    model.train()
    saved, data = 0, batches(t, pos)
    while step < args.steps:
        xb, yb = next(data)
        loss = nn.functional.cross_entropy(model(augment(xb)), yb)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        sched.step()
        step += 1
        if args.verbose:
            print("step %d loss %.6f lr %g" % (step, loss.item(), sched.get_last_lr()[0]))
        if out and step % args.save_every == 0:
            save(out, args.checkpoint_style, t, pos, step)
            saved += 1
            if saved == args.stop_after_checkpoint:
                sys.stdout.flush()
                os._exit(0)  # as a kill right after the checkpoint: no clean-up, no final


def rng_states(t, pos):
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
            "python": random.getstate(), "loader": pos["gen_state"]}


def save(out, style, t, pos, step):
    """Writes the checkpoint of step ``step`` in the given style."""
    if style == "dir":
        d = os.path.join(out, "checkpoint-%d" % step)
        os.makedirs(d, exist_ok=True)
        torch.save(t["model"].state_dict(), os.path.join(d, "model.pt"))
        torch.save(t["opt"].state_dict(), os.path.join(d, "optimizer.pt"))
        torch.save(t["sched"].state_dict(), os.path.join(d, "scheduler.pt"))
        torch.save(t["scaler"].state_dict(), os.path.join(d, "scaler.pt"))
        torch.save(rng_states(t, pos), os.path.join(d, "rng_state.pth"))
        with open(os.path.join(d, "trainer_state.json"), "w") as f:
            json.dump({"global_step": step, "epoch": pos["epoch"], "batch": pos["batch"]}, f)
        return
    ckpt = {"model": t["model"].state_dict(), "optimizer": t["opt"].state_dict(),
            "scheduler": t["sched"].state_dict(), "scaler": t["scaler"].state_dict(),
            "rng": rng_states(t, pos), "step": step, "epoch": pos["epoch"],
            "batch": pos["batch"]}
    path = os.path.join(out, CKPT)
    if style == "rename":
        torch.save(ckpt, path + ".tmp")
        os.replace(path + ".tmp", path)
    else:
        torch.save(ckpt, path)


def _load(path):
    try:
        return torch.load(path, weights_only=False)  # holds numpy and Python RNG states
    except TypeError:  # torch < 1.13 has no weights_only
        return torch.load(path)


def latest(out):
    """The latest checkpoint in ``out`` as one dict (``ckpt.pt``, else the highest complete
    ``checkpoint-<step>/``), or None."""
    if os.path.isfile(os.path.join(out, CKPT)):
        return _load(os.path.join(out, CKPT))
    steps = [int(m.group(1)) for m in map(CKPT_DIR.match, os.listdir(out)) if m
             and os.path.isfile(os.path.join(out, m.group(0), "trainer_state.json"))]
    if not steps:
        return None
    d = os.path.join(out, "checkpoint-%d" % max(steps))
    with open(os.path.join(d, "trainer_state.json")) as f:
        state = json.load(f)
    return {"model": _load(os.path.join(d, "model.pt")),
            "optimizer": _load(os.path.join(d, "optimizer.pt")),
            "scheduler": _load(os.path.join(d, "scheduler.pt")),
            "scaler": _load(os.path.join(d, "scaler.pt")),
            "rng": _load(os.path.join(d, "rng_state.pth")), "step": state["global_step"],
            "epoch": state["epoch"], "batch": state["batch"]}


def restore(t, ck, forget):
    """Restores checkpoint ``ck`` into ``t`` except the pieces in ``forget``; returns the data
    position and the step to go on from."""
    model = t["model"]
    if "batchnorm" in forget:  # the parameters only: the BatchNorm buffers stay fresh
        params = {n for n, _ in model.named_parameters()}
        model.load_state_dict({k: v for k, v in ck["model"].items() if k in params}, strict=False)
    else:
        model.load_state_dict(ck["model"])
    for piece, obj in (("optimizer", t["opt"]), ("scheduler", t["sched"]),
                       ("scaler", t["scaler"])):
        if piece not in forget:
            obj.load_state_dict(ck[piece])
    rng = ck["rng"]
    if "torch-rng" not in forget:
        torch.set_rng_state(rng["torch"])
    if "numpy-rng" not in forget:
        np.random.set_state(rng["numpy"])
    if "python-rng" not in forget:
        random.setstate(rng["python"])
    pos = new_position()
    if "data-position" not in forget:
        pos.update(epoch=ck["epoch"], batch=ck["batch"], gen_state=rng["loader"])
    return pos, ck["step"]


def write_final(out, model):
    tensors = {k: v.detach().clone() for k, v in model.state_dict().items()}
    if bitexact is not None:
        bitexact.dump("final", **tensors)
        return
    try:
        from safetensors.torch import save_file
    except ImportError:
        torch.save(tensors, os.path.join(out, "final.pt"))
    else:
        save_file(tensors, os.path.join(out, "final.safetensors"))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--save-every", type=int, default=4, metavar="K")
    ap.add_argument("--checkpoint-style", choices=["file", "rename", "dir"], default="file")
    ap.add_argument("--resume", action="store_true", help="go on from the latest checkpoint")
    ap.add_argument("--forget", action="append", default=[], choices=PIECES,
                    help="do not restore this piece at --resume (repeatable)")
    ap.add_argument("--stop-after-checkpoint", type=int, default=0, metavar="N",
                    help="end right after the Nth checkpoint, as a kill would (debugging)")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    out = os.environ.get("BITEXACT_OUT")
    if out:
        os.makedirs(out, exist_ok=True)
    t = build(int(os.environ.get("BITEXACT_SEED", "0")))
    pos, step = new_position(), 0
    ck = latest(out) if args.resume and out else None
    if ck is not None:
        pos, step = restore(t, ck, set(args.forget))
        if args.verbose:
            print("resumed at step %d (epoch %d, batch %d)" % (step, pos["epoch"], pos["batch"]))
    train(t, pos, step, args, out)
    if out:
        write_final(out, t["model"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
