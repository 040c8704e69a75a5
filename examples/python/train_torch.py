#!/usr/bin/env python3
"""PyTorch CPU training with checkpoint/resume: a bitexact example.

    bitexact run --vary all -- python examples/python/train_torch.py --resume-at 10

An MLP with dropout, trained with AdamW on synthetic data from the seed, fed by a ``DataLoader``
with ``num_workers`` workers (``$BITEXACT_WORKERS``, default 2),
``worker_init_fn=bitexact.worker_init_fn`` and a seeded ``generator``. Every step writes the
parameters and the loss with ``bitexact.step``; the end writes ``final.safetensors``.

Resume: with ``--resume-at K`` the run trains K steps, saves model, optimizer, RNG states (torch,
numpy, random) and the loader position (epoch, batch in epoch, the loader generator's state at
the epoch start) to a file, then starts again as a fresh process would (``seed_everything``, a
new model, optimizer and loader), loads the checkpoint and trains the remaining steps. The
per-step outputs equal an uninterrupted run's bit for bit. By default (``--resume-runs odd``)
only runs with an odd ``BITEXACT_RUN`` resume (and plain runs, without ``BITEXACT_RUN``), so
bitexact compares resumed runs against uninterrupted ones; ``--resume-runs all`` resumes in
every run.

Planted bugs (``--planted``):

* ``resume-forgets-rng``: the resume does not restore the RNG states, so the dropout masks
  differ from the uninterrupted run from step K on (needs ``--resume-at K``);
* ``worker-rng``: augmentation noise comes from each worker's global numpy RNG (seeded by
  ``worker_init_fn``) instead of a per-sample generator, so it depends on which worker loads a
  sample: reproducible for a fixed worker count, different under ``--vary workers``.

The script prints nothing unless ``--verbose``.
"""

import argparse
import os
import random
import sys
import tempfile
import warnings

try:
    import bitexact
except ImportError:  # not installed: use the copy in this checkout (../../python)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
    import bitexact

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

# bitexact's workers variation asks for 3 workers even on 2 cores: keep the output quiet.
warnings.filterwarnings("ignore", message="This DataLoader will create")

PLANTED = ["resume-forgets-rng", "worker-rng"]
N, D, H, C, BATCH = 512, 32, 64, 4, 32


class Synthetic(Dataset):
    """Samples from a random linear teacher; ``__getitem__`` adds augmentation noise."""

    def __init__(self, seed, planted):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(N, D, generator=g)
        teacher = torch.randn(D, C, generator=g)
        self.y = (self.x @ teacher).argmax(dim=1)
        self.planted = planted
        self.epoch = 0

    def set_epoch(self, epoch):
        """Called before each epoch's iterator is created (workers get a copy then)."""
        self.epoch = epoch

    def __len__(self):
        return N

    def __getitem__(self, i):
        if self.planted == "worker-rng":
            # BUG (for --vary workers): the stream depends on which worker loads the sample.
            noise = torch.from_numpy(np.random.standard_normal(D).astype(np.float32))
        else:
            # One generator per (sample, epoch): independent of workers and their scheduling.
            g = torch.Generator().manual_seed(bitexact.worker_seed(i, salt=self.epoch))
            noise = torch.randn(D, generator=g)
        return self.x[i] + 0.05 * noise, self.y[i]


class Position:
    """Where the loader is: epoch, batches consumed in it, generator state at the epoch start."""

    def __init__(self):
        self.epoch = 0
        self.batch = 0
        self.gen_state = None

    def state_dict(self):
        return {"epoch": self.epoch, "batch": self.batch, "gen_state": self.gen_state}

    def load_state_dict(self, d):
        self.epoch, self.batch, self.gen_state = d["epoch"], d["batch"], d["gen_state"]


def build(planted, workers):
    """Everything a fresh process builds: seeds, model, optimizer, dataset, loader."""
    seed = bitexact.seed_everything()
    model = nn.Sequential(nn.Linear(D, H), nn.ReLU(), nn.Dropout(0.3), nn.Linear(H, C))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    ds = Synthetic(seed, planted)
    gen = torch.Generator().manual_seed(seed)
    loader = DataLoader(ds, batch_size=BATCH, shuffle=True, drop_last=True, num_workers=workers,
                        worker_init_fn=bitexact.worker_init_fn, generator=gen)
    return model, opt, ds, gen, loader


