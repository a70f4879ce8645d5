#!/usr/bin/env python3
"""Hugging Face LlamaForCausalLM + PEFT LoRA, as users run them (issue #17).

The bench configs (configs.py) as transformers' own Llama (sdpa attention,
untied embeddings like bench/model.py) with PEFT's LoRA on q, k, v, o, gate,
up, down (configs.LORA_TARGETS, r and alpha of the config, no dropout).
bench.py's `--model hf` rows and scripts/gpu-hf-peft-check.sh use it.

  hf_peft.py config --config curve -o DIR/config.json
      the LlamaConfig of a bench config (what scripts/export_hf.py exports
      here; no torch needed)
  hf_peft.py init --config curve --seed 0 --out DIR
      DIR/model.safetensors (fp32, Hugging Face names: what `kiln-run train
      --weights` reads) and DIR/init_adapters (PEFT's own LoRA init,
      save_pretrained: what `kiln-run train --adapters` reads)
  hf_peft.py weights --config small --seed 0 --out DIR
      DIR/weights.safetensors (fp32, what bench.py --model hf trains from the
      same seed) and DIR/tokens.bin (bench/tokens.py's Markov stream), for
      the Kiln column of the HF rows
  hf_peft.py train --config curve --dir DIR --data tokens.bin --steps 100 --json OUT
      PyTorch + PEFT from DIR's weights and init adapters on kiln-run's token
      windows: per-step losses (loss_curve.py compare reads the JSON)
  hf_peft.py eval --config curve --weights W --adapters DIR --data tokens.bin
      --step T --kiln LOG [--tolerance 1e-3]
      PEFT loads DIR (PeftModel.from_pretrained) onto the model from W; its
      loss on step T's windows against the loss kiln-run logged for step T;
      --checkpoint CKPT: the adapters must equal the checkpoint's params;
      --same-batch-kiln LOG: kiln-run's loss of the same adapter files on
      the same batch; --noise-floor: the same adapters in fp32
  hf_peft.py window --config curve --data tokens.bin --step T --out DIR
      step T's (inputs, labels) as raw int64 files for kiln-run --input

Precision everywhere (what bench/curve.sh validated for the hand model):
bf16 base weights, fp32 adapters (PEFT's autocast_adapter_dtype), the
forward under torch.autocast(bfloat16), fp32 AdamW state (fused on CUDA).
"""

import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from configs import CONFIGS, LORA_TARGETS  # noqa: E402

PEFT_PREFIX = "base_model.model."


class HfError(Exception):
    """A problem reported as one line and exit code 1."""


def llama_config(cfg):
    """transformers' LlamaConfig fields for a bench config (plain JSON)."""
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": cfg.vocab, "hidden_size": cfg.d_model,
        "intermediate_size": cfg.ffn, "num_hidden_layers": cfg.layers,
        "num_attention_heads": cfg.heads, "num_key_value_heads": cfg.kv_heads,
        "head_dim": cfg.head_dim, "max_position_embeddings": max(2048, cfg.seq),
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
        "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
        "initializer_range": 0.02, "pad_token_id": None, "bos_token_id": 1,
        "eos_token_id": 2,
    }


def lora_settings(cfg, dropout=0.0):
    """PEFT LoraConfig keyword arguments (plain values) for a bench config."""
    return {"r": cfg.lora_r, "lora_alpha": cfg.lora_alpha, "lora_dropout": dropout,
            "target_modules": list(LORA_TARGETS), "bias": "none", "task_type": "CAUSAL_LM"}


def kiln_lora_spec(cfg, dropout=0.0):
    """The same adapters as `kiln compile --lora` spells them."""
    return f"r={cfg.lora_r},alpha={cfg.lora_alpha},dropout={dropout:g}"


def build_model(cfg, seed, dtype=None, device="cpu"):
    """LlamaForCausalLM from the config, random init from `seed` (on the CPU
    in fp32, so a seed gives the same weights anywhere), then `dtype`."""
    import torch
    import transformers

    config = transformers.LlamaConfig(**llama_config(cfg))
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM._from_config(
        config, attn_implementation="sdpa", dtype=torch.float32)
    return model.to(device=device, dtype=dtype or torch.float32)


def add_lora(model, cfg, seed, dropout=0.0):
    """PEFT's LoRA with its own initialization (A Kaiming-uniform from the
    torch RNG seeded here, B zero)."""
    import torch
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    return get_peft_model(model, LoraConfig(**lora_settings(cfg, dropout)))


