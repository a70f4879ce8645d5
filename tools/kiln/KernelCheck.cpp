//===- KernelCheck.cpp - Reference data for the GPU kernel harness --------===//
//
// For every kernel of a step program: random inputs (in ranges the kernel
// can index with), the reference interpreter's outputs for the kernel's
// own tensor body, and the launch with the given symbol values. The runtime
// tool kiln-kernel-check (runtime/, runs on the GPU machine without MLIR)
// launches the cubin on these inputs and compares. Every call draws fresh
// inputs unless a seed is given.
//
// Layout: DIR/check/<kernel>/case.txt, in<K>.bin, expect<K>.bin (raw
// little-endian elements of the tensor's dtype; bf16 as its 16 bits).
//
//===----------------------------------------------------------------------===//

#include "CudaOutput.h"
#include "Driver.h"

#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"
#include "kiln/Dialect/Kernel/OpClassification.h"
#include "kiln/Interp/Interpreter.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

using namespace llvm;
using namespace mlir;

namespace kiln::driver {
namespace {

class NoWeights : public WeightSource {
public:
  absl::StatusOr<HostTensor> load(StringRef name) override {
    return absl::InvalidArgumentError("kernel bodies read no parameters: " + name.str());
  }
};

/// What random values an input may take so that the kernel only reads in
/// bounds: index ranges come from the ops that index with the input.
struct Range {
  double low = -1, high = 1;
  bool positive = false;
  int64_t ignoreIndex = 0;
  bool withIgnore = false;
};

Range rangeFor(BlockArgument arg, const StringMap<int64_t> &sizes) {
  Range range;
  auto size = [&](Value v, int64_t axis) -> std::optional<int64_t> {
    Dim d = getDim(cast<RankedTensorType>(v.getType()), axis);
    return evaluateDim(d, [&](StringRef s) -> std::optional<int64_t> {
      auto it = sizes.find(s);
      return it == sizes.end() ? std::nullopt : std::optional<int64_t>(it->second);
    });
  };
  Type element = cast<RankedTensorType>(arg.getType()).getElementType();
  bool isInt = isa<IntegerType>(element);
  // Integers that reach an index operand only through views take the full
  // range of the indexed dim; ones that pass through arithmetic first stay
  // tiny (0 or 1), which is in bounds for any dim of size >= 2.
  double direct = std::numeric_limits<double>::infinity();
  bool derivedIndex = false;
  SmallVector<std::pair<Value, bool>> work{{arg, false}};
  llvm::SmallPtrSet<Operation *, 16> seen;
  while (!work.empty()) {
    auto [v, derivedValue] = work.pop_back_val();
    bool derived = derivedValue;
    for (OpOperand &use : v.getUses()) {
      Operation *user = use.getOwner();
      if (!seen.insert(user).second)
        continue;
      unsigned operand = use.getOperandNumber();
      auto limit = [&](std::optional<int64_t> bound) {
        if (!bound)
          return;
        if (derived)
          derivedIndex = true;
        else
          direct = std::min(direct, (double)*bound);
      };
      auto axisOf = [](Value data, int64_t axis) {
        return axis < 0 ? axis + cast<RankedTensorType>(data.getType()).getRank() : axis;
      };
      if (auto g = dyn_cast<GatherOp>(user); g && operand == 1)
        limit(size(g.getData(), axisOf(g.getData(), g.getAxis())));
      else if (auto g = dyn_cast<GatherElementsOp>(user); g && operand == 1)
        limit(size(g.getData(), axisOf(g.getData(), g.getAxis())));
      else if (auto g = dyn_cast<GatherNdOp>(user); g && operand == 1) {
        int64_t depth = cast<RankedTensorType>(g.getIndices().getType()).getShape().back();
        for (int64_t k = 0; k < depth; ++k)
          limit(size(g.getData(), g.getBatchDims() + k));
      } else if (auto sc = dyn_cast<ScatterAddOp>(user); sc && operand == 1)
        limit(size(sc.getDest(), axisOf(sc.getDest(), sc.getAxis())));
      else if (isa<CrossEntropyOp, CrossEntropyGradOp>(user) && operand == 1) {
        limit(size(user->getOperand(0), 1));
        range.withIgnore = true;
        range.ignoreIndex = user->getAttrOfType<IntegerAttr>("ignore_index").getInt();
      } else if (isa<SqrtOp, RsqrtOp, LogOp, PowOp>(user))
        range.positive = true;
      bool view =
          isa<ReshapeOp, SliceOp, PadOp, SqueezeOp, UnsqueezeOp, ExpandOp, TransposeOp, ConcatOp>(
              user);
      for (Value r : user->getResults())
        work.push_back({r, derived || !view});
    }
  }
  if (isInt) {
    range.low = 0;
    range.high = element.isInteger(1) || derivedIndex ? 2 : std::isinf(direct) ? 4 : direct;
  }
  if (!isInt && range.positive)
    range.low = 0.05;
  return range;
}

uint16_t toBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  uint32_t rounding = 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

uint16_t toF16(float f) {
  APFloat value(f);
  bool lost;
  value.convert(APFloat::IEEEhalf(), APFloat::rmNearestTiesToEven, &lost);
  return static_cast<uint16_t>(value.bitcastToAPInt().getZExtValue());
}

/// The tensor's elements as the kernel stores them.
std::string rawBytes(const HostTensor &t) {
  std::string out;
  auto put = [&](const void *p, size_t n) { out.append(static_cast<const char *>(p), n); };
  for (int64_t i = 0, e = t.numel(); i < e; ++i) {
    switch (t.dtype) {
    case DType::F32: {
      float v = t.getDouble(i);
      put(&v, 4);
      break;
    }
    case DType::F64: {
      double v = t.getDouble(i);
      put(&v, 8);
      break;
    }
    case DType::BF16: {
      uint16_t v = toBf16(t.getDouble(i));
      put(&v, 2);
      break;
    }
    case DType::F16: {
      uint16_t v = toF16(t.getDouble(i));
      put(&v, 2);
      break;
    }
    case DType::Bool:
    case DType::I8:
    case DType::U8: {
      int8_t v = t.getInt(i);
      put(&v, 1);
      break;
    }
    case DType::I16:
    case DType::U16: {
      int16_t v = t.getInt(i);
      put(&v, 2);
      break;
    }
    case DType::I32:
    case DType::U32: {
      int32_t v = t.getInt(i);
      put(&v, 4);
      break;
    }
    case DType::I64:
    case DType::U64: {
      int64_t v = t.getInt(i);
      put(&v, 8);
      break;
    }
    }
  }
  return out;
}

Error writeBytes(const Twine &path, StringRef bytes) {
  std::error_code ec;
  raw_fd_ostream os(path.str(), ec, sys::fs::OF_None);
  if (ec)
    return createStringError(ec, "cannot write " + path + ": " + ec.message());
  os << bytes;
  os.close();
  if ((ec = os.error())) {
    os.clear_error(); // Reported here, not as an LLVM fatal error.
    return createStringError(ec, path + ": write failed: " + ec.message());
  }
  return Error::success();
}

/// ‖out − ref‖ / ‖ref‖ a bf16/f16 attention kernel may have against the
/// interpreter: the policy of docs/codegen.md ("Numerics policy"), 1.5× the
/// worst error of PyTorch's flash backend measured by bench/attention.py
/// (2.99e-3 on the H200, 2026-12-01).
constexpr const char *kAttentionL2Tolerance = "4.5e-3";

/// Which kernel arguments and results are an attention's q, k, v, dout, out
/// and dq, dk, dv (empty where none): harnesses feed and read them by name.
struct AttentionRoles {
  SmallVector<std::string> inputs, outputs;
  bool any() const {
    return llvm::any_of(inputs, [](const std::string &r) { return !r.empty(); }) ||
           llvm::any_of(outputs, [](const std::string &r) { return !r.empty(); });
  }
};

AttentionRoles attentionRoles(Block &body) {
  AttentionRoles roles;
  roles.inputs.resize(body.getNumArguments());
  roles.outputs.resize(body.getTerminator()->getNumOperands());
  auto name = [&](Value v, StringRef role) {
    // A widening/narrowing cast fused in front keeps the role: the harness
    // writes the values in the argument's dtype.
    if (Operation *def = v ? v.getDefiningOp() : nullptr; def && isa<CastOp>(def))
      v = def->getOperand(0);
    if (auto arg = dyn_cast_or_null<BlockArgument>(v); arg && arg.getOwner() == &body)
      roles.inputs[arg.getArgNumber()] = role.str();
  };
  llvm::DenseMap<Value, StringRef> results;
  body.walk([&](Operation *op) {
    if (auto a = dyn_cast<AttentionOp>(op)) {
      name(a.getQuery(), "q");
      name(a.getKey(), "k");
      name(a.getValue(), "v");
      results[a.getResult()] = "o";
    } else if (auto g = dyn_cast<AttentionGradOp>(op)) {
      name(g.getQuery(), "q");
      name(g.getKey(), "k");
      name(g.getValue(), "v");
      name(g.getGrad(), "do");
      name(g.getOut(), "o");
      results[g.getQueryGrad()] = "dq";
      results[g.getKeyGrad()] = "dk";
      results[g.getValueGrad()] = "dv";
    }
  });
  for (auto [i, v] : llvm::enumerate(body.getTerminator()->getOperands())) {
    Value source = v;
    // A narrowing cast of the result keeps its role.
    if (Operation *def = source.getDefiningOp(); def && isa<CastOp>(def))
      source = def->getOperand(0);
    if (auto it = results.find(source); it != results.end())
      roles.outputs[i] = it->second.str();
  }
  return roles;
}

} // namespace

int writeKernelChecks(ModuleOp module, StringRef dir, StringRef sizeSpec,
                      std::optional<uint64_t> seed) {
  StringMap<int64_t> sizes;
  SmallVector<StringRef> entries;
  sizeSpec.split(entries, ',', -1, false);
  // `reference=none`: the cases without inputs or reference outputs, for
  // harnesses that bring their own data at sizes the interpreter would take
  // too long for (bench/attention.py).
  bool withReference = true;
  for (StringRef entry : entries) {
    auto [name, value] = entry.split('=');
    if (name.trim() == "reference") {
      if (value.trim() != "none" && value.trim() != "interpreter")
        return fail("--kernel-check entry '" + entry + "': reference is none or interpreter");
      withReference = value.trim() != "none";
      continue;
    }
    int64_t v;
    if (value.trim().getAsInteger(10, v) || v <= 0)
      return fail("--kernel-check entry '" + entry + "' needs NAME=POSITIVE_INTEGER");
    sizes[name.trim()] = v;
  }
  uint64_t s = seed ? *seed : std::chrono::steady_clock::now().time_since_epoch().count();
  std::mt19937_64 rng(s);
  auto evaluate = [&](Dim d) {
    return evaluateDim(d, [&](StringRef name) -> std::optional<int64_t> {
      auto it = sizes.find(name);
      return it == sizes.end() ? std::nullopt : std::optional<int64_t>(it->second);
    });
  };
  MLIRContext *context = module.getContext();
  unsigned cases = 0;
  // Which NVRTC module holds which kernel (same grouping as writeCuda).
  unsigned index = 0;
  for (auto kernel : module.getOps<kernel::KernelOp>()) {
    std::string moduleName = "module" + std::to_string(index++ / kKernelsPerModule);
    Block &body = kernel.getBody().front();
    SmallString<256> caseDir(dir);
    sys::path::append(caseDir, "check", kernel.getSymName());
    if (std::error_code ec = sys::fs::create_directories(caseDir))
      return fail("cannot create " + caseDir + ": " + ec.message());
    // The body as a function the interpreter runs.
    OpBuilder builder(context);
    OwningOpRef<ModuleOp> scratch = ModuleOp::create(kernel.getLoc());
    builder.setInsertionPointToEnd(scratch->getBody());
    SmallVector<Type> resultTypes(body.getTerminator()->getOperandTypes());
    auto func = builder.create<func::FuncOp>(
        kernel.getLoc(), "reference",
        FunctionType::get(context, body.getArgumentTypes(), resultTypes));
    Block *entry = func.addEntryBlock();
    IRMapping map;
    for (auto [from, to] : llvm::zip(body.getArguments(), entry->getArguments()))
      map.map(from, to);
    builder.setInsertionPointToEnd(entry);
    for (Operation &op : body.without_terminator())
      builder.clone(op, map);
    SmallVector<Value> results;
    for (Value v : body.getTerminator()->getOperands())
      results.push_back(map.lookup(v));
    builder.create<func::ReturnOp>(kernel.getLoc(), results);
    // Kernels may size things by symbols no input shape binds (iota).
    specializeSymbols(*scratch, sizes);

    std::string text;
    raw_string_ostream os(text);
    bool lowPrecision = false;
    std::vector<HostTensor> inputs;
    for (BlockArgument arg : body.getArguments()) {
      auto type = cast<RankedTensorType>(arg.getType());
      std::optional<DType> dtype = fromMlirType(type.getElementType());
      if (!dtype)
        return fail(kernel.getSymName() + ": no host dtype for an input");
      std::vector<int64_t> shape;
      for (Dim d : getDims(type)) {
        std::optional<int64_t> v = evaluate(d);
        if (!v)
          return fail(kernel.getSymName() + ": --kernel-check gives no value for " +
                      dimToString(d));
        shape.push_back(*v);
      }
      HostTensor t(*dtype, shape);
      Range range = rangeFor(arg, sizes);
      for (int64_t i = 0; i < t.numel(); ++i) {
        if (t.isFloat()) {
          double u = std::uniform_real_distribution<double>(range.low, range.high)(rng);
          t.set(i, u);
        } else {
          int64_t hi = std::max<int64_t>(1, (int64_t)range.high);
          int64_t v = std::uniform_int_distribution<int64_t>(0, hi - 1)(rng);
          if (range.withIgnore && std::uniform_int_distribution<int>(0, 9)(rng) == 0)
            v = range.ignoreIndex;
          t.setInt(i, v);
        }
      }
      lowPrecision |= *dtype == DType::BF16 || *dtype == DType::F16;
      inputs.push_back(std::move(t));
    }
    absl::StatusOr<InterpreterResult> reference = InterpreterResult{};
    if (withReference) {
      NoWeights weights;
      reference = interpret(func, inputs, weights);
    } else {
      // Outputs of the right dtype and size, never written to a file.
      for (Value v : body.getTerminator()->getOperands()) {
        auto type = cast<RankedTensorType>(v.getType());
        std::vector<int64_t> shape;
        for (Dim d : getDims(type))
          shape.push_back(evaluate(d).value_or(0));
        reference->outputs.emplace_back(*fromMlirType(type.getElementType()), shape);
      }
    }
    if (!reference.ok())
      return fail(kernel.getSymName() +
                  ": reference interpreter: " + std::string(reference.status().message()));
    for (const HostTensor &out : reference->outputs)
      lowPrecision |= out.dtype == DType::BF16 || out.dtype == DType::F16;
    for (Value v : body.getTerminator()->getOperands()) {
      Type element = cast<RankedTensorType>(v.getType()).getElementType();
      lowPrecision |= element.isBF16() || element.isF16();
    }
    body.walk([&](Operation *op) {
      for (Type t : op->getResultTypes())
        if (auto tensor = dyn_cast<RankedTensorType>(t))
          lowPrecision |= tensor.getElementType().isBF16() || tensor.getElementType().isF16();
    });

    kernel::LaunchShape shape = kernel::launchShape(kernel.getKind(), body);
    std::optional<int64_t> items = evaluate(shape.items), shared = evaluate(shape.shared);
    if (!items || !shared)
      return fail(kernel.getSymName() + ": launch sizes need more --kernel-check symbols");
    int64_t blocks = std::max<int64_t>(1, (*items + shape.itemsPerBlock - 1) / shape.itemsPerBlock);
    os << "kernel " << kernel.getSymName() << "\n";
    os << "module " << moduleName << "\n";
    os << "launch " << std::min<int64_t>(blocks, 1 << 20) << " " << shape.block << " " << *shared
       << "\n";
    os << "tolerance " << (lowPrecision ? "1e-2" : "1e-5") << "\n";
    AttentionRoles roles = attentionRoles(body);
    // Low-precision attention is judged by its relative L2 error, the
    // numerics policy of docs/codegen.md, not element by element.
    if (roles.any() && lowPrecision)
      os << "metric l2 " << kAttentionL2Tolerance << "\n";
    if (!withReference)
      os << "reference none\n";
    for (auto [i, t] : llvm::enumerate(inputs)) {
      std::string file = "in" + std::to_string(i) + ".bin";
      if (withReference)
        if (Error e = writeBytes(caseDir + "/" + file, rawBytes(t)))
          return fail(toString(std::move(e)));
      os << "in " << dtypeName(t.dtype) << " " << t.numel() << " " << file << "\n";
      // A block-of-columns input (kiln-lower-to-step): the harness lays it
      // in rows of `stride` elements, the gaps poisoned.
      if (auto strides = kernel->getAttrOfType<DenseI64ArrayAttr>("kiln.in_row_strides");
          strides && static_cast<int64_t>(i) < strides.size() && strides[i])
        os << "instride " << i << " "
           << cast<RankedTensorType>(body.getArgument(i).getType()).getShape().back() << " "
           << strides[i] << "\n";
    }
    for (auto [i, role] : llvm::enumerate(roles.inputs))
      if (!role.empty())
        os << "role in " << i << " " << role << "\n";
    for (auto [i, role] : llvm::enumerate(roles.outputs))
      if (!role.empty())
        os << "role out " << i << " " << role << "\n";
    for (auto [i, t] : llvm::enumerate(reference->outputs)) {
      Value yielded = body.getTerminator()->getOperand(i);
      Value copyFrom;
      kernel::OutputInit init = kernel::outputInit(yielded, &copyFrom);
      std::string how = "poison";
      if (init == kernel::OutputInit::Zero)
        how = "zero";
      else if (init == kernel::OutputInit::CopyOperand) {
        if (auto arg = dyn_cast<BlockArgument>(copyFrom))
          how = "copy" + std::to_string(arg.getArgNumber());
        else
          how = "zero"; // a splat destination: kiln-lower-to-step fills it
      }
      std::string file = "expect" + std::to_string(i) + ".bin";
      if (withReference)
        if (Error e = writeBytes(caseDir + "/" + file, rawBytes(t)))
          return fail(toString(std::move(e)));
      os << "out " << dtypeName(t.dtype) << " " << t.numel() << " " << file << " " << how << "\n";
      // A block-of-columns output (an in-place concatenation's part): the
      // harness gives it rows of `stride` elements and checks the gaps.
      if (auto strides = kernel->getAttrOfType<DenseI64ArrayAttr>("kiln.out_row_strides");
          strides && static_cast<int64_t>(i) < strides.size() && strides[i])
        os << "stride " << i << " " << cast<RankedTensorType>(yielded.getType()).getShape().back()
           << " " << strides[i] << "\n";
    }
    for (Attribute symbol : kernel.getSymbols())
      os << "symbol " << cast<StringAttr>(symbol).getValue() << " "
         << sizes.lookup(cast<StringAttr>(symbol).getValue()) << "\n";
    if (Error e = writeBytes(caseDir + "/case.txt", text))
      return fail(toString(std::move(e)));
    ++cases;
  }
  // GEMMs: the descriptor's operands as [batch or 1, rows, cols] tensors and
  // the interpreter's kiln.matmul of them as the reference.
  unsigned gemms = 0;
  for (auto func : module.getOps<func::FuncOp>()) {
    if (!withReference)
      break; // cuBLASLt's GEMMs are not what such harnesses measure
    unsigned number = 0;
    WalkResult walked = func.walk([&](kernel::GemmOp gemm) {
      std::string name = (func.getName() + "_gemm" + Twine(number++)).str();
      auto value = [&](Dim d) { return evaluate(d); };
      std::optional<int64_t> m = value(gemm.getM()), n = value(gemm.getN()), k = value(gemm.getK()),
                             batch = value(gemm.getBatch());
      SmallVector<int64_t> strides;
      for (Dim d : gemm.getStrides().getDims())
        if (std::optional<int64_t> v = value(d))
          strides.push_back(*v);
      if (!m || !n || !k || !batch || strides.size() != 3) {
        fail(name + ": --kernel-check gives no value for a GEMM size");
        return WalkResult::interrupt();
      }
      auto elementOf = [](Value v) {
        return cast<kernel::BufferType>(v.getType()).getTensor().getElementType();
      };
      Type ea = elementOf(gemm.getA()), eb = elementOf(gemm.getB()), ec = elementOf(gemm.getC());
      if (ea != eb || ea != ec)
        return WalkResult::advance(); // mixed-type GEMMs are not generated today
      int64_t ba = strides[0] ? *batch : 1, bb = strides[1] ? *batch : 1;
      bool ta = gemm.getTransA(), tb = gemm.getTransB();
      auto tensor = [&](int64_t b, int64_t r, int64_t c) {
        return RankedTensorType::get({b, r, c}, ea);
      };
      RankedTensorType at = ta ? tensor(ba, *k, *m) : tensor(ba, *m, *k);
      RankedTensorType bt = tb ? tensor(bb, *n, *k) : tensor(bb, *k, *n);
      RankedTensorType ct = tensor(*batch, *m, *n);
      OpBuilder builder(context);
      OwningOpRef<ModuleOp> scratch = ModuleOp::create(gemm.getLoc());
      builder.setInsertionPointToEnd(scratch->getBody());
      SmallVector<Type> argTypes{at, bt};
      RankedTensorType biasType = RankedTensorType::get({*n}, ea);
      if (gemm.getBias())
        argTypes.push_back(biasType);
      auto reference = builder.create<func::FuncOp>(gemm.getLoc(), "reference",
                                                    FunctionType::get(context, argTypes, {ct}));
      Block *entry = reference.addEntryBlock();
      builder.setInsertionPointToEnd(entry);
      Location loc = gemm.getLoc();
      Value product =
          builder.create<MatmulOp>(loc, ct, entry->getArgument(0), entry->getArgument(1), ta, tb);
      // The epilogue, spelled with the graph ops it replaced.
      kernel::Epilogue epilogue = gemm.getEpilogue();
      if (gemm.getBias())
        product = builder.create<AddOp>(loc, product, entry->getArgument(2));
      if (epilogue == kernel::Epilogue::bias_relu)
        product = builder.create<ReluOp>(loc, product);
      if (epilogue == kernel::Epilogue::bias_gelu)
        product = builder.create<GeluOp>(loc, product, GeluApproximation::tanh);
      builder.create<func::ReturnOp>(loc, product);
      std::vector<HostTensor> inputs;
      for (Type argType : argTypes) {
        auto t = cast<RankedTensorType>(argType);
        HostTensor h(*fromMlirType(ea), std::vector<int64_t>(t.getShape()));
        for (int64_t i = 0; i < h.numel(); ++i)
          h.set(i, std::uniform_real_distribution<double>(-1, 1)(rng));
        inputs.push_back(std::move(h));
      }
      NoWeights weights;
      absl::StatusOr<InterpreterResult> result = interpret(reference, inputs, weights);
      if (!result.ok()) {
        fail(name + ": reference interpreter: " + std::string(result.status().message()));
        return WalkResult::interrupt();
      }
      SmallString<256> caseDir(dir);
      sys::path::append(caseDir, "check", name);
      if (std::error_code ec = sys::fs::create_directories(caseDir)) {
        fail("cannot create " + caseDir + ": " + ec.message());
        return WalkResult::interrupt();
      }
      std::string text;
      raw_string_ostream os(text);
      bool low = !ea.isF32();
      os << "gemm " << *m << " " << *n << " " << *k << " " << *batch << " " << strides[0] << " "
         << strides[1] << " " << strides[2] << " " << ta << " " << tb << "\n";
      os << "epilogue " << kernel::stringifyEpilogue(epilogue) << "\n";
      os << "tolerance " << (low ? "1e-2" : "1e-5") << "\n";
      for (auto [i, t] : llvm::enumerate(inputs)) {
        std::string file = "in" + std::to_string(i) + ".bin";
        if (Error e = writeBytes(caseDir + "/" + file, rawBytes(t))) {
          fail(toString(std::move(e)));
          return WalkResult::interrupt();
        }
        os << "in " << dtypeName(t.dtype) << " " << t.numel() << " " << file << "\n";
      }
      const HostTensor &out = result->outputs.front();
      if (Error e = writeBytes(caseDir + "/expect0.bin", rawBytes(out))) {
        fail(toString(std::move(e)));
        return WalkResult::interrupt();
      }
      os << "out " << dtypeName(out.dtype) << " " << out.numel() << " expect0.bin poison\n";
      if (Error e = writeBytes(caseDir + "/case.txt", text)) {
        fail(toString(std::move(e)));
        return WalkResult::interrupt();
      }
      ++gemms;
      return WalkResult::advance();
    });
    if (walked.wasInterrupted())
      return 1;
  }
  errs() << "kiln: " << cases << " kernel and " << gemms << " GEMM checks (seed " << s << ") -> "
         << dir << "/check\n";
  return 0;
}

} // namespace kiln::driver
