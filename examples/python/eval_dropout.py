"""Evaluation of a fixed model, written without bitexact: its outputs should not depend on any
seed, since evaluation has no randomness. `--planted train-mode` forgets `model.eval()`, so
dropout stays on and the predictions depend on the RNG state. Runs that differ only in the seed
show it, and `--trace ops` names the op:

    bitexact run --seed-everything --vary seed --trace ops -- python examples/python/eval_dropout.py
    # exit 0: the predictions do not depend on the seed
    bitexact run --seed-everything --vary seed --trace ops -- \\
        python examples/python/eval_dropout.py --planted train-mode
    # exit 1: first divergence ... aten::native_dropout ... in module Net.drop (forward)

`--seed-everything` makes bitexact seed the script's RNGs from the run's seed at start-up (the
script never seeds the global RNG itself), so `--vary seed` reaches it. The weights come from a
fixed generator, as if loaded from a checkpoint.
"""

import argparse
import os

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.drop = nn.Dropout(0.2)
        self.fc2 = nn.Linear(32, 3)

    def forward(self, x):
        return self.fc2(self.drop(torch.relu(self.fc1(x))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--planted", choices=["train-mode"])
    args = ap.parse_args()
    with torch.random.fork_rng():  # "the checkpoint": fixed weights and inputs
        torch.manual_seed(1234)
        model = Net()
        x = torch.randn(8, 16)
    if args.planted != "train-mode":
        model.eval()
    with torch.no_grad():
        predictions = model(x).argmax(dim=1)
    out = os.environ.get("BITEXACT_OUT")
    if out:
        torch.save({"predictions": predictions}, os.path.join(out, "predictions.pt"))
    print(predictions.tolist())


if __name__ == "__main__":
    main()