def causal_lm_loss(model, inputs, labels):
    """The model's own loss with labels already the next tokens (what the
    export's `--labels shifted` graph computes: HF's loss, not shifted again)."""
    labels = labels.contiguous()  # HF views shift_labels flat
    return model(input_ids=inputs, labels=labels, shift_labels=labels).loss


def load_base(cfg, weights, dtype, device):
    """The model with `weights` (HF names) loaded strictly."""
    from safetensors.torch import load_file

    model = build_model(cfg, 0, dtype, device)
    state = load_file(weights)
    missing, unexpected = model.load_state_dict(state, strict=False)
    # lm_head may be absent only if tied (never in these configs).
    if missing or unexpected:
        raise HfError(f"{weights}: missing {sorted(missing)[:5]}, unexpected "
                      f"{sorted(unexpected)[:5]}")
    return model


def read_tokens(path, cfg):
    import numpy as np

    tokens = np.fromfile(path, dtype="<u4" if cfg.vocab > 65535 else "<u2")
    if tokens.size < cfg.seq + 1:
        raise HfError(f"{path}: {tokens.size} tokens, one window needs {cfg.seq + 1}")
    if int(tokens.max()) >= cfg.vocab:
        raise HfError(f"{path}: token {int(tokens.max())} is outside the vocabulary ({cfg.vocab})")
    return tokens


def step_window(tokens, seed, step, cfg, device):
    """kiln-run's (inputs, labels) of step `step` (1-based)."""
    import numpy as np
    import torch
    from tokens import windows

    w = torch.from_numpy(windows(tokens, seed, step, cfg.batch, cfg.seq).astype(np.int64)).to(device)
    return w[:, :-1].contiguous(), w[:, 1:].contiguous()


def adapter_parameters(model):
    return [p for n, p in model.named_parameters() if p.requires_grad]


# ---------------------------------------------------------------- commands

def cmd_config(args):
    cfg = CONFIGS[args.config]
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    with open(args.output, "w") as f:
        json.dump(llama_config(cfg), f, indent=1)
        f.write("\n")
    print(f"wrote {args.output}: LlamaForCausalLM of the '{cfg.name}' config")
    return 0


def cmd_init(args):
    import torch
    from safetensors.torch import save_file

    cfg = CONFIGS[args.config]
    os.makedirs(args.out, exist_ok=True)
    model = build_model(cfg, args.seed)
    save_file({n: t.detach().contiguous() for n, t in model.state_dict().items()},
              os.path.join(args.out, "model.safetensors"), metadata={"format": "pt"})
    peft_model = add_lora(model.to(torch.bfloat16), cfg, args.seed)
    peft_model.save_pretrained(os.path.join(args.out, "init_adapters"))
    print(f"wrote {args.out}/model.safetensors (seed {args.seed}) and "
          f"{args.out}/init_adapters (PEFT's LoRA init)")
    return 0


def cmd_weights(args):
    from safetensors.torch import save_file
    from tokens import markov_tokens, write_tokens

    cfg = CONFIGS[args.config]
    os.makedirs(args.out, exist_ok=True)
    model = build_model(cfg, args.seed)
    save_file({n: t.detach().contiguous() for n, t in model.state_dict().items()},
              os.path.join(args.out, "weights.safetensors"), metadata={"format": "pt"})
    dtype = write_tokens(os.path.join(args.out, "tokens.bin"),
                         markov_tokens(cfg.vocab, min(cfg.tokens * 64, 1 << 22), args.seed),
                         cfg.vocab)
    print(f"wrote {args.out}/weights.safetensors (seed {args.seed}) and tokens.bin ({dtype})")
    return 0


def load_peft(cfg, weights, adapters, device, trainable):
    import torch
    from peft import PeftModel

    base = load_base(cfg, weights, torch.bfloat16, device)
    model = PeftModel.from_pretrained(base, adapters, is_trainable=trainable)
    for name, p in model.named_parameters():
        if ".lora_" in name and p.dtype != torch.float32:
            raise HfError(f"{adapters}: adapter '{name}' loaded as {p.dtype}, expected fp32")
    return model