def train(model, opt, ds, gen, loader, pos, start, stop, verbose):
    """Trains steps start..stop-1 from loader position ``pos``."""
    model.train()
    it = None
    s = start
    while s < stop:
        if it is None:
            if pos.gen_state is None:
                pos.gen_state = gen.get_state().clone()  # a new epoch starts here
            else:
                gen.set_state(pos.gen_state)  # resuming inside an epoch: replay its start
            ds.set_epoch(pos.epoch)
            it = iter(loader)  # draws the worker base seed and the permutation from gen
            for _ in range(pos.batch):
                next(it)
        try:
            xb, yb = next(it)
        except StopIteration:
            pos.epoch, pos.batch, pos.gen_state, it = pos.epoch + 1, 0, None, None
            continue
        loss = nn.functional.cross_entropy(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        pos.batch += 1
        params = {k: v.detach() for k, v in model.named_parameters()}
        bitexact.step(s, loss=loss.detach(), **params)
        if verbose:
            print("step %d loss %.6f" % (s, loss.item()))
        s += 1
    del it  # shuts the workers down


def save(path, model, opt, pos):
    torch.save({
        "model": model.state_dict(),
        "opt": opt.state_dict(),
        "pos": pos.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "numpy_rng": np.random.get_state(),
        "random_rng": random.getstate(),
    }, path)


def load(path):
    try:
        return torch.load(path, weights_only=False)  # holds numpy / random RNG states
    except TypeError:  # torch < 1.13 has no weights_only
        return torch.load(path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--resume-at", type=int, metavar="K", help="checkpoint after K steps, resume")
    ap.add_argument("--resume-runs", choices=["odd", "all"], default="odd",
                    help="which runs resume: odd BITEXACT_RUN (default) or all")
    ap.add_argument("--planted", choices=PLANTED, help="add one nondeterminism bug")
    ap.add_argument("--verbose", action="store_true", help="print the loss of every step")
    args = ap.parse_args(argv)
    if args.resume_at is not None and not 0 < args.resume_at < args.steps:
        ap.error("--resume-at must be between 1 and --steps - 1")
    if args.planted == "resume-forgets-rng" and args.resume_at is None:
        ap.error("--planted resume-forgets-rng needs --resume-at K")
    workers = bitexact.workers(2)  # $BITEXACT_WORKERS under bitexact run (recorded as read)
    run_index = os.environ.get("BITEXACT_RUN")
    resume = args.resume_at is not None and (
        args.resume_runs == "all" or run_index is None or int(run_index) % 2 == 1)

    model, opt, ds, gen, loader = build(args.planted, workers)
    pos = Position()
    if not resume:
        train(model, opt, ds, gen, loader, pos, 0, args.steps, args.verbose)
    else:
        k = args.resume_at
        train(model, opt, ds, gen, loader, pos, 0, k, args.verbose)
        with tempfile.TemporaryDirectory(prefix="bitexact-ckpt-") as tmp:
            path = os.path.join(tmp, "checkpoint.pt")  # outside $BITEXACT_OUT: not an output
            save(path, model, opt, pos)
            del model, opt, ds, gen, loader, pos
            # A fresh start, as a new process: seeds again, builds a new model, then loads.
            model, opt, ds, gen, loader = build(args.planted, workers)
            ck = load(path)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        pos = Position()
        pos.load_state_dict(ck["pos"])
        if args.planted != "resume-forgets-rng":
            torch.set_rng_state(ck["torch_rng"])
            np.random.set_state(ck["numpy_rng"])
            random.setstate(ck["random_rng"])
        train(model, opt, ds, gen, loader, pos, k, args.steps, args.verbose)

    model.eval()
    with torch.no_grad():
        logits = model(ds.x)
        accuracy = (logits.argmax(dim=1) == ds.y).float().mean()
    bitexact.dump("final", accuracy=accuracy, **model.state_dict())
    if args.verbose:
        print("accuracy %.4f" % accuracy.item())
    return 0


if __name__ == "__main__":
    sys.exit(main())
