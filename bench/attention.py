#!/usr/bin/env python3
"""Attention microbenchmark: Kiln's attention kernels beside PyTorch's flash
and cuDNN backends, on the same inputs, in one run (issue 18, item 5).

Two phases, because the compiler runs where MLIR is and the kernels where
the GPU is:

  bench/attention.py prepare [--out bench/out/attn] [--shapes small,1b,8b]
      (CPU machine with a kiln build): per shape, the graph IR of one causal
      bf16 attention and its gradient (batch and seq symbolic), through the
      kernel pipeline and `kiln compile --emit=cuda --kernel-check=...,
      reference=none`: the kernels a model's attention gets, and their case
      files without data (the GPU side makes it).

  bench/attention.py run [--out bench/out/attn] [--kernel-check PATH]
      (GPU machine): per shape, fresh random bf16 q, k, v, dO; a float64
      reference (O, dQ, dK, dV) on the GPU; PyTorch SDPA with the flash and
      the cuDNN backend; Kiln's forward and backward kernels through
      kiln-kernel-check (--inputs/--dump/--time). Prints TFLOP/s (the
      FlashAttention convention: forward 4·b·h·s²·d/2 for causal, backward
      2.5× that) and each implementation's ‖out − ref‖/‖ref‖ with its ratio
      to the flash backend's, the numerics policy of docs/codegen.md: a
      ratio above 1.5 fails. Writes OUT/results.json. With --fa90 PATH (the
      harness bench/fa90/run.sh builds, bench/fa90/fa90), also Kiln's sm_90a
      forward (lib/Codegen/cuda/FlashAttention90.cuh: the kernels/kiln_fa90
      module the runtime runs on sm_90) on the same inputs: row "kiln sm90a
      fwd". Where the backward's harness (bench/fa90/backward.cu, built as
      fa90bwd) sits beside it, or --fa90-bwd names it, the row is "kiln
      sm90a" with Kiln's sm_90a backward too
      (lib/Codegen/cuda/FlashAttention90Backward.cuh: prepare, main and
      finish launches, timed together, after its own forward's O and lse).
      With --cudnn-harness PATH (bench/cudnnplans/run.sh build DIR makes
      DIR/cudnnplans), row "kiln cudnn": the cuDNN graphs kiln-run builds
      for its cuDNN implementation (runtime/lib/CudnnAttention.cpp, the
      heuristic's plan) on the same inputs, forward and backward.
"""
import argparse
import json
import math
import os
import pathlib
import subprocess
import sys

# (batch, heads, kv_heads, seq, head_dim): the bench's small and 1b configs
# (bench/configs.py) and an 8B-like hd128 s4096 shape (Llama 3 8B's heads).
SHAPES = {
    "small": (8, 12, 12, 1024, 64),
    "1b": (4, 32, 8, 2048, 64),
    "8b": (2, 32, 8, 4096, 128),
    # For a CPU test of the prepare phase (bench/test_attention.py).
    "tiny": (1, 4, 2, 128, 64),
}
POLICY_RATIO = 1.5
ROOT = pathlib.Path(__file__).resolve().parent.parent


def flops(shape, backward=False):
    b, h, _, s, d = shape
    forward = 4 * b * h * s * s * d / 2  # causal: half the score matrix
    return forward * 2.5 if backward else forward


# --------------------------------------------------------------------------
# prepare (CPU)


def attention_ir(shape):
    """The forward and the backward of one causal bf16 attention as graph IR,
    batch and seq symbolic: the kernels Kiln generates for a model's
    attention at these heads and head dim (test/Codegen/cuda-kernels.mlir
    has the same ops)."""
    _, h, kv, _, d = shape

    def t(heads):
        return f"tensor<?x{heads}x?x{d}xbf16, #kiln.dims<[b, s]>>"

    q, kvt = t(h), t(kv)
    return f"""func.func @fwd(%q: {q}, %k: {kvt}, %v: {kvt}) -> {q} {{
  %0 = kiln.attention %q, %k, %v {{causal}} : ({q}, {kvt}, {kvt}) -> {q}
  return %0 : {q}
}}
func.func @bwd(%q: {q}, %k: {kvt}, %v: {kvt}, %dy: {q}, %o: {q}) -> ({q}, {kvt}, {kvt}) {{
  %0:3 = kiln.attention_grad %q, %k, %v grad %dy out %o {{causal}} : ({q}, {kvt}, {kvt}, {q}, {q}) -> ({q}, {kvt}, {kvt})
  return %0#0, %0#1, %0#2 : {q}, {kvt}, {kvt}
}}
"""


