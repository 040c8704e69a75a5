#!/usr/bin/env python3
"""A small numpy MLP trained with SGD, fed by a multiprocessing loader: a bitexact example.

    bitexact run --vary all -- python examples/python/train_numpy.py

Synthetic data comes from the seed; a ``multiprocessing.Pool`` of ``$BITEXACT_WORKERS`` workers
(default 2; 0 = no pool) augments each batch with random noise, and the batches come back in
order. Every step writes its parameters with ``bitexact.step`` and the end writes
``final.safetensors``. Run plainly it trains and prints nothing (``--verbose`` prints losses).

Each ``--planted`` flag adds one classic nondeterminism bug that bitexact should catch:

* ``unseeded-workers``: workers draw augmentation noise from ``np.random.default_rng()`` (OS
  entropy), so every run differs from step 0 on, whatever is varied;
* ``thread-sum``: the weight gradient is summed over as many float32 chunks as there are threads
  (``BITEXACT_THREADS``, else ``OMP_NUM_THREADS``, else 1), so ``--vary threads`` changes it;
* ``set-order``: class labels are numbered by iterating a Python ``set`` of class names, so the
  labels depend on ``PYTHONHASHSEED`` and ``--vary hashseed`` changes them;
* ``uninit-read``: a bias vector is taken from ``np.empty`` and never initialised, so its values
  are whatever ``malloc`` returned: zeros from fresh pages, the poison byte under
  ``MALLOC_PERTURB_`` (``--vary poison``).

The correct (default) version seeds each batch's augmentation from (seed, batch index) with
``bitexact.worker_seed``, which makes the result independent of which worker runs a batch and of
the number of workers.
"""

import argparse
import os
import sys

try:
    import bitexact
except ImportError:  # not installed: use the copy in this checkout (../../python)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
    import bitexact

import numpy as np

PLANTED = ["unseeded-workers", "thread-sum", "set-order", "uninit-read"]
CLASSES = ["cat", "dog", "bird", "fish", "frog", "horse", "ship", "truck"]
N, D, H, BATCH = 1024, 32, 64, 64


def augment(task):
    """Worker: adds noise and a random per-sample scale to one batch (batch index, x, planted)."""
    index, x, planted = task
    if planted == "unseeded-workers":
        rng = np.random.default_rng()  # BUG: OS entropy, different in every run
    else:
        rng = np.random.default_rng(bitexact.worker_seed(index))  # one stream per batch
    scale = rng.uniform(0.9, 1.1, size=(x.shape[0], 1)).astype(np.float32)
    noise = rng.standard_normal(x.shape).astype(np.float32)
    return x * scale + np.float32(0.05) * noise


def thread_count():
    """The thread count bitexact gives (BITEXACT_THREADS, else OMP_NUM_THREADS), else 1."""
    for var in ("BITEXACT_THREADS", "OMP_NUM_THREADS"):
        value = os.environ.get(var, "").strip()
        if value.isdigit() and int(value) > 0:
            return int(value)
    return 1


def make_data(seed, planted):
    """Inputs and labels: a random linear 'teacher' picks a class name for every sample."""
    rng = np.random.default_rng([seed, 1])
    x = rng.standard_normal((N, D)).astype(np.float32)
    teacher = rng.standard_normal((D, len(CLASSES))).astype(np.float32)
    names = [CLASSES[k] for k in np.argmax(x @ teacher, axis=1)]
    if planted == "set-order":
        order = list(set(CLASSES))  # BUG: set iteration order depends on PYTHONHASHSEED
    else:
        order = CLASSES
    label_of = {name: i for i, name in enumerate(order)}
    y = np.array([label_of[n] for n in names], dtype=np.int64)
    return x, y


def init_params(seed, planted):
    rng = np.random.default_rng([seed, 2])
    w1 = (rng.standard_normal((D, H)) / np.sqrt(D)).astype(np.float32)
    w2 = (rng.standard_normal((H, len(CLASSES))) / np.sqrt(H)).astype(np.float32)
    if planted == "uninit-read":
        b1 = np.empty(1 << 18, dtype=np.float32)[:H]  # BUG: never initialised
    else:
        b1 = np.zeros(H, dtype=np.float32)
    b2 = np.zeros(len(CLASSES), dtype=np.float32)
    return {"fc1.weight": w1, "fc1.bias": b1, "fc2.weight": w2, "fc2.bias": b2}


