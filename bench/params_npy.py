"""model.py's parameters handed from a PyTorch process to a JAX one.

bench.py builds the model with torch on the CPU (the same weights and LoRA
init as its PyTorch columns) and writes it here; its JAX worker, another
process that never imports torch, reads it. One .npy per tensor under its
Hugging Face / PEFT name and manifest.json ({name: dtype}); bf16 is stored
as its uint16 bits (numpy has no bf16) and read back as ml_dtypes.bfloat16,
which JAX takes as bf16.
"""

import json
import os

import numpy as np

MANIFEST = "manifest.json"


def write_torch_params(model, directory):
    """Every parameter of model (frozen and adapters) into directory."""
    import torch

    manifest = {}
    for i, (name, p) in enumerate(model.named_parameters()):
        t = p.detach().cpu().contiguous()
        if t.dtype == torch.bfloat16:
            array, dtype = t.view(torch.int16).numpy().view(np.uint16), "bfloat16"
        elif t.dtype == torch.float32:
            array, dtype = t.numpy(), "float32"
        else:
            raise ValueError(f"{name}: dtype {t.dtype} has no .npy hand-off")
        np.save(os.path.join(directory, f"{i}.npy"), array)
        manifest[name] = {"file": f"{i}.npy", "dtype": dtype}
    with open(os.path.join(directory, MANIFEST), "w") as f:
        json.dump(manifest, f, indent=1)


def read_params(directory):
    """(frozen, adapters): dicts of numpy arrays, adapters the '.lora_' names."""
    import ml_dtypes

    with open(os.path.join(directory, MANIFEST)) as f:
        manifest = json.load(f)
    frozen, adapters = {}, {}
    for name, entry in manifest.items():
        array = np.load(os.path.join(directory, entry["file"]))
        if entry["dtype"] == "bfloat16":
            array = array.view(ml_dtypes.bfloat16)
        elif array.dtype != np.dtype(entry["dtype"]):
            raise ValueError(f"{directory}/{entry['file']}: {array.dtype}, "
                             f"manifest says {entry['dtype']} for {name}")
        (adapters if ".lora_" in name else frozen)[name] = array
    return frozen, adapters
