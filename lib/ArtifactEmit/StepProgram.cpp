//===- StepProgram.cpp - Encode a lowered step as the "step" section ------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// A function after kiln-lower-to-step is a straight-line list of buffer ops;
// this writes it as the JSON the runtime's executor decodes
// (docs/artifact.md, "The step program"). Every SSA buffer gets an id in
// definition order; sizes are #kiln.expr strings the runtime evaluates.
//
//===----------------------------------------------------------------------===//

#include "kiln/ArtifactEmit/Sections.h"

#include "kiln/ArtifactEmit/ElementType.h"
#include "kiln/ArtifactEmit/LaunchVariants.h"
#include "kiln/ArtifactEmit/Nf4Roles.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"
#include "kiln/Dialect/Kernel/KernelDialect.h"
#include "kiln/artifact/Json.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/DenseMap.h"

using namespace mlir;
using kiln::artifact::Json;

namespace {

Json expr(kiln::SymExprAttr e) { return Json::string(kiln::dimToString(e)); }

/// Little-endian element bytes of a dense literal, hex encoded (bool: one
/// byte per element).
FailureOr<std::string> literalHex(Operation *op, ElementsAttr value) {
  auto dense = llvm::dyn_cast<DenseElementsAttr>(value);
  if (!dense)
    return op->emitError("constant is not a dense literal; the step encoding "
                         "holds dense literals only"),
           failure();
  std::string bytes;
  auto append = [&](const APInt &bits, unsigned width) {
    unsigned n = width < 8 ? 1 : width / 8;
    for (unsigned i = 0; i < n; ++i)
      bytes.push_back(static_cast<char>(
          bits.extractBitsAsZExtValue(std::min(8u, std::max(1u, width - i * 8)), i * 8)));
  };
  Type element = dense.getElementType();
  unsigned width = element.getIntOrFloatBitWidth();
  int64_t count = dense.getNumElements();
  if (llvm::isa<FloatType>(element)) {
    auto values = dense.getValues<APFloat>();
    for (int64_t i = 0; i < count; ++i)
      append(values[dense.isSplat() ? 0 : i].bitcastToAPInt(), width);
  } else {
    auto values = dense.getValues<APInt>();
    for (int64_t i = 0; i < count; ++i)
      append(values[dense.isSplat() ? 0 : i], width);
  }
  static const char *digits = "0123456789abcdef";
  std::string hex;
  hex.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    hex.push_back(digits[c >> 4]);
    hex.push_back(digits[c & 15]);
  }
  return hex;
}

/// The role of a function argument or result from its kiln.* attributes.
/// Results of the loop programs (kiln-loop-programs) may also be the
/// gradient norm or the counted tokens.
Json role(DictionaryAttr attrs, bool result) {
  Json r = Json::object();
  auto str = [&](StringRef key) { return attrs ? attrs.getAs<StringAttr>(key) : StringAttr(); };
  if (auto name = str("kiln.param")) {
    r.set("role", Json::string("param"));
    r.set("name", Json::string(name.str()));
  } else if (auto state = str("kiln.state")) {
    r.set("role", Json::string("state"));
    r.set("name", Json::string(state.str()));
  } else if (auto accum = str("kiln.accum")) {
    r.set("role", Json::string("accum"));
    r.set("name", Json::string(accum.str()));
  } else if (attrs && attrs.get("kiln.lr")) {
    r.set("role", Json::string("lr"));
  } else if (attrs && attrs.get("kiln.step")) {
    r.set("role", Json::string("step"));
  } else if (attrs && attrs.get("kiln.rng_seed")) {
    r.set("role", Json::string("rng_seed"));
  } else if (auto name = str("kiln.name")) {
    StringRef value = name.getValue();
    bool named = result && (value == "grad_norm" || value == "tokens");
    r.set("role", Json::string(value == "loss" ? "loss" : named ? value.str() : "input"));
    r.set("name", Json::string(name.str()));
  } else {
    r.set("role", Json::string("other"));
  }
  return r;
}

