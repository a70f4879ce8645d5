#!/usr/bin/env python3
"""Exports tiny random-init Hugging Face models as Kiln test fixtures.

Each family is built from transformers' own modeling class (tiny config:
2 layers, hidden 64, 4 heads / 2 KV heads where the family has GQA, vocab
256, the default `sdpa` attention), wrapped so the model's own loss (labels
with -100 ignored) is the graph's only output, and exported with
`torch.onnx.export(dynamo=True)` with dynamic batch and seq (BERT also with
the legacy exporter, opset 17). The layout is the one of the shared fixtures
under test/fixtures/onnx:

  <name>/model.onnx
  <name>/meta.json                exporter, versions, inputs, op types, loss,
                                  PyTorch parameter -> ONNX initializer
  <name>/test_data_set_0/input_K.pb, output_0.pb (PyTorch's loss)
  <name>/test_data_set_0/grad/<initializer>.pb  PyTorch's gradient of every
                                  parameter, keyed by the ONNX initializer
                                  that holds it (transposed where the
                                  exporter folded a transpose into it)
  <name>/test_data_set_1/...      a second batch x seq shape

Usage (torch, transformers, onnx and onnxscript installed; CPU is enough):
  scripts/export_hf_fixtures.py [--out test/fixtures/onnx] [--only llama,gpt2]
Never edit the written expected values by hand: rerun this script.
"""
import argparse
import json
import pathlib
import shutil
import sys
import warnings

import numpy as np
import onnx
import torch
import transformers
from onnx import numpy_helper

VOCAB = 256
SHAPES = [(2, 16), (3, 9)]  # batch x seq of test_data_set_0 and _1


def common(**extra):
    base = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                num_hidden_layers=2, num_attention_heads=4,
                max_position_embeddings=128, tie_word_embeddings=False,
                pad_token_id=0, bos_token_id=1, eos_token_id=2)
    base.update(extra)
    return base


def families():
    t = transformers
    gqa = dict(num_key_value_heads=2)
    return {
        "llama": lambda: t.LlamaForCausalLM(t.LlamaConfig(**common(**gqa))),
        "mistral": lambda: t.MistralForCausalLM(t.MistralConfig(**common(**gqa))),
        "qwen2": lambda: t.Qwen2ForCausalLM(t.Qwen2Config(**common(**gqa))),
        "qwen3": lambda: t.Qwen3ForCausalLM(
            t.Qwen3Config(**common(head_dim=16, **gqa))),
        "gemma2": lambda: t.Gemma2ForCausalLM(
            t.Gemma2Config(**common(head_dim=16, **gqa))),
        "gemma3": lambda: t.Gemma3ForCausalLM(
            t.Gemma3TextConfig(**common(head_dim=16, **gqa))),
        "phi3": lambda: t.Phi3ForCausalLM(t.Phi3Config(**common(**gqa))),
        "olmo2": lambda: t.Olmo2ForCausalLM(t.Olmo2Config(**common(**gqa))),
        "gpt_neox": lambda: t.GPTNeoXForCausalLM(t.GPTNeoXConfig(**common())),
        "gpt2": lambda: t.GPT2LMHeadModel(t.GPT2Config(
            vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=128,
            tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)),
        # Llama with a padding mask input: left-padded rows, some of whose
        # queries see no key at all (the exporter's IsNaN guard gives 0).
        "llama_padded": lambda: t.LlamaForCausalLM(t.LlamaConfig(**common(**gqa))),
        "bert": lambda: t.BertForMaskedLM(t.BertConfig(
            **common(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))),
    }


PADDED = {"llama_padded"}  # families exported with an attention_mask input


class WithLoss(torch.nn.Module):
    """The model's own loss as the graph's output (what a training export is)."""

    def __init__(self, model):
        super().__init__()
        self.m = model

    def forward(self, input_ids, labels):
        return self.m(input_ids=input_ids, labels=labels).loss


