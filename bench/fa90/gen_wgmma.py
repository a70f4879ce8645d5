# generates the wgmma wrappers of FlashAttention90.cuh; with the argument
# "bwd", those of FlashAttention90Backward.cuh (pasted between its markers)
import sys
def ss(n, ty, name="mmaSS", trans="0, 0"):
    r = n // 2
    regs = ", ".join(f"%{i}" for i in range(r))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(r))
    return f'''template <> __device__ __forceinline__ void {name}<{n}, {ty[0]}>(float (&d)[{r}], uint64_t a, uint64_t b, int scaleD) {{
  asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{r+2}, 0;\\n"
               "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ty[1]}.{ty[1]} {{{regs}}}, %{r}, %{r+1}, p, 1, 1, {trans};\\n}}\\n"
               : {outs}
               : "l"(a), "l"(b), "r"(scaleD));
}}
'''
def rs(n, ty):
    r = n // 2
    regs = ", ".join(f"%{i}" for i in range(r))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(r))
    return f'''template <> __device__ __forceinline__ void mmaRS<{n}, {ty[0]}>(float (&d)[{r}], const uint32_t (&a)[4], uint64_t b, int scaleD) {{
  asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{r+5}, 0;\\n"
               "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ty[1]}.{ty[1]} {{{regs}}}, {{%{r}, %{r+1}, %{r+2}, %{r+3}}}, %{r+4}, p, 1, 1, 1;\\n}}\\n"
               : {outs}
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(scaleD));
}}
'''
TYPES = [("__nv_bfloat16", "bf16"), ("__half", "f16")]
if sys.argv[1:] == ["bwd"]:
    out = []
    for ty in TYPES:
        out.append(ss(64, ty, "mmaSSK"))
        for n in (32, 64, 128):
            out.append(ss(n, ty, "mmaSST", "1, 1"))
    print("".join(out), end="")
    sys.exit(0)
out = []
for ty in [("__nv_bfloat16", "bf16"), ("__half", "f16")]:
    out.append(ss(128, ty))
    for n in (64, 128):
        out.append(rs(n, ty))
print("// Generated wrappers (one per shape and type): S = Q K^T from shared memory\n// (both K-major), O += P V with P from registers (V N-major, imm-trans-b 1).\n// scale-d is a predicate set from a register (NVRTC needs that).")
print("template <int N, typename T> __device__ void mmaSS(float (&)[N / 2], uint64_t, uint64_t, int);")
print("template <int N, typename T> __device__ void mmaRS(float (&)[N / 2], const uint32_t (&)[4], uint64_t, int);")
print("".join(out))
