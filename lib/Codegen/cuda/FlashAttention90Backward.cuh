// Kiln's attention backward for Hopper (lib/Codegen/cuda/FlashAttention90Backward.cuh).
//
// sm_90a only (wgmma, setmaxnreg); include after FlashAttention90.cuh,
// whose shared-memory layout, descriptors, barriers and wgmma wrappers it
// reuses. Three launches (the FlashAttention-2/3 scheme):
//   1. prepare: D = rowsum(dO * O) per query row (fp32), and the fp32 dQ
//      accumulator zeroed;
//   2. backward: parallel over key tiles. A block owns BN = 128 keys of one
//      (batch, kv head): a producer warpgroup and two consumer warpgroups of
//      64 keys each. dK and dV stay in registers for the whole block (no
//      atomics on them); grouped-query attention loops over the kv head's
//      query heads inside the block, so dK/dV come out summed. Per query
//      tile of BM = 64 rows (Q, dO, lse, D streamed by the producer through
//      a 2-stage ring): S^T = K Q^T and dP^T = V dO^T (wgmma, both operands
//      from shared memory), P^T = exp(S^T scale - lse), dV += P^T dO (P^T
//      from registers, rounded once to bf16/f16), dS^T = P^T (dP^T - D),
//      dK += dS^T Q (registers), and dQ += dS K: dS^T is stored to shared
//      memory and read back transposed (wgmma's MN-major A), and the
//      tile's dQ (kAlternateDq, kSplitDq below: both warpgroups, half the
//      head dim each) is added to the fp32 accumulator with 16-byte
//      reductions from a per-warp staging tile (kDqWarp);
//   3. finish: dQ = scale * accumulator, rounded to bf16/f16.
// Plain FlashAttention numerics: P and dS rounded once before their
// products (the policy of docs/codegen.md). Layouts: q, o, dO, dQ
// [B, H, Sq, D]; k, v, dK, dV [B, Hkv, L, D], each dense or, where the
// Layout's bit says so (FlashAttention90.cuh), [B, Sq, H, D] /
// [B, L, Hkv, D]; the fp32 dQ accumulator in dQ's layout (so that finish
// is elementwise); lse, D [B, H, Sq] (lse the natural log-sum-exp of the
// scaled scores, what kiln_fa90::forward writes); causal is top-left
// aligned (key j visible to query i iff j <= i).
namespace kiln_fa90 {
namespace bwd {
#ifndef KILN_FA90_BWD_STAGES
#define KILN_FA90_BWD_STAGES 2
#endif
// The Q/dO ring's depth at head dim 64 (at 128 a third stage does not fit
// beside the warp staging tiles): KILN_FA90_BWD_STAGES64, the ring at 64
// only, for A/B builds.
#ifndef KILN_FA90_BWD_STAGES64
#define KILN_FA90_BWD_STAGES64 KILN_FA90_BWD_STAGES
#endif
constexpr int BN = 128, BM = 64;
template <int D> constexpr int kStagesOf = D == 64 ? KILN_FA90_BWD_STAGES64 : KILN_FA90_BWD_STAGES;
// How dQ += dS K is shared between the two consumer warpgroups. By turns
// (kAlternateDq): warpgroup t % 2 computes query tile t's whole dQ over all
// 128 keys and adds it to the fp32 accumulator: half the atomics of one
// partial per warpgroup, and the same work for both over two tiles; the
// dS^T tile is double-buffered and both warpgroups meet at a barrier once
// per tile. Otherwise each warpgroup adds the partial of its own 64 keys
// (bench/fa90 builds both to compare: -DKILN_FA90_BWD_ALTERNATE=0).
#ifndef KILN_FA90_BWD_ALTERNATE
#define KILN_FA90_BWD_ALTERNATE 1
#endif
template <int D> constexpr bool kAlternateDq = KILN_FA90_BWD_ALTERNATE != 0;
// How dQ's product is scheduled (bench/fa90 builds the variants to compare:
// -DKILN_FA90_BWD_SPLIT, _MERGE, _PIPE = 0/1). The split is on (with kDqWarp
// below it measured best on every shape: docs/benchmarks.md, "Sixteenth
// session"); merge and pipelining stay off.
// kSplitDq: both warpgroups compute every query tile's dQ over all 128 keys,
// each half of the head dim's columns (m64n32 at head dim 64, m64n64 at
// 128): the same atomics as kAlternateDq, the same work for both on every
// tile, and no warpgroup-dependent branch around the products (such a
// branch with a product in flight makes ptxas serialize every wgmma, C7518,
// which is why the two below need it).
#ifndef KILN_FA90_BWD_SPLIT
#define KILN_FA90_BWD_SPLIT 1
#endif
#ifndef KILN_FA90_BWD_MERGE
#define KILN_FA90_BWD_MERGE 0
#endif
#ifndef KILN_FA90_BWD_PIPE
#define KILN_FA90_BWD_PIPE 0
#endif
// How dQ reaches the fp32 accumulator (kDqWarp, kDqV4, kBulkDq below).
#ifndef KILN_FA90_BWD_DQWARP
#define KILN_FA90_BWD_DQWARP 1
#endif
template <int D> constexpr bool kSplitDq = KILN_FA90_BWD_SPLIT != 0 && kAlternateDq<D>;
// kMergedDkDq: dQ's product is issued right behind dK += dS^T Q, one wait
// for both instead of one per product.
template <int D> constexpr bool kMergedDkDq = KILN_FA90_BWD_MERGE != 0 && kSplitDq<D>;
// kPipelined (implies kMergedDkDq): the next query tile's S^T and dP^T are
// issued before this tile's dQ atomics, which run under those products.
// Head dim 64 only: at 128 the extra live accumulators spill (ptxas).
template <int D> constexpr bool kPipelined = KILN_FA90_BWD_PIPE != 0 && kSplitDq<D> && D == 64;
// kBulkDq: a warpgroup's dQ tile goes to the fp32 accumulator as one bulk
// reduction per row (cp.reduce.async.bulk .add.f32, the TMA unit's) from a
// staging tile in shared memory, instead of 8-byte atomics from every
// thread. Head dim 64 (at 128 the staging does not fit), without
// kMergedDkDq / kPipelined. Measured 13% slower at 1b than the float2
// atomics (the warpgroup barriers around the staging): off
// (-DKILN_FA90_BWD_BULKDQ=1 -DKILN_FA90_BWD_DQWARP=0).
#ifndef KILN_FA90_BWD_BULKDQ
#define KILN_FA90_BWD_BULKDQ 0
#endif
template <int D>
constexpr bool kBulkDq = KILN_FA90_BWD_BULKDQ != 0 && KILN_FA90_BWD_DQWARP == 0 && D == 64 && !kMergedDkDq<D> && !kPipelined<D>;
// kDqV4 (without kDqWarp): the dQ atomics as 16-byte `red.global.add.v4.f32`
// (sm_90): lanes 2m and 2m + 1 trade one float pair through a shuffle so
// that each holds four consecutive columns of one row (the even lane the
// first row, the odd lane the second): half the reductions of the float2
// atomics, the same bytes. Measured 1b 0.782 -> 0.715 ms, 8B-like 2.155 ->
// 2.013; a little behind kDqWarp except with documents at head dim 128
// (0.331 against 0.336 ms). -DKILN_FA90_BWD_DQWARP=0 -DKILN_FA90_BWD_DQV4=1.
#ifndef KILN_FA90_BWD_DQV4
#define KILN_FA90_BWD_DQV4 0
#endif
template <int D> constexpr bool kDqV4 = KILN_FA90_BWD_DQV4 != 0 && KILN_FA90_BWD_DQWARP == 0;
// kDqWarp (on): each consumer warp writes its 16 rows of a dQ block (its
// DQN columns) to a staging tile of its own, reads them back row-major and
// sends them as 16-byte `red.global.add.v4.f32` that cover whole 128-byte
// lines (4 lines per instruction, against 8 lines of 32 bytes for a float2
// atomic): half the reductions and a quarter of the L2 requests, and only
// __syncwarp between the stores and the reads. With kSplitDq, measured on
// the H200 against float2 atomics: 1b 0.782 -> 0.702 ms, 8B-like 2.155 ->
// 1.939 (docs/benchmarks.md). The atomics' issue and L2 requests were what
// the kernel waited on: without any dQ atomics (a timing-only build) 1b
// takes 0.640 ms, 8B-like 1.63. -DKILN_FA90_BWD_DQWARP=0 restores them.
template <int D> constexpr bool kDqWarp = KILN_FA90_BWD_DQWARP != 0;
// The warp staging tile's row pitch in floats: 72 puts the 8 rows of one
// float2 store 32 bytes apart in the banks (two wavefronts for 256 bytes,
// the least there is), and rows stay 16-byte aligned for the v4 reads.
constexpr int kWarpPitch = 72;
// The staging tile's row pitch in floats: 8 more than the row, so that the
// 8 rows one store instruction covers fall on different banks (2-way).
template <int D> constexpr int kDqPitch = D + 8;

// Dynamic shared memory: K, V (BN rows), the two warpgroups' dS^T tiles
// (64 keys x BM queries; two sets with kAlternateDq), the ring of Q, dO
// (BM rows), lse and D (BM floats), the mbarriers; 1024 bytes of slack for
// the 1024-byte alignment.
template <int D> struct Smem {
  static constexpr int kStages = kStagesOf<D>;
  static constexpr int kv = BN * D * 2, qt = BM * D * 2, ds = 64 * BM * 2;
  static constexpr int k = 0, v = k + kv, dS = v + kv, q = dS + (kAlternateDq<D> ? 4 : 2) * ds, dO = q + kStages * qt,
                       lse = dO + kStages * qt, dd = lse + kStages * BM * 4,
                       dqStage = dd + kStages * BM * 4, // kBulkDq: a tile per warpgroup
                       dqWarp = dqStage + (kBulkDq<D> ? 2 * 64 * kDqPitch<D> * 4 : 0), // kDqWarp: a tile per consumer warp
                       bars = dqWarp + (kDqWarp<D> ? 8 * 16 * kWarpPitch * 4 : 0),
                       bytes = bars + (2 * kStages + 1) * 8 + 1024;
  static_assert(bytes <= 227 * 1024, "more shared memory than an sm_90 block gets");
};
constexpr int kThreads = 384;

// wgmma wrappers the forward has no use for (bench/fa90/gen_wgmma.py bwd):
// m64n64k16 with both operands K-major (S^T = K Q^T at 64 queries), and
// both operands MN-major (dQ = dS K: dS^T stored [key][query], K [key][d]).
template <int N, typename T> __device__ void mmaSST(float (&)[N / 2], uint64_t, uint64_t, int);
template <int N, typename T> __device__ void mmaSSK(float (&)[N / 2], uint64_t, uint64_t, int);
template <> __device__ __forceinline__ void mmaSSK<64, __nv_bfloat16>(float (&d)[32], uint64_t a, uint64_t b, int scaleD) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
               : "l"(a), "l"(b), "r"(scaleD));
}
template <> __device__ __forceinline__ void mmaSST<64, __nv_bfloat16>(float (&d)[32], uint64_t a, uint64_t b, int scaleD) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 1, 1;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
               : "l"(a), "l"(b), "r"(scaleD));
}
template <> __device__ __forceinline__ void mmaSST<128, __nv_bfloat16>(float (&d)[64], uint64_t a, uint64_t b, int scaleD) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 1, 1;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
               : "l"(a), "l"(b), "r"(scaleD));
}
template <> __device__ __forceinline__ void mmaSSK<64, __half>(float (&d)[32], uint64_t a, uint64_t b, int scaleD) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
               : "l"(a), "l"(b), "r"(scaleD));
}
template <> __device__ __forceinline__ void mmaSST<64, __half>(float (&d)[32], uint64_t a, uint64_t b, int scaleD) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 1, 1;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
               : "l"(a), "l"(b), "r"(scaleD));
}
template <> __device__ __forceinline__ void mmaSST<128, __half>(float (&d)[64], uint64_t a, uint64_t b, int scaleD) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 1, 1;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
               : "l"(a), "l"(b), "r"(scaleD));
}

