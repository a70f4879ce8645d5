//===- StepArtifact.cpp - meta and params sections; write a .kiln ---------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "kiln/ArtifactEmit/Sections.h"

#include "kiln/ArtifactEmit/ElementType.h"
#include "kiln/Dialect/Graph/GraphDialect.h"
#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Graph/InitProgram.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"
#include "kiln/artifact/Artifact.h"
#include "kiln/artifact/Json.h"

#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringSet.h"

using namespace mlir;
using kiln::artifact::Json;

namespace {
FailureOr<Json> paramEntry(Operation *where, StringRef name, Type type, bool trainable,
                           bool fromInit, StringRef foldedFrom = {},
                           std::optional<bool> foldedTransposed = std::nullopt,
                           ArrayAttr aliases = {}, bool nonzero = false) {
  auto tensor = llvm::dyn_cast<RankedTensorType>(type);
  const char *dtype = tensor ? kiln::artifactDTypeName(tensor.getElementType()) : nullptr;
  if (!dtype)
    return where->emitError("parameter '")
           << name << "' has type " << type << ", which no safetensors dtype holds";
  if (!tensor.hasStaticShape())
    return where->emitError("parameter '") << name << "' has a dynamic shape " << type;
  Json shape = Json::array();
  for (int64_t dim : tensor.getShape())
    shape.push(Json::integer(dim));
  Json entry = Json::object();
  entry.set("name", Json::string(name.str()));
  entry.set("source", Json::string(name.str()));
  entry.set("dtype", Json::string(dtype));
  entry.set("shape", std::move(shape));
  entry.set("trainable", Json::boolean(trainable));
  if (fromInit)
    entry.set("init", Json::boolean(true));
  // The step divides by it (kiln-norm-grad-from-output): loading checks.
  if (nonzero)
    entry.set("nonzero", Json::boolean(true));
  // The exporter folded this initializer from a named weight (typically its
  // transpose); weights files keyed by PyTorch names hold that one.
  // For a 2-D one, whether it is that weight's transpose: a square matrix
  // cannot tell by its shape.
  if (!foldedFrom.empty())
    entry.set("folded_from", Json::string(foldedFrom.str()));
  if (!foldedFrom.empty() && foldedTransposed)
    entry.set("folded_transposed", Json::boolean(*foldedTransposed));
  // Other names of the weight read (tied weights): a checkpoint keeps one.
  if (aliases && !aliases.empty()) {
    Json names = Json::array();
    for (Attribute alias : aliases)
      if (auto name = llvm::dyn_cast<StringAttr>(alias))
        names.push(Json::string(name.str()));
    entry.set("aliases", std::move(names));
  }
  return entry;
}
} // namespace

FailureOr<std::string> kiln::emitParamsSection(ModuleOp module, func::FuncOp step) {
  llvm::StringSet<> initialized;
  if (auto init = module.lookupSymbol<func::FuncOp>(kInitProgramName))
    for (unsigned i = 0; i < init.getNumResults(); ++i)
      if (auto name = init.getResultAttrOfType<StringAttr>(i, "kiln.param"))
        initialized.insert(name.getValue());

  llvm::StringSet<> nonzero;
  step.walk([&](ParameterOp op) {
    if (op->hasAttr(kiln::kNonzeroAttr))
      nonzero.insert(op.getName());
  });
  Json params = Json::array();
  llvm::StringSet<> seen;
  for (unsigned i = 0; i < step.getNumArguments(); ++i) {
    auto name = step.getArgAttrOfType<StringAttr>(i, "kiln.param");
    if (!name || !seen.insert(name.getValue()).second)
      continue;
    auto foldedFrom = step.getArgAttrOfType<StringAttr>(i, kiln::kSourceNameAttr);
    std::optional<bool> transposed;
    if (auto attr = step.getArgAttrOfType<BoolAttr>(i, kiln::kSourceTransposedAttr))
      transposed = attr.getValue();
    FailureOr<Json> entry =
        paramEntry(step, name.getValue(), step.getArgument(i).getType(),
                   /*trainable=*/true, initialized.contains(name.getValue()),
                   foldedFrom ? foldedFrom.getValue() : StringRef(), transposed,
                   step.getArgAttrOfType<ArrayAttr>(i, kiln::kSourceAliasesAttr));
    if (failed(entry))
      return failure();
    params.push(std::move(*entry));
  }
  // Frozen weights the step reads, then the checkpoint weights the init
  // program reads (an NF4-quantized weight is read only there).
  auto frozen = [&](ParameterOp op) {
    if (!seen.insert(op.getName()).second)
      return WalkResult::advance();
    auto foldedFrom = op->getAttrOfType<StringAttr>(kiln::kSourceNameAttr);
    std::optional<bool> transposed;
    if (auto attr = op->getAttrOfType<BoolAttr>(kiln::kSourceTransposedAttr))
      transposed = attr.getValue();
    FailureOr<Json> entry = paramEntry(op, op.getName(), op.getType(), /*trainable=*/false,
                                       initialized.contains(op.getName()),
                                       foldedFrom ? foldedFrom.getValue() : StringRef(), transposed,
                                       op->getAttrOfType<ArrayAttr>(kiln::kSourceAliasesAttr),
                                       nonzero.contains(op.getName()));
    if (failed(entry))
      return WalkResult::interrupt();
    params.push(std::move(*entry));
    return WalkResult::advance();
  };
  if (step.walk(frozen).wasInterrupted())
    return failure();
  if (auto init = module.lookupSymbol<func::FuncOp>(kInitProgramName))
    if (init.walk(frozen).wasInterrupted())
      return failure();
  return params.print();
}

