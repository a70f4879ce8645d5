//===- GraphOps.td - Kiln graph dialect ops ----------------*- tablegen -*-===//
//
// Every op states its semantics in one line, verifies its operands, and
// infers its result type (InferTypeOpInterface) where the result follows from
// operands and attributes. Ops whose result shape is a choice (reshape,
// expand, cast, iota, split, opaque) carry it in the result type, and their
// verifier checks it against the operands.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_GRAPH_OPS_TD
#define KILN_GRAPH_OPS_TD

include "Graph/GraphBase.td"
include "Graph/GraphAttrs.td"
include "Graph/GraphInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"

// Type inference whose check against declared result types tolerates dims
// one side does not know yet (see kiln::areCompatibleReturnTypes).
def Kiln_InferType : InferTypeOpAdaptorBase<[{
  static bool isCompatibleReturnTypes(::mlir::TypeRange inferred,
                                      ::mlir::TypeRange declared) {
    return ::kiln::areCompatibleReturnTypes(inferred, declared);
  }
}]>;

//===----------------------------------------------------------------------===//
// Sources: constants, parameters, iota
//===----------------------------------------------------------------------===//

def Kiln_ConstantOp : Kiln_Op<"constant",
    [ConstantLike, Pure, Kiln_InferType]> {
  let summary = "A tensor literal (small values only; weights are parameters)";
  let arguments = (ins ElementsAttr:$value);
  let results = (outs Kiln_Tensor:$result);
  let assemblyFormat = "attr-dict $value";
  let hasFolder = 1;
}

def Kiln_ParameterOp : Kiln_Op<"parameter", [Pure]> {
  let summary = "A named model weight; its value comes from the weight source";
  let description = [{
    `kiln.parameter "l1.weight" trainable : tensor<64x32xf32>` is the tensor
    stored under that name (the ONNX initializer name, kept verbatim so users
    select trainables by name). The bytes are never part of the IR: they are
    read from the module's weight source by whoever needs values.
  }];
  let arguments = (ins StrAttr:$name, UnitAttr:$trainable);
  let results = (outs Kiln_Tensor:$result);
  let assemblyFormat = "$name (`trainable` $trainable^)? attr-dict `:` type($result)";
}

def Kiln_IotaOp : Kiln_Op<"iota", [Pure]> {
  let summary = "result[i...] = i[dim] (0, 1, 2, ... along one dimension)";
  let arguments = (ins I64Attr:$dim);
  let results = (outs Kiln_NumericTensor:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Elementwise unary
//===----------------------------------------------------------------------===//

class Kiln_UnaryOp<string mnemonic, Type tensorType, string semantics,
                   list<Trait> traits = []>
    : Kiln_Op<mnemonic, !listconcat(traits,
          [Pure, Elementwise, SameOperandsAndResultType, InferTypeOpInterface])> {
  let summary = semantics;
  let arguments = (ins tensorType:$input);
  let results = (outs tensorType:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Kiln_NegOp : Kiln_UnaryOp<"neg", Kiln_SignedNumericTensor, "-x">;
def Kiln_AbsOp : Kiln_UnaryOp<"abs", Kiln_SignedNumericTensor, "|x|">;
def Kiln_ExpOp : Kiln_UnaryOp<"exp", Kiln_FloatTensor, "e^x">;
def Kiln_LogOp : Kiln_UnaryOp<"log", Kiln_FloatTensor, "natural log">;
def Kiln_SqrtOp : Kiln_UnaryOp<"sqrt", Kiln_FloatTensor, "square root">;
def Kiln_RsqrtOp : Kiln_UnaryOp<"rsqrt", Kiln_FloatTensor, "1 / sqrt(x)">;
def Kiln_ReciprocalOp : Kiln_UnaryOp<"reciprocal", Kiln_FloatTensor, "1 / x">;
def Kiln_TanhOp : Kiln_UnaryOp<"tanh", Kiln_FloatTensor, "hyperbolic tangent">;
def Kiln_SigmoidOp : Kiln_UnaryOp<"sigmoid", Kiln_FloatTensor, "1 / (1 + e^-x)">;
def Kiln_SiluOp : Kiln_UnaryOp<"silu", Kiln_FloatTensor, "x * sigmoid(x)">;
def Kiln_ReluOp : Kiln_UnaryOp<"relu", Kiln_FloatTensor, "max(x, 0)">;
def Kiln_ErfOp : Kiln_UnaryOp<"erf", Kiln_FloatTensor, "Gauss error function">;
def Kiln_SinOp : Kiln_UnaryOp<"sin", Kiln_FloatTensor, "sine">;
def Kiln_CosOp : Kiln_UnaryOp<"cos", Kiln_FloatTensor, "cosine">;
def Kiln_NotOp : Kiln_UnaryOp<"not", Kiln_BoolTensor, "logical not">;
def Kiln_StopGradientOp : Kiln_UnaryOp<"stop_gradient", Kiln_Tensor,
    "identity whose gradient is zero (cuts differentiation)">;

// Float classification: a bool of the input's shape. `is_inf` tests +inf
// and/or -inf (ONNX IsInf's detect_positive / detect_negative).
class Kiln_FloatClassOp<string mnemonic, string semantics>
    : Kiln_Op<mnemonic, [Pure, Elementwise,
                         DeclareOpInterfaceMethods<InferTypeOpInterface>]> {
  let summary = semantics;
  let results = (outs Kiln_BoolTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::inferReturnTypes(
        ::mlir::MLIRContext *context, std::optional<::mlir::Location>,
        ::mlir::ValueRange operands, ::mlir::DictionaryAttr,
        ::mlir::OpaqueProperties, ::mlir::RegionRange,
        ::llvm::SmallVectorImpl<::mlir::Type> &results) {
      auto type = ::llvm::cast<::mlir::RankedTensorType>(operands[0].getType());
      results.push_back(type.clone(::mlir::IntegerType::get(context, 1)));
      return ::mlir::success();
    }
  }];
}

def Kiln_IsNanOp : Kiln_FloatClassOp<"is_nan", "x is NaN"> {
  let arguments = (ins Kiln_FloatTensor:$input);
}
def Kiln_IsInfOp : Kiln_FloatClassOp<"is_inf",
    "x is +inf (detect_positive) or -inf (detect_negative)"> {
  let arguments = (ins Kiln_FloatTensor:$input,
                       DefaultValuedAttr<BoolAttr, "true">:$detect_positive,
                       DefaultValuedAttr<BoolAttr, "true">:$detect_negative);
}

def Kiln_GeluOp : Kiln_Op<"gelu",
    [Pure, Elementwise, SameOperandsAndResultType, InferTypeOpInterface]> {
  let summary = "x * Phi(x); `approximate = tanh` uses the tanh formula";
  let arguments = (ins Kiln_FloatTensor:$input,
      DefaultValuedAttr<Kiln_GeluApproximationAttr,
                        "::kiln::GeluApproximation::none">:$approximate);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

//===----------------------------------------------------------------------===//
// Elementwise binary with numpy broadcasting
//===----------------------------------------------------------------------===//

class Kiln_BinaryOp<string mnemonic, Type tensorType, string semantics,
                    string resultKind, list<Trait> traits = []>
    : Kiln_Op<mnemonic, !listconcat(traits, [Pure, Kiln_InferType])> {
  let summary = semantics # " (numpy broadcasting)";
  let arguments = (ins tensorType:$lhs, tensorType:$rhs);
  let results = (outs Kiln_Tensor:$result);
  let assemblyFormat =
      "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::inferReturnTypes(
        ::mlir::MLIRContext *context, std::optional<::mlir::Location> loc,
        Adaptor adaptor, ::llvm::SmallVectorImpl<::mlir::Type> &results) {
      return ::kiln::inferBroadcastBinary(context, loc, adaptor.getLhs().getType(),
          adaptor.getRhs().getType(), ::kiln::BinaryResultKind::}] # resultKind # [{,
          results);
    }
  }];
}

