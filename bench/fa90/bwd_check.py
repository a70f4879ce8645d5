#!/usr/bin/env python3
"""Check and time Kiln's sm_90a attention backward (FlashAttention90Backward.cuh)
through its harness (fa90bwd, bench/fa90/backward.cu) beside PyTorch's flash
and cuDNN backends, on the same fresh random bf16 inputs (GPU machine):

  python3 bwd_check.py [--bin [LABEL=]./fa90bwd ...] [--shapes ...] [--iters 20]

--bin may be given several times (variants of the kernels built with
different -D switches): each runs on the same inputs against the same
reference, one "kiln LABEL" row each.

Per shape: a float64 reference (O, dQ, dK, dV), each implementation's
||x - ref|| / ||ref|| and Kiln's ratio to the flash backend's error (the
numerics policy of docs/codegen.md: at most 1.5), and the backward's
TFLOP/s (FlashAttention convention: 2.5x the forward's 4 b h sq l d, halved
when causal). Shapes with tails and unequal query/key lengths check only
against the reference where flash cannot run them the same way (causal with
sq != l: PyTorch's flash aligns the mask bottom-right, Kiln top-left).
Masked shapes (the mask operand, FlashAttention90.cuh) pass a mask to the
harness and compare against the float64 reference with the same explicit
mask (a row with every key dropped gives 0, as Kiln's portable kernel does)
and PyTorch's SDPA with that mask as attn_mask (its efficient and cuDNN
backends: flash takes no mask): Kiln's error at most 1.5x the better
of them. Forms: pad (key padding [B, L], HF's attention_mask), doc (packed
documents, ids [B, S]; tiles across documents are skipped), elem (a keep
tensor [B, SQ, L] read per element: the generated kernel's mask functor).
Exit status 1 when a check fails."""
import argparse
import math
import pathlib
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# name: (batch, heads, kv heads, query length, key length, head dim, causal)
SHAPES = {
    "tail64": (1, 4, 2, 300, 300, 64, True),
    "full64": (2, 4, 1, 200, 333, 64, False),
    "tail128": (1, 4, 2, 300, 300, 128, True),
    "full128": (1, 2, 2, 132, 257, 128, False),
    "small": (8, 12, 12, 1024, 1024, 64, True),
    "1b": (4, 32, 8, 2048, 2048, 64, True),
    "8b": (2, 32, 8, 4096, 4096, 128, True),
    "1b-full": (4, 32, 8, 2048, 2048, 64, False),
}
# name: (batch, heads, kv heads, query length, key length, head dim, causal, mask form)
MASKED = {
    "pad64": (4, 8, 2, 1024, 1024, 64, False, "pad"),
    "pad128-causal": (4, 8, 2, 1024, 1024, 128, True, "pad"),
    "doc64": (2, 8, 8, 2048, 2048, 64, True, "doc"),
    "doc128": (2, 8, 2, 2048, 2048, 128, True, "doc"),
    "elem64": (2, 4, 2, 300, 332, 64, False, "elem"),
    "elem128-causal": (2, 4, 2, 300, 300, 128, True, "elem"),
    "1b-doc": (4, 32, 8, 2048, 2048, 64, True, "doc"),
    "1b-pad": (4, 32, 8, 2048, 2048, 64, True, "pad"),
    "8b-doc": (2, 32, 8, 4096, 4096, 128, True, "doc"),
}


