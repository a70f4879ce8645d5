"""Benchmark configurations and the model-FLOP formula (no torch needed).

The issue's accounting for one LoRA training step over T = batch * seq tokens:
  frozen GEMMs     4 * N * T        forward 2NT + input gradient 2NT (no weight
                                    gradient for frozen weights)
  LoRA GEMMs       6 * N_lora * T   forward, input and weight gradients
  attention        3.5 * forward    forward = 2 * batch * seq^2 * d per layer
                                    (QK^T and PV, halved for causal masking)
N counts every frozen GEMM weight (projections, MLP, lm_head; not the
embedding lookup or norms); N_lora counts the adapter weights.
"""

from dataclasses import dataclass, asdict

LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class Config:
    name: str
    layers: int
    d_model: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    batch: int
    seq: int
    lora_r: int = 16
    lora_alpha: int = 32

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads

    @property
    def tokens(self) -> int:
        return self.batch * self.seq

    def as_dict(self):
        return asdict(self)


CONFIGS = {
    "small": Config("small", layers=12, d_model=768, heads=12, kv_heads=12, ffn=2048,
                    vocab=32000, batch=8, seq=1024),
    "1b": Config("1b", layers=16, d_model=2048, heads=32, kv_heads=8, ffn=8192,
                 vocab=128256, batch=4, seq=2048),
    # The 100-step loss-curve comparison (bench/loss_curve.py): small enough
    # that its weights travel with the artifact, big enough to learn.
    "curve": Config("curve", layers=4, d_model=256, heads=8, kv_heads=4, ffn=688,
                    vocab=4096, batch=8, seq=128),
    # For --dry-run on a CPU: the same code paths, seconds to run.
    "tiny": Config("tiny", layers=2, d_model=64, heads=4, kv_heads=2, ffn=128,
                   vocab=256, batch=2, seq=32, lora_r=4, lora_alpha=8),
}


def linear_shapes(cfg: Config):
    """(name, in_features, out_features) of every GEMM weight of one layer."""
    kv = cfg.kv_heads * cfg.head_dim
    return [
        ("q_proj", cfg.d_model, cfg.d_model),
        ("k_proj", cfg.d_model, kv),
        ("v_proj", cfg.d_model, kv),
        ("o_proj", cfg.d_model, cfg.d_model),
        ("gate_proj", cfg.d_model, cfg.ffn),
        ("up_proj", cfg.d_model, cfg.ffn),
        ("down_proj", cfg.ffn, cfg.d_model),
    ]


def frozen_gemm_params(cfg: Config) -> int:
    per_layer = sum(i * o for _, i, o in linear_shapes(cfg))
    return cfg.layers * per_layer + cfg.d_model * cfg.vocab  # + lm_head


def lora_params(cfg: Config) -> int:
    per_layer = sum(cfg.lora_r * (i + o) for name, i, o in linear_shapes(cfg)
                    if name in LORA_TARGETS)
    return cfg.layers * per_layer


def step_flops(cfg: Config) -> dict:
    t = cfg.tokens
    frozen = 4 * frozen_gemm_params(cfg) * t
    lora = 6 * lora_params(cfg) * t
    attention_forward = 2 * cfg.batch * cfg.seq * cfg.seq * cfg.d_model * cfg.layers
    attention = 3.5 * attention_forward
    return {"frozen": frozen, "lora": lora, "attention": attention,
            "total": frozen + lora + attention}