def prepare(args):
    build = pathlib.Path(os.environ.get("KILN_BUILD", str(ROOT / "build")))
    out = pathlib.Path(args.out)
    for name in args.shapes.split(","):
        shape = SHAPES[name]
        b, _, _, s, _ = shape
        target = out / name
        target.mkdir(parents=True, exist_ok=True)
        graph, step = target / "attention.mlir", target / "attention-step.mlir"
        graph.write_text(attention_ir(shape))
        subprocess.run([str(build / "bin/kiln-opt"), str(graph), "--kiln-fuse",
                        "--kiln-lower-to-step", "-o", str(step)], check=True)
        subprocess.run([str(build / "bin/kiln"), "compile", str(step), "--emit=cuda",
                        "--arch=sm_90,sm_80", f"--kernel-check=b={b},s={s},reference=none",
                        "-o", str(target)], check=True)
        print(f"prepared {name} {shape} -> {target}")


# --------------------------------------------------------------------------
# run (GPU)


def parse_case(path):
    case = {"ins": [], "outs": [], "roles_in": {}, "roles_out": {}}
    for line in path.read_text().splitlines():
        words = line.split()
        if not words:
            continue
        if words[0] == "kernel":
            case["kernel"] = words[1]
        elif words[0] in ("in", "out"):
            case[words[0] + "s"].append((words[1], int(words[2]), words[3]))
        elif words[0] == "role":
            case["roles_" + words[1]][words[3]] = int(words[2])
    return case


def find_cases(directory):
    """The forward and backward attention kernels and the backward's narrowing
    launches (their fp32 dK/dV accumulators into the bf16 results)."""
    forward = backward = None
    narrow = []
    for case_dir in sorted((directory / "check").iterdir()):
        case = parse_case(case_dir / "case.txt")
        roles = case["roles_out"]
        if "dq" in roles or "dk" in roles:
            backward = case
        elif "o" in roles:
            forward = case
    if backward:
        narrow = [parse_case(d / "case.txt") for d in sorted((directory / "check").iterdir())
                  if d.name.startswith(backward["kernel"] + "_narrow")]
    if not forward or not backward:
        sys.exit(f"attention.py: {directory}: no attention forward/backward kernel cases "
                 "(need kiln's 'role' lines)")
    return forward, backward, narrow


