#!/usr/bin/env python3
"""Several shapes in one kiln-run: what a shape switch costs.

On the GPU machine, with an artifact compiled with --dynamic and --buckets
(docs/benchmarks.md, "Several shapes"):

    python3 bench/shapes.py STEP.kiln --batch 8 --seq 512,768,1024 [--steps 30]
        [--graph-cache 1]

Runs kiln-run once per shape alone, then once with the whole list (step t
runs shape (t-1) mod N, so every step switches shape), and prints, per
shape, the median step time alone and in the mixed run, which program
serves it (a bucket or the symbolic step), and the run's graph counts.
Random init (--init random:0) and uniform random tokens: speed only.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

STEP = re.compile(r"^step (\d+) loss \S+ step_ms (\S+) tokens/s \S+ peak_mem (\d+)(?: shape (\S+))?$")


def run(kiln_run, artifact, data, batch, seq, steps, extra=()):
    cmd = [kiln_run, "train", artifact, "--init", "random:0", "--data", data, "--batch", batch,
           "--seq", seq, "--steps", str(steps), "--log-every", "1", *extra]
    print("$ " + " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"kiln-run exited {proc.returncode}: {proc.stderr.strip()}")
    rows, peak = [], 0
    for line in proc.stdout.splitlines():
        m = STEP.match(line)
        if m:
            rows.append((int(m.group(1)), float(m.group(2)), m.group(4)))
            peak = max(peak, int(m.group(3)))
    programs = re.search(r"^shapes: (.*)$", proc.stdout, re.M)
    graphs = re.search(r"^cuda graphs: (.*)$", proc.stdout, re.M)
    return rows, peak, programs.group(1) if programs else "", graphs.group(1) if graphs else ""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("artifact")
    parser.add_argument("--batch", default="8")
    parser.add_argument("--seq", required=True, help="comma list, e.g. 512,768,1024")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--kiln-run", default="build-rt/tools/kiln-run/kiln-run")
    parser.add_argument("--graph-cache", type=int, default=None,
                        help="kiln-run --graph-cache for the mixed run (1: patch every switch)")
    args = parser.parse_args()
    seqs = args.seq.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "tokens.bin")
        # Uniform tokens from a fixed LCG: no numpy needed, same file each run.
        x, out = 12345, bytearray()
        for _ in range(1 << 20):
            x = (1103515245 * x + 12345) % (1 << 31)
            out += (x % args.vocab).to_bytes(2, "little")
        open(data, "wb").write(out)
        alone = {}
        for seq in seqs:
            rows, peak, _, _ = run(args.kiln_run, args.artifact, data, args.batch, seq, args.steps)
            # The first steps capture graphs: the median of the rest.
            alone[seq] = (statistics.median(ms for _, ms, _ in rows[3:]), peak)
        extra = ["--graph-cache", str(args.graph_cache)] if args.graph_cache else []
        rows, peak, programs, graphs = run(args.kiln_run, args.artifact, data, args.batch,
                                           args.seq, args.steps, extra)
    mixed = {}
    for step, ms, shape in rows:
        if step > len(seqs):  # after each shape's first (capturing) step
            mixed.setdefault(shape.split("seq=")[1], []).append(ms)
    print(f"\nprograms: {programs}\ngraphs (mixed run): {graphs}")
    print(f"peak memory: mixed run {peak / 2**30:.2f} GiB; alone " +
          ", ".join(f"seq {s} {alone[s][1] / 2**30:.2f} GiB" for s in seqs))
    print("| seq | alone: median step ms | mixed (switching every step): median step ms |")
    print("|---|---|---|")
    for seq in seqs:
        print(f"| {seq} | {alone[seq][0]:.2f} | {statistics.median(mixed[seq]):.2f} |")


if __name__ == "__main__":
    main()
