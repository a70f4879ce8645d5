//===- Lora.cpp - Insert LoRA adapters on linear layers -------------------===//
//
// PEFT's LoRA Linear, written into the graph so autodiff, fusion and the
// memory plan see the adapters like any other op:
//   y = x W^T + (alpha / r) * (dropout(x) A^T) B^T
// with A [r, in] Kaiming-uniform (a = sqrt(5)) and B [out, r] zero, both
// created by the init program, base weights frozen.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Graph/GraphDialect.h"
#include "kiln/Dialect/Graph/InitProgram.h"
#include "kiln/Dialect/Graph/LinearWeights.h"
#include "kiln/Dialect/Graph/Passes.h"
#include "kiln/Dialect/Graph/VJP.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Regex.h"

#include <cmath>

namespace kiln {
#define GEN_PASS_DEF_LORAPASS
#include "kiln/Dialect/Graph/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {

struct Adapter {
  std::string aName, bName;
  int64_t in, out;
  Type element;
};

struct LoraPass final : kiln::impl::LoraPassBase<LoraPass> {
  using LoraPassBase::LoraPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (rank <= 0 || !(alpha > 0) || !(dropout >= 0 && dropout < 1)) {
      module.emitError("LoRA needs r > 0, alpha > 0 and 0 <= dropout < 1");
      return signalPassFailure();
    }
    llvm::Regex targetRegex(targets), skipRegex(skip);
    std::string error;
    if (!targetRegex.isValid(error) || (!skip.empty() && !skipRegex.isValid(error))) {
      module.emitError("invalid LoRA regex: ") << error;
      return signalPassFailure();
    }
    auto selected = [&](const LinearWeight &w) {
      std::string torchName = w.pytorchName();
      ParameterOp param = w.param;
      StringRef onnxName = param.getName();
      auto matches = [&](llvm::Regex &r) { return r.match(torchName) || r.match(onnxName); };
      return matches(targetRegex) && (skip.empty() || !matches(skipRegex));
    };

    SmallVector<LinearWeight> sites;
    SmallVector<std::string> seen; // for the error message
    module.walk([&](MatmulOp matmul) {
      auto func = matmul->getParentOfType<func::FuncOp>();
      if (func && isInitProgram(func))
        return;
      std::optional<LinearWeight> w = matchLinearWeight(matmul);
      if (!w)
        return;
      if (selected(*w))
        sites.push_back(*w);
      else if (seen.size() < 8)
        seen.push_back(w->pytorchName());
    });
    if (sites.empty()) {
      auto diag = module.emitError("LoRA: no linear layer's weight matches targets '")
                  << targets << "'";
      if (!seen.empty())
        diag << " (linear weights: " << llvm::join(seen, ", ") << ")";
      return signalPassFailure();
    }

    // The settings PEFT's adapter_config.json needs when the runtime saves
    // the adapters.
    Builder attrs(module.getContext());
    module->setAttr(
        "kiln.lora",
        attrs.getDictionaryAttr({attrs.getNamedAttr("rank", attrs.getI64IntegerAttr(rank)),
                                 attrs.getNamedAttr("alpha", attrs.getF64FloatAttr(alpha)),
                                 attrs.getNamedAttr("dropout", attrs.getF64FloatAttr(dropout))}));
    func::FuncOp init = getOrCreateInitProgram(module);
    llvm::StringMap<Adapter> adapters;
    llvm::DenseMap<Operation *, Value> seeds; // per function
    int64_t stream = 0;
    for (LinearWeight &w : sites) {
      std::string module = w.moduleName();
      auto [it, created] = adapters.try_emplace(module);
      Adapter &adapter = it->second;
      if (created) {
        adapter = {module + ".lora_A.weight", module + ".lora_B.weight", w.inFeatures,
                   w.outFeatures, adapterElement(w.param.getType().getElementType())};
        createInit(init, adapter, stream);
      }
      w.param.setTrainable(false); // PEFT freezes the base layer.
      Value seed;
      if (dropout > 0) {
        auto func = w.matmul->getParentOfType<func::FuncOp>();
        Value &slot = seeds[func];
        if (!slot)
          slot = addSeedArgument(func);
        seed = slot;
      }
      rewrite(w, adapter, seed, stream++);
    }
  }

