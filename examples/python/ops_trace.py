"""A small transformer classifier trained for a few AdamW steps, written without bitexact: no
import, no dumps. `bitexact run --trace ops` traces every PyTorch op it makes and, when two runs
differ, names the first op whose output differed while its inputs matched, with its module,
phase, step and source line:

    bitexact run --trace ops -- python examples/python/ops_trace.py                     # exit 0
    bitexact run --trace ops -- python examples/python/ops_trace.py --planted noise      # exit 1
    bitexact run --trace ops -- python examples/python/ops_trace.py --planted branch     # exit 1
    bitexact run --trace ops -- python examples/python/ops_trace.py --planted clock      # exit 1
    bitexact run --trace ops -- python examples/python/ops_trace.py --planted race       # exit 1

- `noise`: the classifier head adds noise from an unseeded generator: the report names
  `aten::randn.generator` in module `Classifier.head` (forward), at this file's line, and the
  generator whose state differed before the call, `Classifier.head.gen`.
- `clock`: torch's default generator is reseeded from the clock before training: the first
  dropout of the encoder draws from another state, and the report names the default generator.
- `race`: a stand-in for a race or an atomic's order: the head adds tiny noise
  (`uniform_(0, 1e-39)`, below float32's normal range) from a generator in the same state in
  every run, while odd runs flush such numbers to zero (`torch.set_flush_denormal`, a
  process-wide switch no op input shows). The op's inputs and its generator's state are
  identical and its output differs: the report calls it nondeterministic.
- `branch`: every forward picks an extra activation with a `random.Random()` nobody seeded (so
  from the OS): the runs call different ops (`aten::relu` where another run calls
  `aten::gelu`), reported as control flow diverging. Each run makes 4 random picks, so two runs
  agree by chance 1 time in 16; `--runs 4` makes a miss a 1-in-4096 event.

The script seeds torch and `random` itself (bitexact leaves a script's seeding alone) and runs
its DataLoader with two seeded workers.
"""

import argparse
import os
import random
import time

import torch
from torch import nn


class Head(nn.Module):
    def __init__(self, d, classes, noisy, tiny=False):
        super().__init__()
        self.fc = nn.Linear(d, classes)
        self.noisy = noisy
        self.tiny = torch.Generator().manual_seed(7) if tiny else None
        self.gen = torch.Generator().manual_seed(random.SystemRandom().randrange(2**32))

    def forward(self, x):
        if self.noisy:  # planted: noise from an unseeded generator
            x = x + 0.01 * torch.randn(x.shape, generator=self.gen)
        if self.tiny is not None:  # planted: denormal noise, flushed in odd runs
            x = x + torch.empty_like(x).uniform_(0, 1e-39, generator=self.tiny)
        return self.fc(x)


class Classifier(nn.Module):
    def __init__(self, vocab, d, classes, noisy, branchy, tiny=False):
        super().__init__()
        self.branchy = random.Random() if branchy else None  # planted: seeded from the OS
        self.embed = nn.Embedding(vocab, d)
        self.encoder = nn.TransformerEncoderLayer(d, nhead=4, dim_feedforward=2 * d, dropout=0.1,
                                                  batch_first=True)
        self.head = Head(d, classes, noisy, tiny)

    def forward(self, tokens):
        h = self.encoder(self.embed(tokens))
        if self.branchy is not None:
            h = torch.relu(h) if self.branchy.random() < 0.5 else nn.functional.gelu(h)
        return self.head(h.mean(dim=1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--planted", choices=["noise", "branch", "clock", "race"])
    ap.add_argument("--steps", type=int, default=4)
    args = ap.parse_args()
    random.seed(0)
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 50, (64, 12), generator=g)
    labels = torch.randint(0, 4, (64,), generator=g)
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(tokens, labels), batch_size=16, shuffle=True,
        num_workers=2, generator=torch.Generator().manual_seed(1))
    model = Classifier(50, 32, 4, args.planted == "noise", args.planted == "branch",
                       args.planted == "race")
    if args.planted == "clock":  # planted: the default generator reseeded from the clock
        torch.manual_seed(time.time_ns())
    if args.planted == "race":  # planted: a switch no op input shows, flipped in odd runs
        torch.set_flush_denormal(int(os.environ.get("BITEXACT_RUN", "0")) % 2 == 1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step, (x, y) in zip(range(args.steps), loader):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        print("step %d loss %.6f" % (step, loss.item()))


if __name__ == "__main__":
    main()
