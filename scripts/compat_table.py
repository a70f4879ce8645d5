#!/usr/bin/env python3
"""The real-family compatibility table of docs/compatibility.md (issue #23).

Phases (scripts/compat-table.sh runs them):

  compat_table.py cpu [--only a,b] [--out DIR]   compiler machine: for each family,
      the real model's config (transformers' config class, the published
      sizes) cut to --layers decoder layers (default 2: the full weights
      would not fit this machine's export), exported by scripts/export_hf.py
      (random init, trace at batch 2 x seq 16, dynamic batch and seq), then
      `kiln report` at --batch x --seq and `kiln compile --emit=artifact`
      (bf16 LoRA r=16,alpha=32, AdamW, memory plan at those sizes) into
      DIR/<family>/step.kiln; the rows go to DIR/planned.json. The exports'
      weights are deleted once compiled (only the artifacts travel).
  compat_table.py gpu [--out DIR]                GPU machine: `kiln-run report` on
      every DIR/*/step.kiln at the same sizes (random init, random tokens):
      measured peak, step time, tokens/s -> DIR/measured.json
  compat_table.py table [--out DIR] [--doc docs/compatibility.md]
      rewrites the doc's table between its markers from planned.json and,
      when present, measured.json (measured columns "pending" otherwise)

A family that fails at any stage is a row with the stage and the reason.
"""
import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
BEGIN = "<!-- compat-table:begin (scripts/compat-table.sh writes this part) -->"
END = "<!-- compat-table:end -->"
TOLERANCE = 0.05  # measured peak within 5% of the plan