std::string kiln::emitMetaSection(func::FuncOp step, StringRef sourceModel,
                                  const std::vector<std::string> &targets) {
  llvm::SetVector<StringRef> symbols;
  for (Type type : step.getArgumentTypes())
    if (auto tensor = llvm::dyn_cast<RankedTensorType>(type))
      for (Dim dim : getDims(tensor))
        for (StringRef symbol : dimSymbols(dim))
          symbols.insert(symbol);
  Json names = Json::array();
  for (StringRef symbol : symbols)
    names.push(Json::string(symbol.str()));
  Json meta = Json::object();
  meta.set("format", Json::string("kiln-step"));
  meta.set("creator", Json::string("kiln compile"));
  meta.set("model", Json::string(sourceModel.str()));
  meta.set("entry", Json::string(step.getSymName().str()));
  Json archs = Json::array();
  for (const std::string &target : targets)
    archs.push(Json::string(target));
  meta.set("targets", std::move(archs));
  meta.set("symbols", std::move(names));
  if (std::optional<int64_t> vocab = stepVocabularySize(step))
    meta.set("vocab_size", Json::integer(*vocab));
  if (auto module = step->getParentOfType<ModuleOp>())
    if (auto lora = module->getAttrOfType<DictionaryAttr>("kiln.lora")) {
      Json settings = Json::object();
      if (auto rank = lora.getAs<IntegerAttr>("rank"))
        settings.set("r", Json::integer(rank.getInt()));
      if (auto alpha = lora.getAs<FloatAttr>("alpha"))
        settings.set("alpha", Json::number(alpha.getValueAsDouble()));
      if (auto dropout = lora.getAs<FloatAttr>("dropout"))
        settings.set("dropout", Json::number(dropout.getValueAsDouble()));
      meta.set("lora", std::move(settings));
    }
  // kiln compile --data-parallel: kiln-run train --gpus N needs it.
  if (auto dp = step->getAttrOfType<DictionaryAttr>("kiln.data_parallel")) {
    Json settings = Json::object();
    if (auto mb = dp.getAs<FloatAttr>("bucket_mb"))
      settings.set("bucket_mb", Json::number(mb.getValueAsDouble()));
    if (auto buckets = dp.getAs<IntegerAttr>("buckets"))
      settings.set("buckets", Json::integer(buckets.getInt()));
    meta.set("data_parallel", std::move(settings));
  }
  // What kiln-run tune may measure (docs/tuning.md): cuBLASLt's top K per
  // GEMM, and the attention implementations the runtime has.
  if (auto module = step->getParentOfType<ModuleOp>())
    if (auto tuning = module->getAttrOfType<DictionaryAttr>("kiln.tuning"))
      if (auto topK = tuning.getAs<IntegerAttr>("gemm_topk")) {
        Json settings = Json::object();
        settings.set("gemm_topk", Json::integer(topK.getInt()));
        Json implementations = Json::array();
        implementations.push(Json::string("cudnn"));
        implementations.push(Json::string("kernels"));
        settings.set("attention", std::move(implementations));
        meta.set("tuning", std::move(settings));
      }
  return meta.print(/*pretty=*/true) + "\n";
}

std::string kiln::bucketSectionName(StringRef function) { return "step/" + function.str(); }

