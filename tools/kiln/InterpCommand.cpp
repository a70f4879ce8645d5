//===- InterpCommand.cpp - kiln interp ------------------------------------===//
//
// Runs IR or a model on the reference interpreter with the ONNX backend-test
// layout: input_K.pb in, output_K.pb out; gradients (results tagged
// kiln.grad_of) go to grad/<parameter name>.pb.
//
//===----------------------------------------------------------------------===//

#include "Driver.h"

#include "kiln/Dialect/Graph/GraphDialect.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"
#include "kiln/Import/OnnxWeightSource.h"
#include "kiln/Import/TensorProto.h"
#include "kiln/Interp/InitProgram.h"
#include "kiln/Interp/Interpreter.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include "llvm/ADT/StringMap.h"
#include <limits>
#include <map>
#include <optional>

using namespace llvm;
using namespace mlir;

namespace kiln::driver {
namespace {

cl::opt<std::string> input(cl::Positional, cl::desc("<IR.mlir | model.onnx>"), cl::Required,
                           cl::sub(interpCommand()), cl::cat(category()));
cl::opt<std::string> inputsDir("inputs", cl::desc("Folder with input_K.pb, one per argument"),
                               cl::value_desc("dir"), cl::Required, cl::sub(interpCommand()),
                               cl::cat(category()));
cl::opt<std::string> outputsDir("outputs",
                                cl::desc("Folder to write output_K.pb (and "
                                         "grad/<parameter>.pb) into"),
                                cl::value_desc("dir"), cl::Required, cl::sub(interpCommand()),
                                cl::cat(category()));
cl::opt<bool>
    constSmallInputs("const-small-inputs",
                     cl::desc("With an ONNX model: compile scalar inputs and integer vector "
                              "inputs as constants holding the given values (how the ONNX "
                              "node tests pass shapes, axes, pads and bounds)"),
                     cl::sub(interpCommand()), cl::cat(category()));

cl::opt<unsigned> steps("steps",
                        cl::desc("Run a train step (kiln compile --emit=step-mlir) this many times "
                                 "on the same inputs; writes params/<name>.pb"),
                        cl::init(0), cl::sub(interpCommand()), cl::cat(category()));
cl::opt<bool>
    explainDispatch("explain-dispatch",
                    cl::desc("Print which compiled function (shape bucket or the symbolic "
                             "step) runs"),
                    cl::sub(interpCommand()), cl::cat(category()));
cl::opt<double>
    learningRate("lr", cl::desc("Learning rate fed to the step (default: the one compiled in)"),
                 cl::init(-1.0), cl::sub(interpCommand()), cl::cat(category()));

cl::opt<uint64_t> seed("seed",
                       cl::desc("Seed of the step's random numbers (dropout) and of the init "
                                "program (LoRA init); the k-th seed argument of step s gets "
                                "seed + (s - 1) * <seed arguments> + k"),
                       cl::init(0), cl::sub(interpCommand()), cl::cat(category()));
cl::opt<std::string> paramsDir("params",
                               cl::desc("Folder of <parameter name>.pb files that replace those "
                                        "parameters' values (checkpoint or init program)"),
                               cl::value_desc("dir"), cl::sub(interpCommand()),
                               cl::cat(category()));

cl::opt<unsigned>
    gradAccumRuntime("grad-accum",
                     cl::desc("With --steps and a step compiled with --loop-programs: run "
                              "each step as K micro-batches through @main__accum, then "
                              "@main__apply (--inputs holds K sets of inputs, micro-batch "
                              "after micro-batch), as kiln-run train --grad-accum does"),
                     cl::init(0), cl::sub(interpCommand()), cl::cat(category()));
cl::opt<std::string>
    evalInputsDir("eval-inputs",
                  cl::desc("With --steps and --loop-programs: after each step, run "
                           "@main__eval on this folder's input_K.pb and print its loss"),
                  cl::value_desc("dir"), cl::sub(interpCommand()), cl::cat(category()));

cl::opt<std::string>
    saveDir("save",
            cl::desc("With --steps: after the last step write the trained parameters, "
                     "the optimizer state and the step count to <dir> (params/, state/, "
                     "step.txt), which --resume continues from"),
            cl::value_desc("dir"), cl::sub(interpCommand()), cl::cat(category()));
cl::opt<std::string> resumeDir("resume",
                               cl::desc("With --steps: start from a --save folder's parameters and "
                                        "optimizer state, numbering steps after its step count"),
                               cl::value_desc("dir"), cl::sub(interpCommand()),
                               cl::cat(category()));

cl::opt<std::string>
    writeInitDir("write-init",
                 cl::desc("Also write every parameter the init program makes (LoRA "
                          "adapters, NF4 codes) to <dir>/<name>.pb"),
                 cl::value_desc("dir"), cl::sub(interpCommand()), cl::cat(category()));

cl::opt<std::string>
    memoryBudget("memory-budget",
                 cl::desc("Bytes the interpreter's live tensors may hold (8 per element), "
                          "e.g. 8G, 512M, 1000000; an op whose results would not fit fails "
                          "naming the op and the bytes (default: half of the physical "
                          "memory or of ulimit -v / -d, whichever is smaller)"),
                 cl::value_desc("size"), cl::sub(interpCommand()), cl::cat(category()));

/// --memory-budget as bytes: digits with an optional K, M, G or T suffix
/// (powers of 1024, an `iB` after it allowed); 0 when not given.
std::optional<uint64_t> parseMemoryBudget() {
  if (memoryBudget.empty())
    return 0;
  StringRef text = StringRef(memoryBudget).trim();
  uint64_t value = 0;
  if (text.consumeInteger(10, value) || value == 0)
    return std::nullopt;
  text.consume_back("iB") || text.consume_back("B");
  unsigned shift = 0;
  if (text.equals_insensitive("k"))
    shift = 10;
  else if (text.equals_insensitive("m"))
    shift = 20;
  else if (text.equals_insensitive("g"))
    shift = 30;
  else if (text.equals_insensitive("t"))
    shift = 40;
  else if (!text.empty())
    return std::nullopt;
  if (shift && value > (std::numeric_limits<uint64_t>::max() >> shift))
    return std::nullopt;
  return value << shift;
}

InterpreterOptions interpreterOptions;

absl::StatusOr<HostTensor> readInput(unsigned index) {
  SmallString<256> path(inputsDir);
  sys::path::append(path, "input_" + Twine(index) + ".pb");
  return readTensorFile(path.str().str());
}

/// An input_K.pb past the last one the function takes: a model with fewer
/// inputs than the test data was made for must not run on part of it.
int refuseExtraInput(unsigned taken) {
  SmallString<256> path(inputsDir);
  sys::path::append(path, "input_" + Twine(taken) + ".pb");
  if (!sys::fs::exists(path))
    return 0;
  return fail(path + ": one input file more than the " + Twine(taken) + " input" +
              (taken == 1 ? "" : "s") + " the model takes");
}

/// What --const-small-inputs freezes: integer vectors (shapes, axes, pads)
/// and scalars of any type (bounds, fill values, ratios).
bool isShapeLikeInput(const HostTensor &t) {
  if (t.shape.empty())
    return true;
  return !t.isFloat() && t.shape.size() == 1 && t.numel() <= 64;
}

class NoWeights : public WeightSource {
  absl::StatusOr<HostTensor> load(StringRef name) override {
    return absl::NotFoundError("parameter '" + name.str() +
                               "' has no weight source (module lacks kiln.weights)");
  }
};

int writeOutputs(func::FuncOp func, const std::vector<HostTensor> &outputs) {
  if (std::error_code ec = sys::fs::create_directories(outputsDir))
    return fail(outputsDir + ": " + ec.message());
  unsigned plain = 0;
  for (auto [i, tensor] : llvm::enumerate(outputs)) {
    SmallString<256> path(outputsDir);
    std::string name;
    if (auto param = func.getResultAttrOfType<StringAttr>(i, "kiln.grad_of")) {
      sys::path::append(path, "grad");
      if (std::error_code ec = sys::fs::create_directories(path))
        return fail(path + ": " + ec.message());
      sys::path::append(path, param.str() + ".pb");
      name = param.str();
    } else {
      sys::path::append(path, "output_" + Twine(plain++) + ".pb");
      name = "output_" + std::to_string(i);
      if (auto attr = func.getResultAttrOfType<StringAttr>(i, "kiln.name"))
        name = attr.str();
    }
    absl::Status status = writeTensorFile(path.str().str(), tensor, name);
    if (!status.ok())
      return fail(std::string(status.message()));
  }
  return 0;
}

/// Exit code of a violated shape guard, distinct from other errors (1).
constexpr int kGuardViolation = 3;

/// Binds symbols from the data inputs and evaluates the function's
/// kiln.guards; prints one line naming input, symbol, value and condition.
int checkGuards(func::FuncOp func, ArrayRef<unsigned> dataArgs, ArrayRef<HostTensor> inputs,
                llvm::StringMap<int64_t> &values) {
  struct Binding {
    int64_t value;
    std::string input;
  };
  llvm::StringMap<Binding> bound;
  auto violation = [](const Twine &line) {
    errs() << "kiln: error: " << line << "\n";
    return kGuardViolation;
  };
  for (auto [k, arg] : llvm::enumerate(dataArgs)) {
    if (k >= inputs.size())
      break;
    std::string name = "input " + std::to_string(k);
    if (auto attr = func.getArgAttrOfType<StringAttr>(arg, "kiln.name"))
      name = attr.str();
    auto type = llvm::dyn_cast<RankedTensorType>(func.getArgument(arg).getType());
    if (!type || static_cast<size_t>(type.getRank()) != inputs[k].shape.size())
      continue; // The interpreter reports rank errors.
    for (auto [d, dim] : llvm::enumerate(getDims(type))) {
      SmallVector<StringRef> symbols = dimSymbols(dim);
      if (symbols.size() != 1 || dim != SymExprAttr::getSymbol(func.getContext(), symbols[0]))
        continue;
      int64_t value = inputs[k].shape[d];
      auto [it, inserted] = bound.try_emplace(symbols[0], Binding{value, name});
      if (!inserted && it->second.value != value)
        return violation(name + ": " + symbols[0] + "=" + Twine(value) + " violates " + name + "." +
                         symbols[0] + " == " + it->second.input + "." + symbols[0] + " (" +
                         it->second.input + " has " + symbols[0] + "=" + Twine(it->second.value) +
                         ")");
    }
  }
  for (auto &entry : bound)
    values[entry.getKey()] = entry.getValue().value;
  auto guards = func->getAttrOfType<ArrayAttr>("kiln.guards");
  if (!guards)
    return 0;
  for (auto guard : guards.getAsRange<DictionaryAttr>()) {
    auto expr = guard.getAs<SymExprAttr>("expr");
    auto kind = guard.getAs<StringAttr>("kind");
    auto origin = guard.getAs<StringAttr>("origin");
    if (!expr || !kind)
      return fail("malformed guard " + Twine(dimToString(expr)));
    std::optional<int64_t> value = evaluateDim(expr, [&](StringRef s) -> std::optional<int64_t> {
      auto it = bound.find(s);
      return it == bound.end() ? std::nullopt : std::optional(it->second.value);
    });
    if (!value)
      continue; // Symbols not bound by inputs are checked by the interpreter.
    std::string text = dimToString(expr), condition;
    bool ok = true;
    if (kind.getValue() == "range") {
      int64_t lo = guard.getAs<IntegerAttr>("min").getInt();
      int64_t hi = guard.getAs<IntegerAttr>("max").getInt();
      ok = lo <= *value && *value <= hi;
      condition = std::to_string(lo) + " <= " + text + " <= " + std::to_string(hi);
    } else if (kind.getValue() == "divisible") {
      int64_t divisor = guard.getAs<IntegerAttr>("divisor").getInt();
      ok = *value % divisor == 0;
      condition = text + " % " + std::to_string(divisor) + " == 0";
    }
    if (ok)
      continue;
    SmallVector<StringRef> symbols = dimSymbols(expr);
    std::string input = bound.lookup(symbols.front()).input;
    return violation(input + ": " + text + "=" + Twine(*value) + " violates " + condition +
                     " (required by " + (origin ? origin.getValue() : "a compiled assumption") +
                     ")");
  }
  return 0;
}

/// Where a train step's arguments come from.
struct StepArgument {
  enum Kind { Data, Param, State, Accum, LearningRate, StepNumber, Seed } kind;
  std::string name; // parameter, state or accumulator name
};

std::vector<StepArgument> classifyArguments(func::FuncOp func) {
  std::vector<StepArgument> args;
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    if (auto p = func.getArgAttrOfType<StringAttr>(i, "kiln.param"))
      args.push_back({StepArgument::Param, p.str()});
    else if (auto s = func.getArgAttrOfType<StringAttr>(i, "kiln.state"))
      args.push_back({StepArgument::State, s.str()});
    else if (auto a = func.getArgAttrOfType<StringAttr>(i, "kiln.accum"))
      args.push_back({StepArgument::Accum, a.str()});
    else if (func.getArgAttr(i, "kiln.lr"))
      args.push_back({StepArgument::LearningRate, ""});
    else if (func.getArgAttr(i, "kiln.step"))
      args.push_back({StepArgument::StepNumber, ""});
    else if (func.getArgAttr(i, kRngSeedAttr))
      args.push_back({StepArgument::Seed, ""});
    else
      args.push_back({StepArgument::Data, ""});
  }
  return args;
}

HostTensor scalarF32(double value) {
  HostTensor t(DType::F32, {});
  t.set(0, value);
  return t;
}

/// The value of the `k`-th seed argument in step `step` (1-based): every
/// seed argument of every step draws different numbers, reproducibly.
HostTensor seedFor(const std::vector<StepArgument> &layout, unsigned step, unsigned k) {
  uint64_t perStep =
      llvm::count_if(layout, [](const StepArgument &a) { return a.kind == StepArgument::Seed; });
  HostTensor t(DType::I64, {});
  t.setInt(0, static_cast<int64_t>(seed + (step - 1) * perStep + k));
  return t;
}

/// Adds --params DIR's <name>.pb files to the weights served first.
int loadParamOverrides(OverlayWeightSource &weights) {
  if (paramsDir.empty())
    return 0;
  std::error_code ec;
  for (sys::fs::directory_iterator it(paramsDir, ec), end; it != end && !ec; it.increment(ec)) {
    StringRef path = it->path();
    if (!path.ends_with(".pb"))
      continue;
    absl::StatusOr<HostTensor> tensor = readTensorFile(path.str());
    if (!tensor.ok())
      return fail(std::string(tensor.status().message()));
    weights.tensors[sys::path::stem(path).str()] = std::move(*tensor);
  }
  if (ec)
    return fail(paramsDir + ": " + ec.message());
  return 0;
}

/// A state name ("w/exp_avg") as a file name and back.
std::string stateFileName(const std::string &name) {
  std::string out;
  for (char c : name)
    out += c == '/' ? std::string("%2F") : c == '%' ? std::string("%25") : std::string(1, c);
  return out + ".pb";
}
std::string stateName(StringRef file) {
  std::string out;
  for (size_t i = 0; i < file.size(); ++i) {
    if (file[i] == '%' && file.substr(i, 3) == "%2F")
      out += '/', i += 2;
    else if (file[i] == '%' && file.substr(i, 3) == "%25")
      out += '%', i += 2;
    else
      out += file[i];
  }
  return out;
}

/// --save: the parameters, optimizer state and completed steps.
int saveTrainState(const std::map<std::string, HostTensor> &params,
                   const std::map<std::string, HostTensor> &state, unsigned completed) {
  if (saveDir.empty())
    return 0;
  for (const char *sub : {"params", "state"}) {
    SmallString<256> dir(saveDir);
    sys::path::append(dir, sub);
    if (std::error_code ec = sys::fs::create_directories(dir))
      return fail(saveDir + ": " + ec.message());
  }
  for (auto [list, sub] : {std::pair{&params, "params"}, std::pair{&state, "state"}})
    for (const auto &[name, tensor] : *list) {
      SmallString<256> path(saveDir);
      sys::path::append(path, sub, list == &params ? name + ".pb" : stateFileName(name));
      if (absl::Status status = writeTensorFile(path.str().str(), tensor, name); !status.ok())
        return fail(std::string(status.message()));
    }
  SmallString<256> stepPath(saveDir);
  sys::path::append(stepPath, "step.txt");
  std::error_code ec;
  raw_fd_ostream out(stepPath, ec);
  if (ec)
    return fail(stepPath.str().str() + ": " + ec.message());
  out << completed << "\n";
  return 0;
}

/// --resume: overwrites the tensors --save wrote (each must be one the
/// step has) and returns the completed steps in `start`.
int loadTrainState(std::map<std::string, HostTensor> &params,
                   std::map<std::string, HostTensor> &state, unsigned &start) {
  start = 0;
  if (resumeDir.empty())
    return 0;
  SmallString<256> stepPath(resumeDir);
  sys::path::append(stepPath, "step.txt");
  auto text = MemoryBuffer::getFile(stepPath);
  unsigned completed = 0;
  if (!text || StringRef((*text)->getBuffer()).trim().getAsInteger(10, completed))
    return fail(stepPath.str().str() + ": no step count (not a kiln interp --save folder)");
  start = completed;
  for (auto [list, sub] : {std::pair{&params, "params"}, std::pair{&state, "state"}}) {
    SmallString<256> dir(resumeDir);
    sys::path::append(dir, sub);
    if (!sys::fs::is_directory(dir))
      continue; // nothing of that kind saved (zeros stay)
    std::error_code ec;
    for (sys::fs::directory_iterator it(dir, ec), end; it != end && !ec; it.increment(ec)) {
      StringRef path = it->path();
      if (!path.ends_with(".pb"))
        continue;
      std::string name =
          list == &params ? sys::path::stem(path).str() : stateName(sys::path::stem(path));
      if (!list->count(name))
        return fail(path.str() + ": the step has no " +
                    (list == &params ? "parameter '" : "optimizer state '") + name + "'");
      absl::StatusOr<HostTensor> tensor = readTensorFile(path.str());
      if (!tensor.ok())
        return fail(std::string(tensor.status().message()));
      (*list)[name] = std::move(*tensor);
    }
    if (ec)
      return fail(dir.str().str() + ": " + ec.message());
  }
  return 0;
}

/// Runs the train step `steps` times: parameters start from the weight
/// source, optimizer state from zeros, and each step feeds the next.
int runSteps(func::FuncOp func, std::vector<HostTensor> data, WeightSource &weights) {
  std::vector<StepArgument> layout = classifyArguments(func);
  std::map<std::string, HostTensor> params, state;
  double lr = learningRate;
  if (lr < 0) {
    auto compiled = func->getAttrOfType<FloatAttr>("kiln.default_lr");
    if (!compiled)
      return fail("the step has no compiled learning rate; pass --lr");
    lr = compiled.getValueAsDouble();
  }
  for (auto [i, arg] : llvm::enumerate(layout)) {
    if (arg.kind == StepArgument::Param) {
      absl::StatusOr<HostTensor> value = weights.load(arg.name);
      if (!value.ok())
        return fail(std::string(value.status().message()));
      params[arg.name] = std::move(*value);
    } else if (arg.kind == StepArgument::State) {
      auto type = llvm::cast<RankedTensorType>(func.getArgument(i).getType());
      std::optional<DType> dtype = fromMlirType(type.getElementType());
      if (!dtype || !type.hasStaticShape())
        return fail("optimizer state '" + arg.name + "' needs a static float type");
      state[arg.name] = HostTensor(*dtype, std::vector<int64_t>(type.getShape()));
    }
  }
  HostTensor loss;
  unsigned start;
  if (int rc = loadTrainState(params, state, start))
    return rc;
  for (unsigned step = start + 1; step <= start + steps; ++step) {
    std::vector<HostTensor> inputs;
    size_t nextData = 0;
    unsigned nextSeed = 0;
    for (const StepArgument &arg : layout) {
      switch (arg.kind) {
      case StepArgument::Seed: inputs.push_back(seedFor(layout, step, nextSeed++)); break;
      case StepArgument::Data:
        if (nextData >= data.size())
          return fail("the step takes more data inputs than --inputs holds");
        inputs.push_back(data[nextData++]);
        break;
      case StepArgument::Param: inputs.push_back(params[arg.name]); break;
      case StepArgument::State: inputs.push_back(state[arg.name]); break;
      case StepArgument::Accum: return fail("the step has accumulator arguments; run @main");
      case StepArgument::LearningRate: inputs.push_back(scalarF32(lr)); break;
      case StepArgument::StepNumber: inputs.push_back(scalarF32(step)); break;
      }
    }
    absl::StatusOr<InterpreterResult> result = interpret(func, inputs, weights, interpreterOptions);
    if (!result.ok())
      return fail(std::string(result.status().message()));
    for (auto [i, tensor] : llvm::enumerate(result->outputs)) {
      if (auto p = func.getResultAttrOfType<StringAttr>(i, "kiln.param"))
        params[p.str()] = std::move(tensor);
      else if (auto s = func.getResultAttrOfType<StringAttr>(i, "kiln.state"))
        state[s.str()] = std::move(tensor);
      else if (i == 0)
        loss = std::move(tensor);
    }
    outs() << "step " << step << ": loss " << format("%.7f", loss.getDouble(0)) << "\n";
  }
  if (int rc = saveTrainState(params, state, start + steps))
    return rc;
  if (std::error_code ec = sys::fs::create_directories(outputsDir + "/params"))
    return fail(outputsDir + ": " + ec.message());
  for (auto &[name, tensor] : params) {
    SmallString<256> path(outputsDir);
    sys::path::append(path, "params", name + ".pb");
    if (absl::Status status = writeTensorFile(path.str().str(), tensor, name); !status.ok())
      return fail(std::string(status.message()));
  }
  SmallString<256> lossPath(outputsDir);
  sys::path::append(lossPath, "output_0.pb");
  if (absl::Status status = writeTensorFile(lossPath.str().str(), loss, "loss"); !status.ok())
    return fail(std::string(status.message()));
  return 0;
}

/// Zeros of a function argument's static type.
absl::StatusOr<HostTensor> zerosFor(func::FuncOp func, unsigned i, const std::string &name) {
  auto type = llvm::cast<RankedTensorType>(func.getArgument(i).getType());
  std::optional<DType> dtype = fromMlirType(type.getElementType());
  if (!dtype || !type.hasStaticShape())
    return absl::InvalidArgumentError("'" + name + "' needs a static float type");
  return HostTensor(*dtype, std::vector<int64_t>(type.getShape()));
}

/// The run-time loop of kiln-run train on the CPU: each step accumulates
/// --grad-accum micro-batches with @main__accum, then @main__apply updates
/// the parameters from their token-weighted mean; --eval-inputs runs
/// @main__eval after each step. Seeds: micro-batch m of step s counts as
/// draw (s - 1) * K + m of the seed formula.
int runLoopSteps(ModuleOp module, const std::vector<HostTensor> &data, WeightSource &weights) {
  auto accum = module.lookupSymbol<func::FuncOp>("main__accum");
  auto apply = module.lookupSymbol<func::FuncOp>("main__apply");
  auto eval = module.lookupSymbol<func::FuncOp>("main__eval");
  if (!accum || !apply || !eval)
    return fail(input + ": --grad-accum and --eval-inputs need the loop programs "
                        "(kiln compile --emit=step-mlir --loop-programs)");
  unsigned k = std::max(1u, gradAccumRuntime.getValue());
  double lr = learningRate;
  if (lr < 0) {
    auto compiled = apply->getAttrOfType<FloatAttr>("kiln.default_lr");
    if (!compiled)
      return fail("the step has no compiled learning rate; pass --lr");
    lr = compiled.getValueAsDouble();
  }
  std::vector<HostTensor> evalData;
  if (!evalInputsDir.empty()) {
    unsigned evalArgs = llvm::count_if(classifyArguments(eval), [](const StepArgument &a) {
      return a.kind == StepArgument::Data;
    });
    for (unsigned i = 0; i < evalArgs; ++i) {
      SmallString<256> path(evalInputsDir);
      sys::path::append(path, "input_" + Twine(i) + ".pb");
      absl::StatusOr<HostTensor> tensor = readTensorFile(path.str().str());
      if (!tensor.ok())
        return fail(std::string(tensor.status().message()));
      evalData.push_back(std::move(*tensor));
    }
  }
  std::map<std::string, HostTensor> params, state, accumulators;
  for (func::FuncOp func : {accum, apply})
    for (auto [i, arg] : llvm::enumerate(classifyArguments(func))) {
      std::map<std::string, HostTensor> *into = arg.kind == StepArgument::State   ? &state
                                                : arg.kind == StepArgument::Accum ? &accumulators
                                                                                  : nullptr;
      if (arg.kind == StepArgument::Param && !params.count(arg.name)) {
        absl::StatusOr<HostTensor> value = weights.load(arg.name);
        if (!value.ok())
          return fail(std::string(value.status().message()));
        params[arg.name] = std::move(*value);
      } else if (into && !into->count(arg.name)) {
        absl::StatusOr<HostTensor> zeros = zerosFor(func, i, arg.name);
        if (!zeros.ok())
          return fail(std::string(zeros.status().message()));
        (*into)[arg.name] = std::move(*zeros);
      }
    }
  // Runs `func` on `inputs` (its data arguments, in order), threading the
  // persistent tensors; named results ("loss", "tokens", "grad_norm") go
  // to `named`.
  auto run = [&](func::FuncOp func, ArrayRef<HostTensor> inputs, unsigned step, unsigned draw,
                 std::map<std::string, double> &named) -> int {
    std::vector<StepArgument> layout = classifyArguments(func);
    std::vector<HostTensor> args;
    size_t nextData = 0;
    unsigned nextSeed = 0;
    for (const StepArgument &arg : layout) {
      switch (arg.kind) {
      case StepArgument::Seed: args.push_back(seedFor(layout, draw, nextSeed++)); break;
      case StepArgument::Data:
        if (nextData >= inputs.size())
          return fail("@" + func.getName().str() + " takes more data inputs than given");
        args.push_back(inputs[nextData++]);
        break;
      case StepArgument::Param: args.push_back(params[arg.name]); break;
      case StepArgument::State: args.push_back(state[arg.name]); break;
      case StepArgument::Accum: args.push_back(accumulators[arg.name]); break;
      case StepArgument::LearningRate: args.push_back(scalarF32(lr)); break;
      case StepArgument::StepNumber: args.push_back(scalarF32(step)); break;
      }
    }
    absl::StatusOr<InterpreterResult> result = interpret(func, args, weights, interpreterOptions);
    if (!result.ok())
      return fail(std::string(result.status().message()));
    for (auto [i, tensor] : llvm::enumerate(result->outputs)) {
      if (auto p = func.getResultAttrOfType<StringAttr>(i, "kiln.param"))
        params[p.str()] = std::move(tensor);
      else if (auto s = func.getResultAttrOfType<StringAttr>(i, "kiln.state"))
        state[s.str()] = std::move(tensor);
      else if (auto a = func.getResultAttrOfType<StringAttr>(i, "kiln.accum"))
        accumulators[a.str()] = std::move(tensor);
      else if (auto n = func.getResultAttrOfType<StringAttr>(i, "kiln.name"))
        named[n.str()] = tensor.getDouble(0);
    }
    return 0;
  };
  size_t perMicro = llvm::count_if(
      classifyArguments(accum), [](const StepArgument &a) { return a.kind == StepArgument::Data; });
  if (data.size() != perMicro * k)
    return fail(inputsDir + ": --grad-accum " + std::to_string(k) + " needs " +
                std::to_string(perMicro * k) + " input files (" + std::to_string(perMicro) +
                " per micro-batch), found " + std::to_string(data.size()));
  std::map<std::string, double> last;
  unsigned start;
  if (int rc = loadTrainState(params, state, start))
    return rc;
  for (unsigned step = start + 1; step <= start + steps; ++step) {
    for (unsigned m = 0; m < k; ++m) {
      std::map<std::string, double> micro;
      if (int rc = run(accum, ArrayRef<HostTensor>(data).slice(m * perMicro, perMicro), step,
                       (step - 1) * k + m + 1, micro))
        return rc;
      outs() << "step " << step << " micro-batch " << m << ": loss "
             << format("%.7f", micro["loss"]) << " tokens " << format("%.0f", micro["tokens"])
             << "\n";
    }
    last.clear();
    if (int rc = run(apply, {}, step, step, last))
      return rc;
    outs() << "step " << step << ": loss " << format("%.7f", last["loss"]) << " grad_norm "
           << format("%.7f", last["grad_norm"]) << "\n";
    if (!evalData.empty()) {
      std::map<std::string, double> evaluated;
      if (int rc = run(eval, evalData, step, step, evaluated))
        return rc;
      outs() << "step " << step << ": eval loss " << format("%.7f", evaluated["loss"]) << " tokens "
             << format("%.0f", evaluated["tokens"]) << "\n";
    }
  }
  if (int rc = saveTrainState(params, state, start + steps))
    return rc;
  if (std::error_code ec = sys::fs::create_directories(outputsDir + "/params"))
    return fail(outputsDir + ": " + ec.message());
  for (auto &[name, tensor] : params) {
    SmallString<256> path(outputsDir);
    sys::path::append(path, "params", name + ".pb");
    if (absl::Status status = writeTensorFile(path.str().str(), tensor, name); !status.ok())
      return fail(std::string(status.message()));
  }
  return 0;
}

} // namespace

