#!/usr/bin/env python3
"""Checks `kiln report --format json` field by field.

usage: check_report.py fixtures REPORT.json FIXTURES_DIR WORK_DIR SRC_DIR
       check_report.py breaks REPORT.json

Expected values come from elsewhere than the report: parameter, LoRA and
NF4 counts from the ONNX files and meta.json (onnx's Python package, PEFT's
default target regex, r * (in + out) per adapter); the Llama fixture's
shape from scripts/llama_mlir.py's "tiny" config; the peaks from `kiln
compile --memory-plan` with the same flags; the smallest budget by
compiling just below it (must fail) and at it (must pass). Prints one line
per checked row and "OK"."""
import json
import pathlib
import re
import subprocess
import sys

import numpy as np
import onnx

FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16,
               onnx.TensorProto.DOUBLE}
# PEFT's usual projection names: kiln-lora's default targets (docs/lora-qlora.md).
LORA_TARGETS = re.compile(
    r"(^|[./])(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj|qkv_proj|"
    r"gate_up_proj|query|key|value|query_key_value|c_attn|c_proj|c_fc|out_proj|fc1|fc2|"
    r"wq|wk|wv|wo|w1|w2|w3)([./]weight)?$")
RANK = 16
GIB = 1024.0 ** 3

failures = []


def expect(row, field, got, want):
    if got != want:
        failures.append(f"{row}: {field} = {got!r}, expected {want!r}")


def expect_true(row, what, cond):
    if not cond:
        failures.append(f"{row}: {what}")


def onnx_counts(path):
    """Float weights of rank >= 1, and the 2-D ones no Gather reads (what
    NF4 can store: linear weights, not embedding tables)."""
    model = onnx.load(str(path), load_external_data=False)
    gathered = {n.input[0] for n in model.graph.node if n.op_type == "Gather"}
    params = nf4 = nf4_weights = 0
    for init in model.graph.initializer:
        if init.data_type not in FLOAT_TYPES or len(init.dims) == 0:
            continue
        n = int(np.prod(init.dims))
        params += n
        if len(init.dims) == 2 and init.name not in gathered:
            nf4 += n
            nf4_weights += 1
    return params, nf4_weights, nf4


def lora_counts(meta):
    targets = adapters = 0
    for name, p in meta["params"].items():
        if len(p["shape"]) == 2 and LORA_TARGETS.search(name):
            out_features, in_features = p["shape"]
            targets += 1
            adapters += RANK * (in_features + out_features)
    return targets, adapters


def kiln_compile(model, args):
    return subprocess.run(["kiln", "compile", str(model), "--emit=step-mlir", "--precision=bf16",
                           "--lora", "r=16,alpha=32"] + args,
                          capture_output=True, text=True)


def check_memory(name, model, row, work, seq):
    sizes = f"batch=4,seq={seq}"
    for setup, quant in (("lora", []), ("qlora", ["--quant", "nf4"])):
        for remat in ("none", "auto"):
            planned = row["memory"][setup][f"remat_{remat}"]
            where = f"{name} {setup} remat={remat}"
            plan_file = work / f"{name}.{setup}.{remat}.json"
            run = kiln_compile(model, quant + [f"--remat-budget={remat}", "--memory-report", sizes,
                                               "--memory-plan", str(plan_file)])
            expect_true(where, f"kiln compile failed: {run.stderr}", run.returncode == 0)
            if run.returncode:
                continue
            plan = json.loads(plan_file.read_text())
            step = plan["step_program"]
            expect(where, "error", planned["error"], None)
            expect(where, "graph_peak_bytes", planned["graph_peak_bytes"], plan["peak_bytes"])
            expect(where, "persistent_bytes", planned["persistent_bytes"], plan["persistent_bytes"])
            expect(where, "activation_peak_bytes", planned["activation_peak_bytes"],
                   plan["activation_peak_bytes"])
            expect(where, "arena_bytes", planned["arena_bytes"], step["arena_bytes"])
            expect(where, "workspace_bytes", planned["workspace_bytes"], step["workspace_bytes"])
            expect(where, "planned_peak_bytes", planned["planned_peak_bytes"],
                   step["persistent_bytes"] + step["arena_bytes"] + step["workspace_bytes"])
        # The smallest budget: met at its value, not a byte below.
        budget = row["memory"][setup]["min_budget"]
        where = f"{name} {setup} min_budget"
        expect(where, "error", budget["error"], None)
        least = budget["bytes"]
        none = row["memory"][setup]["remat_none"]
        auto = row["memory"][setup]["remat_auto"]
        expect_true(where, "at most the auto and none peaks",
                    least <= min(none["graph_peak_bytes"], auto["graph_peak_bytes"]))
        expect_true(where, "above the persistent bytes", least > none["persistent_bytes"])
        expect(where, "gib", budget["gib"], least / GIB)
        met = kiln_compile(model, quant + [f"--remat-budget={(least + 0.5) / GIB!r}",
                                           "--memory-report", sizes])
        expect_true(where, f"a budget of {least} bytes is not met: {met.stderr}",
                    met.returncode == 0)
        below = kiln_compile(model, quant + [f"--remat-budget={(least - 1) / GIB!r}",
                                             "--memory-report", sizes])
        expect_true(where, f"a budget of {least - 1} bytes is met", below.returncode != 0 and
                    "cannot be met" in below.stderr)