def families():
    """name -> (model it stands for, transformers config class, config
    fields of the published model). Sizes from the models' config.json."""
    return {
        "llama": ("Llama 3.2 1B", "LlamaConfig", dict(
            vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
            num_attention_heads=32, num_key_value_heads=8, head_dim=64, rms_norm_eps=1e-5,
            rope_theta=500000.0, max_position_embeddings=131072, tie_word_embeddings=True,
            rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})),
        "llama-8b": ("Llama 3.1 8B", "LlamaConfig", dict(
            vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
            num_attention_heads=32, num_key_value_heads=8, rms_norm_eps=1e-5,
            rope_theta=500000.0, max_position_embeddings=131072, tie_word_embeddings=False,
            rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})),
        "mistral": ("Mistral 7B v0.3", "MistralConfig", dict(
            vocab_size=32768, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
            num_attention_heads=32, num_key_value_heads=8, rms_norm_eps=1e-5,
            rope_theta=1000000.0, max_position_embeddings=32768, sliding_window=None,
            tie_word_embeddings=False)),
        "qwen2": ("Qwen2.5 1.5B", "Qwen2Config", dict(
            vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
            num_attention_heads=12, num_key_value_heads=2, rms_norm_eps=1e-6,
            rope_theta=1000000.0, max_position_embeddings=32768, tie_word_embeddings=True)),
        "qwen3": ("Qwen3 1.7B", "Qwen3Config", dict(
            vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
            num_attention_heads=16, num_key_value_heads=8, head_dim=128, rms_norm_eps=1e-6,
            rope_theta=1000000.0, max_position_embeddings=40960, tie_word_embeddings=True)),
        "gemma2": ("Gemma 2 2B", "Gemma2Config", dict(
            vocab_size=256000, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
            num_attention_heads=8, num_key_value_heads=4, head_dim=256, sliding_window=4096,
            attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
            query_pre_attn_scalar=256, max_position_embeddings=8192, tie_word_embeddings=True)),
        "gemma3": ("Gemma 3 1B", "Gemma3TextConfig", dict(
            vocab_size=262144, hidden_size=1152, intermediate_size=6912, num_hidden_layers=26,
            num_attention_heads=4, num_key_value_heads=1, head_dim=256, sliding_window=512,
            query_pre_attn_scalar=256, rope_theta=1000000.0, max_position_embeddings=32768,
            tie_word_embeddings=True)),
        "phi3": ("Phi-3 mini 4k", "Phi3Config", dict(
            vocab_size=32064, hidden_size=3072, intermediate_size=8192, num_hidden_layers=32,
            num_attention_heads=32, num_key_value_heads=32, rms_norm_eps=1e-5,
            max_position_embeddings=4096, original_max_position_embeddings=4096,
            sliding_window=None, tie_word_embeddings=False, pad_token_id=32000)),
        "olmo2": ("OLMo 2 1B", "Olmo2Config", dict(
            vocab_size=100352, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
            num_attention_heads=16, num_key_value_heads=16, rms_norm_eps=1e-6,
            rope_theta=500000.0, max_position_embeddings=4096, tie_word_embeddings=False,
            pad_token_id=100277)),
        "gpt_neox": ("Pythia 1.4B", "GPTNeoXConfig", dict(
            vocab_size=50304, hidden_size=2048, intermediate_size=8192, num_hidden_layers=24,
            num_attention_heads=16, rotary_pct=0.25, max_position_embeddings=2048,
            use_parallel_residual=True, tie_word_embeddings=False)),
        "gpt2": ("GPT-2 XL", "GPT2Config", dict(
            vocab_size=50257, n_embd=1600, n_layer=48, n_head=25, n_positions=1024,
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=True)),
        "stablelm": ("StableLM 2 1.6B", "StableLmConfig", dict(
            vocab_size=100352, hidden_size=2048, intermediate_size=5632, num_hidden_layers=24,
            num_attention_heads=32, num_key_value_heads=32, partial_rotary_factor=0.25,
            use_qkv_bias=True, layer_norm_eps=1e-5, max_position_embeddings=4096,
            tie_word_embeddings=False)),
        "granite": ("Granite 3.1 2B", "GraniteConfig", dict(
            vocab_size=49155, hidden_size=2048, intermediate_size=8192, num_hidden_layers=40,
            num_attention_heads=32, num_key_value_heads=8, rms_norm_eps=1e-5,
            rope_theta=5000000.0, max_position_embeddings=131072, embedding_multiplier=12.0,
            residual_multiplier=0.22, attention_multiplier=0.015625, logits_scaling=8.0,
            tie_word_embeddings=True, pad_token_id=0)),
        "starcoder2": ("StarCoder2 3B", "Starcoder2Config", dict(
            vocab_size=49152, hidden_size=3072, intermediate_size=12288, num_hidden_layers=30,
            num_attention_heads=24, num_key_value_heads=2, sliding_window=4096,
            rope_theta=999999.4, max_position_embeddings=16384, residual_dropout=0.0,
            embedding_dropout=0.0, attention_dropout=0.0, tie_word_embeddings=True,
            bos_token_id=0, eos_token_id=0)),
    }


LAYER_KEYS = ("num_hidden_layers", "n_layer")


def make_config(cls_name, fields, layers):
    import transformers

    fields = dict(fields)
    key = next(k for k in LAYER_KEYS if k in fields)
    full = fields[key]
    fields[key] = layers
    return getattr(transformers, cls_name)(**fields), full


def full_parameters(cls_name, fields):
    """Parameters of the published model (meta tensors: no memory)."""
    import torch
    import transformers

    config = getattr(transformers, cls_name)(**fields)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    seen, total = set(), 0
    for p in model.parameters():  # tied weights once
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    return total


def run(cmd, log):
    start = time.monotonic()
    with open(log, "a") as f:
        f.write("+ " + " ".join(map(str, cmd)) + "\n")
        f.flush()
        proc = subprocess.run(list(map(str, cmd)), stdout=f, stderr=subprocess.STDOUT)
    return proc.returncode, time.monotonic() - start


def last_line(log):
    lines = [line for line in pathlib.Path(log).read_text().splitlines() if line.strip()]
    for line in reversed(lines):
        if "error" in line.lower():
            return line.strip()[:300]
    return (lines[-1].strip() if lines else "no output")[:300]


