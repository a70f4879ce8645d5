"""Token data shared by bench/ scripts (numpy only, no torch).

markov_tokens: a learnable token stream (each token has four possible
successors), so a loss curve moves well below log(vocab) in 100 steps.
windows: the exact training windows `kiln-run train --data` takes for a step
(runtime/lib/TokenData.cpp: SplitMix64 hashes, Lemire's multiply-shift), so
PyTorch trains on the same batches.
step_batches: bench.py's per-step random batches.
"""

import numpy as np

MASK = (1 << 64) - 1


def markov_tokens(vocab, count, seed):
    rng = np.random.default_rng(seed)
    successors = rng.integers(0, vocab, size=(vocab, 4))
    choice = rng.choice(4, size=count, p=[0.55, 0.25, 0.15, 0.05])
    out = np.empty(count, dtype=np.int64)
    token = int(rng.integers(0, vocab))
    for i in range(count):
        out[i] = token
        token = int(successors[token, choice[i]])
    return out


def write_tokens(path, tokens, vocab):
    dtype = "<u4" if vocab > 65535 else "<u2"
    np.asarray(tokens).astype(dtype).tofile(path)
    return "uint32" if vocab > 65535 else "uint16"


def _mix(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def window_start(count, seed, step, row, seq):
    starts = count - seq
    h = _mix(_mix(_mix(seed) ^ step) ^ row)
    return (h * starts) >> 64


def windows(tokens, seed, step, batch, seq):
    """[batch, seq + 1] windows of kiln-run's step `step` (1-based)."""
    rows = [tokens[window_start(len(tokens), seed, step - 1, r, seq):][:seq + 1]
            for r in range(batch)]
    return np.stack(rows)


def step_batches(vocab, batch, seq, count, seed):
    """count uniform random [batch, seq + 1] token batches, one per step of
    bench.py's timed loop: its PyTorch and JAX columns train on the same,
    different batch each step."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, vocab, size=(count, batch, seq + 1), dtype=np.int32)