class Kiln_ArithOp<string mnemonic, string semantics, list<Trait> traits = []>
    : Kiln_BinaryOp<mnemonic, Kiln_NumericTensor, semantics, "SameElement", traits>;
class Kiln_CompareOp<string mnemonic, string semantics>
    : Kiln_BinaryOp<mnemonic, Kiln_Tensor, semantics, "Bool">;
class Kiln_LogicalOp<string mnemonic, string semantics>
    : Kiln_BinaryOp<mnemonic, Kiln_BoolTensor, semantics, "SameElement">;

def Kiln_AddOp : Kiln_ArithOp<"add", "lhs + rhs", [Commutative]> {
  let hasFolder = 1;
  let hasCanonicalizer = 1;
}
def Kiln_SubOp : Kiln_ArithOp<"sub", "lhs - rhs"> { let hasFolder = 1; }
def Kiln_MulOp : Kiln_ArithOp<"mul", "lhs * rhs", [Commutative]> { let hasFolder = 1; }
def Kiln_DivOp : Kiln_ArithOp<"div", "lhs / rhs (integers truncate toward zero)"> {
  let hasFolder = 1;
}
def Kiln_PowOp : Kiln_ArithOp<"pow", "lhs ^ rhs">;
def Kiln_MaxOp : Kiln_ArithOp<"max", "max(lhs, rhs)", [Commutative]>;
def Kiln_MinOp : Kiln_ArithOp<"min", "min(lhs, rhs)", [Commutative]>;

def Kiln_EqOp : Kiln_CompareOp<"eq", "lhs == rhs">;
def Kiln_NeOp : Kiln_CompareOp<"ne", "lhs != rhs">;
def Kiln_LtOp : Kiln_CompareOp<"lt", "lhs < rhs">;
def Kiln_LeOp : Kiln_CompareOp<"le", "lhs <= rhs">;
def Kiln_GtOp : Kiln_CompareOp<"gt", "lhs > rhs">;
def Kiln_GeOp : Kiln_CompareOp<"ge", "lhs >= rhs">;

def Kiln_AndOp : Kiln_LogicalOp<"and", "lhs and rhs">;
def Kiln_OrOp : Kiln_LogicalOp<"or", "lhs or rhs">;
def Kiln_XorOp : Kiln_LogicalOp<"xor", "lhs xor rhs">;

def Kiln_SelectOp : Kiln_Op<"select", [Pure, Kiln_InferType]> {
  let summary = "condition ? true_value : false_value (numpy broadcasting)";
  let arguments = (ins Kiln_BoolTensor:$condition, Kiln_Tensor:$true_value,
                       Kiln_Tensor:$false_value);
  let results = (outs Kiln_Tensor:$result);
  let assemblyFormat = "$condition `,` $true_value `,` $false_value attr-dict "
                       "`:` functional-type(operands, results)";
}

