#!/usr/bin/env python3
"""The PyTorch + PEFT side of scripts/gpu-sft-check.sh (supervised
fine-tuning on packed documents with masked prompts, issue #19).

  sft_reference.py make-data --out DIR [--vocab 2048 --train 2000 --eval 200 --seed 0]
      synthetic SFT JSONL (DIR/train.jsonl, DIR/eval.jsonl): a random
      prompt, a separator, the prompt reversed as the completion, EOS;
      labels -100 on the prompt and separator (scripts/kiln_dataset.py
      converts them)
  sft_reference.py pytorch --model DIR --adapters INIT --batches DIR --steps 100
      --lr 2e-4 --warmup 10 [--eval-batches DIR --eval-every 20] --json OUT
      the exported Hugging Face model (DIR/config.json + model.safetensors)
      with Kiln's initial LoRA adapters (PeftModel, trainable; bf16 frozen
      weights, fp32 adapters, --base-dtype float32 for an fp32 base), AdamW
      under bf16 autocast and transformers' cosine schedule with warmup, trained
      on exactly the micro-batches kiln-run feeds (`kiln-run data-stats
      --dump`): step t reads micro-batch t-1; loss = cross entropy over the
      counted labels (already the next tokens), position_ids given and no
      attention_mask, so attention stays within each packed document
  sft_reference.py loss --model DIR --adapters INIT --batches DIR
      the loss of the dumped micro-batch 0 with those adapters (no update)
  sft_reference.py compare --kiln LOG --pytorch JSON [--kiln-log-file JSONL]
      [--tolerance 0.01]
      every step's loss within the tolerance (bench/loss_curve.py's
      comparison); eval losses and learning rates compared where Kiln's
      --log-file records them
"""
import argparse
import json
import math
import os
import pathlib
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))

ADAMW = {"betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0}


def cmd_make_data(args):
    rng = random.Random(args.seed)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    eos, sep = 1, 2
    for name, count in (("train", args.train), ("eval", args.eval)):
        with open(out / f"{name}.jsonl", "w") as f:
            for _ in range(count):
                prompt = [rng.randrange(3, args.vocab) for _ in range(rng.randint(8, 60))]
                completion = prompt[::-1][:rng.randint(4, 40)] + [eos]
                ids = prompt + [sep] + completion
                labels = [-100] * (len(prompt) + 1) + completion
                f.write(json.dumps({"input_ids": ids, "labels": labels}) + "\n")
    print(f"wrote {out}/train.jsonl ({args.train}) and eval.jsonl ({args.eval}), vocab "
          f"{args.vocab}")
    return 0


def load_batches(directory, count=None):
    import numpy as np
    import torch

    directory = pathlib.Path(directory)
    index = [json.loads(line) for line in (directory / "batches.jsonl").read_text().splitlines()]
    if count is not None and len(index) < count:
        sys.exit(f"sft_reference: {directory} holds {len(index)} micro-batches, need {count}")
    batches = []
    for entry in index[:count]:
        shape = (entry["batch"], entry["seq"])
        tensors = {}
        for name in ("input_ids", "position_ids", "labels", "attention_mask"):
            path = directory / f"{entry['index']}.{name}.bin"
            if path.exists():
                tensors[name] = torch.from_numpy(np.fromfile(path, "<i8").reshape(shape))
        batches.append((tensors, entry["counted"]))
    return batches


def summed_loss(model, tensors, device):
    import torch

    inputs = {k: v.to(device) for k, v in tensors.items() if k != "labels"}
    labels = tensors["labels"].to(device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.startswith("cuda")):
        logits = model(**inputs, use_cache=False).logits
    return torch.nn.functional.cross_entropy(
        logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100,
        reduction="sum")


def load_model(model_dir, adapters, device, base_dtype):
    """The export's Hugging Face model with `adapters` (PeftModel,
    trainable) as a PEFT user trains it in bf16: frozen base weights in
    `base_dtype` (bf16 by default, as Kiln's --precision=bf16 stores them and
    bench/hf_peft.py loads them; with fp32 the residual stream and norms
    would run in fp32 under autocast, which Kiln's step does not), adapters
    in fp32 (PEFT's autocast_adapter_dtype), the forward under autocast."""
    import torch
    import transformers
    from peft import PeftModel
    from safetensors.torch import load_file

    model_dir = pathlib.Path(model_dir)
    config = transformers.AutoConfig.from_pretrained(model_dir)
    base = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = base.load_state_dict(load_file(model_dir / "model.safetensors"),
                                               strict=False)
    if unexpected:
        sys.exit(f"sft_reference: weights the model lacks: {unexpected}")
    base = base.to(dtype=getattr(torch, base_dtype))
    model = PeftModel.from_pretrained(base, adapters, is_trainable=True).to(device)
    for name, p in model.named_parameters():
        if p.requires_grad and p.dtype != torch.float32:
            sys.exit(f"sft_reference: adapter {name} is {p.dtype}, expected fp32")
    return model


def cmd_loss(args):
    """The loss of one dumped micro-batch with the given adapters, no
    update: what kiln-run's step 1 on that batch (--input) must print."""
    import torch

    model = load_model(args.model, args.adapters, args.device, args.base_dtype)
    (tensors, counted), = load_batches(args.batches, 1)
    with torch.no_grad():
        loss = summed_loss(model, tensors, args.device).item() / counted
    print(f"pytorch+peft loss of micro-batch 0: {loss:.7f}")
    return 0


def cmd_pytorch(args):
    import torch
    import transformers

    torch.manual_seed(0)
    model = load_model(args.model, args.adapters, args.device, args.base_dtype)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=args.lr, **ADAMW)
    schedule = (transformers.get_cosine_schedule_with_warmup(optimizer, args.warmup, args.steps)
                if args.schedule == "cosine" else
                transformers.get_constant_schedule_with_warmup(optimizer, args.warmup))
    train = load_batches(args.batches, args.steps)
    evals = load_batches(args.eval_batches) if args.eval_batches else []
    losses, lrs, eval_losses = [], [], {}
    for step in range(1, args.steps + 1):
        tensors, counted = train[step - 1]
        lrs.append(optimizer.param_groups[0]["lr"])
        loss = summed_loss(model, tensors, args.device) / counted
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        if evals and args.eval_every and step % args.eval_every == 0:
            model.eval()
            with torch.no_grad():
                total = sum(summed_loss(model, t, args.device).item() for t, _ in evals)
            eval_losses[step] = total / sum(c for _, c in evals)
            model.train()
        print(f"step {step} loss {losses[-1]:.7f} lr {lrs[-1]:.3e}"
              + (f" eval {eval_losses[step]:.7f}" if step in eval_losses else ""))
    pathlib.Path(args.json).write_text(json.dumps(
        {"losses": losses, "lr": lrs, "eval": eval_losses, "steps": args.steps}) + "\n")
    return 0