def cmd_train(args):
    import torch

    cfg = CONFIGS[args.config]
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise HfError("no CUDA device (--device cpu runs a slow smoke test)")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    weights = os.path.join(args.dir, "model.safetensors")
    init = os.path.join(args.dir, "init_adapters")
    model = load_peft(cfg, weights, init, device, trainable=True)
    params = adapter_parameters(model)
    tokens = read_tokens(args.data, cfg)
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=args.weight_decay,
                            **({"fused": True} if device.type == "cuda" else {}))
    model.train()
    losses = []
    for t in range(1, args.steps + 1):
        inputs, labels = step_window(tokens, args.seed, t, cfg, device)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = causal_lm_loss(model, inputs, labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach().item())
        if t == 1 or t % args.log_every == 0 or t == args.steps:
            print(f"step {t} loss {losses[-1]:.7f}", flush=True)
    if args.save_adapters:
        model.save_pretrained(args.save_adapters)
    record = {"system": "pytorch+peft", "model": "LlamaForCausalLM", "config": cfg.as_dict(),
              "steps": args.steps, "seed": args.seed, "lr": args.lr,
              "weight_decay": args.weight_decay, "adapters": len(params),
              "torch": torch.__version__, "losses": losses}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1)
    print(f"pytorch+peft: {len(params)} adapter tensors, {args.steps} steps, "
          f"{losses[0]:.4f} -> {losses[-1]:.4f}")
    return 0


def logged_loss(path, step):
    from loss_curve import parse_kiln_log

    with open(path) as f:
        losses = parse_kiln_log(f.read())
    if step not in losses:
        raise HfError(f"{path}: no 'step {step} loss' line")
    return losses[step]


def judge_reload(peft_loss, kiln_loss, tolerance):
    """(ok, relative difference): the PEFT forward reproduces Kiln's loss."""
    if not (math.isfinite(peft_loss) and math.isfinite(kiln_loss)) or kiln_loss == 0:
        return False, math.nan
    rel = abs(peft_loss - kiln_loss) / abs(kiln_loss)
    return rel <= tolerance, rel


def compare_checkpoint(adapters_dir, checkpoint):
    """(ok, line): every tensor of the adapter directory equals the
    checkpoint's params/<name> (what the resumed step computes with)."""
    from safetensors.numpy import load_file

    import numpy as np

    saved = load_file(os.path.join(adapters_dir, "adapter_model.safetensors"))
    ckpt = load_file(checkpoint)
    worst, missing = 0.0, []
    for name, value in saved.items():
        key = "params/" + name[len(PEFT_PREFIX):]
        if key not in ckpt:
            missing.append(key)
            continue
        other = ckpt[key].astype(np.float64)
        worst = max(worst, float(np.max(np.abs(value.astype(np.float64) - other), initial=0.0)))
    ok = not missing and worst == 0.0
    text = (f"{len(saved)} adapter tensors against {checkpoint}: "
            + (f"missing {missing[:3]}" if missing else f"max |diff| {worst:.3g}"))
    return ok, text


def cmd_eval(args):
    import torch

    cfg = CONFIGS[args.config]
    device = torch.device(args.device)
    kiln = logged_loss(args.kiln, args.step)
    model = load_peft(cfg, args.weights, args.adapters, device, trainable=False)
    model.eval()
    tokens = read_tokens(args.data, cfg)
    inputs, labels = step_window(tokens, args.seed, args.step, cfg, device)
    with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16):
        loss = float(causal_lm_loss(model, inputs, labels))
    ok, rel = judge_reload(loss, kiln, args.tolerance)
    print(f"PEFT (PeftModel.from_pretrained {args.adapters}) on step {args.step}'s batch: "
          f"loss {loss:.7f}; kiln-run step {args.step}: {kiln:.7f}; |diff| {abs(loss - kiln):.2e}, "
          f"relative {rel:.2e} (tolerance {args.tolerance:g})")
    if args.same_batch_kiln:
        # The same adapter files loaded by kiln-run (--adapters) on the same
        # batch (--input): like with like, whatever the checkpoint holds.
        same = logged_loss(args.same_batch_kiln, 1)
        print(f"kiln-run --adapters {args.adapters} on that batch: {same:.7f} "
              f"(resumed step: relative {abs(same - kiln) / abs(kiln):.2e}; "
              f"PEFT: relative {abs(loss - same) / abs(same):.2e})")
    if args.noise_floor:
        # The bf16 noise floor: the same adapters with the forward in fp32.
        with torch.no_grad():
            fp32 = float(causal_lm_loss(model.float(), inputs, labels))
        print(f"PEFT fp32 with the same adapters: {fp32:.7f}; bf16 noise floor "
              f"(PEFT bf16 vs fp32) {abs(loss - fp32) / abs(fp32):.2e}, kiln vs fp32 "
              f"{abs(kiln - fp32) / abs(fp32):.2e}")
    if args.checkpoint:
        same, text = compare_checkpoint(args.adapters, args.checkpoint)
        print(("OK " if same else "MISMATCH ") + text)
        ok = ok and same
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


