"""bench/model.py's Llama-style decoder with LoRA adapters, in JAX + optax.

The same model, term by term: parameters are flat dicts under the Hugging
Face / PEFT names of model.py (model.layers.N.self_attn.q_proj.weight,
...q_proj.lora_A.weight), weights keep PyTorch's [out, in] layout, so
model.py's parameters carry over as they are (params_npy.py) and a loss
computed here is comparable with model.py's (test_model_jax.py).

Precision follows model.py under bf16 autocast: the compute dtype is the
frozen weights' dtype (bf16 in the benchmark); the fp32 adapters are cast to
it for their products, as autocast casts them; RMSNorm statistics and the
cross entropy run in fp32. With fp32 frozen weights everything is fp32
(model.py without autocast).

Attention is `jax.nn.dot_product_attention(is_causal=True)` with grouped
KV heads as they are (query head n reads KV head n // (heads / kv_heads),
what model.py's repeat_interleave spells), through `implementation`: "cudnn"
(cuDNN's fused attention, GPU only) or "xla" (XLA's own: the score matrix
materialized).
"""

import functools

import jax
import jax.numpy as jnp
import optax

from configs import Config, LORA_TARGETS, linear_shapes

# torch.optim.AdamW's defaults, which bench.py's PyTorch columns use.
ADAMW = {"b1": 0.9, "b2": 0.999, "eps": 1e-8, "weight_decay": 0.01}
RMS_EPS = 1e-5
ROPE_THETA = 10000.0
_PROJ_MODULE = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn",
                "o_proj": "self_attn", "gate_proj": "mlp", "up_proj": "mlp",
                "down_proj": "mlp"}


def proj_name(layer, proj):
    return f"model.layers.{layer}.{_PROJ_MODULE[proj]}.{proj}"


def adapter_names(cfg: Config):
    return [f"{proj_name(i, p)}.lora_{ab}.weight" for i in range(cfg.layers)
            for p, _, _ in linear_shapes(cfg) if p in LORA_TARGETS for ab in "AB"]


def rms_norm(x, weight):
    h = x.astype(jnp.float32)
    h = h * jax.lax.rsqrt(jnp.mean(h * h, axis=-1, keepdims=True) + RMS_EPS)
    return weight * h.astype(x.dtype)


def rope_tables(seq, head_dim):
    inv = 1.0 / (ROPE_THETA ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim))
    angles = jnp.outer(jnp.arange(seq, dtype=jnp.float32), inv)
    return jnp.cos(angles), jnp.sin(angles)


def apply_rope(x, cos, sin):
    # x: [batch, seq, heads, head_dim] (dot_product_attention's BTNH layout);
    # rotate halves (HF's rotate_half), tables in x's dtype as model.py does.
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    cos = cos[None, :, None, :].astype(x.dtype)
    sin = sin[None, :, None, :].astype(x.dtype)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def linear(x, weight):
    # weight in PyTorch's [out, in] layout: y = x W^T.
    return jnp.einsum("...i,oi->...o", x, weight)


def lora_linear(x, frozen, adapters, name, scaling):
    y = linear(x, frozen[name + ".weight"])
    a = adapters.get(name + ".lora_A.weight")
    if a is not None:
        b = adapters[name + ".lora_B.weight"]
        y = y + linear(linear(x, a.astype(x.dtype)), b.astype(x.dtype)) * scaling
    return y


def loss_fn(adapters, frozen, tokens, cfg: Config, implementation):
    """Mean next-token cross entropy of tokens [batch, seq + 1] (model.py's
    forward(tokens[:, :-1], tokens[:, 1:]))."""
    inputs, labels = tokens[:, :-1], tokens[:, 1:]
    b, s = inputs.shape
    scaling = cfg.lora_alpha / cfg.lora_r
    x = frozen["model.embed_tokens.weight"][inputs]
    cos, sin = rope_tables(s, cfg.head_dim)
    for i in range(cfg.layers):
        lin = lambda proj, h: lora_linear(h, frozen, adapters, proj_name(i, proj), scaling)
        pre = f"model.layers.{i}."
        h = rms_norm(x, frozen[pre + "input_layernorm.weight"])
        q = lin("q_proj", h).reshape(b, s, cfg.heads, cfg.head_dim)
        k = lin("k_proj", h).reshape(b, s, cfg.kv_heads, cfg.head_dim)
        v = lin("v_proj", h).reshape(b, s, cfg.kv_heads, cfg.head_dim)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        y = jax.nn.dot_product_attention(q, k, v, is_causal=True,
                                         implementation=implementation)
        x = x + lin("o_proj", y.reshape(b, s, cfg.d_model))
        h = rms_norm(x, frozen[pre + "post_attention_layernorm.weight"])
        x = x + lin("down_proj", jax.nn.silu(lin("gate_proj", h)) * lin("up_proj", h))
    logits = linear(rms_norm(x, frozen["model.norm.weight"]), frozen["lm_head.weight"])
    logits = logits.astype(jnp.float32)
    lse = jax.nn.logsumexp(logits, axis=-1)
    picked = jnp.take_along_axis(logits, labels[..., None], axis=-1)[..., 0]
    return jnp.mean(lse - picked)


def optimizer(lr):
    return optax.adamw(lr, **ADAMW)


def make_train_step(cfg: Config, implementation, lr):
    """(init, step): init(adapters) -> optimizer state; step(adapters,
    opt_state, frozen, tokens) -> (adapters, opt_state, loss), one jax.jit
    over forward, backward and AdamW, the adapters and the optimizer state
    donated (updated in place)."""
    opt = optimizer(lr)

    @functools.partial(jax.jit, donate_argnums=(0, 1))
    def step(adapters, opt_state, frozen, tokens):
        loss, grads = jax.value_and_grad(loss_fn)(adapters, frozen, tokens, cfg,
                                                  implementation)
        updates, opt_state = opt.update(grads, opt_state, adapters)
        return optax.apply_updates(adapters, updates), opt_state, loss

    return opt.init, step