def torch_dtype(name):
    import torch
    return {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[name]


def write_inputs(case, tensors, directory):
    """Every input of the case: the named ones from `tensors`, the rest zero."""
    import torch
    target = directory / case["kernel"]
    target.mkdir(parents=True, exist_ok=True)
    by_index = {i: role for role, i in case["roles_in"].items()}
    for i, (dtype, count, file) in enumerate(case["ins"]):
        role = by_index.get(i)
        if role is None:
            sys.exit(f"attention.py: {case['kernel']}: input {i} has no role")
        t = tensors[role].to(torch_dtype(dtype)).contiguous()
        assert t.numel() == count, (case["kernel"], role, t.shape, count)
        t.cpu().view(torch.uint8 if t.element_size() == 1 else
                     {2: torch.int16, 4: torch.int32}[t.element_size()]).numpy().tofile(target / file)


def read_output(case, role, directory, shape):
    import numpy as np
    import torch
    index = case["roles_out"][role]
    dtype, count, _ = case["outs"][index]
    raw = np.fromfile(directory / case["kernel"] / f"out{index}.bin",
                      dtype={"bf16": np.int16, "f16": np.float16, "f32": np.float32}[dtype])
    assert raw.size == count
    t = torch.from_numpy(raw)
    if dtype == "bf16":
        t = t.view(torch.bfloat16)
    return t.reshape(shape)


def run_kernel_check(tool, directory, inputs, dump, kernels, launches):
    cmd = [tool, str(directory), "--inputs", str(inputs), "--dump", str(dump),
           "--time", str(launches)] + kernels
    done = subprocess.run(cmd, capture_output=True, text=True)
    times = {}
    for line in done.stdout.splitlines():
        if line.startswith(("PASS ", "FAIL ")) and "median" in line:
            name = line.split()[1].rstrip(":")
            times[name] = float(line.split("median ")[1].split()[0])
    if done.returncode not in (0, 1) or len(times) != len(kernels):
        sys.exit(f"attention.py: kiln-kernel-check failed:\n{done.stdout}{done.stderr}")
    return times


def run_fa90(tool, shape, q, k, v, scratch, launches):
    """Kiln's sm_90a forward through its harness (`fa90 io ...`): O and the
    median time of `launches` launches."""
    import numpy as np
    import torch
    b, h, kv, s, d = shape
    scratch.mkdir(parents=True, exist_ok=True)
    paths = [scratch / f"{n}.bin" for n in ("q", "k", "v", "o")]
    for t, path in zip((q, k, v), paths):
        t.contiguous().cpu().view(torch.int16).numpy().tofile(path)
    done = subprocess.run([tool, "io", str(b), str(h), str(kv), str(s), str(d)] +
                          [str(p) for p in paths] + [str(launches)],
                          capture_output=True, text=True)
    if done.returncode != 0 or not done.stdout.startswith("median "):
        sys.exit(f"attention.py: {tool} io failed:\n{done.stdout}{done.stderr}")
    raw = np.fromfile(paths[3], dtype=np.int16)
    assert raw.size == b * h * s * d
    o = torch.from_numpy(raw).view(torch.bfloat16).reshape(b, h, s, d).cuda()
    return o, float(done.stdout.split()[1])


def run_fa90_backward(tool, shape, q, k, v, do, scratch, launches):
    """Kiln's sm_90a forward and backward through the backward's harness
    (`fa90bwd B H KV S S D 1 q k v do DIR ITERS`): (O, dQ, dK, dV) and the
    median forward and backward times."""
    import numpy as np
    import torch
    b, h, kv, s, d = shape
    scratch.mkdir(parents=True, exist_ok=True)
    paths = [scratch / f"{n}.bin" for n in ("q", "k", "v", "do")]
    for t, path in zip((q, k, v, do), paths):
        t.contiguous().cpu().view(torch.int16).numpy().tofile(path)
    done = subprocess.run([tool, str(b), str(h), str(kv), str(s), str(s), str(d), "1"] +
                          [str(p) for p in paths] + [str(scratch), str(launches)],
                          capture_output=True, text=True)
    words = done.stdout.split()
    if done.returncode != 0 or len(words) < 5 or words[0] != "fwd":
        sys.exit(f"attention.py: {tool} failed:\n{done.stdout}{done.stderr}")

    def load(name, heads):
        raw = np.fromfile(scratch / f"{name}.bin", dtype=np.int16)
        assert raw.size == b * heads * s * d
        return torch.from_numpy(raw).view(torch.bfloat16).reshape(b, heads, s, d).cuda()

    outs = (load("o", h), load("dq", h), load("dk", kv), load("dv", kv))
    return outs, float(words[1]), float(words[4])


def rel_l2(x, ref):
    x = x.detach().double()
    return float((x - ref).norm() / ref.norm())


def cuda_time(fn, warmup=3, iters=20):
    import torch
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    times.sort()
    return times[len(times) // 2]


def reference(q, k, v, do, scale):
    """float64 attention and its gradients, one batch at a time."""
    import torch
    outs = [[], [], [], []]
    groups = q.shape[1] // k.shape[1]
    for i in range(q.shape[0]):
        qi, ki, vi = (t[i:i + 1].double().requires_grad_() for t in (q, k, v))
        kr, vr = ki.repeat_interleave(groups, 1), vi.repeat_interleave(groups, 1)
        s = qi @ kr.transpose(-1, -2) * scale
        n = s.shape[-1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1), -math.inf)
        o = torch.softmax(s, -1) @ vr
        dq, dk, dv = torch.autograd.grad(o, (qi, ki, vi), do[i:i + 1].double())
        for acc, t in zip(outs, (o.detach(), dq, dk, dv)):
            acc.append(t)
        del s, o
    return [torch.cat(t) for t in outs]


def torch_backend(backend, q, k, v, do):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    gqa = q.shape[1] != k.shape[1]
    qg, kg, vg = (t.detach().clone().requires_grad_() for t in (q, k, v))

    def forward():
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(qg, kg, vg, is_causal=True, enable_gqa=gqa)

    o = forward()
    dq, dk, dv = torch.autograd.grad(o, (qg, kg, vg), do)
    fwd_ms = cuda_time(forward)
    o_timed = forward()
    bwd_ms = cuda_time(lambda: torch.autograd.grad(o_timed, (qg, kg, vg), do, retain_graph=True))
    return (o, dq, dk, dv), fwd_ms, bwd_ms


def run(args):
    import torch
    from torch.nn.attention import SDPBackend

    out = pathlib.Path(args.out)
    tool = args.kernel_check
    results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
               "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
               "shapes": {}}
    failed = False
    names = [n for n in args.shapes.split(",") if (out / n / "check").is_dir()]
    for name in names:
        shape = SHAPES[name]
        b, h, kv, s, d = shape
        directory = out / name
        forward, backward, narrow = find_cases(directory)
        gen = torch.Generator(device="cuda").manual_seed(args.seed)
        q = torch.randn(b, h, s, d, device="cuda", generator=gen).bfloat16()
        k = torch.randn(b, kv, s, d, device="cuda", generator=gen).bfloat16()
        v = torch.randn(b, kv, s, d, device="cuda", generator=gen).bfloat16()
        do = torch.randn(b, h, s, d, device="cuda", generator=gen).bfloat16()
        scale = 1 / math.sqrt(d)
        ref = reference(q, k, v, do, scale)
        rows = {}
        for label, backend in (("torch flash", SDPBackend.FLASH_ATTENTION),
                               ("torch cudnn", SDPBackend.CUDNN_ATTENTION)):
            try:
                outs, fwd_ms, bwd_ms = torch_backend(backend, q, k, v, do)
            except RuntimeError as e:
                rows[label] = {"error": str(e).splitlines()[0]}
                continue
            rows[label] = {"fwd_ms": fwd_ms, "bwd_ms": bwd_ms,
                           "err": [rel_l2(x, r) for x, r in zip(outs, ref)]}
        # Kiln: the forward's output feeds the backward where it reads one.
        scratch = directory / "run"
        tensors = {"q": q, "k": k, "v": v, "do": do}
        write_inputs(forward, tensors, scratch / "in")
        kernels = [forward["kernel"]]
        times = run_kernel_check(tool, directory, scratch / "in", scratch / "out", kernels,
                                 args.launches)
        o = read_output(forward, "o", scratch / "out", (b, h, s, d))
        tensors["o"] = o.cuda()
        write_inputs(backward, tensors, scratch / "in")
        times.update(run_kernel_check(tool, directory, scratch / "in", scratch / "out",
                                      [backward["kernel"]], args.launches))
        dq = read_output(backward, "dq", scratch / "out", (b, h, s, d)).cuda()
        dk = read_output(backward, "dk", scratch / "out", (b, kv, s, d)).cuda()
        dv = read_output(backward, "dv", scratch / "out", (b, kv, s, d)).cuda()
        # What the narrowing launches do: round the fp32 accumulators once.
        dk, dv = dk.bfloat16(), dv.bfloat16()
        bwd_ms = times[backward["kernel"]]
        rows["kiln kernels"] = {"fwd_ms": times[forward["kernel"]], "bwd_ms": bwd_ms,
                                "err": [rel_l2(x, r) for x, r in
                                        zip((o.cuda(), dq, dk, dv), ref)],
                                "note": "backward: the tiled kernel alone (its fp32 "
                                        "accumulator fills and narrowing not timed)"}
        fa90_bwd = args.fa90_bwd or (args.fa90 and str(pathlib.Path(args.fa90).parent / "fa90bwd"))
        if fa90_bwd and d in (64, 128) and pathlib.Path(fa90_bwd).is_file():
            outs, fwd_ms, bwd_ms = run_fa90_backward(fa90_bwd, shape, q, k, v, do,
                                                     scratch / "fa90bwd", args.launches)
            rows["kiln sm90a"] = {"fwd_ms": fwd_ms, "bwd_ms": bwd_ms,
                                  "err": [rel_l2(x, r) for x, r in zip(outs, ref)],
                                  "note": "backward: prepare + main + finish"}
        elif args.fa90 and d in (64, 128):
            o90, fwd_ms = run_fa90(args.fa90, shape, q, k, v, scratch / "fa90", args.launches)
            rows["kiln sm90a fwd"] = {"fwd_ms": fwd_ms, "bwd_ms": None,
                                      "err": [rel_l2(o90, ref[0])],
                                      "note": "forward only (the backward is the tiled kernel)"}
        if args.cudnn_harness:
            outs, fwd_ms, bwd_ms = run_fa90_backward(args.cudnn_harness, shape, q, k, v, do,
                                                     scratch / "cudnn", args.launches)
            rows["kiln cudnn"] = {"fwd_ms": fwd_ms, "bwd_ms": bwd_ms,
                                  "err": [rel_l2(x, r) for x, r in zip(outs, ref)],
                                  "note": "kiln-run's cuDNN graphs (heuristic plan)"}
        flash = rows.get("torch flash", {}).get("err")
        print(f"\n{name}: b{b} h{h} kv{kv} s{s} d{d}, causal bf16")
        print(f"{'':14} {'fwd ms':>8} {'TFLOP/s':>8} {'bwd ms':>8} {'TFLOP/s':>8}   "
              f"{'err O':>8} {'err dQ':>8} {'err dK':>8} {'err dV':>8}  ratio to flash (max)")
        for label, row in rows.items():
            if "error" in row:
                print(f"{label:14} unavailable: {row['error']}")
                continue
            row["fwd_tflops"] = flops(shape) / row["fwd_ms"] / 1e9
            bwd = row["bwd_ms"] is not None
            row["bwd_tflops"] = flops(shape, True) / row["bwd_ms"] / 1e9 if bwd else None
            ratio = max(e / f for e, f in zip(row["err"], flash)) if flash else float("nan")
            row["ratio_to_flash"] = ratio
            verdict = ""
            if label.startswith("kiln"):
                ok = ratio <= POLICY_RATIO
                failed |= not ok
                verdict = "PASS" if ok else f"FAIL (> {POLICY_RATIO})"
            errs = " ".join(f"{e:8.2e}" for e in row["err"])
            bwd_text = (f"{row['bwd_ms']:8.3f} {row['bwd_tflops']:8.1f}" if bwd
                        else f"{'-':>8} {'-':>8}")
            errs += " " * (9 * (4 - len(row["err"])))
            print(f"{label:14} {row['fwd_ms']:8.3f} {row['fwd_tflops']:8.1f} "
                  f"{bwd_text}   {errs}  {ratio:5.2f} {verdict}")
        results["shapes"][name] = {"shape": shape, "rows": rows}
    (out / "results.json").write_text(json.dumps(results, indent=1))
    print(f"\n{results['device']}, torch {results['torch']}, CUDA {results['cuda']}, "
          f"cuDNN {results['cudnn']}; {'FAIL' if failed else 'PASS'}")
    return 1 if failed else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("phase", choices=["prepare", "run"])
    parser.add_argument("--out", default=str(ROOT / "bench/out/attn"))
    parser.add_argument("--shapes", default="small,1b,8b")
    parser.add_argument("--kernel-check",
                        default=str(ROOT / "build-rt/tools/kiln-kernel-check/kiln-kernel-check"))
    parser.add_argument("--launches", type=int, default=20)
    parser.add_argument("--fa90", help="bench/fa90's harness binary: time Kiln's sm_90a "
                        "forward too")
    parser.add_argument("--fa90-bwd", help="bench/fa90's backward harness (fa90bwd; default: "
                        "beside --fa90): time Kiln's sm_90a backward too")
    parser.add_argument("--cudnn-harness", help="bench/cudnnplans' binary: time kiln-run's "
                        "cuDNN attention graphs too (row 'kiln cudnn')")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.phase == "prepare":
        prepare(args)
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