  /// Adapters of bf16/f16 weights are fp32 master weights (PEFT's default
  /// autocast_adapter_dtype): their AdamW updates are far below bf16's
  /// resolution of the weights themselves.
  static Type adapterElement(Type base) {
    if (base.isF32() || base.isF64())
      return base;
    return Float32Type::get(base.getContext());
  }

  /// lora_A ~ U(-1/sqrt(in), 1/sqrt(in)): Kaiming-uniform with a = sqrt(5)
  /// has gain sqrt(2 / (1 + a^2)) = sqrt(1/3) and bound gain * sqrt(3 / in).
  void createInit(func::FuncOp init, const Adapter &adapter, int64_t stream) {
    OpBuilder b(init.getBody().front().getTerminator());
    Location loc = NameLoc::get(b.getStringAttr(adapter.aName));
    double bound = 1.0 / std::sqrt(static_cast<double>(adapter.in));
    auto aType = RankedTensorType::get({rank, adapter.in}, adapter.element);
    Value a = b.create<RandomUniformOp>(loc, aType, init.getArgument(0), b.getF64FloatAttr(-bound),
                                        b.getF64FloatAttr(bound), b.getI64IntegerAttr(stream));
    addInitResult(init, a, adapter.aName);
    auto bType = RankedTensorType::get({adapter.out, rank}, adapter.element);
    Value zeros = splatLike(b, NameLoc::get(b.getStringAttr(adapter.bName)), 0.0, bType);
    addInitResult(init, zeros, adapter.bName);
  }

  Value addSeedArgument(func::FuncOp func) {
    MLIRContext *context = func.getContext();
    unsigned index = func.getNumArguments();
    auto type = RankedTensorType::get({}, IntegerType::get(context, 64));
    NamedAttribute attrs[] = {
        NamedAttribute(StringAttr::get(context, kRngSeedAttr), UnitAttr::get(context)),
        NamedAttribute(StringAttr::get(context, "kiln.name"),
                       StringAttr::get(context, "dropout_seed"))};
    func.insertArgument(index, type, DictionaryAttr::get(context, attrs), func.getLoc());
    return func.getArgument(index);
  }

  /// y -> y + (alpha / r) * (dropout(x) A^T) B^T, every other use of y
  /// reading the sum.
  void rewrite(LinearWeight &w, const Adapter &adapter, Value seed, int64_t stream) {
    MatmulOp matmul = w.matmul;
    OpBuilder b(matmul->getContext());
    b.setInsertionPointAfter(matmul);
    Location loc = matmul.getLoc();
    auto paramType = [&](int64_t rows, int64_t cols) {
      return RankedTensorType::get({rows, cols}, adapter.element);
    };
    auto aParam = b.create<ParameterOp>(NameLoc::get(b.getStringAttr(adapter.aName)),
                                        paramType(rank, adapter.in), adapter.aName,
                                        /*trainable=*/true);
    aParam->setAttr(kInitAttr, b.getStringAttr("kaiming_uniform(a=sqrt(5))"));
    auto bParam = b.create<ParameterOp>(NameLoc::get(b.getStringAttr(adapter.bName)),
                                        paramType(adapter.out, rank), adapter.bName,
                                        /*trainable=*/true);
    bParam->setAttr(kInitAttr, b.getStringAttr("zeros"));
    Value x = matmul.getLhs();
    if (seed)
      x = b.create<DropoutOp>(loc, x, seed, b.getF64FloatAttr(dropout),
                              b.getI64IntegerAttr(stream));
    // The adapter path runs in the adapters' type (PEFT casts the input to
    // lora_A's dtype); --precision=bf16 later narrows its matmuls again.
    auto xType = llvm::cast<RankedTensorType>(x.getType());
    if (xType.getElementType() != adapter.element)
      x = b.create<CastOp>(loc, xType.clone(adapter.element), x);
    Value down = b.create<MatmulOp>(loc, x, aParam, false, true);
    Value up = b.create<MatmulOp>(loc, down, bParam, false, true);
    Value scale = scalarConstant(b, loc, alpha / static_cast<double>(rank), adapter.element);
    Value scaled = b.create<MulOp>(loc, up, scale);
    auto yType = llvm::cast<RankedTensorType>(matmul.getResult().getType());
    if (yType.getElementType() != adapter.element)
      scaled = b.create<CastOp>(loc, yType, scaled);
    auto sum = b.create<AddOp>(loc, matmul.getResult(), scaled);
    matmul.getResult().replaceAllUsesExcept(sum.getResult(), sum);
  }
};

} // namespace
