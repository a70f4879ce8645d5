# PyTorch SDPA (flash and cuDNN backends) on the harness's shapes, in the same
# run: forward time, TFLOP/s and rel L2 error against a float64 reference.
import torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
torch.manual_seed(0)
def bench(fn, iters=30):
    for _ in range(3): fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); b.synchronize(); ts.append(a.elapsed_time(b))
    ts.sort(); return ts[len(ts) // 2]
for name, (B, H, KV, S, D) in {"1b": (4, 32, 8, 2048, 64), "8b": (2, 32, 8, 4096, 128), "small": (8, 12, 12, 1024, 64)}.items():
    q = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(B, KV, S, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(B, KV, S, D, device="cuda", dtype=torch.bfloat16)
    g = H // KV
    ref = F.scaled_dot_product_attention(q.double(), k.double().repeat_interleave(g, 1), v.double().repeat_interleave(g, 1), is_causal=True)
    flop = 4 * B * H * S * S * D / 2
    for be in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION):
        with sdpa_kernel([be]):
            kk, vv = (k, v) if be == SDPBackend.FLASH_ATTENTION else (k.repeat_interleave(g, 1), v.repeat_interleave(g, 1))
            fn = lambda: F.scaled_dot_product_attention(q, kk, vv, is_causal=True, enable_gqa=kk.shape[1] != H)
            try:
                o = fn(); ms = bench(fn)
                err = ((o.double() - ref).norm() / ref.norm()).item()
                print(f"torch {be.name:16s} {name:6s} fwd {ms:.3f} ms {flop / ms / 1e9:.1f} TFLOP/s relL2 {err:.3e}", flush=True)
            except Exception as e:
                print(f"torch {be.name} {name}: {e}", flush=True)
    del ref
    torch.cuda.empty_cache()
