//===- QuantizeNf4.cpp - NF4 storage of frozen linear weights -------------===//
//
// QLoRA's storage: frozen linear weights live as NF4 codes plus a per-block
// absmax, and the step dequantizes them right before the matmul (which
// fusion later folds into the GEMM's operand load). The codes are computed
// where the weights live — by the init program when a checkpoint loads —
// never by the compiler, which does not see weight values.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Graph/GraphDialect.h"
#include "kiln/Dialect/Graph/InitProgram.h"
#include "kiln/Dialect/Graph/LinearWeights.h"
#include "kiln/Dialect/Graph/Passes.h"

#include "llvm/ADT/MapVector.h"
#include "llvm/Support/Regex.h"

namespace kiln {
#define GEN_PASS_DEF_QUANTIZENF4PASS
#include "kiln/Dialect/Graph/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {

struct QuantizeNf4Pass final : kiln::impl::QuantizeNf4PassBase<QuantizeNf4Pass> {
  using QuantizeNf4PassBase::QuantizeNf4PassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (blockSize <= 0 || blockSize % 2) {
      module.emitError("NF4 block size must be even and positive, got ")
          << static_cast<int64_t>(blockSize);
      return signalPassFailure();
    }
    llvm::Regex skipRegex(skip);
    std::string error;
    if (!skip.empty() && !skipRegex.isValid(error)) {
      module.emitError("invalid NF4 skip regex: ") << error;
      return signalPassFailure();
    }
    // Reads of each weight (by name), and whether every read is a frozen
    // linear-layer weight in the same layout.
    struct Candidate {
      SmallVector<LinearWeight> uses;
      SmallVector<ParameterOp> reads;
      bool eligible = true;
    };
    llvm::MapVector<StringRef, Candidate> weights;
    module.walk([&](ParameterOp param) {
      auto func = param->getParentOfType<func::FuncOp>();
      if (func && isInitProgram(func))
        return;
      Candidate &c = weights[param.getName()];
      c.reads.push_back(param);
      if (param.getTrainable() || param.getType().getRank() != 2)
        c.eligible = false;
      for (Operation *user : param->getUsers()) {
        // Through the optional transpose to the matmul.
        Operation *use = user;
        if (auto t = dyn_cast<TransposeOp>(user); t && t->hasOneUse())
          use = *t->getUsers().begin();
        auto matmul = dyn_cast<MatmulOp>(use);
        std::optional<LinearWeight> w = matmul ? matchLinearWeight(matmul) : std::nullopt;
        if (!w || w->param != param ||
            (!c.uses.empty() && c.uses.front().pytorchLayout != w->pytorchLayout)) {
          c.eligible = false;
          continue;
        }
        c.uses.push_back(*w);
      }
    });
    func::FuncOp init;
    for (auto &[name, c] : weights) {
      if (!c.eligible || c.uses.empty())
        continue;
      LinearWeight w = c.uses.front();
      if (!skip.empty() && (skipRegex.match(name) || skipRegex.match(w.pytorchName())))
        continue;
      if (!init)
        init = getOrCreateInitProgram(module);
      quantizeInInit(init, w);
      for (ParameterOp read : c.reads)
        replaceRead(read, w);
    }
  }

  std::string codesName(LinearWeight w) { return (w.param.getName() + ".nf4_codes").str(); }
  std::string absmaxName(LinearWeight w) { return (w.param.getName() + ".nf4_absmax").str(); }

  /// [out, in] in PyTorch's layout: the order the blocks run over.
  RankedTensorType pytorchType(LinearWeight w) {
    return RankedTensorType::get({w.outFeatures, w.inFeatures}, w.param.getType().getElementType());
  }

