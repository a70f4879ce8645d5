#!/usr/bin/env python3
"""shifted_reference.py CONFIG_DIR EXPORT_DIR OUT: writes inputs for the
export's graph (input_ids, labels = the next tokens, -100 on a few) and
PyTorch's loss of the same model (the exported safetensors loaded into the
Hugging Face class): mean cross entropy of logits[t] against labels[t], no
further shift, which is what kiln-run's token windows train."""
import pathlib
import sys

import numpy as np
import torch
import transformers
from onnx import numpy_helper
from safetensors.torch import load_file

config_dir, export_dir, out = map(pathlib.Path, sys.argv[1:4])
config = transformers.AutoConfig.from_pretrained(config_dir)
model = transformers.AutoModelForCausalLM.from_config(config)
model.load_state_dict(load_file(export_dir / "model.safetensors"), strict=False)
model.eval()
g = torch.Generator().manual_seed(3)
tokens = torch.randint(0, config.vocab_size, (3, 10), generator=g)
ids, labels = tokens[:, :-1].contiguous(), tokens[:, 1:].clone()
labels[0, :3] = -100
with torch.no_grad():
    logits = model(input_ids=ids).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, config.vocab_size).float(),
                                             labels.reshape(-1), ignore_index=-100)
out.mkdir(parents=True, exist_ok=True)
for k, t in enumerate([ids, labels]):
    (out / f"input_{k}.pb").write_bytes(numpy_helper.from_array(t.numpy()).SerializeToString())
(out / "output_0.pb").write_bytes(
    numpy_helper.from_array(np.array(loss.numpy(), dtype=np.float32)).SerializeToString())
