#!/usr/bin/env python3
"""Writes a Llama-architecture training graph in Kiln's graph dialect.

  scripts/llama_mlir.py --config 1b > llama-1b.mlir
  kiln compile llama-1b.mlir --emit=step-mlir --memory-report batch=4,seq=2048

Sizing the memory of a model does not need its weights, only its shapes:
this emits `@main(input_ids, labels) -> loss` with every weight a trainable
`kiln.parameter` and symbolic `batch` and `seq`. Layer structure as in
Hugging Face's LlamaForCausalLM: RMSNorm, q/k/v projections, grouped-query
causal attention, o projection, residual, RMSNorm, SwiGLU MLP, residual;
final norm, LM head (tied to the embedding when the config says so) and
mean cross-entropy over batch*seq tokens. Rotary position embeddings are
left out: they rotate q and k in place of the projections' outputs, which
changes which tensors attention keeps, not their sizes.
"""
import argparse
import sys

# Llama 3.2 1B (meta-llama/Llama-3.2-1B config.json) and the shared test
# fixture's shape (test/fixtures/onnx/llama_dynamo).
CONFIGS = {
    "1b": dict(vocab=128256, hidden=2048, layers=16, heads=32, kv_heads=8,
               intermediate=8192, tied=True),
    "tiny": dict(vocab=256, hidden=64, layers=2, heads=4, kv_heads=2,
                 intermediate=176, tied=False),
    # Head dim 64 (the attention kernels' shapes, test/Codegen/attention-sm90a.test).
    "tiny64": dict(vocab=256, hidden=256, layers=1, heads=4, kv_heads=2,
                   intermediate=512, tied=False),
}


class Writer:
    def __init__(self, dtype):
        self.lines = []
        self.count = 0
        self.dtype = dtype

    def t(self, dims, dtype=None):
        """tensor type; dims are ints or symbolic strings."""
        dtype = dtype or self.dtype
        shape = "x".join("?" if isinstance(d, str) else str(d) for d in dims)
        syms = [d for d in dims if isinstance(d, str)]
        enc = f", #kiln.dims<[{', '.join(syms)}]>" if syms else ""
        return f"tensor<{shape}x{dtype}{enc}>" if dims else f"tensor<{dtype}>"

    def op(self, text):
        name = f"%v{self.count}"
        self.count += 1
        self.lines.append(f"    {name} = {text}")
        return name


