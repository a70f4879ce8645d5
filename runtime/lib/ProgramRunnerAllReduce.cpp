//===- ProgramRunnerAllReduce.cpp - The step's all_reduce ops -------------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Data parallelism (docs/runtime.md): with a communicator an all_reduce is
// the bucket's NCCL calls on the communication stream and its wait an event
// wait; without one (a run of one) the outputs are the inputs: a copy where
// the reduction is out of place, else nothing.
//
//===----------------------------------------------------------------------===//

#include "ProgramRunner.h"

using namespace kiln::runtime;
using namespace kiln::artifact;

Status ProgramRunner::prepareAllReduce(ProgramRunner &r, const ProgramOp &op) {
  const StepProgram &p = r.program;
  if (op.kind == ProgramOp::Kind::AllReduceWait) {
    if (r.communicator)
      r.actions.push_back({Action::AllReduceWait, static_cast<size_t>(op.bucket)});
    return Status::success();
  }
  if (!r.communicator) {
    for (size_t i = 0; i < op.ins.size(); ++i)
      if (op.ins[i] != op.outs[i]) {
        r.actions.push_back({Action::Copy, r.copyList.size()});
        r.copyList.push_back({r.pointers[op.ins[i]], r.pointers[op.outs[i]], r.bytes[op.ins[i]]});
      }
    return Status::success();
  }
  if (Status s = r.communicator->prepareBucket(op.bucket); !s)
    return s;
  AllReduce reduce;
  reduce.bucket = op.bucket;
  for (size_t i = 0; i < op.ins.size(); ++i) {
    DType dtype = p.buffers[op.ins[i]].dtype;
    std::optional<nccl::DataType> type = nccl::dataTypeOf(dtype);
    if (!type)
      return Error{std::string("NCCL cannot average ") + dtypeName(dtype)};
    reduce.items.push_back({r.pointers[op.ins[i]], r.pointers[op.outs[i]],
                            r.bytes[op.ins[i]] / dtypeSize(dtype), *type});
  }
  r.actions.push_back({Action::AllReduce, r.allReduceList.size()});
  r.allReduceList.push_back(std::move(reduce));
  return Status::success();
}

Status ProgramRunner::recordAllReduce(std::pair<Action, size_t> entry, CUstream stream) const {
  if (entry.first == Action::AllReduceWait)
    return communicator->wait(static_cast<int64_t>(entry.second), stream);
  const AllReduce &reduce = allReduceList[entry.second];
  if (Status s = communicator->allReduce(reduce.bucket, reduce.items, stream); !s)
    return fail(s.getError());
  return Status::success();
}