/// The "attention" object of a launch (docs/artifact.md): the buffer of
/// each role. An output that the kernel accumulates in fp32 names the
/// buffer its narrowing launch writes; that launch and the fill before the
/// kernel are listed in "replaces", since another implementation writes the
/// final buffer itself.
Json attentionEntry(kiln::kernel::LaunchOp launch, const llvm::DenseMap<Value, int64_t> &ids,
                    const llvm::DenseMap<Operation *, int64_t> &opIndex) {
  Json entry = Json::object();
  Json replaces = Json::array();
  SmallVector<Value> operands(launch.getIns());
  llvm::append_range(operands, launch.getOuts());
  DictionaryAttr attention = *launch.getAttention();
  auto narrowed = attention.getAs<ArrayAttr>("narrowed");
  for (NamedAttribute role : attention.getValue()) {
    StringRef name = role.getName().strref();
    if (name == "narrowed")
      continue;
    if (auto list = dyn_cast<ArrayAttr>(role.getValue())) { // seq_major: role names
      Json names = Json::array();
      for (Attribute element : list)
        names.push(Json::string(cast<StringAttr>(element).str()));
      entry.set(name.str(), std::move(names));
    } else if (auto text = dyn_cast<StringAttr>(role.getValue())) {
      entry.set(name.str(), Json::string(text.str()));
    } else if (auto flag = dyn_cast<BoolAttr>(role.getValue())) {
      entry.set(name.str(), Json::boolean(flag.getValue()));
    } else if (auto number = dyn_cast<FloatAttr>(role.getValue())) {
      entry.set(name.str(), Json::number(number.getValueAsDouble()));
    } else if (auto position = dyn_cast<IntegerAttr>(role.getValue())) {
      Value buffer = operands[position.getInt()];
      if (narrowed && llvm::is_contained(narrowed, StringAttr::get(launch.getContext(), name))) {
        Value accumulator = buffer;
        for (Operation *user : accumulator.getUsers()) {
          if (auto fill = dyn_cast<kiln::kernel::FillOp>(user);
              fill && fill.getTarget() == accumulator) {
            replaces.push(Json::integer(opIndex.lookup(user)));
          } else if (auto narrow = dyn_cast<kiln::kernel::LaunchOp>(user);
                     narrow && narrow != launch && narrow.getIns().size() == 1 &&
                     narrow.getIns().front() == accumulator) {
            replaces.push(Json::integer(opIndex.lookup(user)));
            buffer = narrow.getOuts().front();
          }
        }
      }
      entry.set(name.str(), Json::integer(ids.lookup(buffer)));
    }
  }
  entry.set("replaces", std::move(replaces));
  return entry;
}

} // namespace