def cmd_window(args):
    """Step T's (inputs, labels) as raw little-endian int64 files, what
    `kiln-run train --input input_ids=FILE --input labels=FILE` feeds."""
    import numpy as np

    cfg = CONFIGS[args.config]
    tokens = read_tokens(args.data, cfg)
    from tokens import windows

    w = windows(tokens, args.seed, args.step, cfg.batch, cfg.seq).astype("<i8")
    os.makedirs(args.out, exist_ok=True)
    np.ascontiguousarray(w[:, :-1]).tofile(os.path.join(args.out, "input_ids.bin"))
    np.ascontiguousarray(w[:, 1:]).tofile(os.path.join(args.out, "labels.bin"))
    print(f"wrote {args.out}/input_ids.bin and labels.bin: step {args.step}'s windows "
          f"[{cfg.batch}, {cfg.seq}] int64")
    return 0


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("config", help="the LlamaConfig JSON of a bench config")
    c.add_argument("--config", default="curve", choices=sorted(CONFIGS))
    c.add_argument("-o", "--output", required=True)
    i = sub.add_parser("init", help="weights and PEFT's initial adapters from a seed")
    i.add_argument("--config", default="curve", choices=sorted(CONFIGS))
    i.add_argument("--seed", type=int, default=0)
    i.add_argument("--out", required=True)
    w = sub.add_parser("weights", help="weights and tokens for the bench's Kiln column")
    w.add_argument("--config", default="small", choices=sorted(CONFIGS))
    w.add_argument("--seed", type=int, default=0)
    w.add_argument("--out", required=True)
    t = sub.add_parser("train", help="PyTorch + PEFT on kiln-run's windows")
    t.add_argument("--config", default="curve", choices=sorted(CONFIGS))
    t.add_argument("--dir", required=True, help="what `init` wrote")
    t.add_argument("--data", required=True)
    t.add_argument("--steps", type=int, default=100)
    t.add_argument("--seed", type=int, default=0, help="kiln-run's --seed (data order)")
    t.add_argument("--lr", type=float, default=1e-3)
    t.add_argument("--weight-decay", type=float, default=0.01)
    t.add_argument("--device", default="cuda")
    t.add_argument("--log-every", type=int, default=10)
    t.add_argument("--json", metavar="OUT")
    t.add_argument("--save-adapters", metavar="DIR")
    e = sub.add_parser("eval", help="PEFT loads adapters; loss vs kiln-run's")
    e.add_argument("--config", default="curve", choices=sorted(CONFIGS))
    e.add_argument("--weights", required=True)
    e.add_argument("--adapters", required=True)
    e.add_argument("--data", required=True)
    e.add_argument("--step", type=int, required=True)
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--kiln", required=True, metavar="LOG")
    e.add_argument("--tolerance", type=float, default=1e-3, help="relative")
    e.add_argument("--device", default="cuda")
    e.add_argument("--same-batch-kiln", metavar="LOG",
                   help="kiln-run's log of the same adapters (--adapters) on the same batch "
                        "(--input): its step-1 loss is printed beside the others")
    e.add_argument("--noise-floor", action="store_true",
                   help="also the same adapters' loss with the forward in fp32")
    e.add_argument("--checkpoint", metavar="CKPT",
                   help="kiln-run's --save checkpoint: the adapters must equal its params")
    wi = sub.add_parser("window", help="step T's windows as raw int64 files for --input")
    wi.add_argument("--config", default="curve", choices=sorted(CONFIGS))
    wi.add_argument("--data", required=True)
    wi.add_argument("--step", type=int, required=True)
    wi.add_argument("--seed", type=int, default=0)
    wi.add_argument("--out", required=True)
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    handler = {"config": cmd_config, "init": cmd_init, "weights": cmd_weights, "train": cmd_train,
               "eval": cmd_eval, "window": cmd_window}[args.command]
    try:
        return handler(args)
    except HfError as e:
        print(f"hf_peft {args.command}: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
