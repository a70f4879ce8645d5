"""PyTorch's bf16 cross entropy on head_ce_check's inputs: the bf16 policy's bar.

    python3 bench/headce/torch_ref.py DUMP_DIR

DUMP_DIR holds what `head_ce_check ... DUMP_DIR` wrote: the bf16 inputs, the
float64 reference of the sampled rows and kiln's two paths' results on them.
PyTorch runs the head as autocast does (logits = hidden · Wᵀ in bf16, fp32
accumulation; F.cross_entropy on the bf16 logits; the backward in bf16) and
every result is compared with the float64 reference (‖out − ref‖ / ‖ref‖).
Exit 1 when a kiln path's error is worse than PyTorch's (loss or dHidden).
"""

import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F


def rel(out, ref):
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def main():
    d = Path(sys.argv[1])
    rows, vocab, width, ns = map(int, (d / "shape.txt").read_text().split())
    bf16 = lambda name, shape: torch.from_numpy(
        np.fromfile(d / name, dtype=np.uint16).astype(np.int32) << 16).view(torch.float32).reshape(shape).to(torch.bfloat16)
    f64 = lambda name, shape: np.fromfile(d / name, dtype=np.float64).reshape(shape)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    hidden = bf16("hidden.bin", (rows, width)).to(dev).requires_grad_()
    weight = bf16("weight.bin", (vocab, width)).to(dev)
    labels = torch.from_numpy(np.fromfile(d / "labels.bin", dtype=np.int64)).to(dev)
    sample = np.fromfile(d / "sample.bin", dtype=np.int64)
    ref_loss, ref_dx = f64("ref_loss.bin", (ns,)), f64("ref_dhidden.bin", (ns, width))

    logits = hidden @ weight.t()  # bf16 out, fp32 accumulation
    loss = F.cross_entropy(logits, labels, ignore_index=-100)
    loss.backward()
    rows_loss = F.cross_entropy(logits.detach(), labels, ignore_index=-100, reduction="none")
    s = torch.from_numpy(sample).to(dev)
    torch_loss = rows_loss[s].double().cpu().numpy()
    torch_dx = hidden.grad[s].double().cpu().numpy()
    results = {"torch bf16 (" + dev + ")": (rel(torch_loss, ref_loss), rel(torch_dx, ref_dx))}
    for tag in ("fp32", "bf16"):
        results[f"kiln {tag} chunk"] = (rel(f64(f"kiln_{tag}_loss.bin", (ns,)), ref_loss),
                                        rel(f64(f"kiln_{tag}_dhidden.bin", (ns, width)), ref_dx))
    print(f"{'':22s} {'loss rel err':>14s} {'dHidden rel err':>16s}   (vs float64, {ns} rows)")
    for name, (l, x) in results.items():
        print(f"{name:22s} {l:14.6e} {x:16.6e}")
    bar_l, bar_x = next(iter(results.values()))
    bad = [n for n, (l, x) in list(results.items())[1:] if l > bar_l or x > bar_x]
    print("policy: " + ("FAIL (worse than PyTorch bf16): " + ", ".join(bad) if bad else
                        "both kiln paths within PyTorch bf16's error"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