class WithMaskAndLoss(WithLoss):
    def forward(self, input_ids, attention_mask, labels):
        return self.m(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss


def make_inputs(family, batch, seq, generator):
    ids = torch.randint(3, VOCAB, (batch, seq), generator=generator)
    if family == "bert":  # masked LM: predict ~1/3 of the positions
        labels = torch.full_like(ids, -100)
        pick = torch.rand(batch, seq, generator=generator) < 0.35
        pick[:, 0] = True
        labels[pick] = ids[pick]
    else:  # causal LM: labels are the inputs (shifted by the model)
        labels = ids.clone()
        labels[0, :2] = -100  # a prompt the loss ignores
    if family in PADDED:  # the last row left-padded by a third
        mask = torch.ones_like(ids)
        mask[-1, :seq // 3] = 0
        labels[mask == 0] = -100
        return ids, mask, labels
    return ids, labels


def export(wrapper, example, path, legacy):
    names = ["input_ids", "attention_mask", "labels"] if len(example) == 3 else ["input_ids", "labels"]
    if legacy:
        axes = {n: {0: "batch", 1: "seq"} for n in names}
        torch.onnx.export(wrapper, example, str(path), input_names=names,
                          output_names=["loss"], dynamic_axes=axes,
                          opset_version=17, dynamo=False)
        return
    batch, seq = torch.export.Dim("batch", min=1), torch.export.Dim("seq", min=2)
    shapes = {n: {0: batch, 1: seq} for n in names}
    program = torch.onnx.export(wrapper, example, dynamic_shapes=shapes,
                                input_names=names, output_names=["loss"],
                                dynamo=True, external_data=False)
    program.save(str(path))


def initializer_of(pname, param, inits, folded, taken):
    """The initializer holding `param`: the one with its name, the one the
    exporter records it was folded from, or else the one with its values
    (the perturbed init makes values unique); and whether it holds the
    transpose."""
    p = param.detach().numpy()
    candidates = [n for n in inits if n not in taken and (n == pname or folded.get(n) == pname)]
    candidates += [n for n in inits if n not in taken and n not in candidates]
    for name in candidates:
        value = inits[name]
        if name in taken:
            continue
        if value.shape == p.shape and np.array_equal(value, p):
            return name, False, 0.0
        if p.ndim == 2 and value.shape == p.T.shape and np.array_equal(value, p.T):
            return name, True, 0.0
    # Gemma's norms scale by (1 + weight): the exporter folds the sum into
    # an initializer of its own, whose gradient is the weight's.
    for name in candidates:
        value = inits[name]
        if value.shape == p.shape and p.ndim == 1 and np.array_equal(value, (p + 1).astype(value.dtype)):
            return name, False, 1.0
    return None, False, 0.0


def save_tensor(array, path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(numpy_helper.from_array(np.array(array, copy=True, order="C")).SerializeToString())


def write_fixture(family, legacy, out_dir):
    torch.manual_seed(0)
    model = families()[family]()
    model.eval()  # dropout off (the configs set it to 0 as well)
    with torch.no_grad():  # non-trivial norms and biases (HF inits 1 / 0)
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn(p.shape))
    wrapper = WithMaskAndLoss(model) if family in PADDED else WithLoss(model)
    name = f"hf_{family}_{'legacy' if legacy else 'dynamo'}"
    folder = out_dir / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    generator = torch.Generator().manual_seed(1)
    data = [make_inputs(family, b, s, generator) for b, s in SHAPES]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        export(wrapper, data[0], folder / "model.onnx", legacy)
    wrapper.eval()  # the legacy exporter leaves the module in training mode

    graph = onnx.load(str(folder / "model.onnx"))
    inits = {i.name: numpy_helper.to_array(i) for i in graph.graph.initializer
             if i.data_type == onnx.TensorProto.FLOAT}
    folded = {}
    for i in graph.graph.initializer:
        for prop in i.metadata_props:
            if prop.key == "pkg.onnxscript.optimizer.folded_from":
                folded[i.name] = prop.value.strip("[]'\" ")
    params, taken = {}, set()
    losses = []
    for index, inputs in enumerate(data):
        wrapper.zero_grad()
        loss = wrapper(*inputs)
        losses.append(float(loss.detach()))
        sets = folder / f"test_data_set_{index}"
        for k, tensor in enumerate(inputs):
            save_tensor(tensor.numpy(), sets / f"input_{k}.pb")
        save_tensor(np.array(loss.detach().numpy(), dtype=np.float32), sets / "output_0.pb")
        if index != 0:
            continue
        loss.backward()
        for pname, param in wrapper.named_parameters():
            init, transposed, offset = initializer_of(pname, param, inits, folded, taken)
            params[pname] = {"shape": list(param.shape), "initializer": init,
                             "transposed": transposed}
            if offset:
                params[pname]["offset"] = offset  # initializer = parameter + offset
            if init is None:  # folded into something else: no reference
                print(f"{name}: {pname} has no initializer of its own", file=sys.stderr)
                continue
            taken.add(init)
            grad = param.grad.numpy()
            save_tensor(grad.T if transposed else grad, sets / "grad" / f"{init}.pb")

    inputs = [[i.name, [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]]
              for i in graph.graph.input]
    meta = {
        "name": name,
        "family": family,
        "model_class": type(model).__name__,
        "exporter": "legacy" if legacy else "dynamo",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "onnx": onnx.__version__,
        "attn_implementation": model.config._attn_implementation,
        "opsets": {o.domain or "ai.onnx": o.version for o in graph.opset_import},
        "inputs": inputs,
        "shapes": [list(s) for s in SHAPES],
        "nodes": len(graph.graph.node),
        "op_types": sorted({n.op_type for n in graph.graph.node}),
        "loss": losses[0],
        "losses": losses,
        "params": params,
        "functions": [f.name for f in graph.functions],
    }
    (folder / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"{name}: {meta['nodes']} nodes, loss {losses[0]:.6f}, "
          f"{sum(p['initializer'] is not None for p in params.values())}/{len(params)} "
          f"parameters with a reference gradient")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(pathlib.Path(__file__).resolve().parent.parent
                                             / "test" / "fixtures" / "onnx"))
    parser.add_argument("--only", default="", help="comma-separated families "
                        f"({', '.join(families())})")
    args = parser.parse_args()
    wanted = [f for f in args.only.split(",") if f] or list(families())
    for f in wanted:
        if f not in families():
            parser.error(f"unknown family '{f}'")
    out = pathlib.Path(args.out)
    for family in wanted:
        write_fixture(family, False, out)
        if family == "bert":
            write_fixture(family, True, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
