#!/usr/bin/env python3
"""GPU checks of kiln-run's step execution against references made on the
compiler machine by `scripts/gpu-step-check.sh prepare` (python3 + numpy +
onnx only). Usage: step_check.py CASE DATA_DIR KILN_RUN

  fp32-grads  Llama fp32, SGD lr=1 (new = old - grad): the first step's loss
              matches the fixture's output_0.pb within 1e-4 relative and
              every gradient grad/*.pb within 1e-4 * max|grad| (plus one
              fp32 ulp of the parameter: the gradient is read as p0 - p1).
  fp32-adamw  Llama fp32, AdamW: the loss of steps 1..3 matches
              `kiln interp --steps 3` within 1e-4 relative; parameters
              within 5e-4 absolute (Adam's normalization magnifies
              rounding-level gradients, see test/Autodiff/fixture-adamw.test).
  graphs-off  The same three AdamW steps without CUDA Graphs: losses agree
              with the graph run within 1e-5 relative.
  bf16-lora   Llama bf16 + LoRA, 100 steps on the fixture's tokens: every
              loss finite, the last ten average below the first ten.
  lora-k-concat  The bf16 + LoRA step compiled with --lora-k-concat (one GEMM
              per frozen + adapter product, concatenations written in place:
              GEMM leading dimensions, column views, kernels storing at a
              row stride), the same 100 steps: step 1's loss within 2e-3
              relative of bf16-lora's (B = 0: only bf16 rounding differs),
              every loss within 5e-2 and the last ten's mean within 2e-2.
  lora-k-concat-grads  fp32 and bf16 LoRA with SGD lr=1 from the same
              nonzero adapters (the init's A, random B), one step on the
              fixture's inputs, plain against --lora-k-concat (padded frozen
              weights) and against --lora-group-frozen too (q/k/v's and
              gate/up's frozen weights in one buffer, one input-gradient
              GEMM each): the losses within 1e-5 (fp32) / 2e-3 (bf16) relative,
              every adapter gradient (old - new, --save-adapters) nonzero and
              within 1e-4 of its norm in fp32; in bf16 no farther from the
              fp32 plain gradient than 1.5x the plain bf16 one + 1e-3.
  qlora       The same with NF4-quantized frozen weights (init program).
  qlora-dq    The same with --double-quant (the absmax as 8-bit codes, the
              8-bit decode fused into the NF4 dequantize); its first loss
              within 1e-2 relative of qlora's (same weights and seed: only
              the absmax's 8-bit rounding differs).
  shapes      Llama fp32 AdamW compiled with --dynamic and --buckets seq=16,
              run at --seq 8,16,24,8 in one process with CUDA Graphs (seq
              16 runs the bucket; 8 and 24 the symbolic step; again with one
              executable graph per program, patched or re-instantiated for
              each new shape: the same losses): every loss and the final
              parameters match a chain of one-shape runs without graphs
              (--resume) within 1e-5 relative; the bucket's step 2 matches
              the bucket-free artifact's within 1e-5.
"""
import itertools
import json
import os
import re
import struct
import subprocess
import sys

import numpy as np
import onnx
from onnx import numpy_helper

case, data, kiln_run = sys.argv[1], sys.argv[2], sys.argv[3]
work = os.path.join(data, "runs", case)
os.makedirs(work, exist_ok=True)
fixture = os.path.join(data, "fixture")
failures = []


def check(ok, message):
    print(("ok   " if ok else "FAIL ") + message)
    if not ok:
        failures.append(message)


def train(artifact, *extra, seq="16", keep=None):
    cmd = [kiln_run, "train", os.path.join(data, artifact), "--weights",
           os.path.join(data, "weights.safetensors"), "--batch", "2", "--seq", seq,
           "--log-every", "1", *extra]
    print("$ " + " ".join(cmd), flush=True)
    run = subprocess.run(cmd, capture_output=True, text=True)
    sys.stdout.write(run.stdout)
    sys.stderr.write(run.stderr)
    if run.returncode != 0:
        sys.exit(f"FAIL kiln-run exited {run.returncode}")
    if keep is not None:
        keep.append(run.stdout)
    losses = {}
    for line in run.stdout.splitlines():
        m = re.match(r"step (\d+) loss (\S+) step_ms (\S+) tokens/s (\S+) peak_mem (\d+)( shape \S+)?$",
                     line)
        if m:
            losses[int(m.group(1))] = float(m.group(2))
    return losses