def Kiln_CastOp : Kiln_Op<"cast", [Pure, Elementwise]> {
  let summary = "converts the element type (float->int truncates toward zero)";
  let arguments = (ins Kiln_Tensor:$input);
  let results = (outs Kiln_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Contractions, reductions, normalizations
//===----------------------------------------------------------------------===//

def Kiln_MatmulOp : Kiln_Op<"matmul", [Pure, Kiln_InferType]> {
  let summary = "batched matrix product op(lhs) x op(rhs), batch dims broadcast";
  let description = [{
    Both operands have rank >= 2; the last two dims are the matrix, the rest
    broadcast like numpy. `transpose_a`/`transpose_b` swap the last two dims
    of that operand first (so `x * W^T` is `matmul %x, %w {transpose_b}`).
  }];
  let arguments = (ins Kiln_FloatTensor:$lhs, Kiln_FloatTensor:$rhs,
                       UnitAttr:$transpose_a, UnitAttr:$transpose_b);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat =
      "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
}

class Kiln_ReduceOp<string mnemonic, string semantics>
    : Kiln_Op<mnemonic, [Pure, Kiln_InferType]> {
  let summary = semantics # " over `axes` (kept as size 1 with `keepdim`)";
  let arguments = (ins Kiln_NumericTensor:$input, DenseI64ArrayAttr:$axes,
                       UnitAttr:$keepdim);
  let results = (outs Kiln_NumericTensor:$result);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::inferReturnTypes(
        ::mlir::MLIRContext *context, std::optional<::mlir::Location> loc,
        Adaptor adaptor, ::llvm::SmallVectorImpl<::mlir::Type> &results) {
      return ::kiln::inferReduction(context, loc, adaptor.getInput().getType(),
          adaptor.getAxes(), adaptor.getKeepdim(), results);
    }
  }];
}

def Kiln_ReduceSumOp : Kiln_ReduceOp<"reduce_sum", "sum">;
def Kiln_ReduceMeanOp : Kiln_ReduceOp<"reduce_mean", "arithmetic mean">;
def Kiln_ReduceMaxOp : Kiln_ReduceOp<"reduce_max", "maximum">;

// The result type is the input type, so it comes from the trait rather than
// a custom inferReturnTypes: the generated parser infers result types before
// the attr-dict reaches the properties, where `axis` would still be null.
class Kiln_SoftmaxLikeOp<string mnemonic, string semantics>
    : Kiln_Op<mnemonic,
          [Pure, SameOperandsAndResultType, InferTypeOpInterface]> {
  let summary = semantics;
  let arguments = (ins Kiln_FloatTensor:$input, I64Attr:$axis);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::verify() {
      return ::kiln::verifyAxis(getLoc(), getInput().getType(), getAxis(),
                                "axis");
    }
  }];
}

def Kiln_SoftmaxOp : Kiln_SoftmaxLikeOp<"softmax",
    "exp(x) / sum(exp(x)) along `axis`">;
def Kiln_LogSoftmaxOp : Kiln_SoftmaxLikeOp<"log_softmax",
    "x - log(sum(exp(x))) along `axis`">;

def Kiln_LayerNormOp : Kiln_Op<"layer_norm", [Pure, Kiln_InferType]> {
  let summary = "(x - mean) / sqrt(var + epsilon) * weight (+ bias) over dims [axis, rank)";
  let arguments = (ins Kiln_FloatTensor:$input, Kiln_FloatTensor:$weight,
                       Optional<Kiln_FloatTensor>:$bias, I64Attr:$axis,
                       F64Attr:$epsilon);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = "$input `,` $weight (`,` $bias^)? attr-dict `:` "
                       "functional-type(operands, results)";
}

def Kiln_RmsNormOp : Kiln_Op<"rms_norm", [Pure, Kiln_InferType]> {
  let summary = "x / sqrt(mean(x^2) + epsilon) * weight over dims [axis, rank)";
  let arguments = (ins Kiln_FloatTensor:$input, Kiln_FloatTensor:$weight,
                       I64Attr:$axis, F64Attr:$epsilon);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = "$input `,` $weight attr-dict `:` "
                       "functional-type(operands, results)";
}

def Kiln_RmsNormWithRstdOp : Kiln_Op<"rms_norm_with_rstd", [Pure, Kiln_InferType]> {
  let summary = "rms_norm that also returns rstd = 1 / sqrt(mean(x^2) + epsilon) per row";
  let description = [{
    `result` is `kiln.rms_norm`'s; `rstd` (f32, the input's dims [0, axis))
    is the row statistic, kept for `kiln.rms_norm_grad_from_output`
    (`kiln-norm-grad-from-output` makes both).
  }];
  let arguments = (ins Kiln_FloatTensor:$input, Kiln_FloatTensor:$weight,
                       I64Attr:$axis, F64Attr:$epsilon);
  let results = (outs Kiln_FloatTensor:$result, Kiln_FloatTensor:$rstd);
  let assemblyFormat = "$input `,` $weight attr-dict `:` "
                       "functional-type(operands, results)";
}