FailureOr<std::string>
kiln::emitStepProgramSection(func::FuncOp func, const llvm::StringMap<std::string> &kernelModules) {
  llvm::DenseMap<Value, int64_t> ids;
  Json buffers = Json::array();
  auto define = [&](Value v) -> FailureOr<int64_t> {
    auto buffer = llvm::dyn_cast<kernel::BufferType>(v.getType());
    if (!buffer)
      return func.emitError("step value of type ") << v.getType() << " is not a buffer";
    RankedTensorType tensor = buffer.getTensor();
    const char *dtype = kiln::artifactDTypeName(tensor.getElementType());
    if (!dtype)
      return func.emitError("buffer element type ")
             << tensor.getElementType() << " has no dtype name";
    Json shape = Json::array();
    for (Dim d : getDims(tensor))
      shape.push(expr(d));
    Json entry = Json::object();
    entry.set("dtype", Json::string(dtype));
    entry.set("shape", std::move(shape));
    int64_t id = static_cast<int64_t>(ids.size());
    ids[v] = id;
    buffers.push(std::move(entry));
    return id;
  };
  auto use = [&](Value v) { return Json::integer(ids.lookup(v)); };

  Json args = Json::array();
  for (BlockArgument arg : func.getArguments()) {
    FailureOr<int64_t> id = define(arg);
    if (failed(id))
      return failure();
    Json entry = role(func.getArgAttrDict(arg.getArgNumber()), /*result=*/false);
    entry.set("buffer", Json::integer(*id));
    args.push(std::move(entry));
  }

  // Entries are kept apart until the end: an attention launch names buffers
  // and op indices that come after it (attentionEntry).
  std::vector<Json> opEntries;
  std::vector<std::pair<size_t, kiln::kernel::LaunchOp>> attentionLaunches;
  // 2 once a GEMM scales (alpha) or accumulates (beta), 3 with ld, 4 with
  // a padded weight, 5 with a seq-major attention operand (an older runtime
  // would run cuDNN or kiln_fa90 on [B, H, S, D] there).
  int64_t version = 1;
  llvm::DenseMap<Operation *, int64_t> opIndex;
  for (Operation &op : func.getBody().front())
    if (!isa<func::ReturnOp>(op))
      opIndex[&op] = static_cast<int64_t>(opIndex.size());
  Json results = Json::array();
  for (Operation &op : func.getBody().front()) {
    Json entry = Json::object();
    auto result = [&]() -> LogicalResult {
      FailureOr<int64_t> id = define(op.getResult(0));
      if (failed(id))
        return failure();
      entry.set("result", Json::integer(*id));
      return success();
    };
    if (isa<kernel::AllocOp>(op)) {
      entry.set("op", Json::string("alloc"));
      if (failed(result()))
        return failure();
    } else if (auto view = dyn_cast<kernel::ViewOp>(op)) {
      entry.set("op", Json::string("view"));
      entry.set("source", use(view.getSource()));
      if (failed(result()))
        return failure();
      // Version 3: a block of the source at an offset and row stride.
      if (SymExprAttr offset = view.getOffsetAttr()) {
        entry.set("offset", expr(offset));
        version = std::max<int64_t>(version, 3);
      }
      if (SymExprAttr stride = view.getRowStrideAttr()) {
        entry.set("row_stride", expr(stride));
        version = std::max<int64_t>(version, 3);
      }
    } else if (auto weight = dyn_cast<kernel::WeightOp>(op)) {
      entry.set("op", Json::string("weight"));
      entry.set("name", Json::string(weight.getName().str()));
      if (failed(result()))
        return failure();
      // Version 4: a padded frozen weight (K-concatenation), the weight's own
      // [rows, cols] in the buffer's top-left block.
      if (std::optional<ArrayRef<int64_t>> from = weight.getPaddedFrom()) {
        Json dims = Json::array();
        for (int64_t d : *from)
          dims.push(Json::integer(d));
        entry.set("padded_from", std::move(dims));
        version = std::max<int64_t>(version, 4);
      }
      // Version 6: frozen weights side by side in that block.
      if (std::optional<ArrayAttr> members = weight.getMembers()) {
        Json list = Json::array();
        for (auto [name, size] : llvm::zip(*members, *weight.getMemberSizes())) {
          Json m = Json::object();
          m.set("name", Json::string(cast<StringAttr>(name).getValue().str()));
          m.set("size", Json::integer(size));
          list.push(std::move(m));
        }
        entry.set("members", std::move(list));
        entry.set("member_axis", Json::integer(static_cast<int64_t>(*weight.getMemberAxis())));
        version = std::max<int64_t>(version, 6);
      }
    } else if (auto constant = dyn_cast<kernel::ConstantOp>(op)) {
      FailureOr<std::string> hex = literalHex(&op, constant.getValue());
      if (failed(hex))
        return failure();
      entry.set("op", Json::string("constant"));
      entry.set("bytes", Json::string(*hex));
      if (failed(result()))
        return failure();
    } else if (auto fill = dyn_cast<kernel::FillOp>(op)) {
      entry.set("op", Json::string("fill"));
      entry.set("target", use(fill.getTarget()));
      entry.set("value", Json::number(fill.getValue().convertToDouble()));
    } else if (auto copy = dyn_cast<kernel::CopyOp>(op)) {
      entry.set("op", Json::string("copy"));
      entry.set("source", use(copy.getSource()));
      entry.set("target", use(copy.getTarget()));
    } else if (auto launch = dyn_cast<kernel::LaunchOp>(op)) {
      StringRef name = launch.getKernel();
      auto kernelOp =
          SymbolTable::lookupNearestSymbolFrom<kernel::KernelOp>(func, launch.getKernelAttr());
      auto module = kernelModules.find(name);
      if (!kernelOp || module == kernelModules.end())
        return launch.emitError("launch of @") << name << " has no compiled kernel";
      entry.set("op", Json::string("launch"));
      entry.set("kernel", Json::string(name.str()));
      entry.set("module", Json::string(module->second));
      Json operands = Json::array();
      for (Value v : launch.getIns())
        operands.push(use(v));
      for (Value v : launch.getOuts())
        operands.push(use(v));
      entry.set("args", std::move(operands));
      // Version 3: inputs the kernel reads and outputs it writes as columns
      // of a wider buffer, one stride per arg (0: packed).
      auto inStrides = kernelOp->getAttrOfType<DenseI64ArrayAttr>("kiln.in_row_strides");
      auto outStrides = kernelOp->getAttrOfType<DenseI64ArrayAttr>("kiln.out_row_strides");
      if (inStrides || outStrides) {
        Json rowStrides = Json::array();
        auto push = [&](DenseI64ArrayAttr strides, size_t count) {
          for (size_t i = 0; i < count; ++i)
            rowStrides.push(Json::integer(strides && static_cast<int64_t>(i) < strides.size() ? strides[i] : 0));
        };
        push(inStrides, launch.getIns().size());
        push(outStrides, launch.getOuts().size());
        entry.set("row_strides", std::move(rowStrides));
        version = std::max<int64_t>(version, 3);
      }
      Json symbols = Json::array();
      for (Attribute sym : kernelOp.getSymbols())
        symbols.push(Json::string(llvm::cast<StringAttr>(sym).str()));
      entry.set("symbols", std::move(symbols));
      entry.set("items", expr(launch.getItems()));
      entry.set("per", Json::integer(launch.getItemsPerBlock()));
      entry.set("block", Json::integer(launch.getBlock()));
      entry.set("shared", expr(launch.getShared()));
      // Launch shapes tune may measure (LaunchVariants.h); not for a launch
      // the runtime may hand to cuDNN.
      if (!launch.getAttention()) {
        Json variants = Json::array();
        for (const kiln::LaunchVariant &v :
             kiln::launchVariants(kernelOp, launch.getItemsPerBlock(), launch.getBlock())) {
          Json variant = Json::object();
          variant.set("per", Json::integer(v.itemsPerBlock));
          variant.set("block", Json::integer(v.block));
          variants.push(std::move(variant));
        }
        if (!variants.getElements().empty())
          entry.set("variants", std::move(variants));
      }
      if (launch.getAttention()) {
        attentionLaunches.push_back({opEntries.size(), launch});
        if (launch.getAttention()->get("seq_major"))
          version = std::max<int64_t>(version, 5);
      }
      // An NF4 dequantize for GEMMs: its buffers' roles, so the runtime may
      // run a GEMM that reads the codes instead (Nf4Roles.h).
      if (std::optional<Json> nf4 = kiln::nf4RolesOf(launch, kernelOp, ids, opIndex))
        entry.set("nf4", std::move(*nf4));
    } else if (auto gemm = dyn_cast<kernel::GemmOp>(op)) {
      entry.set("op", Json::string("gemm"));
      entry.set("a", use(gemm.getA()));
      entry.set("b", use(gemm.getB()));
      if (gemm.getBias())
        entry.set("bias", use(gemm.getBias()));
      entry.set("c", use(gemm.getC()));
      entry.set("trans_a", Json::boolean(gemm.getTransA()));
      entry.set("trans_b", Json::boolean(gemm.getTransB()));
      entry.set("m", expr(gemm.getM()));
      entry.set("n", expr(gemm.getN()));
      entry.set("k", expr(gemm.getK()));
      entry.set("batch", expr(gemm.getBatch()));
      Json strides = Json::array();
      for (Dim d : gemm.getStrides().getDims())
        strides.push(expr(d));
      entry.set("strides", std::move(strides));
      entry.set("epilogue", Json::string(kernel::stringifyEpilogue(gemm.getEpilogue()).str()));
      entry.set("compute", Json::string(kiln::artifactDTypeName(gemm.getCompute())));
      // Version 2: a runtime that ignored these would compute other values.
      if (std::optional<APFloat> alpha = gemm.getAlpha()) {
        entry.set("alpha", Json::number(alpha->convertToDouble()));
        version = std::max<int64_t>(version, 2);
      }
      if (gemm.getAccumulate()) {
        entry.set("beta", Json::number(1));
        version = std::max<int64_t>(version, 2);
      }
      // Version 3: leading dimensions other than the packed widths.
      if (DimsAttr lds = gemm.getLdsAttr()) {
        Json ld = Json::array();
        for (Dim d : lds.getDims())
          ld.push(expr(d));
        entry.set("ld", std::move(ld));
        version = std::max<int64_t>(version, 3);
      }
    } else if (auto head = dyn_cast<kernel::LinearCrossEntropyOp>(op)) {
      // docs/artifact.md, "The fused LM head"; -1: absent.
      auto optional = [&](Value v) { return v ? use(v) : Json::integer(-1); };
      entry.set("op", Json::string("linear_cross_entropy"));
      entry.set("hidden", use(head.getHidden()));
      entry.set("weight", use(head.getWeight()));
      entry.set("labels", use(head.getLabels()));
      entry.set("grad", optional(head.getGrad()));
      entry.set("loss", use(head.getLoss()));
      entry.set("hidden_grad", optional(head.getHiddenGrad()));
      entry.set("weight_grad", optional(head.getWeightGrad()));
      entry.set("chunk", use(head.getChunk()));
      entry.set("stats", use(head.getStats()));
      entry.set("weight_accum", optional(head.getWeightAccum()));
      entry.set("transpose_weight", Json::boolean(head.getTransposeWeight()));
      entry.set("ignore_index", Json::integer(static_cast<int64_t>(head.getIgnoreIndex())));
      entry.set("softcap", Json::number(head.getSoftcap().convertToDouble()));
      entry.set("chunk_tokens", Json::integer(static_cast<int64_t>(head.getChunkTokens())));
    } else if (auto reduce = dyn_cast<kernel::AllReduceOp>(op)) {
      entry.set("op", Json::string("all_reduce"));
      entry.set("bucket", Json::integer(reduce.getBucket()));
      entry.set("reduce", Json::string("avg"));
      Json ins = Json::array(), outs = Json::array();
      for (Value v : reduce.getIns())
        ins.push(use(v));
      for (Value v : reduce.getOuts())
        outs.push(use(v));
      entry.set("ins", std::move(ins));
      entry.set("outs", std::move(outs));
      if (reduce.getLoss())
        entry.set("loss", Json::boolean(true));
    } else if (auto wait = dyn_cast<kernel::AllReduceWaitOp>(op)) {
      entry.set("op", Json::string("all_reduce_wait"));
      entry.set("bucket", Json::integer(wait.getBucket()));
      Json waited = Json::array();
      for (Value v : wait.getBuffers())
        waited.push(use(v));
      entry.set("buffers", std::move(waited));
    } else if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
        Json r = role(func.getResultAttrDict(i), /*result=*/true);
        r.set("buffer", use(v));
        results.push(std::move(r));
      }
      continue;
    } else {
      return op.emitError("op cannot be encoded in a step program (run "
                          "kiln-lower-to-step first)");
    }
    opEntries.push_back(std::move(entry));
  }
  for (auto &[index, launch] : attentionLaunches)
    opEntries[index].set("attention", attentionEntry(launch, ids, opIndex));
  Json ops = Json::array(std::move(opEntries));

  Json program = Json::object();
  program.set("format", Json::string("kiln-step-program"));
  program.set("version", Json::integer(version));
  program.set("function", Json::string(func.getSymName().str()));
  if (auto lr = func->getAttrOfType<FloatAttr>("kiln.default_lr"))
    program.set("default_lr", Json::number(lr.getValueAsDouble()));
  program.set("buffers", std::move(buffers));
  program.set("args", std::move(args));
  program.set("results", std::move(results));
  program.set("ops", std::move(ops));
  return program.print() + "\n";
}