def cmd_cpu(args):
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    chosen = families()
    if args.only:
        names = args.only.split(",")
        unknown = [n for n in names if n not in chosen]
        if unknown:
            sys.exit(f"compat_table: unknown families {unknown} (known: {', '.join(chosen)})")
        chosen = {n: chosen[n] for n in names}
    planned_path = out / "planned.json"
    doc = json.loads(planned_path.read_text()) if planned_path.exists() else {"rows": {}}
    doc["settings"] = {"batch": args.batch, "seq": args.seq, "layers": args.layers,
                       "lora": args.lora, "precision": "bf16", "optimizer": "adamw"}
    kiln = args.kiln
    for name, (model, cls_name, fields) in chosen.items():
        d = out / name
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        log = d / "log.txt"
        row = {"family": name, "model": model, "config_class": cls_name, "stage": None,
               "error": None}
        print(f"compat_table: {name} ({model})", flush=True)
        try:
            config, full_layers = make_config(cls_name, fields, args.layers)
            row["layers_full"] = full_layers
            row["parameters_full"] = full_parameters(cls_name, fields)
            config.save_pretrained(d / "config")
        except Exception as e:  # noqa: BLE001 - the row says why
            row.update(stage="config", error=f"{type(e).__name__}: {e}"[:300])
            doc["rows"][name] = row
            continue
        row["layers_exported"] = args.layers
        rc, secs = run([sys.executable, ROOT / "scripts/export_hf.py", d / "config/config.json",
                        "--out", d / "export", "--seq", "16"], log)
        row["export_seconds"] = round(secs, 1)
        if rc != 0:
            row.update(stage="export", error=last_line(log))
            doc["rows"][name] = row
            continue
        onnx = d / "export/model.onnx"
        rc, secs = run([kiln, "report", onnx, "--batch", args.batch, "--seq", args.seq,
                        "--lora", args.lora, "--format", "json", "-o", d / "report.json"], log)
        if rc != 0 or not (d / "report.json").exists():
            row.update(stage="report", error=last_line(log))
        else:
            row["report"] = json.loads((d / "report.json").read_text())["rows"][0]
        rc, secs = run([kiln, "compile", onnx, "--lora", args.lora, "--precision=bf16",
                        "--optimizer", "adamw", "--memory-report",
                        f"batch={args.batch},seq={args.seq}", "--emit=artifact", "--quiet",
                        "-o", d / "step.kiln"], log)
        row["artifact_seconds"] = round(secs, 1)
        if rc != 0:
            row.update(stage=row["stage"] or "compile", error=row["error"] or last_line(log))
        else:
            row["artifact_bytes"] = (d / "step.kiln").stat().st_size
        # Only the artifact and the small files travel: the weights (and a
        # model.onnx that holds them inline, under 1 GiB of weights) stay out.
        for f in ("model.onnx.data", "model.safetensors"):
            (d / "export" / f).unlink(missing_ok=True)
        if onnx.exists() and onnx.stat().st_size > (4 << 20):
            onnx.unlink()
        doc["rows"][name] = row
        planned_path.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"compat_table: {name}: {row['error'] or 'ok'}", flush=True)
    planned_path.write_text(json.dumps(doc, indent=1) + "\n")
    return plan_artifacts(args, out, doc)


def plan_artifacts(args, out, doc):
    """kiln-run report --plan-only on every artifact: the planned column of
    the GPU phase, known before it runs (out/planned-artifacts.json)."""
    artifacts = sorted(str(p) for p in out.glob("*/step.kiln"))
    if not artifacts or not os.access(args.kiln_run, os.X_OK):
        print(f"compat_table: no kiln-run at {args.kiln_run}: the artifacts' planned column "
              f"waits for the GPU phase", flush=True)
        return 0
    s = doc["settings"]
    cmd = [args.kiln_run, "report", *artifacts, "--batch", s["batch"], "--seq", s["seq"],
           "--plan-only", "--format", "json", "--output", out / "planned-artifacts.json"]
    return subprocess.run(list(map(str, cmd))).returncode


