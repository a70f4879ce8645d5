//===- LoopPrograms.cpp - accum, apply and eval on the GPU ----------------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// The run-time loop's programs (kiln compile --loop-programs,
// docs/training-step.md): per shape an accum program (one micro-batch's
// token-weighted gradients added to persistent accumulators) and an eval
// program (the forward loss), and one apply program (the optimizer on the
// accumulated mean; it clears the accumulators). They share the step's
// arena, weights and parameters and run one at a time on its stream, each
// captured as a CUDA Graph of its own.
//
//===----------------------------------------------------------------------===//

#include "kiln/runtime/StepExecutor.h"

#include "ElementConversion.h"
#include "ProgramRunner.h"
#include "WeightLoading.h"

#include <cstring>

using namespace kiln::runtime;
using namespace kiln::artifact;

bool StepExecutor::hasLoopPrograms() const {
  return artifact && artifact->getProgram("accum") && artifact->getProgram("apply") &&
         artifact->getProgram("eval");
}

Status StepExecutor::makeAccumulators(const SymbolBindings &sizes) {
  const StepProgram *accum = artifact->getProgram("accum");
  for (const ProgramBinding &arg : accum->args) {
    if (arg.role != "accum")
      continue;
    const ProgramBuffer &buffer = accum->buffers[arg.buffer];
    std::vector<int64_t> shape;
    for (const SizeExpr &d : buffer.shape) {
      Expected<int64_t> v = d.evaluate(sizes);
      if (!v)
        return Error{"accum program: accumulator '" + arg.name + "': " + v.getError()};
      shape.push_back(*v);
    }
    Expected<NamedTensor> t = makeTensor(*device, buffer.dtype, shape, pool.get(), persistentKey(arg));
    if (!t)
      return t.takeError();
    if (Status s = device->check(device->getDriver().cuMemsetD8Async(t->memory.get(), 0,
                                                                     t->count * dtypeSize(t->dtype),
                                                                     device->getStream()),
                                 "cuMemsetD8Async");
        !s)
      return s;
    store[persistentKey(arg)] = std::move(*t);
  }
  return Status::success();
}

Expected<size_t> StepExecutor::loopArenaBytes(const SymbolBindings &sizes) const {
  size_t bytes = 0;
  if (!hasLoopPrograms())
    return bytes;
  for (const char *section : {"accum", "apply", "eval"}) {
    Expected<ArenaPlan> plan = artifact->getProgram(section)->planArena(sizes, kArenaAlignment);
    if (!plan)
      return Error{std::string(section) + " program at these sizes: " + plan.getError()};
    bytes = std::max(bytes, plan->size);
  }
  return bytes;
}

Status StepExecutor::prepareLoopPrograms(Shape &shape, const WeightLoader &loadWeight) {
  SharedMemory memory{arena.get(),  arena.size(), workspace.get(),      support.fill,
                      support.copy, cudnn.get(),  options.communicator, nullptr,
                      nullptr,      false,        support.module,       nullptr,
                      nullptr,      options.thinGemm};
  auto prepare = [&](const char *section, std::unique_ptr<ProgramRunner> &into) -> Status {
    const StepProgram *program = artifact->getProgram(section);
    Expected<ArenaPlan> plan = program->planArena(shape.sizes, kArenaAlignment);
    if (!plan)
      return Error{std::string(section) + " program at " + shape.key + ": " + plan.getError()};
    Expected<std::unique_ptr<ProgramRunner>> runner =
        ProgramRunner::prepare(*program, std::string(section) + " program", *device, *lt, handle,
                               moduleIndex, store, loadWeight, shape.sizes, *plan, memory);
    if (!runner)
      return runner.takeError();
    into = std::move(*runner);
    return Status::success();
  };
  if (Status s = prepare("accum", shape.accum); !s)
    return s;
  if (Status s = prepare("eval", shape.eval); !s)
    return s;
  if (!apply)
    return prepare("apply", apply);
  return Status::success();
}

Expected<StepExecutor::ProgramOutputs> StepExecutor::runLoopProgram(ProgramRunner &runner,
                                                                    const std::string &graphKey,
                                                                    int64_t stepNumber,
                                                                    int64_t draw, double lr) {
  const StepProgram &p = runner.getProgram();
  CUstream stream = device->getStream();
  size_t seeds = 0, perStep = 0;
  for (const ProgramBinding &arg : p.args)
    perStep += arg.role == "rng_seed";
  for (const ProgramBinding &arg : p.args) {
    DType dtype = p.buffers[arg.buffer].dtype;
    std::string bytes;
    if (arg.role == "lr")
      bytes = scalarBytes(dtype, lr);
    else if (arg.role == "step")
      bytes = scalarBytes(dtype, static_cast<double>(stepNumber));
    else if (arg.role == "rng_seed")
      // As kiln interp --grad-accum numbers them: micro-batch m of step s
      // is draw (s - 1) * K + m + 1.
      bytes =
          scalarBytes(dtype, static_cast<double>(options.seed + (draw - 1) * perStep + seeds++));
    else
      continue;
    if (Status s = runner.upload(arg.buffer, bytes, stream); !s)
      return s.takeError();
  }
  Status ran =
      graphs ? graphs->run(graphKey, current->key, [&](CUstream s) { return runner.record(s); })
             : runner.record(stream);
  if (!ran)
    return ran.takeError();
  ProgramOutputs out;
  bool haveLoss = false;
  for (const ProgramBinding &result : p.results) {
    if (result.role != "loss" && result.role != "grad_norm" && result.role != "tokens")
      continue;
    Expected<std::string> bytes = runner.downloadBuffer(result.buffer);
    if (!bytes)
      return bytes.takeError();
    Expected<std::string> value =
        convertElements(bytes->data(), p.buffers[result.buffer].dtype, DType::F64, 1);
    if (!value)
      return value.takeError();
    double v;
    std::memcpy(&v, value->data(), 8);
    if (result.role == "loss")
      out.loss = v, haveLoss = true;
    else if (result.role == "grad_norm")
      out.gradNorm = v;
    else
      out.tokens = v;
  }
  if (!haveLoss)
    return Error{graphKey + " program has no loss result"};
  return out;
}

Expected<StepExecutor::ProgramOutputs> StepExecutor::runAccumulate(int64_t draw) {
  if (!current->accum)
    return Error{"the artifact has no loop programs (compile with kiln compile --loop-programs)"};
  return runLoopProgram(*current->accum, "accum", draw, draw, 0);
}

Expected<StepExecutor::ProgramOutputs> StepExecutor::runApply(int64_t step, double lr) {
  if (!apply)
    return Error{"the artifact has no loop programs (compile with kiln compile --loop-programs)"};
  return runLoopProgram(*apply, "apply", step, step, lr);
}

Expected<StepExecutor::ProgramOutputs> StepExecutor::runEval() {
  if (!current->eval)
    return Error{"the artifact has no loop programs (compile with kiln compile --loop-programs)"};
  return runLoopProgram(*current->eval, "eval", 0, 1, 0);
}
