#!/usr/bin/env python3
"""Exports a Hugging Face model as the ONNX training graph Kiln compiles.

  scripts/export_hf.py MODEL --out DIR [--task causal-lm|masked-lm]
                       [--attention-mask | --position-ids]
                       [--batch 2 --seq 16] [--seed 0] [--static]

MODEL is a Hugging Face model directory (config.json and weights: the
weights are loaded) or a config.json alone (random init from --seed). DIR
gets:

  model.onnx          the graph: inputs input_ids [batch, seq] (and
                      attention_mask with --attention-mask, position_ids
                      with --position-ids), labels
                      [batch, seq] (-100 is ignored; by default already the
                      next tokens, see --labels), output the model's own
                      loss; dynamic batch and seq (--static: --batch and
                      --seq fixed, the causal mask a folded constant); torch.onnx.export
                      (dynamo=True). Weights over 1 GiB go to model.onnx.data.
  model.safetensors   the weights under their Hugging Face names (the
                      graph's initializers keep those names, or record them
                      in folded_from), for `kiln-run train --weights`
  export.json         what was exported (class, task, inputs, versions)

Then: kiln compile DIR/model.onnx --lora r=16,alpha=32 --precision=bf16
--emit=artifact -o step.kiln; kiln-run train step.kiln --weights
DIR/model.safetensors ... (docs/onnx-import.md, "Hugging Face families").
Needs torch, transformers, onnx, onnxscript and safetensors.
"""
import argparse
import json
import pathlib
import sys
import warnings

import torch
import transformers
from safetensors.torch import save_file

TASKS = {"causal-lm": transformers.AutoModelForCausalLM,
         "masked-lm": transformers.AutoModelForMaskedLM}


def load_model(source, task, seed):
    path = pathlib.Path(source)
    if path.is_dir() and (any(path.glob("*.safetensors")) or any(path.glob("*.bin"))):
        return TASKS[task].from_pretrained(path, dtype=torch.float32)
    config_path = path / "config.json" if path.is_dir() else path
    if not config_path.is_file():
        sys.exit(f"export_hf: {source}: expected a model directory or a config.json")
    config = transformers.AutoConfig.from_pretrained(config_path)
    torch.manual_seed(seed)
    return TASKS[task].from_config(config, dtype=torch.float32)