def cmd_gpu(args):
    out = pathlib.Path(args.out)
    doc = json.loads((out / "planned.json").read_text())
    s = doc["settings"]
    artifacts = sorted(str(p) for p in out.glob("*/step.kiln"))
    if not artifacts:
        sys.exit(f"compat_table gpu: no {out}/*/step.kiln (run the cpu phase and carry {out})")
    cmd = [args.kiln_run, "report", *artifacts, "--batch", s["batch"], "--seq", s["seq"],
           "--steps", args.steps, "--warmup", args.warmup, "--format", "json",
           "--output", out / "measured.json"]
    print("+ " + " ".join(map(str, cmd)), flush=True)
    return subprocess.run(list(map(str, cmd))).returncode


# ------------------------------------------------------------------ table

def gib(b):
    if b is None:
        return "-"
    return f"{b / 2**30:.2f} GiB" if b >= 2**30 else f"{b / 2**20:.0f} MiB"


def count(n):
    for unit, size, digits in (("B", 1e9, 2), ("M", 1e6, 1), ("K", 1e3, 1)):
        if n >= size:
            return f"{n / size:.{digits}f}{unit}"
    return str(n)


def short(text, limit=160):
    """A reason for a table cell: paths relative to the repository."""
    text = str(text).replace(str(ROOT) + "/", "")
    return text if len(text) <= limit else text[:limit - 3] + "..."


def peak_cell(memory):
    none, auto = memory.get("remat_none", {}), memory.get("remat_auto", {})
    if none.get("error") or none.get("step_program_error"):
        return "not planned: " + (none.get("error") or none.get("step_program_error"))[:80]
    return f"{gib(none.get('planned_peak_bytes'))} / {gib(auto.get('planned_peak_bytes'))}"


def measured_rows(out, name="measured.json"):
    path = out / name
    if not path.exists():
        return None
    rows = {}
    for r in json.loads(path.read_text())["rows"]:
        rows[pathlib.Path(r["artifact"]).parent.name] = r
    return rows


