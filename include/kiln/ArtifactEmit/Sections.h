//===- Sections.h - Encode compiled-step facts as .kiln sections -*- C++
//-*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// The compiler's side of the artifact sections whose payload the runtime
// already decodes (docs/artifact.md). Each function turns what a pass
// recorded on the step function into the section's JSON, in the encoding
// runtime/lib/artifact parses, so the two cannot drift apart
// (test/Unit/ArtifactInteropTest.cpp runs both).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_ARTIFACTEMIT_SECTIONS_H
#define KILN_ARTIFACTEMIT_SECTIONS_H

#include "kiln/artifact/MemoryPlanSection.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

#include "llvm/ADT/StringMap.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kiln {

/// The "guards" section for \p func's `kiln.guards` (recorded by
/// --kiln-shape-guards): a JSON array, `[]` when there are none. Fails with a
/// diagnostic on \p func for a malformed guard.
mlir::FailureOr<std::string> emitGuardsSection(mlir::func::FuncOp func);

/// The "params" section of \p step (a function of \p module): its
/// `kiln.param` arguments (trainable) and the `kiln.parameter` weights it
/// reads (frozen), each with dtype and static shape; `"init": true` marks
/// those the module's init program produces (adapters, NF4 codes), which
/// the weights file need not hold.
mlir::FailureOr<std::string> emitParamsSection(mlir::ModuleOp module, mlir::func::FuncOp step);

/// The token vocabulary \p step reads (meta "vocab_size"): the rows of the
/// embedding table a data input indexes, else the class dimension of the
/// cross entropy over labels from a data input; none without either.
std::optional<int64_t> stepVocabularySize(mlir::func::FuncOp step);

/// The "meta" section: format, creator, targets (the kernel architectures;
/// none until codegen), the size symbols of \p step's inputs, the source
/// model, LoRA's settings (module attribute kiln.lora) and the tuning search
/// space (kiln.tuning: "tuning": {"gemm_topk": K, "attention": [...]}), and
/// the vocabulary (vocab_size) when stepVocabularySize finds one.
std::string emitMetaSection(mlir::func::FuncOp step, llvm::StringRef sourceModel,
                            const std::vector<std::string> &targets = {});

/// The "step" (or "init") section: \p func, a function after
/// kiln-lower-to-step, as the JSON step program of docs/artifact.md.
/// \p kernelModules maps each kernel symbol to the NVRTC module (artifact
/// section kernels/<module>/...) holding its code.
mlir::FailureOr<std::string>
emitStepProgramSection(mlir::func::FuncOp func, const llvm::StringMap<std::string> &kernelModules);

/// The section holding the step program of shape bucket \p function:
/// "step/<function>".
std::string bucketSectionName(llvm::StringRef function);

/// The shape buckets of \p step (its `kiln.buckets`, from
/// --kiln-shape-buckets; functions after kiln-lower-to-step), in that order:
/// appends each bucket's step program to \p sections as "step/<function>"
/// and lists them in the "meta" section there as "buckets"
/// (`[{"function", "section", "values": {"seq": 512}}]`). Does nothing
/// without `kiln.buckets`. Fails with a diagnostic on \p step for a listed
/// function that is missing, lacks a `kiln.bucket` of positive integers or
/// pins a symbol meta's "symbols" does not list.
mlir::LogicalResult addBucketSections(mlir::func::FuncOp step,
                                      const llvm::StringMap<std::string> &kernelModules,
                                      std::vector<std::pair<std::string, std::string>> &sections);

/// \p func, a function after kiln-lower-to-step, planned at \p values by
/// the runtime's own planner on its step-program encoding: the arena the
/// runtime allocates, as the "memory_plan" section records it. Fails with a
/// diagnostic (an unbound symbol, a function that does not encode).
mlir::FailureOr<artifact::StepMemoryPlan> planLoweredStep(mlir::func::FuncOp func,
                                                          const artifact::SymbolBindings &values);

/// Where the lowered step's arena peaks: the op with the most arena bytes
/// live (the runtime's liveness) and the largest buffers live there.
struct StepPeak {
  struct Buffer {
    size_t bytes = 0;   ///< Aligned as the arena places it.
    std::string type;   ///< "bf16 [8192*batch*seq]"
    std::string writer; ///< The first op after its alloc that writes it.
    size_t lastUse = 0; ///< Op index of its last use.
  };
  size_t op = 0, liveBytes = 0;
  std::string opName;
  std::vector<Buffer> largest;
};

/// \p func after kiln-lower-to-step at \p values: its peak op and the
/// \p count largest buffers live there.
mlir::FailureOr<StepPeak> describeLoweredStepPeak(mlir::func::FuncOp func,
                                                  const artifact::SymbolBindings &values,
                                                  size_t count);

/// meta, guards and params of \p module's `@main` (a graph-level train
/// step), with \p targets as meta's kernel architectures.
mlir::FailureOr<std::vector<std::pair<std::string, std::string>>>
stepArtifactSections(mlir::ModuleOp module, llvm::StringRef sourceModel,
                     const std::vector<std::string> &targets);

/// Writes \p path: a .kiln artifact with the meta, guards and params
/// sections of \p module's `@main` (no kernels or step program yet: codegen
/// adds them). Fails with a diagnostic.
mlir::LogicalResult writeStepArtifact(mlir::ModuleOp module, llvm::StringRef sourceModel,
                                      llvm::StringRef path);

} // namespace kiln

#endif // KILN_ARTIFACTEMIT_SECTIONS_H
