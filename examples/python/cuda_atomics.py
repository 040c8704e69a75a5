"""A small CUDA training step that sums with atomics: a bitexact example for GPUs.

    bitexact run --runs 3 --trace ops -- python examples/python/cuda_atomics.py
    # exit 0: deterministic (bitexact turns torch's deterministic algorithms on)
    bitexact run --runs 3 --deterministic off --trace ops -- python examples/python/cuda_atomics.py
    # exit 1: first divergence at aten::index_add_ in module Bag (forward)

A bag-of-embeddings classifier: the rows of an embedding table are gathered
(``index_select``), summed per bag with ``index_add_``, then a linear head. On CUDA
``index_add_`` of float32 (and ``index_select``'s backward, also an ``index_add_``) adds with
``atomicAdd``, in whatever order the threads arrive, unless deterministic algorithms are on;
the sums then differ in their last bits from run to run. The script calls ``bitexact.seed_everything()``, which reads bitexact's
``--deterministic`` switch. It writes the trained weights to ``$BITEXACT_OUT``. Without a GPU it
says so and exits 0 without writing anything.
"""

import os
import sys

try:
    import bitexact
except ImportError:  # not installed: use the copy in this checkout (../../python)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
    import bitexact

import torch
from torch import nn

VOCAB, DIM, CLASSES, BATCH, BAG, STEPS = 512, 64, 8, 256, 64, 3


class Bag(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Parameter(torch.randn(VOCAB, DIM))
        self.head = nn.Linear(DIM, CLASSES)

    def forward(self, idx):
        rows = self.emb.index_select(0, idx.flatten())
        bags = torch.arange(idx.shape[0], device=idx.device).repeat_interleave(idx.shape[1])
        pooled = torch.zeros(idx.shape[0], DIM, device=idx.device).index_add_(0, bags, rows)
        return self.head(pooled / idx.shape[1])


def main():
    if not torch.cuda.is_available():
        print("cuda_atomics: no CUDA device; nothing to do")
        return
    bitexact.seed_everything()
    model = Bag().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(STEPS):
        idx = torch.randint(0, VOCAB, (BATCH, BAG), device="cuda")
        y = torch.randint(0, CLASSES, (BATCH,), device="cuda")
        loss = nn.functional.cross_entropy(model(idx), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    out = os.environ.get("BITEXACT_OUT")
    if out:
        state = {k: v.cpu() for k, v in model.state_dict().items()}
        torch.save(state, os.path.join(out, "model.pt"))
    print("loss %.6f" % loss.item())


if __name__ == "__main__":
    main()