def make_mask(form, b, sq, l, gen):
    """The form's file contents and its keep tensor [B, 1, SQ, L] (bool)."""
    if form == "pad":  # right padding, one sequence left-padded, one full
        lengths = [l, (l * 7) // 10, l // 3 + 1, l // 2][:b]
        keep = torch.zeros(b, l, dtype=torch.bool, device="cuda")
        for i, n in enumerate(lengths):
            if i == 3:
                keep[i, l - n:] = True
            else:
                keep[i, :n] = True
        return keep.to(torch.uint8), keep[:, None, None, :].expand(b, 1, sq, l)
    if form == "doc":  # documents of 48 .. 1100 tokens, ids non-decreasing
        ids = torch.empty(b, sq, dtype=torch.int32, device="cuda")
        for i in range(b):
            at, doc = 0, 0
            while at < sq:
                n = int(torch.randint(48, 1100, (1,), generator=gen, device="cuda"))
                ids[i, at:at + n] = doc
                at, doc = at + n, doc + 1
        keep = ids[:, :, None] == ids[:, None, :]
        return ids, keep[:, None]
    # elem: random keep (70%), every query keeping at least its first key
    keep = torch.rand(b, sq, l, generator=gen, device="cuda") < 0.7
    keep[:, :, 0] = True
    return keep.to(torch.uint8), keep[:, None]
POLICY = 1.5


def flops(b, h, sq, l, d, causal):
    return 2.5 * 4 * b * h * sq * l * d / (2 if causal else 1)


def reference(q, k, v, do, causal, keep=None):
    outs = [[], [], [], []]
    g = q.shape[1] // k.shape[1]
    for i in range(q.shape[0]):
        qi, ki, vi = (t[i:i + 1].double().requires_grad_() for t in (q, k, v))
        s = qi @ ki.repeat_interleave(g, 1).transpose(-1, -2) / math.sqrt(q.shape[-1])
        if causal:
            mask = torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool, device=s.device).triu(1)
            s = s.masked_fill(mask, -math.inf)
        if keep is not None:
            s = s.masked_fill(~keep[i:i + 1], -math.inf)
        # A row with no key left: P = 0 (Kiln's portable kernel writes 0).
        mx = s.amax(-1, keepdim=True).detach()
        e = torch.exp(s - torch.where(torch.isinf(mx), torch.zeros_like(mx), mx))
        den = e.sum(-1, keepdim=True)
        o = (e / torch.where(den == 0, torch.ones_like(den), den)) @ vi.repeat_interleave(g, 1)
        grads = torch.autograd.grad(o, (qi, ki, vi), do[i:i + 1].double())
        for acc, t in zip(outs, (o.detach(),) + grads):
            acc.append(t)
        del s, o
    return [torch.cat(t) for t in outs]


def cuda_time(fn, iters):
    for _ in range(3):
        fn()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def torch_backend(backend, q, k, v, do, causal, iters, keep=None):
    gqa = q.shape[1] != k.shape[1]
    if (backend == SDPBackend.CUDNN_ATTENTION or keep is not None) and gqa:  # no GQA there
        g = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
        gqa = False
    qg, kg, vg = (t.detach().clone().requires_grad_() for t in (q, k, v))
    if keep is not None and causal:  # is_causal with attn_mask: fold causal into the mask
        keep = keep & torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).tril()
    with sdpa_kernel([backend]):
        if keep is not None:
            o = F.scaled_dot_product_attention(qg, kg, vg, attn_mask=keep)
        else:
            o = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal, enable_gqa=gqa)
    grads = torch.autograd.grad(o, (qg, kg, vg), do, retain_graph=True)
    ms = cuda_time(lambda: torch.autograd.grad(o, (qg, kg, vg), do, retain_graph=True), iters)
    return (o,) + grads, ms