template <> __device__ __forceinline__ void mmaSST<32, __nv_bfloat16>(float (&d)[16], uint64_t a, uint64_t b, int scaleD) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 1, 1;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
               : "l"(a), "l"(b), "r"(scaleD));
}
template <> __device__ __forceinline__ void mmaSST<32, __half>(float (&d)[16], uint64_t a, uint64_t b, int scaleD) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 1, 1;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
               : "l"(a), "l"(b), "r"(scaleD));
}

// Pointer to a float pair in shared memory.
__device__ __forceinline__ float2 lds2(const unsigned char *p) {
  return *reinterpret_cast<const float2 *>(p);
}

// 1. D = rowsum(dO * O), zeroes the dQ accumulator. rows = B H Sq; D / 8
// threads per row, 16-byte loads. A seq-major o or dO (Layout bits kSeqO,
// kSeqDout) needs H and Sq to find row (b, h, i): rows are taken in o's
// storage order then, so that its loads stay consecutive.
template <typename T, int D, unsigned Bits = 0>
__device__ __forceinline__ void prepare(const T *o, const T *dO, float *dd, float *dqAcc,
                                        int64_t rows, int64_t H = 0, int64_t Sq = 0,
                                        Layout<Bits> = Layout<Bits>()) {
  constexpr int per = D / 8;
  constexpr bool seqO = (Bits & kSeqO) != 0, seqDout = (Bits & kSeqDout) != 0;
  const int64_t threadsAll = (int64_t)gridDim.x * blockDim.x;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < rows * per;
       e += threadsAll) {
    const int64_t stored = e / per; // the row's place in o's storage order
    const int c = (int)(e % per);
    int64_t row = stored, oRow = stored, gRow = stored; // [B, H, Sq] index; o's, dO's rows
    if constexpr (seqO || seqDout) {
      int64_t b, h, i;
      if constexpr (seqO) { // stored = (b Sq + i) H + h
        h = stored % H;
        i = (stored / H) % Sq;
        b = stored / (H * Sq);
      } else { // stored = (b H + h) Sq + i
        i = stored % Sq;
        h = (stored / Sq) % H;
        b = stored / (Sq * H);
      }
      row = (b * H + h) * Sq + i;
      const int64_t seqRow = (b * Sq + i) * H + h;
      oRow = seqO ? seqRow : row;
      gRow = seqDout ? seqRow : row;
    }
    const uint4 a = *reinterpret_cast<const uint4 *>(o + oRow * D + c * 8);
    const uint4 g = *reinterpret_cast<const uint4 *>(dO + gRow * D + c * 8);
    const T *ae = reinterpret_cast<const T *>(&a), *ge = reinterpret_cast<const T *>(&g);
    float sum = 0.f;
#pragma unroll
    for (int u = 0; u < 8; ++u)
      sum += (float)ae[u] * (float)ge[u];
    // The row's D / 8 threads are consecutive lanes of one warp (D / 8 is
    // 8 or 16, and rows start at multiples of it).
#pragma unroll
    for (int w = per / 2; w; w /= 2)
      sum += __shfl_xor_sync(0xffffffffu, sum, w, per);
    if (c == 0)
      dd[row] = sum;
    // Every element of the accumulator once, whatever its layout.
    float4 *z = reinterpret_cast<float4 *>(dqAcc + stored * D + c * 8);
    z[0] = make_float4(0.f, 0.f, 0.f, 0.f);
    z[1] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

// 3. dQ = scale * accumulator; n = B H Sq D (a multiple of 8).
template <typename T>
__device__ __forceinline__ void finish(const float *dqAcc, T *dq, float scale, int64_t n) {
  const int64_t threadsAll = (int64_t)gridDim.x * blockDim.x;
  for (int64_t e = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * 4; e < n;
       e += threadsAll * 4) {
    const float4 a = *reinterpret_cast<const float4 *>(dqAcc + e);
    uint2 out;
    out.x = pack<T>(a.x * scale, a.y * scale);
    out.y = pack<T>(a.z * scale, a.w * scale);
    *reinterpret_cast<uint2 *>(dq + e) = out;
  }
}

// 2. One block: keys [kt BN, kt BN + BN) of one (batch, kv head); blocks
// take the key tiles in order, the causal ones with the most query tiles
// first. 384 threads, __launch_bounds__(384, 1).
// The mask is the forward's (FlashAttention90.cuh: NoMask, ElementMask,
// DocumentMask, KeyPaddingMask), applied to S^T before the exponential; a
// query tile the mask drops for all 128 keys is skipped by the producer and
// both consumers alike.
template <typename T, int D, typename Mask = NoMask, unsigned Bits = 0>
__device__ __forceinline__ void backward(const T *q, const T *k, const T *v, const T *dO,
                                         const float *lse, const float *dd, float *dqAcc, T *dK,
                                         T *dV, int64_t B, int64_t H, int64_t Hkv, int64_t Sq,
                                         int64_t L, float scale, bool causal,
                                         unsigned char *smemRaw, Mask mask = Mask(),
                                         Layout<Bits> = Layout<Bits>()) {
  static_assert(D == 64 || D == 128, "kiln_fa90 backward handles head dims 64 and 128");
  using S = Smem<D>;
  constexpr int kStages = S::kStages;
  constexpr int C = D / 8; // 16-byte chunks per row
  unsigned char *smem = reinterpret_cast<unsigned char *>(
      (reinterpret_cast<uintptr_t>(smemRaw) + 1023) & ~static_cast<uintptr_t>(1023));
  const uint32_t base = smemAddr(smem), kAddr = base + S::k, vAddr = base + S::v,
                 dsAddr = base + S::dS, qAddr = base + S::q, doAddr = base + S::dO,
                 bars = base + S::bars;
  auto full = [&](int s) { return bars + 8 * s; };
  auto empty = [&](int s) { return bars + 8 * (kStages + s); };
  const uint32_t kvFull = bars + 8 * 2 * kStages;
  const int64_t BHk = B * Hkv, G = H / Hkv;
  const int64_t kt = (int64_t)blockIdx.x / BHk, bhk = (int64_t)blockIdx.x % BHk;
  const int64_t hk = bhk % Hkv, b = bhk / Hkv, j0 = kt * BN;
  const int64_t qTiles = (Sq + BM - 1) / BM;
  // Causal: query tiles before the key tile's first key see none of it.
  const int64_t qStart = causal ? (j0 / BM < qTiles ? j0 / BM : qTiles) : 0;
  const int perHead = (int)(qTiles - qStart), nIter = (int)(G * perHead);
  // The warpgroup through a shuffle from lane 0, as in the forward: ptxas
  // knows it is uniform per warp and schedules the products better
  // (measured on the H200: 1b 0.810 -> 0.783 ms, 8B-like 2.245 -> 2.150,
  // 1b packed documents 0.518 -> 0.499).
  const int group = __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0), tid = threadIdx.x % 128;
  const Strides qs = stridesOf<(Bits & kSeqQ) != 0, D>(H, Sq),
                ks = stridesOf<(Bits & kSeqK) != 0, D>(Hkv, L),
                vs = stridesOf<(Bits & kSeqV) != 0, D>(Hkv, L),
                gs = stridesOf<(Bits & kSeqDout) != 0, D>(H, Sq),
                dqs = stridesOf<(Bits & kSeqDq) != 0, D>(H, Sq),
                dks = stridesOf<(Bits & kSeqDk) != 0, D>(Hkv, L),
                dvs = stridesOf<(Bits & kSeqDv) != 0, D>(Hkv, L);
  // Iteration t: query tile (qStart + t % perHead) of head hk G + t / perHead.
  auto headOf = [&](int t) { return hk * G + t / perHead; };
  auto rowsOf = [&](int t) { return (qStart + t % perHead) * BM; };
  // Iterations the mask drops for every key of the block: not loaded, not
  // computed; the ring's stages count the ones taken.
  auto blockDrops = [&](int t) {
    if constexpr (Mask::kNone)
      return false;
    const int64_t i0 = rowsOf(t);
    return mask.tile(mask.rows(b, headOf(t), i0, min(i0 + BM, Sq)), b, j0, min(j0 + BN, L)) == kDrop;
  };
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      barrierInit(full(s), 128);
      barrierInit(empty(s), 8); // lane 0 of every consumer warp
    }
    barrierInit(kvFull, 128);
  }
  __syncthreads();
  if (group == 0) { // producer
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n");
    const T *kBase = k + b * ks.batch + hk * ks.head, *vBase = v + b * vs.batch + hk * vs.head;
    for (int e = tid; e < BN * C; e += 128) {
      const int r = e / C, c = e % C;
      const bool valid = j0 + r < L;
      const int64_t row = valid ? j0 + r : 0;
      cpAsync16(kAddr + swizzled(BN, r, c), kBase + row * ks.seq + c * 8, valid);
      cpAsync16(vAddr + swizzled(BN, r, c), vBase + row * vs.seq + c * 8, valid);
    }
    cpAsyncCommit();
    cpAsyncWait<0>();
    fenceProxyAsync();
    barrierArrive(kvFull);
    int n = 0; // iterations loaded
    for (int t = 0; t < nIter; ++t) {
      if (blockDrops(t))
        continue;
      const int s = n % kStages;
      if (n >= kStages)
        barrierWait(empty(s), ((n / kStages) - 1) & 1);
      const int64_t h = headOf(t), i0 = rowsOf(t);
      const int64_t rowBase = (b * H + h) * Sq; // lse's and D's
      const T *qBase = q + b * qs.batch + h * qs.head, *gBase = dO + b * gs.batch + h * gs.head;
#pragma unroll
      for (int u = 0; u < BM * C / 128; ++u) {
        const int e = tid + 128 * u, r = e / C, c = e % C;
        const bool valid = i0 + r < Sq;
        const int64_t row = valid ? i0 + r : 0;
        const uint32_t at = swizzled(BM, r, c) + s * (BM * D * 2);
        cpAsync16(qAddr + at, qBase + row * qs.seq + c * 8, valid);
        cpAsync16(doAddr + at, gBase + row * gs.seq + c * 8, valid);
      }
      if (tid < 2 * BM / 4) { // lse and D: 16 chunks of 4 floats each
        const int which = tid / (BM / 4), c = tid % (BM / 4);
        const int64_t row = i0 + 4 * c;
        const bool valid = row < Sq; // Sq % 4 == 0 is a launch condition
        const float *src = (which ? dd : lse) + rowBase + (valid ? row : 0);
        cpAsync16(base + (which ? S::dd : S::lse) + s * BM * 4 + 16 * c, src, valid);
      }
      cpAsyncCommit();
      if (n > 0) {
        cpAsyncWait<1>();
        fenceProxyAsync();
        barrierArrive(full((n - 1) % kStages));
      }
      ++n;
    }
    if (n > 0) {
      cpAsyncWait<0>();
      fenceProxyAsync();
      barrierArrive(full((n - 1) % kStages));
    }
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n");
  const int cg = group - 1, warp = tid / 32, lane = tid % 32;
  const float kInf = __int_as_float(0x7f800000), log2e = 1.4426950408889634f,
              scaleLog2 = scale * log2e;
  float dv[D / 2], dk[D / 2];
#pragma unroll
  for (int x = 0; x < D / 2; ++x)
    dv[x] = dk[x] = 0.f;
  // This thread's keys (rows of S^T): keyA, keyA + 8, local to the block.
  const int keyA = 64 * cg + 16 * warp + lane / 4;
  constexpr bool alternate = kAlternateDq<D>;
  barrierWait(kvFull, 0);
  // This warpgroup's keys, for the mask's class (keys past L are never
  // stored, and the mask is not read there).
  const int64_t myKeys = j0 + 64 * cg, myKeysEnd = min(myKeys + 64, L);
  // The next iteration at or after t the block takes (the producer's walk).
  auto nextIter = [&](int t) {
    if constexpr (!Mask::kNone)
      while (t < nIter && blockDrops(t))
        ++t;
    return t;
  };
  // S^T = K Q^T and dP^T = V dO^T of the n-th iteration taken (stage n % 2).
  float st[BM / 2], dp[BM / 2];
  auto scores = [&](int n) {
    const int s = n % kStages;
    const uint32_t qS = qAddr + s * (BM * D * 2), doS = doAddr + s * (BM * D * 2);
    barrierWait(full(s), (n / kStages) & 1);
    mmaFence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t a = (kk / 4) * BN * 128 + 64 * cg * 128 + (kk % 4) * 32,
                     bo = (kk / 4) * BM * 128 + (kk % 4) * 32;
      mmaSSK<BM, T>(st, descriptor(kAddr + a, 16, 1024), descriptor(qS + bo, 16, 1024), kk > 0);
      mmaSSK<BM, T>(dp, descriptor(vAddr + a, 16, 1024), descriptor(doS + bo, 16, 1024), kk > 0);
    }
    mmaCommit();
  };
  constexpr bool pipelined = kPipelined<D>, merged = kMergedDkDq<D> || pipelined;
  int t = nextIter(0);
  if (pipelined && t < nIter)
    scores(0);
  for (int n = 0; t < nIter; ++n) { // n: iterations taken: the ring's stage and phase, the dS^T buffer's turn
    const int tNext = nextIter(t + 1);
    const int s = n % kStages;
    const int64_t h = headOf(t), i0 = rowsOf(t);
    const uint32_t qS = qAddr + s * (BM * D * 2), doS = doAddr + s * (BM * D * 2);
    // dS^T of all 128 keys (this warpgroup's rows 64 cg ...), and its rows.
    const uint32_t dsTile = dsAddr + (alternate ? (n & 1) : 0) * (2 * 64 * BM * 2),
                   myDs = dsTile + cg * (64 * BM * 2);
    const bool myDq = kSplitDq<D> || !alternate || (n & 1) == cg;
    const unsigned char *lseS = smem + S::lse + s * BM * 4, *ddS = smem + S::dd + s * BM * 4;
    if (!pipelined)
      scores(n);
    mmaWait<0>();
    pin(st);
    pin(dp);
    // P^T = exp2(S^T scale log2(e) - lse log2(e)); 0 where the key is past
    // the query (causal). Column x of the accumulator: query
    // 8 (x / 4) + 2 (lane % 4) + (x & 1), key keyA (+ 8 when x & 2).
    const bool diagonal = causal && i0 < j0 + BN;
    int cls = kKeep;
    if constexpr (!Mask::kNone)
      if (myKeys < L)
        cls = mask.tile(mask.rows(b, h, i0, min(i0 + BM, Sq)), b, myKeys, myKeysEnd);
    // Into pt, not in place: S^T's registers are defined by products only
    // (kPipelined keeps them in flight across the loop's back edge).
    float pt[BM / 2];
#pragma unroll
    for (int x = 0; x < BM / 2; x += 2) {
      const int col = 8 * (x / 4) + 2 * (lane % 4);
      const float2 l = lds2(lseS + 4 * col);
      float l0 = l.x == -kInf ? kInf : l.x * log2e, l1 = l.y == -kInf ? kInf : l.y * log2e;
      if (!Mask::kNone && cls == kMixed) { // the mask's term, in log2 units
        const int64_t key = j0 + keyA + ((x & 2) ? 8 : 0), qry = i0 + col;
        if (key < L && qry < Sq)
          l0 = fmaf(-mask(b, h, qry, key), log2e, l0);
        if (key < L && qry + 1 < Sq)
          l1 = fmaf(-mask(b, h, qry + 1, key), log2e, l1);
      }
      pt[x] = exp2Approx(fmaf(st[x], scaleLog2, -l0));
      pt[x + 1] = exp2Approx(fmaf(st[x + 1], scaleLog2, -l1));
      if (!Mask::kNone && cls == kDrop)
        pt[x] = pt[x + 1] = 0.f;
      if (diagonal) {
        const int64_t key = j0 + keyA + ((x & 2) ? 8 : 0), qry = i0 + col;
        if (key > qry)
          pt[x] = 0.f;
        if (key > qry + 1)
          pt[x + 1] = 0.f;
      }
    }
    uint32_t pp[BM / 16][4], ps[BM / 16][4];
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk)
#pragma unroll
      for (int g = 0; g < 4; ++g)
        pp[kk][g] = pack<T>(pt[8 * kk + 2 * g], pt[8 * kk + 2 * g + 1]);
    mmaFence();
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk) // dV += P^T dO (dO N-major)
      mmaRS<D, T>(dv, pp[kk], descriptor(doS + kk * 16 * 128, BM * 128, 1024), 1);
    mmaCommit();
    // dS^T = P^T (dP^T - D), rounded once; to registers (dK's A operand)
    // and to shared memory as [key][query] (dQ's A operand, transposed).
