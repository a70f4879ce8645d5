//===- Shape.cpp - reshape, transpose, slice, concat, split, pad, ... -----===//
//
// Data movement only: elements are copied without re-rounding. Ops whose
// result shape is a choice (reshape, expand, split) take it from the result
// type evaluated with the bound symbols.
//
//===----------------------------------------------------------------------===//

#include "Common.h"

#include "absl/strings/str_cat.h"
#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;

namespace kiln::interp {
namespace {

/// The multi-index of a flat row-major index.
Shape unflatten(int64_t flat, ArrayRef<int64_t> shape) {
  Shape index(shape.size());
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return index;
}

/// The same elements under a new shape of equal element count.
absl::StatusOr<Tensors> withShape(const HostTensor &in, Shape shape) {
  if (numel(shape) != in.numel())
    return absl::InvalidArgumentError(absl::StrCat("cannot view ", in.numel(), " elements ",
                                                   in.shapeString(), " as ", shapeString(shape)));
  HostTensor out = in;
  out.shape = std::move(shape);
  return Tensors{std::move(out)};
}

absl::StatusOr<Tensors> runReshape(ReshapeOp op, const HostTensor &in, const Env &env) {
  // One dim the symbols do not determine follows from the element count.
  std::vector<std::optional<int64_t>> dims = env.evaluate(op.getType());
  int64_t known = 1, unknown = -1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] && *dims[i] >= 0) {
      known *= *dims[i];
    } else if (unknown < 0) {
      unknown = i;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("result type ", shapeToString(op.getType()),
                       " has more than one dim the symbols do not determine"));
    }
  }
  Shape shape;
  for (const std::optional<int64_t> &d : dims)
    shape.push_back(d.value_or(0));
  if (unknown >= 0 && known != 0 && in.numel() % known == 0)
    shape[unknown] = in.numel() / known;
  return withShape(in, shape);
}

absl::StatusOr<Tensors> runExpand(ExpandOp op, const HostTensor &in, const Env &env) {
  std::vector<std::optional<int64_t>> dims = env.evaluate(op.getType());
  size_t offset = dims.size() - in.shape.size();
  Shape shape;
  for (size_t i = 0; i < dims.size(); ++i) {
    // An undetermined dim keeps the input's size when that is not 1.
    if (dims[i] && *dims[i] >= 0) {
      shape.push_back(*dims[i]);
    } else if (i >= offset && in.shape[i - offset] != 1) {
      shape.push_back(in.shape[i - offset]);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot determine dim ", i, " of ", shapeToString(op.getType())));
    }
  }
  absl::StatusOr<Shape> b = broadcastShapes({in.shape, shape});
  if (!b.ok() || *b != shape)
    return absl::InvalidArgumentError(
        absl::StrCat("input ", in.shapeString(), " does not broadcast to ", shapeString(shape)));
  HostTensor out(in.dtype, shape);
  BroadcastMap map(in.shape, shape);
  for (int64_t i = 0; i < out.numel(); ++i)
    copyElement(out, i, in, map(i));
  return Tensors{std::move(out)};
}

absl::StatusOr<Tensors> runTranspose(TransposeOp op, const HostTensor &in) {
  ArrayRef<int64_t> perm = op.getPerm();
  Shape shape, inStrides = stridesOf(in.shape);
  for (int64_t p : perm)
    shape.push_back(in.shape[p]);
  HostTensor out(in.dtype, shape);
  for (int64_t i = 0; i < out.numel(); ++i) {
    Shape index = unflatten(i, shape);
    int64_t from = 0;
    for (size_t d = 0; d < perm.size(); ++d)
      from += index[d] * inStrides[perm[d]];
    copyElement(out, i, in, from);
  }
  return Tensors{std::move(out)};
}

/// result[i...] = input[start[d] + i[d] * step[d], ...]: starts are size
/// expressions, lengths come from the result type, and there is no clamping
/// (the importer resolved ONNX's), so every index read must be in range.
absl::StatusOr<Tensors> runSlice(SliceOp op, const HostTensor &in, const Env &env) {
  absl::StatusOr<Shape> shape = env.concreteShape(op.getResult());
  if (!shape.ok())
    return shape.status();
  ArrayRef<Dim> startExprs = op.getStarts().getDims();
  ArrayRef<int64_t> steps = op.getSteps();
  Shape starts;
  for (size_t d = 0; d < in.shape.size(); ++d) {
    std::optional<int64_t> start = env.evaluate(startExprs[d]);
    if (!start)
      return absl::InvalidArgumentError(absl::StrCat(
          "start ", dimToString(startExprs[d]), " of dim ", d, " uses a symbol no input binds"));
    int64_t length = (*shape)[d], last = *start + (length - 1) * steps[d];
    if (length > 0 && (*start < 0 || *start >= in.shape[d] || last < 0 || last >= in.shape[d]))
      return absl::InvalidArgumentError(absl::StrCat("dim ", d, " reads indices ", *start, " to ",
                                                     last, " of a dim of size ", in.shape[d]));
    starts.push_back(*start);
  }
  Shape inStrides = stridesOf(in.shape);
  HostTensor out(in.dtype, *shape);
  for (int64_t i = 0; i < out.numel(); ++i) {
    Shape index = unflatten(i, *shape);
    int64_t from = 0;
    for (size_t d = 0; d < starts.size(); ++d)
      from += (starts[d] + index[d] * steps[d]) * inStrides[d];
    copyElement(out, i, in, from);
  }
  return Tensors{std::move(out)};
}