def rel(x, ref):
    return float((x.double() - ref).norm() / ref.norm())


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bin", action="append", default=None,
                   help="[LABEL=]PATH of a harness build; repeatable (default ./fa90bwd)")
    p.add_argument("--shapes", default=",".join(SHAPES))
    p.add_argument("--masked", default=",".join(MASKED),
                   help="masked shapes (comma-separated; 'none' for none)")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    bins = []
    for spec in args.bin or [str(pathlib.Path(__file__).resolve().parent / "fa90bwd")]:
        label, _, path = spec.rpartition("=")
        bins.append((label or ("sm90a" if len(args.bin or [1]) == 1 else pathlib.Path(path).name), path))
    failed = False
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
          f"cuDNN {torch.backends.cudnn.version()}", flush=True)
    names = [n for n in args.shapes.split(",") if n and n != "none"]
    names += [n for n in args.masked.split(",") if n and n != "none"]
    for name in names:
        masked = name in MASKED
        b, h, kv, sq, l, d, causal = (MASKED[name][:7] if masked else SHAPES[name])
        gen = torch.Generator(device="cuda").manual_seed(args.seed)
        q = torch.randn(b, h, sq, d, device="cuda", generator=gen).bfloat16()
        k = torch.randn(b, kv, l, d, device="cuda", generator=gen).bfloat16()
        v = torch.randn(b, kv, l, d, device="cuda", generator=gen).bfloat16()
        do = torch.randn(b, h, sq, d, device="cuda", generator=gen).bfloat16()
        form, keep, mask_data = (MASKED[name][7],) + make_mask(MASKED[name][7], b, sq, l, gen)[::-1] \
            if masked else (None, None, None)
        ref = reference(q, k, v, do, causal, keep)
        timed = sq >= 1024
        rows = {}
        backends = ((("torch efficient", SDPBackend.EFFICIENT_ATTENTION),
                     ("torch cudnn", SDPBackend.CUDNN_ATTENTION)) if masked else
                    (("torch flash", SDPBackend.FLASH_ATTENTION),
                     ("torch cudnn", SDPBackend.CUDNN_ATTENTION)))
        if sq == l or not causal:
            for label, be in backends:
                try:
                    outs, ms = torch_backend(be, q, k, v, do, causal, args.iters if timed else 1,
                                             keep)
                except RuntimeError as e:
                    rows[label] = ("unavailable: " + str(e).splitlines()[0][:80],)
                    continue
                if outs[1].shape != q.shape or outs[2].shape != k.shape:  # repeated kv heads
                    g = h // kv
                    outs = (outs[0], outs[1], outs[2].unflatten(1, (kv, g)).sum(2),
                            outs[3].unflatten(1, (kv, g)).sum(2))
                errs = [rel(x, r) for x, r in zip(outs, ref)]
                if not all(math.isfinite(e) for e in errs):
                    rows[label] = ("nonfinite outputs (errors %s)" % ", ".join(f"{e:.2e}" for e in errs),)
                    continue
                rows[label] = (errs, ms if timed else None)
        nonfinite = {}
        stdout = []
        with tempfile.TemporaryDirectory() as tmp:
            paths = []
            for n, t in (("q", q), ("k", k), ("v", v), ("do", do)):
                path = pathlib.Path(tmp) / f"{n}.bin"
                t.contiguous().cpu().view(torch.int16).numpy().tofile(path)
                paths.append(str(path))
            extra = []
            if masked:
                mpath = pathlib.Path(tmp) / "mask.bin"
                mask_data.contiguous().cpu().numpy().tofile(mpath)
                extra = [f"{form}:{mpath}"]
            for label, binary in bins:
                try:
                    done = subprocess.run([binary, str(b), str(h), str(kv), str(sq), str(l), str(d),
                                           str(int(causal))] + paths +
                                          [tmp, str(args.iters if timed else 0)] + extra,
                                          capture_output=True, text=True, timeout=40)
                except subprocess.TimeoutExpired:
                    print(f"{name}: {label}: fa90bwd timed out")
                    failed = True
                    continue
                if done.returncode != 0:
                    print(f"{name}: {label}: fa90bwd failed ({done.returncode}): {done.stdout}{done.stderr}")
                    failed = True
                    continue
                import numpy as np
                def load(n, shape):
                    raw = np.fromfile(pathlib.Path(tmp) / f"{n}.bin", dtype=np.int16)
                    return torch.from_numpy(raw).view(torch.bfloat16).reshape(shape).cuda()
                outs = [load("o", q.shape), load("dq", q.shape), load("dk", k.shape), load("dv", v.shape)]
                words = done.stdout.split()
                kiln_ms = float(words[4]) if timed else None
                nonfinite["kiln " + label] = sum(int((~torch.isfinite(x.float())).sum()) for x in outs)
                rows["kiln " + label] = ([rel(x, r) for x, r in zip(outs, ref)], kiln_ms)
                stdout.append(f"{label}: {done.stdout.strip()}")
        # The baseline: PyTorch's flash backend, or with a mask the better
        # of PyTorch's masked backends (per output).
        bases = [r[0] for lbl, r in rows.items() if not lbl.startswith("kiln") and len(r) == 2 and
                 (masked or lbl == "torch flash")]
        flash = ([min(e) for e in zip(*bases)], None) if bases else None
        f = flops(b, h, sq, l, d, causal)
        print(f"\n{name}: b{b} h{h} kv{kv} sq{sq} l{l} d{d} {'causal' if causal else 'full'}"
              f"{' mask ' + form if masked else ''}"
              f"  ({'; '.join(stdout)})")
        print(f"{'':16} {'bwd ms':>8} {'TFLOP/s':>8}   {'err O':>8} {'err dQ':>8} {'err dK':>8} "
              f"{'err dV':>8}  ratio to {'torch masked' if masked else 'flash'} (max)")
        for label, row in rows.items():
            if len(row) == 1:
                print(f"{label:16} {row[0]}")
                continue
            errs, ms = row
            t = f"{ms:8.3f} {f / ms / 1e9:8.1f}" if ms else f"{'-':>8} {'-':>8}"
            ratio = max(e / fe for e, fe in zip(errs, flash[0])) if flash and len(flash) == 2 else None
            verdict = ""
            if label.startswith("kiln"):
                # Without flash on these inputs: the flash errors of bf16
                # attention are ~4e-3; 1e-2 is far above a right kernel.
                bad = nonfinite[label]
                ok = bad == 0 and (ratio <= POLICY if ratio is not None else max(errs) < 1e-2)
                failed |= not ok
                verdict = ("PASS" if ok else "FAIL") + (f" nonfinite {bad}" if bad else "")
            rtext = f"{ratio:5.2f}" if ratio is not None else "    -"
            print(f"{label:16} {t}   " + " ".join(f"{e:8.2e}" for e in errs) + f"  {rtext} {verdict}",
                  flush=True)
        del ref
        torch.cuda.empty_cache()
    print("\nALL PASS" if not failed else "\nSOME FAILED")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
