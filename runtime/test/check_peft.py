"""Loads the adapter directory `kiln-test-files peft-adapters DIR` wrote with
PEFT onto a transformers Llama of bench/configs.py's "tiny" shape and checks
every LoRA weight arrived under its module with its values.
Exits 77 (ctest: skipped) where torch, transformers or peft is missing."""

import sys

try:
    import torch
    from peft import PeftModel
    from transformers import LlamaConfig, LlamaForCausalLM
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

adapter_dir = sys.argv[1]
config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128,
                     num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
base = LlamaForCausalLM(config)
model = PeftModel.from_pretrained(base, adapter_dir)

loaded = {}
for name, param in model.named_parameters():
    if ".lora_" in name:
        # base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight
        loaded[name.replace(".default", "")] = param.detach().float()
expected_names = sorted(loaded)
assert len(expected_names) == 2 * 7 * 2, f"{len(expected_names)} LoRA weights loaded"
for k, name in enumerate(expected_names):
    tensor = loaded[name]
    want = k + torch.arange(tensor.numel(), dtype=torch.float32).reshape(tensor.shape) / 1024
    if not torch.equal(tensor, want):
        sys.exit(f"FAIL: {name} differs from what kiln-test-files wrote")
scaling = model.base_model.model.model.layers[0].self_attn.q_proj.scaling["default"]
assert scaling == 2.0, f"scaling {scaling}, expected alpha / r = 2"
print(f"PEFT loaded {len(expected_names)} LoRA weights from {adapter_dir}: all match")