def check_fixtures(report, fixtures, work, src):
    sys.path.insert(0, str(src / "scripts"))
    from llama_mlir import CONFIGS
    tiny = CONFIGS["tiny"]
    seq = report["settings"]["sizes"]["seq"]
    expect("settings", "sizes", report["settings"]["sizes"], {"batch": 4, "seq": seq})
    expect("settings", "precision", report["settings"]["precision"], "bf16")
    rows = {r["model"]: r for r in report["rows"]}
    for name in ("llama_dynamo", "bert_dynamo", "mlp_dynamo", "mlp_legacy"):
        model = fixtures / name / "model.onnx"
        row = rows[str(model)]
        meta = json.loads((fixtures / name / "meta.json").read_text())
        params, nf4_weights, nf4 = onnx_counts(model)
        targets, adapters = lora_counts(meta)
        expect(name, "error", row["error"], None)
        expect(name, "parameters", row["parameters"], params)
        expect(name, "graph_breaks", row["graph_breaks"], {"count": 0, "graphs": 1, "first": None})
        expect(name, "fullgraph", row["fullgraph"], True)
        expect(name, "nf4", row["nf4"], {"error": None, "weights": nf4_weights, "parameters": nf4})
        arch = row["architecture"]
        if targets:
            expect(name, "lora.targets", row["lora"]["targets"], targets)
            expect(name, "lora.adapter_parameters", row["lora"]["adapter_parameters"], adapters)
            expect(name, "lora.error", row["lora"]["error"], None)
            expect_true(name, "compile_seconds > 0", 0 < row["compile_seconds"] <= row["report_seconds"])
            check_memory(name, model, row, work, seq)
        else:
            expect(name, "lora.targets", row["lora"]["targets"], 0)
            expect_true(name, "LoRA fails naming the linear weights",
                        "no linear layer's weight matches" in row["lora"]["error"] and
                        "l1.weight, l2.weight" in row["lora"]["error"])
            for setup in ("lora", "qlora"):
                for part in ("remat_none", "remat_auto", "min_budget"):
                    expect(name, f"memory.{setup}.{part}.error", row["memory"][setup][part]["error"],
                           row["lora"]["error"])
        if name == "llama_dynamo":
            want = dict(family="decoder", head="LM", layers=tiny["layers"], hidden=tiny["hidden"],
                        heads=tiny["heads"], kv_heads=tiny["kv_heads"],
                        head_dim=tiny["hidden"] // tiny["heads"], vocab=tiny["vocab"],
                        norm="RMSNorm", activation="SiLU (gated)", uniform_attention=True)
            # Its mask is HF's causal mask built from iota and compares: a
            # causal pattern the raising leaves as a mask operand, so cuDNN
            # (unmasked launches only) cannot take it.
            attention = dict(sites=2, raised=2, path="masked (causal pattern)", head_dim=16,
                             element="bf16", kernel="tiled", cudnn=False, cudnn_reason="masked",
                             implementations=["tiled"])
        elif name == "bert_dynamo":
            layers = {m.group(1) for p in meta["params"] for m in [re.search(r"layer\.(\d+)\.", p)] if m}
            embeddings = meta["params"]["m.bert.embeddings.word_embeddings.weight"]["shape"]
            classes = meta["params"]["m.classifier.weight"]["shape"][0]
            # 4 heads: the graph reshapes q/k/v to [batch, seq, 4, 16].
            want = dict(family="encoder", head=f"classifier ({classes} classes)", layers=len(layers),
                        hidden=embeddings[1], heads=4, kv_heads=4, head_dim=16, vocab=embeddings[0],
                        norm="LayerNorm", activation="GELU", uniform_attention=True)
            # Exported as softmax(q kT * scale + mask) with an all-keep mask
            # (BERT without an attention_mask input): the mask analysis drops
            # it, so the attention is raised unmasked and cuDNN may take it.
            attention = dict(sites=2, raised=2, path="unmasked", head_dim=16,
                             element="bf16", kernel="tiled", cudnn=True,
                             cudnn_reason=None, implementations=["tiled", "cudnn"])
        else:
            l1 = meta["params"]["l1.weight"]["shape"]
            l2 = meta["params"]["l2.weight"]["shape"]
            # The legacy exporter spells GELU with Erf, which is not raised.
            want = dict(family="feed-forward", head=f"classifier ({l2[0]} classes)", layers=2,
                        hidden=l1[0], heads=0, kv_heads=0, head_dim=0, vocab=0, norm="LayerNorm",
                        activation="GELU" if name == "mlp_dynamo" else None, uniform_attention=True)
            attention = dict(sites=0, raised=0, path=None, kernel=None, cudnn=False,
                             implementations=[])
        for key, value in want.items():
            expect(name, f"architecture.{key}", arch[key], value)
        for key, value in attention.items():
            expect(name, f"attention.{key}", row["attention"][key], value)
        print(f"checked {name}")

    broken = [r for r in report["rows"] if r["error"]]
    for row in broken:
        expect_true(row["model"], "a broken row holds only model and error",
                    set(row) == {"model", "error"})
        expect_true(row["model"], "the reason names the file", row["model"] in row["error"])
        print(f"checked broken {pathlib.Path(row['model']).name}: {row['error']}")


