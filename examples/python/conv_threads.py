"""A small PyTorch CPU convnet whose weight gradients depend on the CPU thread count.

Everything is seeded and deterministic algorithms are on, so two runs with the same thread
count agree bit for bit; but oneDNN/ATen split the convolution's weight-gradient reduction by
thread, so 1 and 4 threads give different last bits. `bitexact run --vary threads` shows it:

    bitexact run --vary threads -- python examples/python/conv_threads.py

reports `nondeterministic`, `first divergence: step_0000.safetensors:grad.0.bias` and
`blame: breaks when varying: threads`. Pin the thread count (torch.set_num_threads) in
training and evaluation if results must match across machines with different core counts.
"""

import os
import sys

try:
    import bitexact
except ImportError:  # a clean checkout: the helper beside the examples
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
    import bitexact

import torch


def main():
    bitexact.seed_everything(torch=True)  # BITEXACT_THREADS -> torch.set_num_threads
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(16, 16, 3, padding=1),
        torch.nn.Flatten(),
        torch.nn.Linear(16 * 16 * 16, 10),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(int(os.environ.get("BITEXACT_SEED", "0")))
    for i in range(3):
        x = torch.randn(32, 3, 16, 16, generator=gen)
        y = torch.randint(0, 10, (32,), generator=gen)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        grads = {f"grad.{k}": p.grad for k, p in model.named_parameters()}
        bitexact.step(i, loss=loss.detach(), **grads)
        opt.step()


if __name__ == "__main__":
    main()