def batches(x, seed, steps, pool, planted):
    """Yields (step, augmented x, indices): shuffled each epoch, augmented by the workers,
    handed back in order."""
    per_epoch = N // BATCH
    tasks, picks = [], []
    for s in range(steps):
        epoch, k = divmod(s, per_epoch)
        perm = np.random.default_rng([seed, 3, epoch]).permutation(N)
        idx = perm[k * BATCH:(k + 1) * BATCH]
        picks.append(idx)
        tasks.append((s, x[idx], planted))
    results = pool.imap(augment, tasks) if pool is not None else map(augment, tasks)
    for s, xb in enumerate(results):
        yield s, xb, picks[s]


def train_step(p, xb, yb, lr, planted):
    """One SGD step of linear-ReLU-linear with softmax cross-entropy; returns the loss."""
    h_pre = xb @ p["fc1.weight"] + p["fc1.bias"]
    h = np.maximum(h_pre, 0)
    logits = h @ p["fc2.weight"] + p["fc2.bias"]
    logits = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(logits)
    prob = e / e.sum(axis=1, keepdims=True)
    n = xb.shape[0]
    loss = -np.log(prob[np.arange(n), yb] + np.float32(1e-12)).mean(dtype=np.float32)
    d_logits = prob
    d_logits[np.arange(n), yb] -= 1
    d_logits /= np.float32(n)
    g_w2 = h.T @ d_logits
    g_b2 = d_logits.sum(axis=0)
    d_h = (d_logits @ p["fc2.weight"].T) * (h_pre > 0)
    if planted == "thread-sum":
        # BUG: float32 partial sums over one chunk per thread: the rounding depends on the count.
        g_w1 = np.zeros_like(p["fc1.weight"])
        for rows in np.array_split(np.arange(n), thread_count()):
            g_w1 += xb[rows].T @ d_h[rows]
    else:
        g_w1 = xb.T @ d_h
    g_b1 = d_h.sum(axis=0)
    lr = np.float32(lr)
    p["fc1.weight"] -= lr * g_w1
    p["fc1.bias"] -= lr * g_b1
    p["fc2.weight"] -= lr * g_w2
    p["fc2.bias"] -= lr * g_b2
    return np.float32(loss)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--lr", type=float, default=0.5)
    ap.add_argument("--planted", choices=PLANTED, help="add one nondeterminism bug")
    ap.add_argument("--verbose", action="store_true", help="print the loss of every step")
    args = ap.parse_args(argv)

    seed = bitexact.seed_everything(torch=False)  # numpy only: skip importing torch
    workers = bitexact.workers(2)  # $BITEXACT_WORKERS under bitexact run (recorded as read)
    params = init_params(seed, args.planted)  # first: its np.empty gets fresh pages
    x, y = make_data(seed, args.planted)

    pool = None
    if workers > 0:
        import multiprocessing

        pool = multiprocessing.Pool(workers, initializer=bitexact.pool_initializer)
    try:
        for s, xb, idx in batches(x, seed, args.steps, pool, args.planted):
            loss = train_step(params, xb, y[idx], args.lr, args.planted)
            bitexact.step(s, loss=loss, **params)
            if args.verbose:
                print("step %d loss %.6f" % (s, loss))
    finally:
        if pool is not None:
            pool.close()
            pool.join()
    logits = np.maximum(x @ params["fc1.weight"] + params["fc1.bias"], 0) @ params["fc2.weight"]
    accuracy = np.float32((logits.argmax(axis=1) == y).mean())
    bitexact.dump("final", accuracy=accuracy, **params)
    if args.verbose:
        print("accuracy %.4f" % accuracy)
    return 0


if __name__ == "__main__":
    sys.exit(main())