  void quantizeInInit(func::FuncOp init, LinearWeight w) {
    OpBuilder b(init.getBody().front().getTerminator());
    Location loc = w.param.getLoc();
    // A copy of the read keeps kiln.source_name: the runtime maps
    // checkpoint names through it.
    auto read = llvm::cast<ParameterOp>(b.clone(*w.param));
    read.setTrainable(false);
    Value weight = read.getResult();
    if (!w.pytorchLayout)
      weight = b.create<TransposeOp>(loc, weight, b.getDenseI64ArrayAttr({1, 0}));
    auto quantize = b.create<Nf4QuantizeOp>(loc, weight, b.getI64IntegerAttr(blockSize));
    addInitResult(init, quantize.getCodes(), codesName(w));
    if (!doubleQuant) {
      addInitResult(init, quantize.getAbsmax(), absmaxName(w));
      return;
    }
    // QLoRA's double quantization: the absmax values, centred on their
    // mean, stored as 8-bit dynamic-map codes with one fp32 scale per 256.
    Value absmax = quantize.getAbsmax();
    Value offset = b.create<ReduceMeanOp>(loc, absmax, b.getDenseI64ArrayAttr({0}),
                                          /*keepdim=*/false);
    Value centred = b.create<SubOp>(loc, absmax, offset);
    auto nested = b.create<QuantizeBlockwise8bitOp>(loc, centred, b.getI64IntegerAttr(256));
    addInitResult(init, nested.getCodes(), absmaxName(w) + "_codes");
    addInitResult(init, nested.getAbsmax(), absmaxName(w) + "_scale");
    addInitResult(init, offset, absmaxName(w) + "_offset");
  }

  void replaceRead(ParameterOp read, LinearWeight w) {
    OpBuilder b(read);
    Location loc = read.getLoc();
    int64_t n = w.outFeatures * w.inFeatures;
    auto made = b.getStringAttr(("nf4_quantize(" + read.getName() + ")").str());
    auto codes =
        b.create<ParameterOp>(loc, RankedTensorType::get({(n + 1) / 2}, b.getIntegerType(8, false)),
                              codesName(w), /*trainable=*/false);
    codes->setAttr(kInitAttr, made);
    int64_t blocks = (n + blockSize - 1) / blockSize;
    auto stored = [&](Type type, const std::string &name) {
      auto param = b.create<ParameterOp>(loc, type, name, /*trainable=*/false);
      param->setAttr(kInitAttr, made);
      return param.getResult();
    };
    Value absmax;
    if (!doubleQuant) {
      absmax = stored(RankedTensorType::get({blocks}, b.getF32Type()), absmaxName(w));
    } else {
      Value nestedCodes = stored(RankedTensorType::get({blocks}, b.getIntegerType(8, false)),
                                 absmaxName(w) + "_codes");
      Value nestedScale = stored(RankedTensorType::get({(blocks + 255) / 256}, b.getF32Type()),
                                 absmaxName(w) + "_scale");
      Value offset = stored(RankedTensorType::get({}, b.getF32Type()), absmaxName(w) + "_offset");
      Value centred = b.create<DequantizeBlockwise8bitOp>(loc, nestedCodes, nestedScale,
                                                          b.getI64IntegerAttr(256));
      absmax = b.create<AddOp>(loc, centred, offset);
    }
    Value dequantized = b.create<Nf4DequantizeOp>(loc, pytorchType(w), codes, absmax,
                                                  b.getI64IntegerAttr(blockSize));
    if (w.pytorchLayout) {
      read.getResult().replaceAllUsesWith(dequantized);
      read.erase();
      return;
    }
    // The weight was stored [in, out]; its codes run over [out, in]. Every
    // matmul takes the dequantized weight as it is, with its transpose flag
    // toggled, so that no kernel writes a transposed copy (a strided,
    // uncoalesced read of the codes) and cuBLASLt reads the layout it gets.
    auto transposed = b.create<TransposeOp>(loc, dequantized, b.getDenseI64ArrayAttr({1, 0}));
    read.getResult().replaceAllUsesWith(transposed.getResult());
    read.erase();
    for (OpOperand &use : llvm::make_early_inc_range(transposed->getUses())) {
      Operation *user = use.getOwner();
      if (auto matmul = dyn_cast<MatmulOp>(user);
          matmul && use.getOperandNumber() == 1 && matmul.getLhs() != transposed.getResult()) {
        matmul.setTransposeB(!matmul.getTransposeB());
        use.set(dequantized);
      } else if (auto back = dyn_cast<TransposeOp>(user);
                 back && back.getPerm() == ArrayRef<int64_t>{1, 0}) {
        back.getResult().replaceAllUsesWith(dequantized);
        back.erase();
      }
    }
    if (transposed->use_empty())
      transposed.erase();
  }
};

} // namespace