#pragma unroll
    for (int x = 0; x < BM / 2; x += 2) {
      const int col = 8 * (x / 4) + 2 * (lane % 4);
      const float2 dcol = lds2(ddS + 4 * col);
      const uint32_t packed = pack<T>(pt[x] * (dp[x] - dcol.x), pt[x + 1] * (dp[x + 1] - dcol.y));
      ps[x / 8][(x % 8) / 2] = packed;
      const int r = 16 * warp + lane / 4 + ((x & 2) ? 8 : 0);
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(myDs + swizzled(64, r, col / 8) +
                                                     (col % 8) * 2),
                   "r"(packed)
                   : "memory");
    }
    fenceProxyAsync();
    if (alternate) // both halves of dS^T are in
      asm volatile("bar.sync 3, 256;\n" ::: "memory");
    else
      groupSync(1 + cg);
    mmaWait<0>(); // dV's product is in: pp is free
    pin(dv);
    pinU(pp);
    mmaFence();
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk) // dK += dS^T Q (Q N-major)
      mmaRS<D, T>(dk, ps[kk], descriptor(qS + kk * 16 * 128, BM * 128, 1024), 1);
    mmaCommit();
    // dQ = dS K in blocks of 64 head-dim columns (32 accumulator registers),
    // added to the fp32 accumulator: rows i0 + 16 warp + lane / 4 (+ 8),
    // column pairs 64 hb + 8 (x / 4) + 2 (lane % 4).
    float *dqBase = dqAcc + b * dqs.batch + h * dqs.head + i0 * dqs.seq;
    // Columns of one dQ product: 64 (a block of them), or with kSplitDq half
    // the head dim, this warpgroup's half.
    constexpr int DQN = kSplitDq<D> ? D / 2 : 64, dqBlocks = kSplitDq<D> ? 1 : D / 64;
    float dq[DQN / 2];
    auto dqProducts = [&](int hb) {
      const int col0 = kSplitDq<D> ? cg * DQN : 64 * hb; // first head-dim column
      const uint32_t kCols = kAddr + (col0 / 64) * BN * 128 + (col0 % 64) * 2;
      mmaFence();
      if constexpr (alternate) {
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) // over all 128 keys
          mmaSST<DQN, T>(dq, descriptor(dsTile + kk * 16 * 128, 64 * 128, 1024),
                         descriptor(kCols + 16 * kk * 128, BN * 128, 1024), kk > 0);
      } else {
#pragma unroll
        for (int kk = 0; kk < 64 / 16; ++kk) // over this warpgroup's 64 keys
          mmaSST<DQN, T>(dq, descriptor(myDs + kk * 16 * 128, 64 * 128, 1024),
                         descriptor(kCols + (64 * cg + 16 * kk) * 128, BN * 128, 1024),
                         kk > 0);
      }
      mmaCommit();
    };
    auto dqAdd = [&](int hb) {
      const int col0 = kSplitDq<D> ? cg * DQN : 64 * hb;
      if constexpr (kDqWarp<D>) {
        unsigned char *ws = smem + S::dqWarp + (cg * 4 + warp) * (16 * kWarpPitch * 4);
#pragma unroll
        for (int rr = 0; rr < 2; ++rr)
#pragma unroll
          for (int jb = 0; jb < DQN / 8; ++jb)
            *reinterpret_cast<float2 *>(ws + ((lane / 4 + 8 * rr) * kWarpPitch + 8 * jb + 2 * (lane % 4)) * 4) =
                make_float2(dq[4 * jb + 2 * rr], dq[4 * jb + 2 * rr + 1]);
        __syncwarp();
        constexpr int lanesPerRow = DQN / 4, rowsPerTurn = 32 / lanesPerRow;
        const int cc = 4 * (lane % lanesPerRow);
#pragma unroll
        for (int p = 0; p < 16; p += rowsPerTurn) {
          const int rl = p + lane / lanesPerRow, r = 16 * warp + rl;
          const float4 v4 = *reinterpret_cast<const float4 *>(ws + (rl * kWarpPitch + cc) * 4);
          if (i0 + r < Sq)
            asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(dqBase + (int64_t)r * dqs.seq + col0 + cc),
                         "f"(v4.x), "f"(v4.y), "f"(v4.z), "f"(v4.w)
                         : "memory");
        }
        __syncwarp(); // the reads are done before the next block's stores
      } else if constexpr (kDqV4<D>) {
        // Lane l holds rows r, r + 8 at columns c, c + 1 (c = 8 jb + 2 (l % 4));
        // after the trade the even lane has row r, columns c .. c + 3, the
        // odd lane row r + 8, columns c - 2 .. c + 1. Every lane shuffles,
        // so the tail rows test only around the reduction.
        const bool odd = (lane & 1) != 0;
        const int r = 16 * warp + lane / 4 + (odd ? 8 : 0);
        const int c = 2 * (lane % 4) - (odd ? 2 : 0);
        float *rowAt = dqBase + (int64_t)r * dqs.seq + col0 + c;
#pragma unroll
        for (int jb = 0; jb < DQN / 8; ++jb) {
          const float s0 = odd ? dq[4 * jb] : dq[4 * jb + 2], s1 = odd ? dq[4 * jb + 1] : dq[4 * jb + 3];
          const float g0 = __shfl_xor_sync(0xffffffffu, s0, 1), g1 = __shfl_xor_sync(0xffffffffu, s1, 1);
          const float v0 = odd ? g0 : dq[4 * jb], v1 = odd ? g1 : dq[4 * jb + 1],
                      v2 = odd ? dq[4 * jb + 2] : g0, v3 = odd ? dq[4 * jb + 3] : g1;
          if (i0 + r < Sq)
            asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(rowAt + 8 * jb),
                         "f"(v0), "f"(v1), "f"(v2), "f"(v3)
                         : "memory");
        }
      } else {
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) {
          const int r = 16 * warp + lane / 4 + 8 * rr;
          if (i0 + r < Sq) {
#pragma unroll
            for (int jb = 0; jb < DQN / 8; ++jb)
              atomicAdd(reinterpret_cast<float2 *>(dqBase + (int64_t)r * dqs.seq + col0 + 8 * jb +
                                                   2 * (lane % 4)),
                        make_float2(dq[4 * jb + 2 * rr], dq[4 * jb + 2 * rr + 1]));
          }
        }
      }
    };
    // kBulkDq: the fragment of block hb into this warpgroup's staging tile,
    // then one bulk reduction per row of it.
    unsigned char *stage = smem + S::dqStage + cg * 64 * kDqPitch<D> * 4;
    auto dqStageWrite = [&](int hb) {
      const int col0 = kSplitDq<D> ? cg * DQN : 64 * hb;
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        const int r = 16 * warp + lane / 4 + 8 * rr;
#pragma unroll
        for (int jb = 0; jb < DQN / 8; ++jb)
          *reinterpret_cast<float2 *>(stage + (r * kDqPitch<D> + col0 + 8 * jb + 2 * (lane % 4)) * 4) =
              make_float2(dq[4 * jb + 2 * rr], dq[4 * jb + 2 * rr + 1]);
      }
    };
    auto dqFlush = [&] {
      fenceProxyAsync(); // the staging writes, seen by the bulk copies
      groupSync(1 + cg);
      const int col0 = kSplitDq<D> ? cg * DQN : 0, width = kSplitDq<D> ? DQN : D;
      if (tid < 64 && i0 + tid < Sq) {
        float *dst = dqBase + (int64_t)tid * dqs.seq + col0;
        const uint32_t src = smemAddr(stage + (tid * kDqPitch<D> + col0) * 4);
        asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n"
                     "cp.async.bulk.commit_group;\n" ::"l"(dst),
                     "r"(src), "r"(width * 4)
                     : "memory");
      }
    };
    auto release = [&] {
      pin(dk);
      pinU(ps);
      __syncwarp();
      if (lane == 0)
        barrierArrive(empty(s)); // Q and dO of this stage are no longer read
    };
    if constexpr (merged) {
      // dQ's first block is issued behind dK's product (kMergedDkDq), and
      // with kPipelined the next iteration's S^T, dP^T behind that: the
      // atomics run while the tensor cores work.
      const bool ahead = pipelined && tNext < nIter;
      if (myDq) {
        dqProducts(0);
        mmaWait<1>();
      } else {
        mmaWait<0>();
      }
      release();
      if (ahead)
        scores(n + 1);
      if (myDq) {
#pragma unroll
        for (int hb = 0; hb < dqBlocks; ++hb) {
          if (hb > 0)
            dqProducts(hb);
          if (ahead && hb == 0)
            mmaWait<1>();
          else
            mmaWait<0>();
          pin(dq);
          dqAdd(hb);
        }
      }
    } else {
      mmaWait<0>();
      release();
      if (myDq) {
        if constexpr (kBulkDq<D>) {
          // This warpgroup's last bulk reductions have read the staging tile.
          if (tid < 64)
            asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
          groupSync(1 + cg);
        }
#pragma unroll
        for (int hb = 0; hb < dqBlocks; ++hb) {
          dqProducts(hb);
          mmaWait<0>();
          pin(dq);
          if constexpr (kBulkDq<D>)
            dqStageWrite(hb);
          else
            dqAdd(hb);
        }
        if constexpr (kBulkDq<D>)
          dqFlush();
      }
    }
    // The next iteration overwrites myDs: every warp's dQ product is done
    // (the wait above), and this keeps a fast warp from storing early. (With
    // kAlternateDq the next tile writes the other buffer, and the one after
    // waits at the barrier this tile's dQ warpgroup reaches after its product.)
    if (!alternate)
      groupSync(1 + cg);
    t = tNext;
  }
  // The staging tile stays until the bulk reductions from it are done.
  if constexpr (kBulkDq<D>)
    if (tid < 64)
      asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
  // dK = scale dS^T Q, dV; rows keyA, keyA + 8.
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int r = keyA + 8 * rr;
    if (j0 + r < L) {
      T *dkRow = dK + b * dks.batch + hk * dks.head + (j0 + r) * dks.seq,
        *dvRow = dV + b * dvs.batch + hk * dvs.head + (j0 + r) * dvs.seq;
#pragma unroll
      for (int jb = 0; jb < D / 8; ++jb) {
        const int at = 8 * jb + 2 * (lane % 4);
        *reinterpret_cast<uint32_t *>(dkRow + at) =
            pack<T>(dk[4 * jb + 2 * rr] * scale, dk[4 * jb + 2 * rr + 1] * scale);
        *reinterpret_cast<uint32_t *>(dvRow + at) = pack<T>(dv[4 * jb + 2 * rr], dv[4 * jb + 2 * rr + 1]);
      }
    }
  }
}
} // namespace bwd
} // namespace kiln_fa90
