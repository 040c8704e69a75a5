"""A residual MLP trained for a few SGD steps while a second thread keeps an exponential moving
average (EMA) of its weights, written without bitexact. The two threads run ops at the same
time, so their ops interleave differently in every run; `bitexact run --trace ops` traces each
thread as its own stream and compares the streams thread by thread:

    bitexact run --trace ops -- python examples/python/ema_thread.py                     # exit 0
    bitexact run --trace ops -- python examples/python/ema_thread.py --planted noise     # exit 1
    bitexact run --trace ops -- python examples/python/ema_thread.py --checkpoint        # exit 0

- `noise`: the EMA thread adds noise from an unseeded generator to its average: the report
  names `aten::randn.generator` in thread `ema#0`, at this file's line.
- `--checkpoint`: each block runs under non-reentrant `torch.utils.checkpoint`; the ops the
  backward recomputes are recorded under the module that runs them (`Net.blocks.1.fc`), in
  phase `recompute`.

The main thread hands the EMA thread a copy of the weights after each step through a queue, so
the average does not depend on when the EMA thread runs; it is written to
`$BITEXACT_OUT/ema.pt` at the end (when run under bitexact).
"""

import argparse
import os
import queue
import random
import threading

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, d)
        self.act = nn.GELU()

    def forward(self, x):
        return x + self.act(self.fc(x))


class Net(nn.Module):
    def __init__(self, d, blocks, checkpointed):
        super().__init__()
        self.blocks = nn.ModuleList(Block(d) for _ in range(blocks))
        self.head = nn.Linear(d, 1)
        self.checkpointed = checkpointed

    def forward(self, x):
        for b in self.blocks:
            x = checkpoint(b, x, use_reentrant=False) if self.checkpointed else b(x)
        return self.head(x)


def ema_loop(weights, ema, noisy):
    gen = torch.Generator().manual_seed(random.SystemRandom().randrange(2**32))
    while True:
        w = weights.get()
        if w is None:
            return
        for name, value in w.items():
            ema[name].mul_(0.9).add_(value, alpha=0.1)
            if noisy:  # planted: noise from an unseeded generator
                ema[name].add_(1e-6 * torch.randn(value.shape, generator=gen))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--planted", choices=["noise"])
    ap.add_argument("--checkpoint", action="store_true")
    ap.add_argument("--steps", type=int, default=4)
    args = ap.parse_args()
    torch.manual_seed(0)
    model = Net(16, 2, args.checkpoint)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    ema = {k: v.detach().clone() for k, v in model.state_dict().items()}
    weights = queue.Queue()
    thread = threading.Thread(target=ema_loop, name="ema",
                              args=(weights, ema, args.planted == "noise"))
    thread.start()
    x, y = torch.randn(32, 16), torch.randn(32, 1)
    for _ in range(args.steps):
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        weights.put({k: v.detach().clone() for k, v in model.state_dict().items()})
    weights.put(None)
    thread.join()
    if os.environ.get("BITEXACT_OUT"):
        torch.save(ema, os.path.join(os.environ["BITEXACT_OUT"], "ema.pt"))


if __name__ == "__main__":
    main()