LogicalResult kiln::addBucketSections(func::FuncOp step,
                                      const llvm::StringMap<std::string> &kernelModules,
                                      std::vector<std::pair<std::string, std::string>> &sections) {
  auto list = step->getAttr("kiln.buckets");
  if (!list)
    return success();
  auto refs = llvm::dyn_cast<ArrayAttr>(list);
  if (!refs)
    return step.emitError("kiln.buckets is not an array of function symbols");
  auto metaSection =
      llvm::find_if(sections, [](const auto &section) { return section.first == "meta"; });
  if (metaSection == sections.end())
    return step.emitError("no meta section to list the shape buckets in");
  artifact::Expected<Json> meta = Json::parse(metaSection->second);
  if (!meta || !meta->isObject())
    return step.emitError("the meta section is not a JSON object");
  llvm::StringSet<> symbols;
  if (const Json *names = meta->get("symbols"); names && names->isArray())
    for (const Json &name : names->getElements())
      if (name.isString())
        symbols.insert(name.getString());

  auto module = step->getParentOfType<ModuleOp>();
  Json buckets = Json::array();
  std::vector<std::pair<std::string, std::string>> programs;
  for (Attribute item : refs) {
    auto ref = llvm::dyn_cast<FlatSymbolRefAttr>(item);
    if (!ref)
      return step.emitError("kiln.buckets entry ") << item << " is not a function symbol";
    auto bucket = module ? module.lookupSymbol<func::FuncOp>(ref.getAttr()) : func::FuncOp();
    if (!bucket)
      return step.emitError("shape bucket ")
             << ref << " listed in kiln.buckets is not a function of the module";
    auto pinned = bucket->getAttrOfType<DictionaryAttr>("kiln.bucket");
    if (!pinned || pinned.empty())
      return step.emitError("shape bucket ")
             << ref << " has no kiln.bucket attribute (its pinned symbol values)";
    Json values = Json::object();
    for (NamedAttribute entry : pinned) {
      auto value = llvm::dyn_cast<IntegerAttr>(entry.getValue());
      if (!value || value.getInt() < 1)
        return step.emitError("shape bucket ")
               << ref << " pins '" << entry.getName().getValue() << "' to " << entry.getValue()
               << ", not a positive integer";
      if (!symbols.contains(entry.getName().getValue()))
        return step.emitError("shape bucket ") << ref << " pins '" << entry.getName().getValue()
                                               << "', which is no size symbol of the step's inputs";
      values.set(entry.getName().str(), Json::integer(value.getInt()));
    }
    FailureOr<std::string> program = emitStepProgramSection(bucket, kernelModules);
    if (failed(program))
      return failure();
    std::string section = bucketSectionName(bucket.getSymName());
    Json entry = Json::object();
    entry.set("function", Json::string(bucket.getSymName().str()));
    entry.set("section", Json::string(section));
    entry.set("values", std::move(values));
    buckets.push(std::move(entry));
    programs.push_back({section, std::move(*program)});
  }
  meta->set("buckets", std::move(buckets));
  metaSection->second = meta->print(/*pretty=*/true) + "\n";
  // Right after the symbolic step, in kiln.buckets order.
  auto at = llvm::find_if(sections, [](const auto &s) { return s.first == "step"; });
  sections.insert(at == sections.end() ? sections.end() : std::next(at),
                  std::make_move_iterator(programs.begin()),
                  std::make_move_iterator(programs.end()));
  return success();
}

FailureOr<std::vector<std::pair<std::string, std::string>>>
kiln::stepArtifactSections(ModuleOp module, StringRef sourceModel,
                           const std::vector<std::string> &targets) {
  auto step = module.lookupSymbol<func::FuncOp>("main");
  if (!step)
    return module.emitError("no @main step function to write");
  FailureOr<std::string> guards = emitGuardsSection(step);
  FailureOr<std::string> params = emitParamsSection(module, step);
  if (failed(guards) || failed(params))
    return failure();
  return std::vector<std::pair<std::string, std::string>>{
      {"meta", emitMetaSection(step, sourceModel, targets)},
      {"guards", *guards},
      {"params", *params}};
}

LogicalResult kiln::writeStepArtifact(ModuleOp module, StringRef sourceModel, StringRef path) {
  auto step = module.lookupSymbol<func::FuncOp>("main");
  if (!step)
    return module.emitError("no @main step function to write");
  FailureOr<std::string> guards = emitGuardsSection(step);
  FailureOr<std::string> params = emitParamsSection(module, step);
  if (failed(guards) || failed(params))
    return failure();
  artifact::ArtifactWriter writer;
  writer.add("meta", emitMetaSection(step, sourceModel));
  writer.add("guards", *guards);
  writer.add("params", *params);
  if (artifact::Status status = writer.write(path.str()); !status)
    return module.emitError(status.getError());
  return success();
}