absl::StatusOr<Tensors> runConcat(ConcatOp op, Operands args) {
  int64_t axis = op.getAxis();
  Shape shape = args[0]->shape;
  shape[axis] = 0;
  for (const HostTensor *t : args) {
    Shape expected = shape;
    expected[axis] = t->shape[axis];
    if (t->shape != expected)
      return absl::InvalidArgumentError(absl::StrCat("input ", t->shapeString(), " does not match ",
                                                     args[0]->shapeString(), " outside axis ",
                                                     axis));
    shape[axis] += t->shape[axis];
  }
  HostTensor out(args[0]->dtype, shape);
  AxisSplit o(shape, axis);
  int64_t offset = 0;
  for (const HostTensor *t : args) {
    AxisSplit s(t->shape, axis);
    for (int64_t a = 0; a < s.outer; ++a)
      for (int64_t k = 0; k < s.len; ++k)
        for (int64_t i = 0; i < s.inner; ++i)
          copyElement(out, o.at(a, offset + k, i), *t, s.at(a, k, i));
    offset += s.len;
  }
  return Tensors{std::move(out)};
}

absl::StatusOr<Tensors> runSplit(SplitOp op, const HostTensor &in, const Env &env) {
  int64_t axis = op.getAxis();
  // Piece sizes come from the result types; one undetermined piece takes
  // the remainder.
  std::vector<std::optional<int64_t>> sizes;
  int64_t known = 0, unknown = 0;
  for (Value r : op.getResults()) {
    sizes.push_back(env.evaluate(r.getType())[axis]);
    known += sizes.back().value_or(0);
    unknown += !sizes.back();
  }
  if (unknown > 1)
    return absl::InvalidArgumentError("more than one piece size is not determined by the symbols");
  bool negative = false;
  for (std::optional<int64_t> &s : sizes) {
    if (!s)
      s = in.shape[axis] - known;
    negative |= *s < 0;
  }
  if (negative || (!unknown && known != in.shape[axis]))
    return absl::InvalidArgumentError(absl::StrCat(
        "pieces of total size ", known, " do not split dim ", axis, " of ", in.shapeString()));
  Tensors results;
  AxisSplit s(in.shape, axis);
  int64_t offset = 0;
  for (std::optional<int64_t> size : sizes) {
    Shape shape = in.shape;
    shape[axis] = *size;
    HostTensor piece(in.dtype, shape);
    AxisSplit p(shape, axis);
    for (int64_t a = 0; a < p.outer; ++a)
      for (int64_t k = 0; k < p.len; ++k)
        for (int64_t i = 0; i < p.inner; ++i)
          copyElement(piece, p.at(a, k, i), in, s.at(a, offset + k, i));
    offset += *size;
    results.push_back(std::move(piece));
  }
  return results;
}

absl::StatusOr<Tensors> runSqueeze(SqueezeOp op, const HostTensor &in) {
  Shape shape;
  for (int64_t d = 0; d < static_cast<int64_t>(in.shape.size()); ++d) {
    if (!llvm::is_contained(op.getAxes(), d))
      shape.push_back(in.shape[d]);
    else if (in.shape[d] != 1)
      return absl::InvalidArgumentError(
          absl::StrCat("dim ", d, " of ", in.shapeString(), " is not 1"));
  }
  return withShape(in, shape);
}

absl::StatusOr<Tensors> runUnsqueeze(UnsqueezeOp op, const HostTensor &in) {
  Shape shape;
  auto next = in.shape.begin();
  int64_t rank = in.shape.size() + op.getAxes().size();
  for (int64_t d = 0; d < rank; ++d)
    shape.push_back(llvm::is_contained(op.getAxes(), d) ? 1 : *next++);
  return withShape(in, shape);
}

absl::StatusOr<Tensors> runPad(PadOp op, const HostTensor &in) {
  ArrayRef<int64_t> pads = op.getPads();
  size_t rank = in.shape.size();
  Shape shape = in.shape;
  for (size_t d = 0; d < rank; ++d)
    shape[d] += pads[d] + pads[rank + d];
  HostTensor out(in.dtype, shape);
  double value = op.getValue().convertToDouble();
  for (int64_t i = 0; i < out.numel(); ++i) {
    if (out.isFloat())
      out.set(i, value);
    else
      out.setInt(i, in.dtype == DType::Bool ? value != 0 : truncToInt(value));
  }
  Shape outStrides = stridesOf(shape);
  for (int64_t i = 0; i < in.numel(); ++i) {
    Shape index = unflatten(i, in.shape);
    int64_t to = 0;
    for (size_t d = 0; d < rank; ++d)
      to += (index[d] + pads[d]) * outStrides[d];
    copyElement(out, to, in, i);
  }
  return Tensors{std::move(out)};
}

} // namespace

MaybeResults runShape(Operation *op, Operands args, const Env &env) {
  if (args.empty()) // every shape op has an operand
    return std::nullopt;
  const HostTensor &in = *args.front();
  return llvm::TypeSwitch<Operation *, MaybeResults>(op)
      .Case([&](ReshapeOp r) { return runReshape(r, in, env); })
      .Case([&](ExpandOp e) { return runExpand(e, in, env); })
      .Case([&](TransposeOp t) { return runTranspose(t, in); })
      .Case([&](SliceOp s) { return runSlice(s, in, env); })
      .Case([&](ConcatOp c) { return runConcat(c, args); })
      .Case([&](SplitOp s) { return runSplit(s, in, env); })
      .Case([&](SqueezeOp s) { return runSqueeze(s, in); })
      .Case([&](UnsqueezeOp u) { return runUnsqueeze(u, in); })
      .Case([&](PadOp p) { return runPad(p, in); })
      .Default([](Operation *) { return std::nullopt; });
}

} // namespace kiln::interp