def cmd_compare(args):
    from loss_curve import compare, parse_kiln_log

    reference = json.loads(pathlib.Path(args.pytorch).read_text())
    kiln = parse_kiln_log(pathlib.Path(args.kiln).read_text())
    ok, rows, problems, worst = compare(kiln, reference["losses"], args.tolerance,
                                        reference["steps"])
    for t, k, p, rel in rows:
        if t == 1 or t % 10 == 0 or (rel is not None and rel > args.tolerance):
            print(f"step {t:4d} kiln {k} pytorch {p:.6f} rel {rel}")
    # Eval losses and the learning rate of each step, where the loop's
    # --log-file (JSON lines) records them.
    if args.kiln_log_file and os.path.exists(args.kiln_log_file):
        records = [json.loads(line) for line in open(args.kiln_log_file) if line.strip()]
        seen = 0
        for r in records:
            step = r.get("step")
            if "eval_loss" in r and str(step) in reference["eval"]:
                want = reference["eval"][str(step)]
                rel = abs(r["eval_loss"] - want) / abs(want)
                seen += 1
                print(f"eval at step {step}: kiln {r['eval_loss']:.6f} pytorch {want:.6f} rel "
                      f"{rel:.2e}")
                if rel > args.tolerance:
                    problems.append(f"eval at step {step}: relative difference {rel:.3g}")
            if "lr" in r and isinstance(step, int) and 1 <= step <= len(reference["lr"]):
                want = reference["lr"][step - 1]
                if not math.isclose(r["lr"], want, rel_tol=1e-5, abs_tol=1e-12):
                    problems.append(f"step {step}: kiln's lr {r['lr']} is not transformers' "
                                    f"cosine-with-warmup {want}")
        if not seen:
            problems.append("no eval_loss in Kiln's log file (--eval-data/--eval-every given?)")
    else:
        print("note: no Kiln --log-file to compare eval losses and learning rates with")
    for p in problems:
        print(f"FAIL: {p}")
    good = ok and not problems
    print(f"{'OK' if good else 'FAIL'}: {len(rows)} steps, worst relative difference "
          f"{worst[0]:.3e} at step {worst[1]} (tolerance {args.tolerance})")
    return 0 if good else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("make-data")
    p.add_argument("--out", required=True)
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--train", type=int, default=2000)
    p.add_argument("--eval", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p = sub.add_parser("pytorch")
    p.add_argument("--model", required=True)
    p.add_argument("--adapters", required=True)
    p.add_argument("--batches", required=True)
    p.add_argument("--eval-batches")
    p.add_argument("--eval-every", type=int, default=0)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--lr", type=float, default=2e-4)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--schedule", choices=["cosine", "constant"], default="cosine")
    p.add_argument("--device", default="cuda")
    p.add_argument("--base-dtype", choices=["bfloat16", "float32"], default="bfloat16")
    p.add_argument("--json", required=True)
    p = sub.add_parser("loss")
    p.add_argument("--model", required=True)
    p.add_argument("--adapters", required=True)
    p.add_argument("--batches", required=True, help="a --dump directory: micro-batch 0")
    p.add_argument("--device", default="cuda")
    p.add_argument("--base-dtype", choices=["bfloat16", "float32"], default="bfloat16")
    p = sub.add_parser("compare")
    p.add_argument("--kiln", required=True)
    p.add_argument("--pytorch", required=True)
    p.add_argument("--kiln-log-file")
    p.add_argument("--tolerance", type=float, default=0.01)
    args = parser.parse_args()
    return {"make-data": cmd_make_data, "pytorch": cmd_pytorch, "compare": cmd_compare,
            "loss": cmd_loss}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