def render(doc, measured, planned_only=None):
    s = doc["settings"]
    lines = [
        f"Generated by `scripts/compat-table.sh` (transformers' modeling code, random weights). "
        f"Each model is its published config cut to **{s['layers']} decoder layers** (hidden "
        f"size, heads, FFN and vocabulary as published; the full model's weights would not "
        f"fit the CPU export), exported with `scripts/export_hf.py`, planned by `kiln report` "
        f"at batch={s['batch']}, seq={s['seq']} (bf16, AdamW, LoRA {s['lora']} on the default "
        f"targets). Peaks: the step program's plan, `--remat-budget` none / auto. Measured: "
        f"`kiln-run report` of the bf16 LoRA artifact (no remat) on the GPU, random init and "
        f"tokens, against that artifact's own plan.",
        "",
        "| model (family) | parameters (full / exported) | graph breaks | attention | LoRA "
        "targets | LoRA peak | QLoRA peak | smallest budget (LoRA) | planned (artifact) | "
        "measured peak | measured vs planned | step ms | tokens/s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    agree = []
    for name, row in sorted(doc["rows"].items()):
        label = f"{row['model']} (`{name}`)"
        rep = row.get("report")
        if rep is None:
            reason = short(row["error"]).replace("|", "\\|")
            lines.append(f"| {label} | {count(row.get('parameters_full', 0))} | "
                         f"{row['stage']} failed: {reason} | | | | | | | | | | |")
            continue
        breaks = rep["graph_breaks"]
        first = breaks.get("first")
        brk = str(breaks["count"]) + (f": [{first['code']}] {first['op_type']}" if first else "")
        att = rep["attention"]
        attention = "none" if not att.get("sites") else (
            f"{att.get('path')}, head dim {att.get('head_dim')}: "
            + ", ".join(att.get("implementations") or []))
        lora = rep["lora"]
        targets = lora.get("error") or f"{lora['targets']} ({count(lora['adapter_parameters'])})"
        mem = rep.get("memory", {})
        budget = mem.get("lora", {}).get("min_budget", {})
        budget = budget.get("error") or gib(budget.get("bytes"))
        cells = [label, f"{count(row['parameters_full'])} / {count(rep['parameters'])}", brk,
                 attention, targets, peak_cell(mem.get("lora", {})),
                 peak_cell(mem.get("qlora", {})), budget]
        m = (measured or {}).get(name)
        if row.get("error") and "artifact_bytes" not in row:
            cells += [f"no artifact: {short(row['error'])}", "", "", "", ""]
        elif measured is None:
            p = ((planned_only or {}).get(name) or {}).get("planned") or {}
            cells += [gib(p.get("peak_bytes")) if p.get("peak_bytes") else "pending",
                      "pending", "pending", "pending", "pending"]
        elif m is None or m.get("error"):
            cells += [short((m or {}).get("error") or "not run"), "", "", "", ""]
        else:
            p, meas = m["planned"], m["measured"]
            if meas.get("error"):
                cells += [gib(p.get("peak_bytes")), f"not measured: {short(meas['error'])}", "",
                          "", ""]
            else:
                ratio = meas["peak_vs_planned"]
                agree.append((name, ratio))
                cells += [gib(p["peak_bytes"]), gib(meas["peak_bytes"]), f"{100 * ratio:+.1f}%",
                          f"{meas['step_ms_median']:.1f}", f"{meas['tokens_per_second']:,.0f}"]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    lines.append("")
    if measured is None:
        lines.append("Measured columns: pending — the GPU phase (`scripts/compat-table.sh gpu`) "
                     "has not been run on this table yet. \"planned (artifact)\" is `kiln-run "
                     "report --plan-only` on the artifact the GPU phase will run.")
    else:
        bad = [f"{n} ({100 * r:+.1f}%)" for n, r in agree if abs(r) > TOLERANCE]
        lines.append(f"Planned vs measured peak: {len(agree)} models measured, "
                     f"{len(agree) - len(bad)} within {TOLERANCE:.0%}"
                     + (f"; outside: {', '.join(bad)}" if bad else "") + ".")
    return "\n".join(lines) + "\n"


def cmd_table(args):
    out = pathlib.Path(args.out)
    doc = json.loads((out / "planned.json").read_text())
    text = render(doc, measured_rows(out), measured_rows(out, "planned-artifacts.json"))
    path = pathlib.Path(args.doc)
    content = path.read_text()
    if BEGIN not in content or END not in content:
        sys.exit(f"compat_table table: {path} lacks the markers {BEGIN!r} ... {END!r}")
    head, rest = content.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    path.write_text(head + BEGIN + "\n" + text + END + tail)
    print(f"compat_table: wrote the table ({len(doc['rows'])} rows) into {path}")
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="phase", required=True)
    c = sub.add_parser("cpu")
    c.add_argument("--only", help="comma-separated families (default: all)")
    c.add_argument("--layers", type=int, default=2)
    c.add_argument("--batch", type=int, default=4)
    c.add_argument("--seq", type=int, default=1024)
    c.add_argument("--lora", default="r=16,alpha=32")
    c.add_argument("--kiln", default=str(ROOT / "build/bin/kiln"))
    c.add_argument("--kiln-run", default=str(ROOT / "build-rt/tools/kiln-run/kiln-run"),
                   help="for the artifacts' planned column (--plan-only)")
    g = sub.add_parser("gpu")
    g.add_argument("--kiln-run", default=str(ROOT / "build-rt/tools/kiln-run/kiln-run"))
    g.add_argument("--steps", type=int, default=10)
    g.add_argument("--warmup", type=int, default=3)
    t = sub.add_parser("table")
    t.add_argument("--doc", default=str(ROOT / "docs/compatibility.md"))
    for sp in (c, g, t):
        sp.add_argument("--out", default=str(ROOT / "bench/out/compat"))
    args = p.parse_args(argv)
    return {"cpu": cmd_cpu, "gpu": cmd_gpu, "table": cmd_table}[args.phase](args)


if __name__ == "__main__":
    sys.exit(main())
