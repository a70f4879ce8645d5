"""A Llama-style decoder with LoRA adapters, in plain PyTorch.

Parameter names follow Hugging Face's LlamaForCausalLM
(model.layers.N.self_attn.q_proj.weight, ...), so the same names work for the
weights file Kiln reads and the ONNX initializers it imports. Adapters follow
PEFT's naming (q_proj.lora_A.weight / lora_B.weight) and initialization
(A: Kaiming-uniform with a=sqrt(5), B: zeros), scaled by alpha / r.

Frozen weights are stored in bf16; adapters are fp32 master weights and the
forward runs under bf16 autocast (what Kiln's --precision=bf16 does).
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from configs import Config, LORA_TARGETS


class LoRALinear(nn.Module):
    def __init__(self, in_features, out_features, r, alpha, dtype):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features, dtype=dtype),
                                   requires_grad=False)
        self.r = r
        if r:
            self.lora_A = nn.Linear(in_features, r, bias=False, dtype=torch.float32)
            self.lora_B = nn.Linear(r, out_features, bias=False, dtype=torch.float32)
            self.scaling = alpha / r
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.normal_(self.weight, std=0.02)
        if self.r:
            nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
            nn.init.zeros_(self.lora_B.weight)

    def forward(self, x):
        # bench/nf4.py's quantize_model swaps the weight for NF4 codes.
        y = F.linear(x, self.weight) if self.weight is not None else self.nf4.linear(x)
        if self.r:
            y = y + self.lora_B(self.lora_A(x)) * self.scaling
        return y


class RMSNorm(nn.Module):
    def __init__(self, dim, dtype, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim, dtype=dtype), requires_grad=False)
        self.eps = eps

    def forward(self, x):
        # fp32 statistics, as Llama does.
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def rope_tables(seq, head_dim, theta, device):
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim))
    angles = torch.outer(torch.arange(seq, device=device).float(), inv)
    return angles.cos(), angles.sin()


def apply_rope(x, cos, sin):
    # x: [batch, heads, seq, head_dim]; rotate halves (HF's rotate_half layout).
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    cos = cos[None, None].to(x.dtype)
    sin = sin[None, None].to(x.dtype)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg: Config, r, dtype):
        super().__init__()
        self.cfg = cfg
        kv = cfg.kv_heads * cfg.head_dim
        lin = lambda name, i, o: LoRALinear(i, o, r if name in LORA_TARGETS else 0,
                                            cfg.lora_alpha, dtype)
        self.q_proj = lin("q_proj", cfg.d_model, cfg.d_model)
        self.k_proj = lin("k_proj", cfg.d_model, kv)
        self.v_proj = lin("v_proj", cfg.d_model, kv)
        self.o_proj = lin("o_proj", cfg.d_model, cfg.d_model)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        c = self.cfg
        q = self.q_proj(x).view(b, s, c.heads, c.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, c.kv_heads, c.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, c.kv_heads, c.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if c.kv_heads != c.heads:
            rep = c.heads // c.kv_heads
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(y.transpose(1, 2).reshape(b, s, c.d_model))


class MLP(nn.Module):
    def __init__(self, cfg: Config, r, dtype):
        super().__init__()
        self.gate_proj = LoRALinear(cfg.d_model, cfg.ffn, r, cfg.lora_alpha, dtype)
        self.up_proj = LoRALinear(cfg.d_model, cfg.ffn, r, cfg.lora_alpha, dtype)
        self.down_proj = LoRALinear(cfg.ffn, cfg.d_model, r, cfg.lora_alpha, dtype)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, cfg: Config, r, dtype):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.d_model, dtype)
        self.self_attn = Attention(cfg, r, dtype)
        self.post_attention_layernorm = RMSNorm(cfg.d_model, dtype)
        self.mlp = MLP(cfg, r, dtype)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Decoder(nn.Module):
    def __init__(self, cfg: Config, r, dtype):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab, cfg.d_model, dtype=dtype)
        self.embed_tokens.weight.requires_grad_(False)
        self.layers = nn.ModuleList(Layer(cfg, r, dtype) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.d_model, dtype)


class LlamaLoRA(nn.Module):
    """forward(input_ids, labels) -> mean next-token cross-entropy."""

    def __init__(self, cfg: Config, lora=True, dtype=torch.bfloat16, rope_theta=10000.0):
        super().__init__()
        self.cfg = cfg
        self.rope_theta = rope_theta
        r = cfg.lora_r if lora else 0
        self.model = Decoder(cfg, r, dtype)
        self.lm_head = LoRALinear(cfg.d_model, cfg.vocab, 0, 1, dtype)

    def forward(self, input_ids, labels):
        x = self.model.embed_tokens(input_ids)
        cos, sin = rope_tables(input_ids.shape[1], self.cfg.head_dim, self.rope_theta,
                               input_ids.device)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        logits = self.lm_head(self.model.norm(x))
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.reshape(-1))

    def adapter_parameters(self):
        return [p for n, p in self.named_parameters() if ".lora_" in n]


def build(cfg: Config, device, lora=True, seed=0):
    torch.manual_seed(seed)
    model = LlamaLoRA(cfg, lora=lora).to(device)
    for n, p in model.named_parameters():
        p.requires_grad_(".lora_" in n)
    return model
