#!/usr/bin/env python3
"""The LoRA GEMMs of one bench step, by adapter, direction and product.

Reads the per-op TSV of `kiln-run train --profile` (op, label, ms) of the
bench's Llama-like step (`--lora r=R` on every linear layer, the adapters of
q/k/v and of gate/up sharing one down projection: `kiln-lora-concat`) and
prints, per role, the GEMMs that ran, their bytes (bf16 operands, C read
again when it accumulates) and the time the bytes take at the given
bandwidth: what cuBLASLt can at best do for a GEMM this thin. Without a
profile it prints the roles, their shapes, bytes and floors alone.

    python3 bench/lora_gemms.py --config 1b [--profile profile-1b.tsv] [--bandwidth-tbs 4.8]
        [--order small-k-writes|frozen-writes]

The "K-concat" column is what stays when the up projections and the
adapters' input gradients become extra K columns of the frozen GEMMs
(y = [x | s t] [W | B]^T, dX = [dy | s dT] [W ; A]): those rows go, and the
frozen GEMMs grow by r/K of their profiled time (the last lines).
"""

import argparse
import csv
import sys
from dataclasses import dataclass

from configs import CONFIGS


@dataclass
class Role:
    group: str      # "q/k/v", "o", "gate/up", "down"
    name: str       # "q up", "dA", ...
    phase: str      # "fwd" or "bwd"
    m: int
    n: int
    k: int
    acc: bool       # C read and written (beta = 1) today
    kcat: bool      # still a GEMM of its own under K-concatenation
    per_layer: int = 1

    def bytes(self):
        c = self.m * self.n * (2 if self.acc else 1)
        return 2 * (self.m * self.k + self.k * self.n + c)


def lora_roles(cfg, order="small-k-writes"):
    """The LoRA GEMMs of one decoder layer in the order the step issues them.

    order "frozen-writes": as the compiler issued them until the smaller-k
    rule (GemmAccumulate.cpp; the 2026-12-01 profiles): every up projection
    and gate/up's dX add into the frozen GEMM's C (beta = 1). Since then
    ("small-k-writes") they write C and the frozen GEMM adds into it."""
    old = order == "frozen-writes"
    t, h, i, r = cfg.tokens, cfg.d_model, cfg.ffn, cfg.lora_r
    kv = cfg.kv_heads * cfg.head_dim
    fwd = [
        Role("q/k/v", "down x A^T (A of q,k,v concatenated)", "fwd", t, 3 * r, h, False, True),
        Role("q/k/v", "q up s t [0, Bq, 0]^T", "fwd", t, h, 3 * r, old, False),
        Role("q/k/v", "k, v up s t B^T", "fwd", t, kv, 3 * r, old, False, 2),
        Role("o", "down x A^T", "fwd", t, r, h, False, True),
        Role("o", "up s t B^T", "fwd", t, h, r, old, False),
        Role("gate/up", "down x A^T (A of gate,up concatenated)", "fwd", t, 2 * r, h, False, True),
        Role("gate/up", "gate, up up s t [B, 0]^T", "fwd", t, i, 2 * r, old, False, 2),
        Role("down", "down x A^T", "fwd", t, r, i, False, True),
        Role("down", "up s t B^T", "fwd", t, h, r, old, False),
    ]
    bwd = [
        Role("down", "dT = dy B", "bwd", t, r, h, False, True),
        Role("down", "dB = s dy^T t", "bwd", h, r, t, False, True),
        Role("down", "dX = s dT A", "bwd", t, i, r, False, False),
        Role("down", "dA = s dT^T x", "bwd", r, i, t, False, True),
        Role("gate/up", "dT = dy [B, 0], dB = s dy^T t (gate, up)", "bwd", t, 2 * r, i, False, True, 4),
        Role("gate/up", "dA = s dT^T x", "bwd", 2 * r, h, t, False, True),
        Role("gate/up", "dX s dT A", "bwd", t, h, 2 * r, old, False),
        Role("o", "dT = dy B", "bwd", t, r, h, False, True),
        Role("o", "dB = s dy^T t", "bwd", h, r, t, False, True),
        Role("o", "dX = s dT A", "bwd", t, h, r, False, False),
        Role("o", "dA = s dT^T x", "bwd", r, h, t, False, True),
        Role("q/k/v", "k, v dT (+)= dy [0, B, 0]", "bwd", t, 3 * r, kv, False, True, 2),
        Role("q/k/v", "k, v dB = s dy^T t", "bwd", kv, 3 * r, t, False, True, 2),
        Role("q/k/v", "q dB = s dy^T t", "bwd", h, 3 * r, t, False, True),
        Role("q/k/v", "q dT += dy [B, 0, 0]", "bwd", t, 3 * r, h, True, True),
        Role("q/k/v", "dA = s dT^T x", "bwd", 3 * r, h, t, False, True),
        Role("q/k/v", "dX += s dT A", "bwd", t, h, 3 * r, True, False),
    ]
    return fwd, bwd