def read_safetensors(path):
    """name -> float32 array (F32, F16, BF16) of a safetensors file."""
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    body = raw[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        chunk = body[a:b]
        if info["dtype"] == "F32":
            v = np.frombuffer(chunk, dtype="<f4").astype(np.float32)
        elif info["dtype"] == "F16":
            v = np.frombuffer(chunk, dtype="<f2").astype(np.float32)
        elif info["dtype"] == "BF16":
            v = (np.frombuffer(chunk, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            sys.exit(f"FAIL {path}: dtype {info['dtype']} of '{name}'")
        out[name] = v.reshape(info["shape"])
    return out


def write_safetensors(path, tensors):
    """float32 tensors as an F32 safetensors file."""
    header, offset, blobs = {}, 0, []
    for name in sorted(tensors):
        data = np.ascontiguousarray(tensors[name], dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def fixed_inputs():
    return ["--input", "input_ids=" + os.path.join(data, "inputs", "input_ids.bin"),
            "--input", "labels=" + os.path.join(data, "inputs", "labels.bin")]


def read_pb(path):
    tensor = onnx.TensorProto()
    with open(path, "rb") as f:
        tensor.ParseFromString(f.read())
    return numpy_helper.to_array(tensor)


def read_safetensors(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack_from("<Q", raw, 0)
    header = json.loads(raw[8:8 + n])
    types = {"F32": "<f4", "F64": "<f8", "F16": "<f2", "I64": "<i8", "I32": "<i4", "U8": "u1",
             "BOOL": "u1", "I8": "i1", "U16": "<u2", "I16": "<i2", "U32": "<u4", "U64": "<u8"}
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        if info["dtype"] == "BF16":
            bits = np.frombuffer(raw[8 + n + begin:8 + n + end], "<u2").astype(np.uint32) << 16
            out[name] = bits.view(np.float32).reshape(info["shape"])
        else:
            out[name] = np.frombuffer(raw[8 + n + begin:8 + n + end],
                                      types[info["dtype"]]).reshape(info["shape"])
    return out


def interp_losses():
    losses = {}
    for line in open(os.path.join(data, "interp", "log.txt")):
        m = re.match(r"step (\d+): loss (\S+)", line)
        if m:
            losses[int(m.group(1))] = float(m.group(2))
    return losses


if case == "fp32-grads":
    ckpt = os.path.join(work, "step1.safetensors")
    losses = train("llama_fp32_sgd.kiln", "--steps", "1", "--lr", "1", "--save", ckpt,
                   *fixed_inputs())
    ref = float(read_pb(os.path.join(fixture, "output_0.pb")))
    rel = abs(losses[1] - ref) / abs(ref)
    check(rel <= 1e-4, f"step 1 loss {losses[1]:.7f} vs fixture {ref:.7f} (rel {rel:.2e})")
    before = read_safetensors(os.path.join(data, "weights.safetensors"))
    after = read_safetensors(ckpt)
    grads = sorted(os.listdir(os.path.join(fixture, "grad")))
    check(len(grads) > 0, f"{len(grads)} reference gradients")
    for file in grads:
        name = file[:-3]
        g_ref = read_pb(os.path.join(fixture, "grad", file)).astype(np.float64)
        key = "params/" + name
        if key not in after:
            check(False, f"{name}: not in the checkpoint")
            continue
        p0 = before[name].reshape(g_ref.shape)
        g = p0.astype(np.float64) - after[key].reshape(g_ref.shape).astype(np.float64)
        scale = max(np.abs(g_ref).max(), 1e-30)
        # p1 = p0 - g is rounded to fp32: reading g back as p0 - p1 costs up
        # to one ulp of p1 (about p0's) on top of the gradient's own error.
        ulp = np.spacing(np.abs(p0).astype(np.float32)).astype(np.float64)
        excess = np.abs(g - g_ref) - (1e-4 * scale + ulp)
        err = np.abs(g - g_ref).max()
        check(excess.max() <= 0, f"grad {name}: max err {err:.3e} (tol 1e-4*max|grad| = "
                                 f"{1e-4 * scale:.3e} + 1 ulp of the parameter)")
elif case in ("fp32-adamw", "graphs-off"):
    extra = ["--graphs", "off"] if case == "graphs-off" else []
    ckpt = os.path.join(work, "step3.safetensors")
    losses = train("llama_fp32_adamw.kiln", "--steps", "3", "--save", ckpt, *extra,
                   *fixed_inputs())
    ref = interp_losses()
    for step in (1, 2, 3):
        rel = abs(losses[step] - ref[step]) / abs(ref[step])
        check(rel <= 1e-4, f"step {step} loss {losses[step]:.7f} vs interp {ref[step]:.7f} "
                           f"(rel {rel:.2e})")
    after = read_safetensors(ckpt)
    params_dir = os.path.join(data, "interp", "params")
    worst = 0.0
    for file in sorted(os.listdir(params_dir)):
        name = file[:-3]
        p_ref = read_pb(os.path.join(params_dir, file))
        p = after.get("params/" + name)
        if p is None:
            check(False, f"{name}: not in the checkpoint")
            continue
        worst = max(worst, float(np.abs(p.reshape(p_ref.shape) - p_ref).max()))
    check(worst <= 5e-4, f"parameters after 3 steps: max |gpu - interp| {worst:.3e}")
    if case == "graphs-off":
        on = os.path.join(data, "runs", "fp32-adamw", "losses.json")
        if os.path.exists(on):
            with_graphs = {int(k): v for k, v in json.load(open(on)).items()}
            for step in (1, 2, 3):
                rel = abs(losses[step] - with_graphs[step]) / abs(with_graphs[step])
                check(rel <= 1e-5, f"step {step}: graphs off {losses[step]:.7f} vs on "
                                   f"{with_graphs[step]:.7f}")
    json.dump(losses, open(os.path.join(work, "losses.json"), "w"))
elif case in ("bf16-lora", "lora-k-concat", "qlora", "qlora-dq"):
    artifact = {"bf16-lora": "llama_bf16_lora.kiln", "qlora": "llama_bf16_qlora.kiln",
                "lora-k-concat": "llama_bf16_lora_kconcat.kiln",
                "qlora-dq": "llama_bf16_qlora_dq.kiln"}[case]
    losses = train(artifact, "--steps", "100", "--data", os.path.join(data, "inputs", "tokens.bin"),
                   "--seed", "1")
    values = [losses[s] for s in sorted(losses)]
    check(len(values) == 100, f"{len(values)} logged steps")
    check(all(np.isfinite(values)), "every loss finite")
    first, last = np.mean(values[:10]), np.mean(values[-10:])
    check(last < first, f"mean loss steps 1-10 {first:.4f} > steps 91-100 {last:.4f}")
    os.makedirs(work, exist_ok=True)
    json.dump(losses, open(os.path.join(work, "losses.json"), "w"))
    lora = os.path.join(data, "runs", "bf16-lora", "losses.json")
    if case == "lora-k-concat":
        check(os.path.exists(lora), "the bf16-lora case's losses (run it first)")
        if os.path.exists(lora):
            ref = {int(k): v for k, v in json.load(open(lora)).items()}
            rel = abs(losses[1] - ref[1]) / abs(ref[1])
            check(rel <= 2e-3, f"step 1: k-concat {losses[1]:.6f} vs {ref[1]:.6f} (rel {rel:.2e})")
            worst = max(abs(losses[s] - ref[s]) / abs(ref[s]) for s in ref if s in losses)
            check(worst <= 5e-2, f"largest relative loss difference {worst:.2e}")
            tail = abs(np.mean(values[-10:]) - np.mean([ref[s] for s in sorted(ref)][-10:]))
            check(tail <= 2e-2 * abs(np.mean([ref[s] for s in sorted(ref)][-10:])),
                  f"steps 91-100: mean losses differ by {tail:.4f}")
    plain = os.path.join(data, "runs", "qlora", "losses.json")
    if case == "qlora-dq":
        check(os.path.exists(plain), "the qlora case's losses (run it first)")
        if os.path.exists(plain):
            nf4 = {int(k): v for k, v in json.load(open(plain)).items()}
            rel = abs(losses[1] - nf4[1]) / abs(nf4[1])
            check(rel <= 1e-2, f"step 1: double-quantized {losses[1]:.6f} vs fp32 absmax "
                               f"{nf4[1]:.6f} (rel {rel:.2e})")
elif case == "lora-k-concat-grads":
    # The K-concatenated step (padded frozen weights, adapter blocks written
    # into them, in-place concatenations) against the plain LoRA step from
    # the same nonzero adapters: SGD lr=1, one step on fixed inputs, the
    # gradient of every adapter tensor is old - new (--save-adapters).
    import shutil
    rng = np.random.default_rng(7)
    results = {}
    for precision in ("fp32", "bf16"):
        init = os.path.join(work, f"init_{precision}")
        train(f"llama_{precision}_lora_sgd.kiln", "--steps", "0", "--save-adapters", init,
              *fixed_inputs())
        start = os.path.join(work, f"start_{precision}")
        os.makedirs(start, exist_ok=True)
        shutil.copy(os.path.join(init, "adapter_config.json"), start)
        tensors = read_safetensors(os.path.join(init, "adapter_model.safetensors"))
        # B starts at zero in PEFT's init: nonzero B makes every adapter
        # product and its input gradient (the padded weights' columns) count.
        for name in sorted(tensors):
            if "lora_B" in name:
                tensors[name] = (0.05 * rng.standard_normal(tensors[name].shape)).astype(np.float32)
        write_safetensors(os.path.join(start, "adapter_model.safetensors"), tensors)
        for kind in ("plain", "kconcat", "group"):
            artifact = {"plain": f"llama_{precision}_lora_sgd.kiln",
                        "kconcat": f"llama_{precision}_lora_kconcat_sgd.kiln",
                        "group": f"llama_{precision}_lora_group_sgd.kiln"}[kind]
            after = os.path.join(work, f"after_{precision}_{kind}")
            losses = train(artifact, "--steps", "1", "--lr", "1", "--adapters", start,
                           "--save-adapters", after,
                           *fixed_inputs())
            new = read_safetensors(os.path.join(after, "adapter_model.safetensors"))
            grads = {n: tensors[n].astype(np.float64) - new[n].astype(np.float64) for n in tensors}
            results[precision, kind] = (losses.get(1), grads)
    for (precision, tol), kind in itertools.product((("fp32", 1e-4), ("bf16", None)),
                                                    ("kconcat", "group")):
        (lp, gp), (lk, gk) = results[precision, "plain"], results[precision, kind]
        check(lp is not None and lk is not None, f"{precision}: both steps logged a loss")
        if lp is None or lk is None:
            continue
        rel = abs(lk - lp) / abs(lp)
        check(rel <= (1e-5 if precision == "fp32" else 2e-3),
              f"{precision}: loss {kind} {lk:.7f} vs plain {lp:.7f} (rel {rel:.2e})")
        check(sorted(gp) == sorted(gk) and len(gp) > 0, f"{precision}: {len(gp)} adapter tensors")
        worst = 0.0
        for name in sorted(gp):
            norm = np.linalg.norm(gp[name])
            check(norm > 0, f"{precision}: {name} has a nonzero gradient")
            if precision == "fp32":
                err = np.linalg.norm(gk[name] - gp[name]) / max(norm, 1e-30)
                worst = max(worst, err)
                if err > tol:
                    check(False, f"fp32: {name}: {kind} gradient differs by {err:.2e} of its norm")
            else:
                # bf16: no farther from the fp32 plain step's gradient than the
                # plain bf16 step is (1.5x + 1e-3), the numerics policy.
                ref = results["fp32", "plain"][1][name]
                rn = max(np.linalg.norm(ref), 1e-30)
                plain, kcat = np.linalg.norm(gp[name] - ref) / rn, np.linalg.norm(gk[name] - ref) / rn
                worst = max(worst, kcat / max(plain, 1e-12))
                if kcat > 1.5 * plain + 1e-3:
                    check(False, f"bf16: {name}: {kind} {kcat:.2e} from fp32, plain bf16 {plain:.2e}")
        print(f"{precision} {kind}: worst gradient " +
              (f"difference {worst:.2e} of the norm" if precision == "fp32"
               else f"error ratio {kind} / plain {worst:.2f}"))
elif case == "shapes":
    tokens = ["--data", os.path.join(data, "inputs", "tokens.bin"), "--seed", "3"]
    schedule = ["8", "16", "24", "8"]
    out = []
    multi_ckpt = os.path.join(work, "multi.safetensors")
    multi = train("llama_fp32_adamw_buckets.kiln", "--steps", "4", "--save", multi_ckpt,
                  *tokens, seq=",".join(schedule), keep=out)
    check("step/main__seq_16" in out[0], "seq 16 runs the bucket program")
    m = re.search(r"cuda graphs: (\d+) captured, (\d+) instantiated, (\d+) patched", out[0])
    check(m is not None and m.groups() == ("3", "3", "0"),
          "graphs: 3 captured and instantiated (seq 8, 16, 24), seq 8 replayed: " +
          (m.group(0) if m else "no graph line"))
    # One executable graph per program: seq 24 and seq 8 again reuse the
    # symbolic step's, patched when the topology allows, else instantiated.
    single = train("llama_fp32_adamw_buckets.kiln", "--steps", "4", "--graph-cache", "1",
                   *tokens, seq=",".join(schedule), keep=out)
    m = re.search(r"cuda graphs: (\d+) captured, (\d+) instantiated, (\d+) patched", out[1])
    check(m is not None and m.group(1) == "3" and int(m.group(2)) + int(m.group(3)) == 4,
          "--graph-cache 1: 3 captured, instantiated + patched = 4: " +
          (m.group(0) if m else "no graph line"))
    for step in range(1, 5):
        # Atomic accumulations make runs differ in the last bits.
        rel = abs(single[step] - multi[step]) / abs(multi[step])
        check(rel <= 1e-6, f"step {step}: --graph-cache 1 loss {single[step]:.7f} vs the "
                           f"default's {multi[step]:.7f} (rel {rel:.2e})")
    # One shape per process, no graphs, each resuming the last.
    chain, previous = {}, None
    for step, seq in enumerate(schedule, start=1):
        ckpt = os.path.join(work, f"chain{step}.safetensors")
        resume = ["--resume", previous] if previous else []
        chain.update(train("llama_fp32_adamw_buckets.kiln", "--steps", "1", "--save", ckpt,
                           "--graphs", "off", *resume, *tokens, seq=seq))
        previous = ckpt
    for step in range(1, 5):
        rel = abs(multi[step] - chain[step]) / abs(chain[step])
        check(rel <= 1e-5, f"step {step} (seq {schedule[step - 1]}): one run {multi[step]:.7f} "
                           f"vs one-shape runs {chain[step]:.7f} (rel {rel:.2e})")
    a, b = read_safetensors(multi_ckpt), read_safetensors(previous)
    worst = max(float(np.abs(a[k].astype(np.float64) - b[k]).max() /
                      max(np.abs(b[k]).max(), 1e-30)) for k in b if k.startswith(("params/", "state/")))
    check(worst <= 1e-5, f"params and state after 4 steps: max rel diff {worst:.2e}")
    # The bucket program against the symbolic step at seq 16.
    plain = train("llama_fp32_adamw.kiln", "--steps", "1", "--graphs", "off", "--resume",
                  os.path.join(work, "chain1.safetensors"), *tokens, seq="16")
    rel = abs(plain[2] - chain[2]) / abs(chain[2])
    check(rel <= 1e-5, f"step 2 at seq 16: bucket {chain[2]:.7f} vs symbolic step "
                       f"{plain[2]:.7f} (rel {rel:.2e})")
else:
    sys.exit(f"unknown case {case}")

if failures:
    sys.exit(f"{len(failures)} check(s) failed")
print("all checks passed")
