"""Batch invariance: a small causal language model serves 16 fixed prompts, --batch-size at a
time, and writes each request's next-token logits to its own file
($BITEXACT_OUT/logits_<i>.pt). A request must get the same bits whether it is served alone or
batched with others:

    bitexact run --vary batch -- python examples/python/batch_invariance.py --batch-size {batch}

says batch-variant: the head runs on each prompt's last position, a matmul with M = the batch
size, and PyTorch's CPU matmul reduces in another order for M = 1 than for M = 8. With
--trace ops bitexact names that op. --invariant computes every linear layer one row at a time
(M = 1 whatever the batch, as batch_invariant_ops fixes the split of its kernels), and the same
check passes. The script never imports bitexact.
"""

import argparse
import os

import torch
from torch import nn
from torch.nn import functional as F

VOCAB, DIM, HEADS, LAYERS, PROMPT, REQUESTS = 96, 64, 4, 2, 12, 16


class Linear(nn.Linear):
    """nn.Linear, or, with --invariant, one row at a time: every row's dot products are
    reduced in the same order whatever the batch."""

    invariant = False

    def forward(self, x):
        if not Linear.invariant:
            return super().forward(x)
        rows = x.reshape(-1, x.shape[-1])
        out = torch.cat([F.linear(rows[i : i + 1], self.weight, self.bias) for i in range(rows.shape[0])])
        return out.reshape(*x.shape[:-1], self.out_features)


class Block(nn.Module):
    """Pre-norm causal self-attention and an MLP."""

    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.qkv, self.proj = Linear(DIM, 3 * DIM), Linear(DIM, DIM)
        self.fc, self.out = Linear(DIM, 4 * DIM), Linear(4 * DIM, DIM)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(DIM, dim=2)
        q, k, v = (z.view(b, t, HEADS, DIM // HEADS).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / (DIM // HEADS) ** 0.5
        att = att.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, DIM)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class Model(nn.Module):
    """Token and position embeddings, LAYERS blocks, and the head on the last position."""

    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, DIM), nn.Embedding(PROMPT, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln = nn.LayerNorm(DIM)
        self.lm_head = Linear(DIM, VOCAB)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln(x[:, -1, :]))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--invariant", action="store_true", help="row-by-row linear layers")
    a = p.parse_args()
    Linear.invariant = a.invariant
    torch.manual_seed(0)
    model = Model().eval()
    prompts = torch.randint(0, VOCAB, (REQUESTS, PROMPT), generator=torch.Generator().manual_seed(1))
    out = os.environ.get("BITEXACT_OUT", ".")
    with torch.no_grad():
        for start in range(0, REQUESTS, a.batch_size):
            logits = model(prompts[start : start + a.batch_size])
            for i, row in enumerate(logits, start):
                torch.save(row.clone(), os.path.join(out, "logits_%02d.pt" % i))


if __name__ == "__main__":
    main()