int runInterp(MLIRContext &context) {
  std::optional<uint64_t> budget = parseMemoryBudget();
  if (!budget)
    return fail("--memory-budget=" + memoryBudget +
                ": expected a positive size such as 8G, 512M or 1000000");
  interpreterOptions.memoryBudget = *budget;
  ImportOptions options;
  std::vector<HostTensor> inputs;
  bool freeze = constSmallInputs && !StringRef(input).ends_with(".mlir");
  if (freeze) {
    absl::StatusOr<std::vector<std::string>> names = listOnnxInputs(input);
    if (!names.ok())
      return fail(std::string(names.status().message()));
    for (auto [i, name] : llvm::enumerate(*names)) {
      absl::StatusOr<HostTensor> tensor = readInput(i);
      if (!tensor.ok())
        return fail(std::string(tensor.status().message()));
      if (isShapeLikeInput(*tensor))
        options.frozenInputs[name] = *tensor;
      else
        inputs.push_back(std::move(*tensor));
    }
    if (int rc = refuseExtraInput(names->size()))
      return rc;
  }
  std::string weightsPath;
  OwningOpRef<ModuleOp> module = loadModule(context, input, options, weightsPath);
  if (!module)
    return 1;
  func::FuncOp func = findMain(*module);
  if (!func)
    return fail(input + ": no function to run");
  std::vector<StepArgument> layout = classifyArguments(func);
  bool isStep = llvm::any_of(layout, [](const StepArgument &a) {
    return a.kind != StepArgument::Data && a.kind != StepArgument::Seed;
  });
  if (steps > 0 && !isStep)
    return fail(input + ": --steps needs a train step (kiln compile --emit=step-mlir)");
  if ((gradAccumRuntime > 0 || !evalInputsDir.empty()) &&
      (!isStep || !module->lookupSymbol("main__accum") || !module->lookupSymbol("main__apply") ||
       !module->lookupSymbol("main__eval")))
    return fail(input + ": --grad-accum and --eval-inputs need the loop programs "
                        "(kiln compile --emit=step-mlir --loop-programs)");
  if (!freeze) {
    unsigned dataArgs =
        llvm::count_if(layout, [](const StepArgument &a) { return a.kind == StepArgument::Data; });
    // The run-time accumulation reads K micro-batches' inputs.
    unsigned perMicroBatch = dataArgs;
    if (gradAccumRuntime > 1)
      dataArgs *= gradAccumRuntime;
    for (unsigned i = 0; i < dataArgs; ++i) {
      absl::StatusOr<HostTensor> tensor = readInput(i);
      if (!tensor.ok() && gradAccumRuntime > 1)
        return fail(std::string(tensor.status().message()) + " (--grad-accum " +
                    std::to_string(gradAccumRuntime) + " reads " + std::to_string(dataArgs) +
                    " inputs, " + std::to_string(perMicroBatch) + " per micro-batch)");
      if (!tensor.ok())
        return fail(std::string(tensor.status().message()));
      inputs.push_back(std::move(*tensor));
    }
    if (int rc = refuseExtraInput(dataArgs))
      return rc;
  }

  NoWeights noWeights;
  std::unique_ptr<OnnxWeightSource> onnxWeights;
  WeightSource *checkpoint = &noWeights;
  if (!weightsPath.empty()) {
    auto opened = OnnxWeightSource::open(weightsPath);
    if (!opened.ok())
      return fail(std::string(opened.status().message()));
    onnxWeights = std::move(*opened);
    checkpoint = onnxWeights.get();
  }
  // --params replaces checkpoint values before the init program reads them
  // and replaces what the init program makes.
  OverlayWeightSource overlay(*checkpoint);
  if (int rc = loadParamOverrides(overlay))
    return rc;
  if (absl::Status s = runInitProgram(*module, seed, overlay); !s.ok())
    return fail(std::string(s.message()));
  if (!writeInitDir.empty()) {
    if (std::error_code ec = sys::fs::create_directories(writeInitDir))
      return fail(writeInitDir + ": " + ec.message());
    for (auto &[name, tensor] : overlay.tensors) {
      SmallString<256> path(writeInitDir);
      sys::path::append(path, name + ".pb");
      if (absl::Status s = writeTensorFile(path.str().str(), tensor, name); !s.ok())
        return fail(std::string(s.message()));
    }
  }
  if (int rc = loadParamOverrides(overlay))
    return rc;
  WeightSource *weights = &overlay;
  SmallVector<unsigned> dataArgs;
  for (auto [i, arg] : llvm::enumerate(layout))
    if (arg.kind == StepArgument::Data)
      dataArgs.push_back(i);
  llvm::StringMap<int64_t> symbols;
  if (!freeze)
    if (int rc = checkGuards(func, dataArgs, inputs, symbols))
      return rc;
  // A bucket compiled for exactly these symbol values runs instead of the
  // symbolic step; it has the same arguments and results.
  if (auto buckets = func->getAttrOfType<ArrayAttr>("kiln.buckets")) {
    for (auto ref : buckets.getAsRange<FlatSymbolRefAttr>()) {
      auto bucket = module->lookupSymbol<func::FuncOp>(ref.getValue());
      auto pinned =
          bucket ? bucket->getAttrOfType<DictionaryAttr>("kiln.bucket") : DictionaryAttr();
      if (!pinned)
        continue;
      bool matches = llvm::all_of(pinned, [&](NamedAttribute entry) {
        auto it = symbols.find(entry.getName().getValue());
        return it != symbols.end() &&
               it->second == llvm::cast<IntegerAttr>(entry.getValue()).getInt();
      });
      if (matches) {
        func = bucket;
        break;
      }
    }
    if (explainDispatch)
      outs() << "dispatch: " << func.getName() << "\n";
  }
  if (isStep) {
    if (steps == 0)
      steps = 1;
    if (gradAccumRuntime > 0 || !evalInputsDir.empty())
      return runLoopSteps(*module, inputs, *weights);
    return runSteps(func, std::move(inputs), *weights);
  }
  // Seed arguments sit among the data arguments.
  std::vector<HostTensor> arguments;
  size_t nextData = 0;
  unsigned nextSeed = 0;
  for (const StepArgument &arg : layout) {
    if (arg.kind == StepArgument::Seed)
      arguments.push_back(seedFor(layout, 1, nextSeed++));
    else if (nextData < inputs.size())
      arguments.push_back(std::move(inputs[nextData++]));
  }
  absl::StatusOr<InterpreterResult> result =
      interpret(func, arguments, *weights, interpreterOptions);
  if (!result.ok())
    return fail(std::string(result.status().message()));
  return writeOutputs(func, result->outputs);
}

} // namespace kiln::driver
