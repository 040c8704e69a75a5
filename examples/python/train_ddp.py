"""Data-parallel training with torch.distributed (DDP on gloo, CPU), launched by torchrun, as
bitexact checks it:

    bitexact run --runs 3 --vary workers,hashseed,poison -- \\
        torchrun --standalone --nproc-per-node 2 examples/python/train_ddp.py
    # exit 0: every rank's steps are bit-identical run to run

Each rank writes its loss and the (synchronized) parameters after every step with
``bitexact.step``; under torchrun these land in ``$BITEXACT_OUT/rank<R>/``. The data are
sharded with ``DistributedSampler`` (``set_epoch`` every epoch), each rank has its own
DataLoader workers (``bitexact.workers()``, so ``--vary workers`` reaches them), and the global
batch is fixed (``GLOBAL_BATCH // world size`` per rank), so 1 and 2 processes train on the
same batches:

    bitexact run --vary world-size --trace ops -- \\
        torchrun --standalone --nproc-per-node {nproc} examples/python/train_ddp.py
    # exit 0, with "world size: results depend on it (2 vs 1 processes, information); ...
    # first op that differs: ..."

Planted bugs:

* ``--planted rank-seed``: rank 1 reseeds torch from its process id after building the model
  (a per-rank seed meant to decorrelate dropout, taken from something that changes every
  launch). Its dropout masks differ run to run; DDP's gradient all-reduce carries the
  difference to rank 0. ``bitexact run --trace ops`` names rank 1's dropout as the origin and
  rank 0 as a receiver through ``c10d::allreduce_``.
* ``--planted worker-augment``: the augmentation noise is drawn from NumPy's global RNG inside
  the DataLoader workers, so it follows the worker count (each worker has its own stream):
  deterministic run to run, but ``--vary workers`` shows that a machine with another
  ``num_workers`` trains on other data. (Chosen instead of a missing
  ``sampler.set_epoch``: that bug repeats epoch 0's order in every epoch, identically in every
  run, straight or resumed, so no determinism check can see it.)

Each rank ends with ``os._exit(0)`` once its process group is destroyed: torch 2.15's gloo
threads can abort a rank in Python's finalization (see the end of this file).

Test hooks: ``--fail-rank R`` makes rank R raise at its first step; ``--hang-rank R`` makes rank
R sleep forever there (its peers then wait in the all-reduce), for ``--timeout``.
"""

import argparse
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, Dataset, DistributedSampler

import bitexact

GLOBAL_BATCH = 16
SAMPLES = 96
EPOCHS = 2


class Points(Dataset):
    """A fixed regression set; each sample gets augmentation noise."""

    def __init__(self, seed, planted):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(SAMPLES, 16, generator=g)
        self.y = self.x @ torch.randn(16, 4, generator=g)
        self.seed, self.planted, self.epoch = seed, planted, 0

    def __len__(self):
        return SAMPLES

    def __getitem__(self, i):
        if self.planted == "worker-augment":
            noise = torch.from_numpy(np.random.normal(0.0, 0.05, 16)).float()
        else:  # one stream per (seed, epoch, sample): independent of workers and ranks
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch * SAMPLES + i)
            noise = 0.05 * torch.randn(16, generator=g)
        return self.x[i] + noise, self.y[i]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.drop = nn.Dropout(0.1)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(self.drop(torch.relu(self.fc1(x))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--planted", choices=["rank-seed", "worker-augment"])
    ap.add_argument("--fail-rank", type=int)
    ap.add_argument("--hang-rank", type=int)
    args = ap.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    seed = bitexact.seed_everything(torch=True)
    model = nn.parallel.DistributedDataParallel(Net())  # broadcasts rank 0's weights
    if args.planted == "rank-seed" and rank == 1:
        torch.manual_seed(seed + os.getpid())  # the bug: a per-launch seed on one rank
    data = Points(seed, args.planted)
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=seed)
    loader = DataLoader(
        data, batch_size=GLOBAL_BATCH // world, sampler=sampler, **bitexact.dataloader_kwargs()
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    step = 0
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        data.epoch = epoch
        for x, y in loader:
            if rank == args.fail_rank:
                raise RuntimeError("rank %d: planted failure at step %d" % (rank, step))
            if rank == args.hang_rank:
                time.sleep(3600)
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            params = {k: v.detach() for k, v in model.module.state_dict().items()}
            bitexact.step(step, loss=loss.detach(), **params)
            step += 1
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # Leave without Python's finalization. gloo's worker threads may still be releasing the
    # last backward's all-reduces, whose saved thread-local state holds a Python object (the
    # contextvars context autograd's backward stashes in TLS: torch/autograd/graph.py,
    # _engine_run_backward); a thread that needs the GIL while the interpreter finalizes takes
    # the process down with SIGABRT ("terminate called without an active exception": torch
    # 2.15 on Python 3.11, about once in 50-200 launches on a loaded 2-core machine; core dump:
    # ProcessGroupGloo::runLoop -> ~AsyncAllreduceWork -> ~ThreadLocalState -> decref ->
    # take_gil -> pthread_exit; see pytorch/pytorch#179291). The process group is destroyed and
    # every output is written and closed by now.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
