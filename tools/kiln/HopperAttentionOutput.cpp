//===- HopperAttentionOutput.cpp - The artifact's sm_90a attention --------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// kernels/kiln_fa90 (docs/artifact.md): when --arch names sm_90 and the
// step has a tiled attention forward the runtime may replace (a launch with
// `attention` roles, bf16, head dim 64 or 128), Kiln's own Hopper
// forward (lib/Codegen/cuda/FlashAttention90.cuh) compiled by NVRTC for
// sm_90a, one kernel per element type and head dim the step needs, and
// where the step has such an attention backward, its backward
// (FlashAttention90Backward.cuh: prepare, main and finish kernels). The
// runtime runs them on sm_90 devices in place of those launches; everywhere
// else the portable kernels stay.
//
//===----------------------------------------------------------------------===//

#include "CudaOutput.h"
#include "Driver.h"

#include "kiln/Codegen/Cuda.h"
#include "kiln/Codegen/Nvrtc.h"
#include "kiln/Dialect/Kernel/KernelDialect.h"
#include "kiln/artifact/HopperAttention.h"
#include "llvm/ADT/STLExtras.h"

#include <set>
#include <tuple>

using namespace llvm;
using namespace mlir;

namespace kiln::driver {

namespace {
using artifact::DType;
/// (dtype, head dim, layout bits: kiln/artifact/HopperAttention.h).
using Variant = std::tuple<DType, int64_t, unsigned>;

/// The layout bits of a launch's `seq_major` roles.
unsigned layoutBits(DictionaryAttr roles) {
  unsigned bits = 0;
  if (auto seqMajor = roles.getAs<ArrayAttr>("seq_major"))
    for (Attribute role : seqMajor)
      for (unsigned bit = 0; bit < 8; ++bit)
        if (cast<StringAttr>(role).getValue() == artifact::attentionRoleName(bit))
          bits |= 1u << bit;
  return bits;
}

/// Whether \p variants has \p v's dtype and head dim (in any layout).
bool hasShape(const std::set<Variant> &variants, const Variant &v) {
  return llvm::any_of(variants, [&](const Variant &w) {
    return std::get<0>(w) == std::get<0>(v) && std::get<1>(w) == std::get<1>(v);
  });
}

/// (dtype, head dim, layout) of every tiled attention forward (or, with
/// \p backward, backward) the runtime may replace; with \p masked, of the
/// masked ones, whose kernels (one per launch kernel) go to \p maskedKernels.
std::set<Variant> hopperForwards(ModuleOp module, bool backward = false, bool masked = false,
                                 std::set<std::string> *maskedKernels = nullptr) {
  std::set<Variant> needed;
  module.walk([&](kernel::LaunchOp launch) {
    std::optional<DictionaryAttr> roles = launch.getAttention();
    if (!roles || !*roles)
      return;
    auto isMasked = roles->getAs<BoolAttr>("masked");
    if ((isMasked && isMasked.getValue()) != masked)
      return;
    auto direction = roles->getAs<StringAttr>("direction");
    auto q = roles->getAs<IntegerAttr>("q");
    if (!direction || direction.getValue() != (backward ? "backward" : "forward") || !q)
      return;
    SmallVector<Value> operands(launch.getIns());
    llvm::append_range(operands, launch.getOuts());
    if (q.getInt() < 0 || q.getInt() >= (int64_t)operands.size())
      return;
    RankedTensorType type = cast<kernel::BufferType>(operands[q.getInt()].getType()).getTensor();
    Type element = type.getElementType();
    DType dtype = element.isBF16() ? DType::BF16 : element.isF16() ? DType::F16 : DType::F32;
    if (type.getRank() == 4 && !type.isDynamicDim(3) &&
        artifact::hopperAttentionFits(dtype, type.getDimSize(3))) {
      needed.insert({dtype, type.getDimSize(3), layoutBits(*roles)});
      if (maskedKernels)
        maskedKernels->insert(launch.getKernel().str());
    }
  });
  return needed;
}

/// The kiln_fa90 variants of the masked attention kernels \p names
/// (codegen::emitHopperAttentionKernel), or an error naming the kernel.
std::optional<std::string> maskedSources(ModuleOp module, const std::set<std::string> &names) {
  std::string text;
  for (const std::string &name : names) {
    auto kernel = module.lookupSymbol<kernel::KernelOp>(name);
    if (!kernel) {
      fail("kernels/kiln_fa90: no kernel '" + name + "' for a masked attention launch");
      return std::nullopt;
    }
    FailureOr<codegen::CudaSource> source = codegen::emitHopperAttentionKernel(kernel);
    if (failed(source))
      return std::nullopt;
    text += "\n" + source->comment + source->body;
  }
  return text;
}
} // namespace

/// The backward's prepare and main kernels for \p dtype at head dim \p d
/// in \p layout (kiln/artifact/HopperAttention.h has their parameters),
/// those of \p done left out (kernels of layouts that differ only in bits
/// the kernel ignores are one).
static std::string hopperBackwardSource(DType dtype, int64_t d, unsigned layout,
                                        std::set<std::string> &done) {
  std::string t = dtype == DType::BF16 ? "__nv_bfloat16" : "__half", D = std::to_string(d);
  std::string c = "const " + t + " *";
  std::string text;
  if (done.insert("geometry " + D).second)
    text += "\n// The runtime's launch geometry of the backward.\n"
            "static_assert(kiln_fa90::bwd::Smem<" +
            D + ">::bytes == " + std::to_string(artifact::hopperAttentionBackwardSharedBytes(d)) +
            " && kiln_fa90::bwd::kThreads == " +
            std::to_string(artifact::kHopperAttentionBackwardThreads) +
            " && kiln_fa90::bwd::BN == " + std::to_string(artifact::kHopperAttentionBackwardKeys) +
            ", \"kiln_fa90's backward layout is not the runtime's\");\n";
  unsigned prepBits = layout & artifact::kHopperPrepareLayoutBits,
           mainBits = layout & artifact::kHopperBackwardLayoutBits;
  std::string prep = artifact::hopperAttentionBackwardKernel(dtype, d, "prep_", layout);
  if (done.insert(prep).second)
    text += "extern \"C\" __global__ void " + prep + "(" + c + "o, " + c +
            "dO, float *dd,\n    float *dqAcc, int64_t rows" +
            (prepBits ? ", int64_t H, int64_t Sq" : "") +
            ") {\n"
            "  kiln_fa90::bwd::prepare<" +
            t + ", " + D + ">(o, dO, dd, dqAcc, rows" +
            (prepBits ? ", H, Sq, kiln_fa90::Layout<" + std::to_string(prepBits) + ">()" : "") +
            ");\n}\n";
  std::string main = artifact::hopperAttentionBackwardKernel(dtype, d, "", layout);
  if (done.insert(main).second)
    text +=
        "extern \"C\" __global__ void __launch_bounds__(" +
        std::to_string(artifact::kHopperAttentionBackwardThreads) + ", 1)\n" + main + "(" + c +
        "q, " + c + "k, " + c + "v, " + c + "dO,\n    const float *lse, const float *dd, " +
        "float *dqAcc, " + t + " *dK, " + t +
        " *dV, int64_t B, int64_t H,\n    int64_t Hkv, int64_t Sq, int64_t L, int64_t "
        "scaleBits, int64_t causal) {\n"
        "  extern __shared__ __align__(1024) unsigned char smem[];\n"
        "  kiln_fa90::bwd::backward<" +
        t + ", " + D +
        ">(q, k, v, dO, lse, dd, dqAcc, dK, dV, B, H, Hkv, Sq, L,\n"
        "      __int_as_float((int)scaleBits), causal != 0, smem" +
        (mainBits ? ", kiln_fa90::NoMask(), kiln_fa90::Layout<" + std::to_string(mainBits) + ">()"
                  : std::string()) +
        ");\n}\n";
  return text;
}

std::string hopperAttentionSource(const std::set<Variant> &forwards,
                                  const std::set<Variant> &backwards,
                                  const std::string &masked = "") {
  std::string text = "// kiln: Kiln's sm_90a attention forward (kernels/kiln_fa90)\n";
  // The masked variants compute their masks with the generated kernels'
  // helpers.
  if (!masked.empty())
    text += codegen::cudaPrelude(true, false);
  text += codegen::flashAttention90Prelude();
  // The layout bits the runtime names kernels by are kiln_fa90's.
  text += "static_assert(kiln_fa90::kSeqQ == " + std::to_string(artifact::kSeqMajorQ) +
          " && kiln_fa90::kSeqK == " + std::to_string(artifact::kSeqMajorK) +
          " && kiln_fa90::kSeqV == " + std::to_string(artifact::kSeqMajorV) +
          " && kiln_fa90::kSeqO == " + std::to_string(artifact::kSeqMajorO) +
          " && kiln_fa90::kSeqDout == " + std::to_string(artifact::kSeqMajorDout) +
          " && kiln_fa90::kSeqDq == " + std::to_string(artifact::kSeqMajorDq) +
          " && kiln_fa90::kSeqDk == " + std::to_string(artifact::kSeqMajorDk) +
          " && kiln_fa90::kSeqDv == " + std::to_string(artifact::kSeqMajorDv) +
          ", \"kiln_fa90's layout bits are not the runtime's\");\n";
  std::set<std::string> geometry;
  for (auto [dtype, d, layout] : forwards) {
    std::string t = dtype == DType::BF16 ? "__nv_bfloat16" : "__half", D = std::to_string(d);
    std::string name = artifact::hopperAttentionKernel(dtype, d, layout);
    unsigned bits = layout & artifact::kHopperForwardLayoutBits;
    if (!geometry.insert(name).second)
      continue;
    bool first = geometry.insert("geometry " + D).second;
    if (first)
      text += "\n// The runtime's launch geometry (kiln/artifact/HopperAttention.h).\n"
              "static_assert(kiln_fa90::defaultConsumers<" +
              D + ">() == " + std::to_string(artifact::hopperAttentionConsumers(d)) +
              " && kiln_fa90::Smem<" + D +
              ">::bytes == " + std::to_string(artifact::hopperAttentionSharedBytes(d)) +
              ", \"kiln_fa90's layout is not the runtime's\");\n";
    text += "extern \"C\" __global__ void __launch_bounds__(" +
            std::to_string(artifact::hopperAttentionThreads(d)) + ", 1)\n" + name + "(const " + t +
            " *q, const " + t + " *k, const " + t + " *v, " + t +
            " *o, float *lse, int64_t B, int64_t H,\n    int64_t Hkv, int64_t Sq, int64_t L, "
            "int64_t scaleBits, int64_t causal) {\n"
            "  extern __shared__ __align__(1024) unsigned char smem[];\n"
            "  kiln_fa90::forward<" +
            t + ", " + D +
            ">(q, k, v, o, lse, B, H, Hkv, Sq, L, __int_as_float((int)scaleBits), causal != 0,\n"
            "                               smem" +
            (bits ? ", kiln_fa90::NoMask(), kiln_fa90::Layout<" + std::to_string(bits) + ">()"
                  : std::string()) +
            ");\n}\n";
  }
  if (backwards.empty())
    return masked.empty() ? text : text + "\n// kiln: masked attention\n" + masked;
  text += "\n// kiln: its backward\n";
  text += codegen::flashAttention90BackwardPrelude();
  std::set<DType> finishes;
  std::set<std::string> done;
  for (auto [dtype, d, layout] : backwards) {
    text += hopperBackwardSource(dtype, d, layout, done);
    finishes.insert(dtype);
  }
  for (DType dtype : finishes) {
    std::string t = dtype == DType::BF16 ? "__nv_bfloat16" : "__half";
    text += "extern \"C\" __global__ void " + artifact::hopperAttentionFinishKernel(dtype) +
            "(const float *dqAcc, " + t +
            " *dq, int64_t scaleBits,\n    int64_t n) {\n"
            "  kiln_fa90::bwd::finish<" +
            t + ">(dqAcc, dq, __int_as_float((int)scaleBits), n);\n}\n";
  }
  return masked.empty() ? text : text + "\n// kiln: masked attention\n" + masked;
}

int addHopperAttentionSections(ModuleOp module, const CudaOutputOptions &options,
                               std::vector<std::pair<std::string, std::string>> &sections) {
  if (!llvm::is_contained(options.archs, "sm_90"))
    return 0;
  std::set<Variant> forwards = hopperForwards(module);
  // Masked attention: one kiln_fa90 kernel per launch kernel, its mask the
  // generated kernel's; the backward's prepare and finish are the shared ones.
  std::set<std::string> maskedKernels;
  std::set<Variant> maskedForwards = hopperForwards(module, false, /*masked=*/true, &maskedKernels);
  std::set<Variant> maskedBackwards;
  for (const auto &entry : hopperForwards(module, true, /*masked=*/true, &maskedKernels))
    if (hasShape(maskedForwards, entry))
      maskedBackwards.insert(entry);
  if (forwards.empty() && maskedForwards.empty())
    return 0;
  // A backward whose forward runs elsewhere never runs here: the runtime
  // reads the row statistics kiln_fa90's forward writes.
  std::set<Variant> backwards = maskedBackwards;
  for (const auto &entry : hopperForwards(module, /*backward=*/true))
    if (hasShape(forwards, entry))
      backwards.insert(entry);
  std::optional<std::string> masked = maskedSources(module, maskedKernels);
  if (!masked)
    return 1;
  codegen::KernelSource source{artifact::kHopperAttentionModule,
                               hopperAttentionSource(forwards, backwards, *masked)};
  codegen::NvrtcOptions nvrtc;
  nvrtc.cacheDir = options.cacheDir;
  Expected<std::string> cubin = codegen::compileKernel(source, "sm_90a", nvrtc);
  if (!cubin)
    return fail("kernels/" + source.name + ": " + toString(cubin.takeError()));
  std::string prefix = std::string("kernels/") + artifact::kHopperAttentionModule + "/";
  sections.push_back({prefix + "sm_90a.cubin", std::move(*cubin)});
  sections.push_back({prefix + "source", std::move(source.source)});
  return 0;
}

} // namespace kiln::driver