def frozen_roles(cfg):
    """(phase, m, n, k, extra K under K-concatenation) of the frozen GEMMs of a layer."""
    t, h, i, r = cfg.tokens, cfg.d_model, cfg.ffn, cfg.lora_r
    kv = cfg.kv_heads * cfg.head_dim
    return [
        ("fwd", t, h, h, 3 * r), ("fwd", t, kv, h, 3 * r), ("fwd", t, kv, h, 3 * r),
        ("fwd", t, h, h, r), ("fwd", t, i, h, 2 * r), ("fwd", t, i, h, 2 * r),
        ("fwd", t, h, i, r),
        # The input gradient carries each group's dT once (q's, gate's).
        ("bwd", t, i, h, r), ("bwd", t, h, i, 2 * r), ("bwd", t, h, i, 0),
        ("bwd", t, h, h, r), ("bwd", t, h, kv, 0), ("bwd", t, h, kv, 0), ("bwd", t, h, h, 3 * r),
    ]


def parse_gemm(label):
    """(m, n, k) of a profile label 'gemm MxNxK BF16', or None."""
    parts = label.split()
    if len(parts) < 2 or parts[0] != "gemm":
        return None
    dims = parts[1].split("x")
    if len(dims) != 3 or not all(d.isdigit() for d in dims):
        return None
    return tuple(int(d) for d in dims)


def read_profile(path):
    """The GEMMs of the forward and of the backward (split at the LM head)."""
    phases = {"fwd": [], "bwd": []}
    phase = "fwd"
    with open(path, newline="") as f:
        for row in csv.reader(f, delimiter="\t"):
            if len(row) < 3 or row[0] == "op":
                continue
            label, ms = row[1], float(row[2])
            if label.startswith("head ") or label.startswith("kiln_head"):
                phase = "bwd"
                continue
            shape = parse_gemm(label)
            if shape:
                phases[phase].append((shape, ms))
    return phases