def check_breaks(report):
    rows = {pathlib.Path(r["model"]).name: r for r in report["rows"]}
    row = rows["model.onnx"]  # make_fallback_model.py: ArgMax on the labels' side path
    expect("fallback", "graph_breaks", row["graph_breaks"],
           {"count": 1, "graphs": 2, "first": {"code": "unsupported-op", "op_type": "ArgMax",
                                               "node": "to_index",
                                               "reason": "no importer for this op"}})
    expect("fallback", "fullgraph", row["fullgraph"], False)
    expect("fallback", "lora", row["lora"],
           {"error": None, "targets": 1, "modules": ["w"], "adapter_parameters": RANK * (5 + 3)})
    expect("fallback", "parameters", row["parameters"], 3 * 5 + 3)
    if "n" in report["settings"]["sizes"]:
        # Planned at graph level; the step program has no kernel for the
        # host fallback.
        for setup in ("lora", "qlora"):
            for remat in ("remat_none", "remat_auto"):
                step = row["memory"][setup][remat]
                expect_true(f"fallback {setup} {remat}", "graph-level plan",
                            step["error"] is None and step["graph_peak_bytes"] > 0)
                expect(f"fallback {setup} {remat}", "planned_peak_bytes", step["planned_peak_bytes"], None)
                expect_true(f"fallback {setup} {remat}", "step program error names the opaque op",
                            "'kiln.opaque' op has no kernel" in (step["step_program_error"] or ""))
    else:
        for setup in ("lora", "qlora"):
            expect(f"fallback {setup}", "error", row["memory"][setup]["remat_none"]["error"],
                   "needs a value for n (--sizes n=N)")
    print("checked fallback")
    if "unsupported_op.onnx" not in rows:
        return
    row = rows["unsupported_op.onnx"]
    expect("unsupported_op", "graph_breaks.first.op_type", row["graph_breaks"]["first"]["op_type"], "Hardmax")
    expect("unsupported_op", "fullgraph", row["fullgraph"], False)
    expect_true("unsupported_op", "NF4 fails with the reason", bool(row["nf4"]["error"]))
    print("checked unsupported_op")
    row = rows["no_vjp.onnx"]
    expect("no_vjp", "graph_breaks.first.code", row["graph_breaks"]["first"]["code"], "no-vjp")
    expect("no_vjp", "graph_breaks.first.node", row["graph_breaks"]["first"]["node"], "pick")
    print("checked no_vjp")


def main():
    mode, report = sys.argv[1], json.loads(pathlib.Path(sys.argv[2]).read_text())
    expect("report", "format", report["format"], "kiln-report")
    if mode == "fixtures":
        check_fixtures(report, pathlib.Path(sys.argv[3]), pathlib.Path(sys.argv[4]),
                       pathlib.Path(sys.argv[5]))
    else:
        check_breaks(report)
    for failure in failures:
        print("MISMATCH", failure)
    if failures:
        sys.exit(1)
    print("OK")


main()