def emit(cfg, eps=1e-5, key_padding=False):
    w = Writer("f32")
    B, S, H = "batch", "seq", cfg["hidden"]
    nh, nkv = cfg["heads"], cfg["kv_heads"]
    hd = H // nh
    F, V = cfg["intermediate"], cfg["vocab"]
    act = [B, S, H]

    def param(name, dims):
        return w.op(f'kiln.parameter "{name}" trainable : {w.t(dims)}')

    def matmul(x, x_dims, weight, w_dims, out_dims):
        # Hugging Face Linear: y = x W^T, W stored [out, in].
        return w.op(f"kiln.matmul {x}, {weight} {{transpose_b}} : "
                    f"({w.t(x_dims)}, {w.t(w_dims)}) -> {w.t(out_dims)}")

    def rms_norm(x, name):
        weight = param(name, [H])
        return w.op(f"kiln.rms_norm {x}, {weight} {{axis = 2 : i64, epsilon = {eps:.6e} : f64}} : "
                    f"({w.t(act)}, {w.t([H])}) -> {w.t(act)}")

    def binary(kind, a, b, dims):
        return w.op(f"kiln.{kind} {a}, {b} : ({w.t(dims)}, {w.t(dims)}) -> {w.t(dims)}")

    def heads(x, n):
        flat = [B, S, n * hd]
        split = w.op(f"kiln.reshape {x} : {w.t(flat)} -> {w.t([B, S, n, hd])}")
        return w.op(f"kiln.transpose {split} {{perm = array<i64: 0, 2, 1, 3>}} : "
                    f"({w.t([B, S, n, hd])}) -> {w.t([B, n, S, hd])}")

    if key_padding:  # attention_mask [batch, seq] (i1, true = a token), per key
        mask4 = [B, 1, 1, S]
        keep = w.op(f"kiln.reshape %attention_mask : {w.t([B, S], 'i1')} -> {w.t(mask4, 'i1')}")
    embed = param("model.embed_tokens.weight", [V, H])
    x = w.op(f"kiln.gather {embed}, %input_ids {{axis = 0 : i64}} : "
             f"({w.t([V, H])}, {w.t([B, S], 'i64')}) -> {w.t(act)}")
    for i in range(cfg["layers"]):
        p = f"model.layers.{i}"
        h = rms_norm(x, f"{p}.input_layernorm.weight")
        q = matmul(h, act, param(f"{p}.self_attn.q_proj.weight", [H, H]), [H, H], act)
        kv_dims = [B, S, nkv * hd]
        k = matmul(h, act, param(f"{p}.self_attn.k_proj.weight", [nkv * hd, H]),
                   [nkv * hd, H], kv_dims)
        v = matmul(h, act, param(f"{p}.self_attn.v_proj.weight", [nkv * hd, H]),
                   [nkv * hd, H], kv_dims)
        qh, kh, vh = heads(q, nh), heads(k, nkv), heads(v, nkv)
        qd, kd = [B, nh, S, hd], [B, nkv, S, hd]
        if key_padding:
            a = w.op(f"kiln.attention {qh}, {kh}, {vh}, {keep} {{causal}} : "
                     f"({w.t(qd)}, {w.t(kd)}, {w.t(kd)}, {w.t(mask4, 'i1')}) -> {w.t(qd)}")
        else:
            a = w.op(f"kiln.attention {qh}, {kh}, {vh} {{causal}} : "
                     f"({w.t(qd)}, {w.t(kd)}, {w.t(kd)}) -> {w.t(qd)}")
        at = w.op(f"kiln.transpose {a} {{perm = array<i64: 0, 2, 1, 3>}} : "
                  f"({w.t(qd)}) -> {w.t([B, S, nh, hd])}")
        merged = w.op(f"kiln.reshape {at} : {w.t([B, S, nh, hd])} -> {w.t(act)}")
        o = matmul(merged, act, param(f"{p}.self_attn.o_proj.weight", [H, H]), [H, H], act)
        x = binary("add", x, o, act)
        h = rms_norm(x, f"{p}.post_attention_layernorm.weight")
        wide = [B, S, F]
        g = matmul(h, act, param(f"{p}.mlp.gate_proj.weight", [F, H]), [F, H], wide)
        u = matmul(h, act, param(f"{p}.mlp.up_proj.weight", [F, H]), [F, H], wide)
        sg = w.op(f"kiln.silu {g} : {w.t(wide)}")
        m = binary("mul", sg, u, wide)
        d = matmul(m, wide, param(f"{p}.mlp.down_proj.weight", [H, F]), [H, F], act)
        x = binary("add", x, d, act)
    x = rms_norm(x, "model.norm.weight")
    head = embed if cfg["tied"] else param("lm_head.weight", [V, H])
    logits = matmul(x, act, head, [V, H], [B, S, V])
    flat = w.op(f"kiln.reshape {logits} : {w.t([B, S, V])} -> {w.t(['batch*seq', V])}")
    labels = w.op(f"kiln.reshape %labels : {w.t([B, S], 'i64')} -> "
                  f"{w.t(['batch*seq'], 'i64')}")
    loss = w.op(f"kiln.cross_entropy {flat}, {labels} : "
                f"({w.t(['batch*seq', V])}, {w.t(['batch*seq'], 'i64')}) -> tensor<f32>")
    ids = w.t([B, S], "i64")
    mask_arg = (f', %attention_mask: {w.t([B, S], "i1")} {{kiln.name = "attention_mask"}}'
                if key_padding else "")
    return "\n".join([
        "module {",
        f'  func.func @main(%input_ids: {ids} {{kiln.name = "input_ids"}}, '
        f'%labels: {ids} {{kiln.name = "labels"}}{mask_arg}) -> (tensor<f32> {{kiln.name = "loss"}}) {{',
        *w.lines,
        f"    return {loss} : tensor<f32>",
        "  }",
        "}",
    ]) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", choices=sorted(CONFIGS), default="1b")
    parser.add_argument("--key-padding", action="store_true",
                        help="an attention_mask [batch, seq] input (i1) masking keys")
    args = parser.parse_args()
    sys.stdout.write(emit(CONFIGS[args.config], key_padding=args.key_padding))


if __name__ == "__main__":
    main()