def Kiln_CumsumOp : Kiln_Op<"cumsum",
    [Pure, SameOperandsAndResultType, InferTypeOpInterface]> {
  let summary = "running sum along `axis` (optionally exclusive / reversed)";
  let arguments = (ins Kiln_NumericTensor:$input, I64Attr:$axis,
                       UnitAttr:$exclusive, UnitAttr:$reverse);
  let results = (outs Kiln_NumericTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Kiln_TriluOp : Kiln_Op<"trilu",
    [Pure, SameOperandsAndResultType, InferTypeOpInterface]> {
  let summary = "keeps the upper (j - i >= diagonal) or lower (j - i <= diagonal) "
                "triangle of the last two dims, zeroes the rest";
  let arguments = (ins Kiln_Tensor:$input, DefaultValuedAttr<I64Attr, "0">:$diagonal,
                       UnitAttr:$upper);
  let results = (outs Kiln_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Kiln_CrossEntropyOp : Kiln_Op<"cross_entropy", [Pure, Kiln_InferType]> {
  let summary = "-log_softmax(logits)[label] per row, rows with ignore_index "
                "skipped, then mean over counted rows / sum / none";
  let arguments = (ins Kiln_FloatTensor:$logits, Kiln_IndexTensor:$labels,
                       DefaultValuedAttr<I64Attr, "-100">:$ignore_index,
                       DefaultValuedAttr<Kiln_ReductionAttr,
                                         "::kiln::Reduction::mean">:$reduction);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = "$logits `,` $labels attr-dict `:` "
                       "functional-type(operands, results)";
}

def Kiln_AttentionOp : Kiln_Op<"attention", [Pure, Kiln_InferType]> {
  let summary = "softmax(q k^T * scale + mask) v per head; grouped-query heads";
  let description = [{
    query [B, Hq, S, D], key [B, Hkv, L, D], value [B, Hkv, L, Dv] with
    Hq % Hkv == 0 (query head h reads kv head h / (Hq / Hkv)). The optional
    mask broadcasts to [B, Hq, S, L]: i1 keeps where true, a float mask is
    added to the scores. `causal` masks j > i. `scale` defaults to 1/sqrt(D).

    `seq_major` (optional; entries for query, key, value, result) marks the
    tensors stored [B, S, H, D] instead of [B, H, S, D]: the heads' natural
    layout after the projections, so no transpose copies them
    (`kiln-attention-layout`). The mask keeps [B, Hq, S, L].
  }];
  let arguments = (ins Kiln_FloatTensor:$query, Kiln_FloatTensor:$key,
                       Kiln_FloatTensor:$value, Optional<Kiln_Tensor>:$mask,
                       UnitAttr:$causal, OptionalAttr<F64Attr>:$scale,
                       OptionalAttr<DenseBoolArrayAttr>:$seq_major);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = "$query `,` $key `,` $value (`,` $mask^)? attr-dict `:` "
                       "functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Indexing
//===----------------------------------------------------------------------===//

def Kiln_GatherOp : Kiln_Op<"gather", [Pure, Kiln_InferType]> {
  let summary = "result[p..., i..., s...] = data[p..., indices[i...], s...] "
                "along `axis` (embedding lookup is axis 0; negative indices "
                "count from the end)";
  let arguments = (ins Kiln_Tensor:$data, Kiln_IndexTensor:$indices, I64Attr:$axis);
  let results = (outs Kiln_Tensor:$result);
  let assemblyFormat = "$data `,` $indices attr-dict `:` "
                       "functional-type(operands, results)";
}

def Kiln_GatherElementsOp : Kiln_Op<"gather_elements", [Pure, Kiln_InferType]> {
  let summary = "result[i] = data[i with i[axis] replaced by indices[i]]";
  let arguments = (ins Kiln_Tensor:$data, Kiln_IndexTensor:$indices, I64Attr:$axis);
  let results = (outs Kiln_Tensor:$result);
  let assemblyFormat = "$data `,` $indices attr-dict `:` "
                       "functional-type(operands, results)";
}

def Kiln_GatherNdOp : Kiln_Op<"gather_nd", [Pure, Kiln_InferType]> {
  let summary = "result[b..., i...] = data[b..., indices[b..., i..., :]...] "
                "(ONNX GatherND; the last indices dim is the index depth)";
  let arguments = (ins Kiln_Tensor:$data, Kiln_IndexTensor:$indices,
                       DefaultValuedAttr<I64Attr, "0">:$batch_dims);
  let results = (outs Kiln_Tensor:$result);
  let assemblyFormat = "$data `,` $indices attr-dict `:` "
                       "functional-type(operands, results)";
}

def Kiln_ScatterAddOp : Kiln_Op<"scatter_add", [Pure, Kiln_InferType]> {
  let summary = "dest with dest[p..., indices[i...], s...] += updates[p..., i..., s...] "
                "(the transpose of gather; embedding gradients)";
  let arguments = (ins Kiln_NumericTensor:$dest, Kiln_IndexTensor:$indices,
                       Kiln_NumericTensor:$updates, I64Attr:$axis);
  let results = (outs Kiln_NumericTensor:$result);
  let assemblyFormat = "$dest `,` $indices `,` $updates attr-dict `:` "
                       "functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Shape manipulation
//===----------------------------------------------------------------------===//

def Kiln_ReshapeOp : Kiln_Op<"reshape", [Pure]> {
  let summary = "same elements in row-major order, new shape (the result type)";
  let arguments = (ins Kiln_Tensor:$input);
  let results = (outs Kiln_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Kiln_TransposeOp : Kiln_Op<"transpose", [Pure, Kiln_InferType]> {
  let summary = "result dim i = input dim perm[i]";
  let arguments = (ins Kiln_Tensor:$input, DenseI64ArrayAttr:$perm);
  let results = (outs Kiln_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
  let hasFolder = 1;
}

def Kiln_SliceOp : Kiln_Op<"slice", [Pure]> {
  let summary = "result[i...] = input[starts[d] + i[d] * steps[d], ...] per dim d; "
                "the result type gives the lengths";
  let description = [{
    Starts are size expressions (`#kiln.dims<[0, seq - 1]>`), so slices with
    symbolic bounds stay exact; there is no clamping (the importer resolves
    ONNX's clamping and negative indices). A negative step walks backwards
    from its start.

    ```mlir
    %0 = kiln.slice %x {starts = #kiln.dims<[0, 1]>, steps = array<i64: 1, 1>}
        : tensor<?x?xi64, #kiln.dims<[batch, seq]>>
        -> tensor<?x?xi64, #kiln.dims<[batch, seq - 1]>>
    ```
  }];
  let arguments = (ins Kiln_Tensor:$input, Kiln_DimsAttr:$starts,
                       DenseI64ArrayAttr:$steps);
  let results = (outs Kiln_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Kiln_ConcatOp : Kiln_Op<"concat", [Pure, Kiln_InferType]> {
  let summary = "joins inputs along `axis`";
  let arguments = (ins Variadic<Kiln_Tensor>:$inputs, I64Attr:$axis);
  let results = (outs Kiln_Tensor:$result);
  let assemblyFormat = "$inputs attr-dict `:` functional-type(operands, results)";
  let hasFolder = 1;
}

def Kiln_SplitOp : Kiln_Op<"split", [Pure]> {
  let summary = "cuts the input along `axis` into consecutive pieces "
                "(sizes from the result types)";
  let arguments = (ins Kiln_Tensor:$input, I64Attr:$axis);
  let results = (outs Variadic<Kiln_Tensor>:$results);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Kiln_ExpandOp : Kiln_Op<"expand", [Pure]> {
  let summary = "broadcasts the input to the result shape (numpy rules)";
  let arguments = (ins Kiln_Tensor:$input);
  let results = (outs Kiln_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Kiln_SqueezeOp : Kiln_Op<"squeeze", [Pure, Kiln_InferType]> {
  let summary = "removes the size-1 dims listed in `axes`";
  let arguments = (ins Kiln_Tensor:$input, DenseI64ArrayAttr:$axes);
  let results = (outs Kiln_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
  let hasFolder = 1;
}

def Kiln_UnsqueezeOp : Kiln_Op<"unsqueeze", [Pure, Kiln_InferType]> {
  let summary = "inserts size-1 dims at `axes` (positions in the result)";
  let arguments = (ins Kiln_Tensor:$input, DenseI64ArrayAttr:$axes);
  let results = (outs Kiln_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
  let hasFolder = 1;
}

def Kiln_PadOp : Kiln_Op<"pad", [Pure, Kiln_InferType]> {
  let summary = "surrounds the input with `value`: `pads` = [low..., high...]";
  let arguments = (ins Kiln_Tensor:$input, DenseI64ArrayAttr:$pads,
                       DefaultValuedAttr<F64Attr, "0.0">:$value);
  let results = (outs Kiln_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Backward ops: the VJPs of the unit ops, kept whole so fusion sees them
//===----------------------------------------------------------------------===//

def Kiln_SoftmaxGradOp : Kiln_Op<"softmax_grad", [Pure, SameOperandsAndResultType]> {
  let summary = "dx = y * (dy - sum(dy * y, axis)) for y = softmax(x)";
  let arguments = (ins Kiln_FloatTensor:$output, Kiln_FloatTensor:$grad, I64Attr:$axis);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = "$output `,` $grad attr-dict `:` type($output)";
  let hasVerifier = 1;
}

def Kiln_LogSoftmaxGradOp : Kiln_Op<"log_softmax_grad", [Pure, SameOperandsAndResultType]> {
  let summary = "dx = dy - exp(y) * sum(dy, axis) for y = log_softmax(x)";
  let arguments = (ins Kiln_FloatTensor:$output, Kiln_FloatTensor:$grad, I64Attr:$axis);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = "$output `,` $grad attr-dict `:` type($output)";
  let hasVerifier = 1;
}

def Kiln_LayerNormGradOp : Kiln_Op<"layer_norm_grad", [Pure]> {
  let summary = "gradients of layer_norm(x, weight, bias) given dy: dx, dweight, dbias";
  let description = [{
    With xhat = (x - mean) * rstd over dims [axis, rank):
    dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) where g = dy * weight;
    dweight = sum over leading dims of dy * xhat; dbias = sum of dy.
    Statistics are recomputed from x (fp64 accumulation in the reference).
  }];
  let arguments = (ins Kiln_FloatTensor:$input, Kiln_FloatTensor:$weight,
                       Kiln_FloatTensor:$grad, I64Attr:$axis, F64Attr:$epsilon);
  let results = (outs Kiln_FloatTensor:$input_grad, Kiln_FloatTensor:$weight_grad,
                      Kiln_FloatTensor:$bias_grad);
  let assemblyFormat = "$input `,` $weight `,` $grad attr-dict `:` "
                       "functional-type(operands, results)";
  let hasVerifier = 1;
}

def Kiln_RmsNormGradOp : Kiln_Op<"rms_norm_grad", [Pure]> {
  let summary = "gradients of rms_norm(x, weight) given dy: dx, dweight";
  let description = [{
    With r = 1 / sqrt(mean(x^2) + epsilon) over dims [axis, rank) and
    g = dy * weight: dx = r * (g - x * r^2 * mean(g * x));
    dweight = sum over leading dims of dy * x * r.
  }];
  let arguments = (ins Kiln_FloatTensor:$input, Kiln_FloatTensor:$weight,
                       Kiln_FloatTensor:$grad, I64Attr:$axis, F64Attr:$epsilon);
  let results = (outs Kiln_FloatTensor:$input_grad, Kiln_FloatTensor:$weight_grad);
  let assemblyFormat = "$input `,` $weight `,` $grad attr-dict `:` "
                       "functional-type(operands, results)";
  let hasVerifier = 1;
}

def Kiln_RmsNormGradFromOutputOp : Kiln_Op<"rms_norm_grad_from_output", [Pure]> {
  let summary = "gradients of rms_norm(x, weight) given dy, from a scaled normalized output";
  let description = [{
    The input x is not read: with xhat = output / divisor (`output` is the
    normalized x * rstd times the per-column `divisor`, possibly rounded
    to a narrower type, e.g. the product of the bf16-cast norm and a
    frozen scale that the backward keeps anyway) and g = dy * weight:
    dx = rstd * (g - xhat * mean(g * xhat)); dweight = sum over leading
    dims of dy * xhat. `rstd` is `kiln.rms_norm_with_rstd`'s. A zero
    divisor element leaves xhat unknown there: `kiln-norm-grad-from-output`
    only picks frozen divisors, which the runtime checks when weights load.
  }];
  let arguments = (ins Kiln_FloatTensor:$output, Kiln_FloatTensor:$divisor,
                       Kiln_FloatTensor:$weight, Kiln_FloatTensor:$rstd,
                       Kiln_FloatTensor:$grad, I64Attr:$axis);
  let results = (outs Kiln_FloatTensor:$input_grad, Kiln_FloatTensor:$weight_grad);
  let assemblyFormat = "$output `,` $divisor `,` $weight `,` $rstd `,` $grad attr-dict `:` "
                       "functional-type(operands, results)";
  let hasVerifier = 1;
}

def Kiln_AttentionGradOp : Kiln_Op<"attention_grad", [Pure, AttrSizedOperandSegments]> {
  let summary = "gradients of attention(q, k, v, mask) given dout: dq, dk, dv";
  let description = [{
    Recomputes P = softmax(q k^T * scale + mask) per head, then
    dv = P^T dout, dP = dout v^T, dS = P * (dP - rowsum(dP * P)),
    dq = dS k * scale, dk = dS^T q * scale. With grouped-query heads, dk and
    dv sum over the query heads that share a kv head. The mask gets no
    gradient. Same attributes as kiln.attention.

    The optional `out` is the forward op's result attention(q, k, v, mask).
    The value is the same either way; with it, an implementation that kept
    the forward's row statistics (cuDNN's fused attention) computes the
    gradient from out and those statistics instead of recomputing them.

    `seq_major` (optional; entries for query, key, value, grad, out,
    query_grad, key_grad, value_grad) marks the tensors stored [B, S, H, D],
    as on kiln.attention; a gradient's layout may differ from its operand's.
  }];
  let arguments = (ins Kiln_FloatTensor:$query, Kiln_FloatTensor:$key,
                       Kiln_FloatTensor:$value, Optional<Kiln_Tensor>:$mask,
                       Kiln_FloatTensor:$grad, Optional<Kiln_FloatTensor>:$out,
                       UnitAttr:$causal, OptionalAttr<F64Attr>:$scale,
                       OptionalAttr<DenseBoolArrayAttr>:$seq_major);
  let results = (outs Kiln_FloatTensor:$query_grad, Kiln_FloatTensor:$key_grad,
                      Kiln_FloatTensor:$value_grad);
  let assemblyFormat = "$query `,` $key `,` $value (`mask` $mask^)? `grad` $grad "
                       "(`out` $out^)? attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Kiln_CrossEntropyGradOp : Kiln_Op<"cross_entropy_grad", [Pure]> {
  let summary = "dlogits = (softmax(logits) - onehot(label)) * dloss per counted row";
  let description = [{
    Same attributes as kiln.cross_entropy. `grad` is the loss gradient: a
    scalar for mean/sum, [N] for none. For mean every counted row is also
    divided by the number of counted rows; ignored rows get zero.
  }];
  let arguments = (ins Kiln_FloatTensor:$logits, Kiln_IndexTensor:$labels,
                       Kiln_FloatTensor:$grad,
                       DefaultValuedAttr<I64Attr, "-100">:$ignore_index,
                       DefaultValuedAttr<Kiln_ReductionAttr,
                                         "::kiln::Reduction::mean">:$reduction);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = "$logits `,` $labels `,` $grad attr-dict `:` "
                       "functional-type(operands, results)";
  let hasVerifier = 1;
}

// Fused LM head + cross entropy (lib/Dialect/Graph/Transforms/FuseLinearCrossEntropy.cpp).
class Kiln_LinearCrossEntropyBase<string mnemonic, dag extraIns, dag outs>
    : Kiln_Op<mnemonic, [Pure]> {
  let arguments = !con((ins Kiln_FloatTensor:$hidden, Kiln_FloatTensor:$weight,
                            Kiln_IndexTensor:$labels), extraIns,
                       (ins UnitAttr:$transpose_weight,
                            DefaultValuedAttr<I64Attr, "-100">:$ignore_index,
                            OptionalAttr<F64Attr>:$softcap, I64Attr:$chunk_tokens,
                            UnitAttr:$bf16_logits));
  let results = outs;
  let hasVerifier = 1;
}

def Kiln_LinearCrossEntropyOp : Kiln_LinearCrossEntropyBase<"linear_cross_entropy",
    (ins), (outs Kiln_FloatTensor:$loss)> {
  let summary = "mean cross entropy of the logits hidden · W, computed per chunk of "
                "tokens: no [tokens x vocab] tensor exists";
  let description = [{
    hidden [N, H], weight [H, V] (or [V, H] with `transpose_weight`), labels
    [N]. logits = hidden · W in fp32 accumulation, optionally soft-capped
    (`softcap` c: c · tanh(logits / c)); the loss is the mean over the rows
    whose label is not `ignore_index` of logsumexp(logits) − logits[label]
    (a scalar of `loss`'s type, fp32). It is evaluated `chunk_tokens` rows at
    a time, so at most [chunk_tokens, V] logits exist at once: fp32, or bf16
    with `bf16_logits` (bf16 hidden and weight only: the logits are rounded
    to bf16 after the fp32-accumulated matmul, as the unfused bf16 graph
    rounds them; the row statistics stay fp32).
  }];
  let assemblyFormat = "$hidden `,` $weight `,` $labels attr-dict `:` "
                       "functional-type(operands, results)";
}

def Kiln_LinearCrossEntropyGradOp : Kiln_LinearCrossEntropyBase<"linear_cross_entropy_grad",
    (ins Kiln_FloatTensor:$grad),
    (outs Kiln_FloatTensor:$loss, Kiln_FloatTensor:$hidden_grad,
          Optional<Kiln_FloatTensor>:$weight_grad)> {
  let summary = "kiln.linear_cross_entropy's loss and its gradients in one chunked pass";
  let description = [{
    Per chunk of `chunk_tokens` rows: the logits chunk, its logsumexp and
    loss contribution, then dlogits = (softmax − onehot(label)) · grad /
    (counted rows) (zero rows for ignored labels, times 1 − tanh² under a
    soft-cap) over the same chunk, hidden_grad chunk = dlogits · Wᵀ and, when
    the op has a `weight_grad` result, weight_grad += the chunk's share
    (hiddenᵀ · dlogits, or its transpose). `loss` equals the forward op's, so
    the train step computes the loss here and drops the forward op (the
    canonicalizer merges them when `grad` is available before every use of
    the forward loss).
  }];
  let assemblyFormat = "$hidden `,` $weight `,` $labels `,` $grad attr-dict `:` "
                       "functional-type(operands, results)";
  let hasCanonicalizer = 1;
}

//===----------------------------------------------------------------------===//
// Ops the importer could not map
//===----------------------------------------------------------------------===//

//===----------------------------------------------------------------------===//
// Randomness (counter-based, reproducible) and weight quantization
//===----------------------------------------------------------------------===//

def Kiln_SeedTensor : 0DTensorOf<[I64]>;

def Kiln_DropoutOp : Kiln_Op<"dropout",
    [Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "input * keep / (1 - p), keep ~ Bernoulli(1 - p) from Philox";
  let description = [{
    Element `i` is kept when the uniform number drawn by Philox4x32-10 with
    key `seed` and counter `(i / 4, stream, 0, 0)` (word `i % 4`, top 24
    bits scaled to [0, 1)) is `>= p`. The mask is a pure function of
    (seed, stream, i), so the backward pass redraws it instead of storing
    it, and a step replayed with the same seed input drops the same
    elements. Each dropout site gets its own `stream`.
  }];
  let arguments = (ins Kiln_FloatTensor:$input, Kiln_SeedTensor:$seed,
                       F64Attr:$p, I64Attr:$stream);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = "$input `,` $seed attr-dict `:` type($input) `,` type($seed)";
  let hasVerifier = 1;
}

def Kiln_RandomUniformOp : Kiln_Op<"random_uniform", [Pure]> {
  let summary = "uniform numbers in [low, high) from Philox(seed, stream)";
  let description = [{
    Element `i` is `low + (high - low) * u` with `u` drawn as in
    `kiln.dropout`. LoRA initializes `lora_A` with it (Kaiming-uniform
    bounds), in the init program.
  }];
  let arguments = (ins Kiln_SeedTensor:$seed, F64Attr:$low, F64Attr:$high,
                       I64Attr:$stream);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = "$seed attr-dict `:` type($seed) `->` type($result)";
  let hasVerifier = 1;
}

def Kiln_Nf4QuantizeOp : Kiln_Op<"nf4_quantize", [Pure, Kiln_InferType]> {
  let summary = "blockwise NormalFloat4 codes (two per byte) and fp32 absmax";
  let description = [{
    Flattens `input` row-major into blocks of `block_size`; each block is
    divided by its absolute maximum (`absmax`, fp32) and every element is
    rounded to the nearest of the 16 NF4 code values of QLoRA. Two 4-bit
    codes share a byte, the first element in the high nibble (the
    bitsandbytes layout). An all-zero block has absmax 0 and codes 7 (the
    code of 0.0).
  }];
  let arguments = (ins Kiln_FloatTensor:$input,
                       DefaultValuedAttr<I64Attr, "64">:$block_size);
  let results = (outs 1DTensorOf<[UI8]>:$codes, 1DTensorOf<[F32]>:$absmax);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type(results)";
  let hasVerifier = 1;
}

def Kiln_Nf4DequantizeOp : Kiln_Op<"nf4_dequantize", [Pure]> {
  let summary = "NF4 code value * block absmax, reshaped to the result type";
  let description = [{
    The inverse of `kiln.nf4_quantize` up to rounding: element `i` is
    `NF4[code(i)] * absmax[i / block_size]` computed in fp32 and rounded to
    the result's element type. The result type (static) gives the layout.
  }];
  let arguments = (ins 1DTensorOf<[UI8]>:$codes, 1DTensorOf<[F32]>:$absmax,
                       DefaultValuedAttr<I64Attr, "64">:$block_size);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = "$codes `,` $absmax attr-dict `:` type($codes) `,` "
                       "type($absmax) `->` type($result)";
  let hasVerifier = 1;
}

def Kiln_QuantizeBlockwise8bitOp : Kiln_Op<"quantize_blockwise_8bit",
    [Pure, Kiln_InferType]> {
  let summary = "blockwise 8-bit codes of the signed dynamic map, fp32 absmax";
  let description = [{
    QLoRA's double quantization of the NF4 absmax values: blocks of
    `block_size` (256) of a 1-D fp32 tensor are scaled by the reciprocal of
    their absolute maximum and rounded to the nearest of the 256 values of
    the signed dynamic 8-bit map (kiln/Support/DynamicMap8.h).
  }];
  let arguments = (ins 1DTensorOf<[F32]>:$input,
                       DefaultValuedAttr<I64Attr, "256">:$block_size);
  let results = (outs 1DTensorOf<[UI8]>:$codes, 1DTensorOf<[F32]>:$absmax);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type(results)";
}

def Kiln_DequantizeBlockwise8bitOp : Kiln_Op<"dequantize_blockwise_8bit",
    [Pure, Kiln_InferType]> {
  let summary = "dynamic-map value of each code * its block's absmax (fp32)";
  let arguments = (ins 1DTensorOf<[UI8]>:$codes, 1DTensorOf<[F32]>:$absmax,
                       DefaultValuedAttr<I64Attr, "256">:$block_size);
  let results = (outs 1DTensorOf<[F32]>:$result);
  let assemblyFormat = "$codes `,` $absmax attr-dict `:` type($codes) `,` "
                       "type($absmax) `->` type($result)";
}

//===----------------------------------------------------------------------===//
// Collectives (data parallelism)
//===----------------------------------------------------------------------===//

def Kiln_AllReduceOp : Kiln_Op<"all_reduce",
    [DeclareOpInterfaceMethods<InferTypeOpInterface>]> {
  let summary = "Each operand averaged over the data-parallel ranks (one bucket)";
  let description = [{
    Result i is the mean of operand i over every rank of the run (NCCL's
    `ncclAvg`); with one rank it is the operand. The operands of one op are
    one bucket: the runtime reduces them together, on a communication stream
    of their own, overlapping what follows. `kiln-data-parallel` inserts them
    (gradients, and `loss` for the logged loss). It is a collective: every
    rank must run the same ones in the same order, so it declares unknown
    side effects and nothing moves across it.

    ```mlir
    %g:2 = kiln.all_reduce %dw2, %db2 bucket 0 : tensor<8x4xf32>, tensor<4xf32>
    %l = kiln.all_reduce %loss bucket 3 {loss} : tensor<f32>
    ```
  }];
  let arguments = (ins Variadic<Kiln_Tensor>:$inputs, I64Attr:$bucket, UnitAttr:$loss);
  let results = (outs Variadic<Kiln_Tensor>:$results);
  let assemblyFormat = "$inputs `bucket` $bucket attr-dict `:` type($inputs)";
  let hasVerifier = 1;
}

def Kiln_OpaqueOp : Kiln_Op<"opaque"> {
  let summary = "an ONNX node Kiln does not support, kept verbatim";
  let description = [{
    Keeps the ONNX `op_type`, `domain`, the node name and its attributes so
    the graph-break analysis can report it and a fallback can run it. It has
    unknown side effects: nothing moves across it.
  }];
  let arguments = (ins StrAttr:$op_type, StrAttr:$domain, StrAttr:$node_name,
                       DictionaryAttr:$onnx_attributes,
                       Variadic<AnyType>:$inputs);
  let results = (outs Variadic<AnyType>:$results);
  let assemblyFormat = "$op_type `(` $inputs `)` attr-dict `:` "
                       "functional-type($inputs, $results)";
}

#endif // KILN_GRAPH_OPS_TD