def as_training_graph(model, inputs, shifted):
    """The model itself with forward(inputs..., labels) -> loss, so the
    graph's initializers keep the Hugging Face parameter names. With
    `shifted`, labels[t] is the token after input t (kiln-run's token
    windows) and the loss does not shift them again. With position_ids and
    no attention_mask, Hugging Face restricts attention to the runs of
    consecutive positions (packed documents; masking_utils'
    find_packed_sequence_indices) — only without a KV cache, so none is
    made."""
    base = type(model)

    def loss(self, **given):
        extra = {"shift_labels": given["labels"]} if shifted else {}
        if "position_ids" in given:
            extra["use_cache"] = False
        return base.forward(self, **given, **extra).loss

    # torch.onnx.export's dynamic_shapes name forward's parameters.
    class TrainingGraph(base):
        if "attention_mask" in inputs:
            def forward(self, input_ids, attention_mask, labels):
                return loss(self, input_ids=input_ids, attention_mask=attention_mask,
                            labels=labels)
        elif "position_ids" in inputs:
            def forward(self, input_ids, position_ids, labels):
                return loss(self, input_ids=input_ids, position_ids=position_ids,
                            labels=labels)
        else:
            def forward(self, input_ids, labels):
                return loss(self, input_ids=input_ids, labels=labels)

    model.__class__ = TrainingGraph
    return model


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model", help="model directory or config.json")
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--task", choices=sorted(TASKS), default="causal-lm")
    parser.add_argument("--attention-mask", action="store_true",
                        help="add an attention_mask [batch, seq] input (padding)")
    parser.add_argument("--position-ids", action="store_true",
                        help="add a position_ids [batch, seq] input: positions restarting "
                        "at 0 start a new packed document, which attention is restricted "
                        "to (kiln-run train --pack)")
    parser.add_argument("--labels", choices=["shifted", "unshifted"], default="shifted",
                        help="causal-lm: labels[t] is the token after input t (shifted, "
                        "what kiln-run's --data windows feed) or the input itself, "
                        "which the model shifts (Hugging Face's convention)")
    parser.add_argument("--batch", type=int, default=2, help="example batch to trace with")
    parser.add_argument("--seq", type=int, default=16, help="example seq to trace with")
    parser.add_argument("--seed", type=int, default=0, help="init seed for a config alone")
    parser.add_argument("--static", action="store_true",
                        help="export at --batch and --seq only (no dynamic dims): the "
                        "exporter then folds the causal mask into a constant initializer")
    args = parser.parse_args()
    if args.batch < 1 or args.seq < 2:
        parser.error("--batch must be >= 1 and --seq >= 2")
    if args.attention_mask and args.position_ids:
        parser.error("--attention-mask and --position-ids exclude each other: Hugging Face "
                     "derives the packed-document mask from position_ids only without an "
                     "attention_mask")
    if args.position_ids and args.task != "causal-lm":
        parser.error("--position-ids is for --task causal-lm")

    model = load_model(args.model, args.task, args.seed)
    model.eval()  # dropout off: the step is traced deterministic
    class_name = type(model).__name__
    config = model.config
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    shifted = args.task == "causal-lm" and args.labels == "shifted"
    names = ["input_ids"]
    if args.attention_mask:
        names.append("attention_mask")
    if args.position_ids:
        names.append("position_ids")
    names.append("labels")
    graph = as_training_graph(model, names, shifted)
    vocab = config.vocab_size
    ids = torch.randint(0, vocab, (args.batch, args.seq))
    # Traced with two packed documents per row, so the exporter keeps the
    # general (data-dependent) mask.
    half = args.seq // 2
    positions = torch.cat([torch.arange(half), torch.arange(args.seq - half)])
    example = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
               "position_ids": positions.expand(args.batch, -1).contiguous(),
               "labels": ids.clone()}
    example = [example[n] for n in names]
    batch, seq = torch.export.Dim("batch", min=1), torch.export.Dim("seq", min=2)
    dynamic = None if args.static else {n: {0: batch, 1: seq} for n in names}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(graph, tuple(example), dynamic_shapes=dynamic,
                                    input_names=names, output_names=["loss"], dynamo=True)
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    program.save(str(out / "model.onnx"), external_data=weight_bytes > (1 << 30))

    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    # Tied weights are one tensor under several names: safetensors keeps one
    # (the first, as save_pretrained keeps the input embedding's), and the
    # graph may use another ("lm_head.weight"). The groups go into the ONNX
    # model's metadata (kiln.tied_weights), so kiln-run finds the tensor
    # under whichever name a checkpoint kept.
    seen, unique, groups = {}, {}, {}
    for name, tensor in state.items():
        key = (tensor.data_ptr(), tuple(tensor.shape))
        groups.setdefault(key, []).append(name)
        if key in seen:
            continue
        seen[key] = name
        unique[name] = tensor
    save_file(unique, str(out / "model.safetensors"))
    tied = [names for names in groups.values() if len(names) > 1]
    # The model's parameters by name, so `kiln compile` (without --lora)
    # trains them and not the buffers the exporter turned into initializers
    # (RoPE's inv_freq as `expand_1`), which no checkpoint holds.
    parameters = [name for name, _ in model.named_parameters(remove_duplicate=False)]
    import onnx

    onnx_model = onnx.load(str(out / "model.onnx"), load_external_data=False)
    metadata = {"kiln.parameters": parameters}
    if tied:
        metadata["kiln.tied_weights"] = tied
    for key, value in metadata.items():
        entry = onnx_model.metadata_props.add()
        entry.key, entry.value = key, json.dumps(value)
    onnx.save(onnx_model, str(out / "model.onnx"))
    info = {
        "model_class": class_name,
        "task": args.task,
        "source": str(args.model),
        "inputs": names,
        "labels": "shifted" if shifted else "unshifted",
        "tie_word_embeddings": bool(getattr(config, "tie_word_embeddings", False)),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "attn_implementation": config._attn_implementation,
        "static": [args.batch, args.seq] if args.static else None,
    }
    (out / "export.json").write_text(json.dumps(info, indent=1) + "\n")
    print(f"export_hf: {class_name} -> {out / 'model.onnx'}, {len(unique)} weights in "
          f"{out / 'model.safetensors'}")
    for names in tied:
        print(f"export_hf: tied weights {', '.join(names)}: one tensor, recorded in "
              f"model.onnx (kiln.tied_weights) for kiln-run; the checkpoint keeps {names[0]}")
    if info["tie_word_embeddings"]:
        print("export_hf: note: where the exporter folds the output embedding's transpose "
              "into an initializer of its own, full fine-tuning trains it apart from the "
              "input one (LoRA leaves both frozen)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