def attribute(gemms, roles, cfg):
    """Assigns each LoRA GEMM to a role of its layer; returns per-role (count, ms)
    and the frozen GEMMs left over as (shape, ms)."""
    ranks = {cfg.lora_r, 2 * cfg.lora_r, 3 * cfg.lora_r}
    totals = {id(r): [0, 0.0] for r in roles}
    frozen = []
    pending = []
    for shape, ms in gemms:
        if not ranks.intersection(shape):
            frozen.append((shape, ms))
            continue
        match = next((r for r in pending if (r.m, r.n, r.k) == shape), None)
        if match is None:
            pending = [r for r in roles for _ in range(r.per_layer)]
            match = next((r for r in pending if (r.m, r.n, r.k) == shape), None)
        if match is None:
            raise SystemExit(f"lora_gemms: GEMM {shape} is no LoRA role of this config")
        pending.remove(match)
        totals[id(match)][0] += 1
        totals[id(match)][1] += ms
    return totals, frozen


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="1b", choices=sorted(CONFIGS))
    p.add_argument("--profile", help="kiln-run train --profile TSV (op, label, ms)")
    p.add_argument("--bandwidth-tbs", type=float, default=4.8,
                   help="memory bandwidth for the floor, TB/s (H200: 4.8)")
    p.add_argument("--order", default="small-k-writes", choices=("small-k-writes", "frozen-writes"),
                   help="which GEMM of a LoRA sum writes C: the adapter's (now) or the "
                        "frozen one's (profiles before the smaller-k rule)")
    args = p.parse_args(argv)
    cfg = CONFIGS[args.config]
    bw = args.bandwidth_tbs * 1e12
    fwd, bwd = lora_roles(cfg, args.order)
    measured = None
    frozen = {"fwd": [], "bwd": []}
    if args.profile:
        phases = read_profile(args.profile)
        measured = {}
        for phase, roles in (("fwd", fwd), ("bwd", bwd)):
            totals, frozen[phase] = attribute(phases[phase], roles, cfg)
            measured.update(totals)
    print(f"LoRA GEMMs of the {cfg.name} step: {cfg.layers} layers, {cfg.tokens} tokens, "
          f"r = {cfg.lora_r}, bf16; floor = bytes at {args.bandwidth_tbs} TB/s")
    print()
    head = "| adapter | dir | product | m×n×k | C | per layer | MiB each | floor µs each |"
    rule = "|---|---|---|---|---|---|---|---|"
    if measured is not None:
        head += " GEMMs | ms | µs each | of floor | K-concat |"
        rule += "---|---|---|---|---|"
    print(head)
    print(rule)
    sums = {"today": 0.0, "kcat": 0.0, "floor": 0.0, "floor_kcat": 0.0, "count": 0,
            "count_kcat": 0}
    for role in fwd + bwd:
        each = role.bytes()
        floor_us = each / bw * 1e6
        row = (f"| {role.group} | {role.phase} | {role.name} | {role.m}×{role.n}×{role.k} | "
               f"{'beta = 1' if role.acc else 'write'} | {role.per_layer} | "
               f"{each / 2**20:.1f} | {floor_us:.1f} |")
        sums["floor"] += floor_us * role.per_layer * cfg.layers / 1e3
        if role.kcat:
            sums["floor_kcat"] += floor_us * role.per_layer * cfg.layers / 1e3
        if measured is not None:
            count, ms = measured[id(role)]
            sums["today"] += ms
            sums["count"] += count
            if role.kcat:
                sums["kcat"] += ms
                sums["count_kcat"] += count
            per = ms / count * 1e3 if count else 0
            ratio = per / floor_us if count else 0
            row += (f" {count} | {ms:.3f} | {per:.1f} | {ratio:.1f}× | "
                    f"{'stays' if role.kcat else 'gone'} |")
        print(row)
    print()
    print(f"floor of today's LoRA GEMMs: {sums['floor']:.2f} ms; "
          f"of those that stay under K-concat: {sums['floor_kcat']:.2f} ms")
    if measured is None:
        return 0
    extra = 0.0
    for phase in ("fwd", "bwd"):
        shapes = frozen_roles(cfg)
        by_shape = {}
        for shape, ms in frozen[phase]:
            by_shape.setdefault(shape, []).append(ms)
        for ph, m, n, k, more in shapes:
            if ph != phase or not more or (m, n, k) not in by_shape:
                continue
            times = by_shape[(m, n, k)]
            extra += sum(times) / len(times) * more / k * cfg.layers
    print(f"today: {sums['count']} LoRA GEMMs, {sums['today']:.2f} ms")
    print(f"K-concat: {sums['count_kcat']} LoRA GEMMs, {sums['kcat']:.2f} ms, "
          f"frozen GEMMs +{extra:.2f} ms (K + r), "
          f"step -{sums['today'] - sums['kcat'] - extra:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
