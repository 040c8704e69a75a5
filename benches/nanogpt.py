"""A nanoGPT-sized training and eval step for the tracer benches (``benches/op_trace.py``): the
GPT of karpathy/nanoGPT's ``model.py`` (MIT licence; same modules, names, initialization and
forward; ``F.scaled_dot_product_attention`` with ``is_causal=True``), trained the way its
``train.py`` does on CPU: AdamW over a decayed and an undecayed parameter group, gradient
clipping at 1.0, ``zero_grad(set_to_none=True)``. Sizes: nanoGPT's CPU recipe for
shakespeare_char made smaller (2 layers, 4 heads, 64 wide, 64-token context, batch 12,
vocabulary 65, dropout 0). ``$BITEXACT_BENCH_GPT`` = ``layers,heads,width,context,batch``
sets other sizes (``ci/gpu-check.sh``'s compute-bound step: ``8,16,1024,512,16``, whose
activations are over 256 MB).
"""

import math
import os

import torch
from torch import nn
from torch.nn import functional as F

N_LAYER, N_HEAD, N_EMBD, BLOCK, VOCAB, BATCH = 2, 4, 64, 64, 65, 12
if os.environ.get("BITEXACT_BENCH_GPT"):
    N_LAYER, N_HEAD, N_EMBD, BLOCK, BATCH = map(int, os.environ["BITEXACT_BENCH_GPT"].split(","))


class LayerNorm(nn.Module):
    """LayerNorm with an optional bias (nanoGPT's)."""

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(N_EMBD, 3 * N_EMBD)
        self.c_proj = nn.Linear(N_EMBD, N_EMBD)
        self.attn_dropout = nn.Dropout(0.0)
        self.resid_dropout = nn.Dropout(0.0)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(N_EMBD, dim=2)
        k = k.view(B, T, N_HEAD, C // N_HEAD).transpose(1, 2)
        q = q.view(B, T, N_HEAD, C // N_HEAD).transpose(1, 2)
        v = v.view(B, T, N_HEAD, C // N_HEAD).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_fc = nn.Linear(N_EMBD, 4 * N_EMBD)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * N_EMBD, N_EMBD)
        self.dropout = nn.Dropout(0.0)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = LayerNorm(N_EMBD, bias=True)
        self.attn = CausalSelfAttention()
        self.ln_2 = LayerNorm(N_EMBD, bias=True)
        self.mlp = MLP()

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """nanoGPT's GPT: tied token embedding and head, scaled init of the residual projections."""

    def __init__(self):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(VOCAB, N_EMBD),
            wpe=nn.Embedding(BLOCK, N_EMBD),
            drop=nn.Dropout(0.0),
            h=nn.ModuleList([Block() for _ in range(N_LAYER)]),
            ln_f=LayerNorm(N_EMBD, bias=True),
        ))
        self.lm_head = nn.Linear(N_EMBD, VOCAB, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * N_LAYER))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        t = idx.size(1)
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        if targets is None:
            return self.lm_head(x[:, [-1], :]), None
        logits = self.lm_head(x)
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1),
                                       ignore_index=-1)


class Workload:
    """The model, its optimizer and one fixed batch: ``train()`` is one iteration of nanoGPT's
    training loop, ``eval()`` one forward of its ``estimate_loss`` (``torch.no_grad``)."""

    def __init__(self, device="cpu"):
        torch.manual_seed(0)
        self.model = GPT().to(device)
        params = [p for p in self.model.parameters() if p.requires_grad]
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        self.opt = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.99))
        g = torch.Generator().manual_seed(0)
        data = torch.randint(0, VOCAB, (BATCH, BLOCK + 1), generator=g)
        self.x, self.y = data[:, :-1].contiguous().to(device), data[:, 1:].contiguous().to(device)

    def train(self):
        _, loss = self.model(self.x, self.y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)

    def eval(self):
        with torch.no_grad():
            self.model(self.x, self.y)
