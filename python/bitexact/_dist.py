"""Distributed runs (``bitexact run -- torchrun --nproc-per-node 2 train.py``): which rank this
process is, where its outputs go, and which process of a launch does bitexact's per-process
work (seeding, tracing).

torch.distributed's launchers (``torchrun``, ``python -m torch.distributed.run``) start one
worker process per rank with ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE`` in its environment.

* **Outputs.** A worker's :func:`bitexact.dump` / :func:`bitexact.step` files, its memory and
  platform records and its op trace go under ``$BITEXACT_OUT/rank<RANK>/``
  (:func:`out_root`), whatever the world size, so each rank is compared with the same rank of
  the other runs, and rank 0 of a 1-process run with rank 0 of a 2-process run. A process
  without ``RANK`` and ``WORLD_SIZE`` writes to ``$BITEXACT_OUT`` itself.
* **Launchers** (the torchrun agent) are not the program: they are never seeded or traced
  (:func:`is_launcher`).
* **Ownership.** Per-process work happens once per rank: in the first Python process of each
  rank (:func:`claim`), not in its DataLoader workers or other children.
"""

import os

from . import _protocol
import sys

# The launchers of torch.distributed, by script name and by module.
_LAUNCHER_SCRIPTS = ("torchrun",)
_LAUNCHER_MODULES = ("torch.distributed.run", "torch.distributed.launch")


def rank():
    """This process's rank (``$RANK``) when a torch.distributed launcher started it, else
    ``None`` (both ``RANK`` and ``WORLD_SIZE`` must be set)."""
    r, w = os.environ.get("RANK", "").strip(), os.environ.get("WORLD_SIZE", "").strip()
    if not (r.isdigit() and w.isdigit()):
        return None
    return int(r)


def out_root():
    """Where this process's outputs go: ``$BITEXACT_OUT/rank<R>`` for a rank of a distributed
    run (created), else ``$BITEXACT_OUT``; ``None`` outside bitexact."""
    out = os.environ.get(_protocol.OUT_ENV)
    if not out:
        return None
    r = rank()
    if r is None:
        return out
    path = os.path.join(out, "rank%d" % r)
    os.makedirs(path, exist_ok=True)
    return path


def is_launcher():
    """Whether this Python process is a torch.distributed launcher (``torchrun``, ``python -m
    torch.distributed.run``): it starts the ranks and computes nothing itself."""
    argv = getattr(sys, "orig_argv", None) or getattr(sys, "argv", None) or []
    if any(os.path.basename(str(a)) in _LAUNCHER_SCRIPTS for a in argv[:2]):
        return True
    return any(argv[i] == "-m" and argv[i + 1] in _LAUNCHER_MODULES for i in range(len(argv) - 1))


def claim(env_name):
    """Claims this process as the one of its rank that does the work named by ``env_name``
    (``BITEXACT_TRACE_OWNER``, ``BITEXACT_SEEDED``): ``True`` the first time a process of this
    rank asks, ``False`` in its children (DataLoader workers, tools), which inherit the claim.
    Launchers never claim."""
    if is_launcher():
        return False
    mine = "%d:%s" % (os.getpid(), rank())
    held = os.environ.get(env_name)
    if held:
        held_rank = held.partition(":")[2]
        if held == mine:
            return True
        if held_rank == str(rank()) or not held_rank:
            return False  # an ancestor of the same rank holds it
    os.environ[env_name] = mine
    return True
