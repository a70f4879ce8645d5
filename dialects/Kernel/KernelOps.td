//===- KernelOps.td - Kiln kernel dialect ------------------*- tablegen -*-===//
//
// The kernel level sits between the graph dialect and CUDA C++. It has two
// stages in one dialect:
//  - fusion (tensors): `kiln_kernel.fusion` regions group graph ops that
//    become one generated kernel; `kiln.matmul` stays outside (a GEMM).
//  - step program (buffers): the train step as an explicit list of
//    allocations, views, kernel launches and cuBLASLt GEMMs, with every size
//    a symbolic expression. The runtime interprets this list; each
//    `kiln_kernel.kernel` holds the tensor body its CUDA source comes from.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_KERNEL_OPS_TD
#define KILN_KERNEL_OPS_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/IR/RegionKindInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"

def Kernel_Dialect : Dialect {
  let name = "kiln_kernel";
  let cppNamespace = "::kiln::kernel";
  let summary = "Kiln kernel dialect: fusion groups, kernels, launches and GEMMs";
  let description = [{
    See docs/dialects/kernel.md. Sizes reuse the graph dialect's
    `#kiln.expr` / `#kiln.dims` polynomials over size symbols.
  }];
  let dependentDialects = ["::kiln::GraphDialect"];
  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;
}

// The graph dialect's size attributes, referenced without including its .td
// (its enums would be generated a second time).
def Kernel_SymExpr : Attr<CPred<"::llvm::isa<::kiln::SymExprAttr>($_self)">,
                          "size expression (#kiln.expr)"> {
  let storageType = "::kiln::SymExprAttr";
  let returnType = "::kiln::SymExprAttr";
  let convertFromStorage = "$_self";
}
def Kernel_Dims : Attr<CPred<"::llvm::isa<::kiln::DimsAttr>($_self)">,
                       "size expressions (#kiln.dims)"> {
  let storageType = "::kiln::DimsAttr";
  let returnType = "::kiln::DimsAttr";
  let convertFromStorage = "$_self";
}

class Kernel_Op<string mnemonic, list<Trait> traits = []>
    : Op<Kernel_Dialect, mnemonic, traits>;

//===----------------------------------------------------------------------===//
// Types and enums
//===----------------------------------------------------------------------===//

def Kernel_BufferType : TypeDef<Kernel_Dialect, "Buffer"> {
  let mnemonic = "buffer";
  let summary = "Device memory holding one dense row-major tensor";
  let description = [{
    `!kiln_kernel.buffer<tensor<?x64xf32, #kiln.dims<[batch*seq]>>>`: the
    tensor type gives the element type and the (symbolic) shape; the byte
    size is the element count times the element size.
  }];
  let parameters = (ins "::mlir::RankedTensorType":$tensor);
  let assemblyFormat = "`<` $tensor `>`";
}

def Kernel_Buffer : Type<CPred<"::llvm::isa<::kiln::kernel::BufferType>($_self)">,
                         "kernel buffer", "::kiln::kernel::BufferType">;

def Kernel_FusionKind : I32EnumAttr<"FusionKind", "how a fused kernel iterates", [
    I32EnumAttrCase<"loop", 0>,          // one thread per element of the outputs
    I32EnumAttrCase<"row", 1>,           // one block per row, block reductions
    I32EnumAttrCase<"scan", 2>,          // one thread per scanned line
    I32EnumAttrCase<"scatter", 3>,       // copy, then atomic adds per update
    I32EnumAttrCase<"attention", 4>,     // one block per query row, no SxS buffer
    I32EnumAttrCase<"attention_grad", 5>,
    I32EnumAttrCase<"quantize", 6>]> {        // one block per NF4 block
  let cppNamespace = "::kiln::kernel";
  let genSpecializedAttr = 0;
}
def Kernel_FusionKindAttr : EnumAttr<Kernel_Dialect, Kernel_FusionKind, "kind"> {
  let assemblyFormat = "`<` $value `>`";
}

def Kernel_Epilogue : I32EnumAttr<"Epilogue", "cuBLASLt epilogue", [
    I32EnumAttrCase<"none", 0>, I32EnumAttrCase<"bias", 1>,
    I32EnumAttrCase<"relu", 2>, I32EnumAttrCase<"bias_relu", 3>,
    I32EnumAttrCase<"gelu", 4>, I32EnumAttrCase<"bias_gelu", 5>,
    I32EnumAttrCase<"bgrada", 6>, I32EnumAttrCase<"bgradb", 7>]> {
  let cppNamespace = "::kiln::kernel";
  let genSpecializedAttr = 0;
}
def Kernel_EpilogueAttr : EnumAttr<Kernel_Dialect, Kernel_Epilogue, "epilogue"> {
  let assemblyFormat = "`<` $value `>`";
}

//===----------------------------------------------------------------------===//
// Fusion stage (tensors)
//===----------------------------------------------------------------------===//

def Kernel_FusionOp : Kernel_Op<"fusion",
    [IsolatedFromAbove, SingleBlockImplicitTerminator<"YieldOp">,
     RecursiveMemoryEffects]> {
  let summary = "Graph ops that become one generated kernel";
  let description = [{
    The region's block arguments are the operands in order; the yielded
    values are the results (the tensors the kernel writes). Everything inside
    is recomputed per element (loop) or per row (row) and never stored.

    ```mlir
    %r = kiln_kernel.fusion <loop> (%x, %b) : (tensor<?x64xf32, #kiln.dims<[n]>>,
        tensor<64xf32>) -> tensor<?x64xf32, #kiln.dims<[n]>> {
    ^bb0(%a0: tensor<?x64xf32, #kiln.dims<[n]>>, %a1: tensor<64xf32>):
      %s = kiln.add %a0, %a1 : ...
      %t = kiln.silu %s : ...
      kiln_kernel.yield %t : tensor<?x64xf32, #kiln.dims<[n]>>
    }
    ```
  }];
  let arguments = (ins Kernel_FusionKindAttr:$kind, Variadic<AnyType>:$inputs);
  let results = (outs Variadic<AnyType>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$kind `(` $inputs `)` attr-dict `:` functional-type($inputs, results) $body";
  let hasVerifier = 1;
  let skipDefaultBuilders = 1;
  let builders = [OpBuilder<(ins "::kiln::kernel::FusionKind":$kind,
      "::mlir::ValueRange":$inputs, "::mlir::TypeRange":$resultTypes)>];
}

def Kernel_YieldOp : Kernel_Op<"yield",
    [Pure, Terminator, ReturnLike, ParentOneOf<["FusionOp", "KernelOp"]>]> {
  let summary = "The values a fusion or kernel body produces";
  let arguments = (ins Variadic<AnyType>:$values);
  let builders = [OpBuilder<(ins), [{ /* empty */ }]>];
  let assemblyFormat = "($values^ `:` type($values))? attr-dict";
}

//===----------------------------------------------------------------------===//
// Step program (buffers)
//===----------------------------------------------------------------------===//

def Kernel_KernelOp : Kernel_Op<"kernel",
    [Symbol, IsolatedFromAbove, SingleBlockImplicitTerminator<"YieldOp">]> {
  let summary = "One generated kernel: its tensor-level body and its ABI";
  let description = [{
    The body is the fusion region it was outlined from. The kernel's
    parameters are, in order: one pointer per block argument (inputs), one
    per yielded value (outputs), then one `int64_t` per entry of `symbols`
    (the size symbols its shapes mention, sorted). `kiln_kernel.launch`
    passes them in the same order.
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, Kernel_FusionKindAttr:$kind,
                       StrArrayAttr:$symbols);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$sym_name $kind `symbols` $symbols attr-dict-with-keyword $body";
}

def Kernel_AllocOp : Kernel_Op<"alloc", [MemoryEffects<[MemAlloc]>]> {
  let summary = "A fresh buffer sized by its (symbolic) type";
  let results = (outs Kernel_Buffer:$result);
  let assemblyFormat = "attr-dict `:` qualified(type($result))";
}

def Kernel_ViewOp : Kernel_Op<"view", [Pure]> {
  let summary = "The same bytes seen with another shape (reshape of row-major data), or a block of columns";
  let description = [{
    Without `offset` and `row_stride`: the source's elements, all of them,
    in another shape. With them: a block of the source's elements whose
    result rows (all dims but the last) are `row_stride` elements apart
    (default: the result's width, the last dim), starting `offset` elements
    (default 0) into the source. Columns `[c0, c0 + w)` of a row-major
    `[R, ld]` buffer are `offset = c0, row_stride = ld` with result `[R, w]`;
    the first rows of a buffer are `offset = 0` alone. Such a view is the
    root's memory (the memory plan and live ranges follow the source); a
    view whose row stride is not its width is read and written only by
    GEMMs whose leading dimension is that stride (`lds`) and by kernels
    that index it by rows (docs/design/lora-k-concat.md).

    ```mlir
    %t = kiln_kernel.view %xt {offset = #kiln.expr<2048>, row_stride = #kiln.expr<2064>}
        : !kiln_kernel.buffer<tensor<8192x2064xbf16>> -> !kiln_kernel.buffer<tensor<8192x16xbf16>>
    ```
  }];
  let arguments = (ins Kernel_Buffer:$source, OptionalAttr<Kernel_SymExpr>:$offset,
                       OptionalAttr<Kernel_SymExpr>:$row_stride);
  let results = (outs Kernel_Buffer:$result);
  let assemblyFormat = "$source attr-dict `:` qualified(type($source)) `->` qualified(type($result))";
  let hasVerifier = 1;
}

def Kernel_WeightOp : Kernel_Op<"weight", [Pure]> {
  let summary = "A frozen model weight, read from the weight source by name";
  let description = [{
    With `padded_from = [R, C]` the buffer is larger than the weight: the
    weight's `[R, C]` elements sit in its top-left block (row stride: the
    buffer's width), the rest starts as zeros. K-concatenation's padded
    frozen weights (docs/design/lora-k-concat.md): the step writes the
    adapter's `s B^T` into the rows below and `A^T` into the columns beside,
    and one GEMM reads the weight with either.

    ```mlir
    %w = kiln_kernel.weight "l.up_proj.weight" {padded_from = array<i64: 64, 176>}
        : !kiln_kernel.buffer<tensor<80x192xbf16>>
    ```

    With `members` the block holds several weights side by side along
    `member_axis` (`name` is the first), each `member_sizes` wide: the frozen
    weights of one GEMM over `[Wq | Wk | Wv | A^T]` (kiln-lora-k-concat's
    group-frozen); each member's own GEMMs read views of its part.

    ```mlir
    %w = kiln_kernel.weight "q.weight" {padded_from = array<i64: 64, 96>,
        members = ["q.weight", "k.weight", "v.weight"], member_sizes = array<i64: 64, 16, 16>,
        member_axis = 1 : i64} : !kiln_kernel.buffer<tensor<72x104xbf16>>
    ```
  }];
  let arguments = (ins StrAttr:$name, OptionalAttr<DenseI64ArrayAttr>:$padded_from,
                       OptionalAttr<StrArrayAttr>:$members,
                       OptionalAttr<DenseI64ArrayAttr>:$member_sizes,
                       OptionalAttr<I64Attr>:$member_axis);
  let results = (outs Kernel_Buffer:$result);
  let assemblyFormat = "$name attr-dict `:` qualified(type($result))";
  let hasVerifier = 1;
}

def Kernel_ConstantOp : Kernel_Op<"constant", [Pure]> {
  let summary = "A buffer initialized with a literal";
  let arguments = (ins ElementsAttr:$value);
  let results = (outs Kernel_Buffer:$result);
  let assemblyFormat = "$value attr-dict `:` qualified(type($result))";
}

def Kernel_FillOp : Kernel_Op<"fill"> {
  let summary = "Sets every element of a buffer (zeroes accumulators of atomic adds)";
  let arguments = (ins Kernel_Buffer:$target, F64Attr:$value);
  let assemblyFormat = "$target `,` $value attr-dict `:` qualified(type($target))";
}

def Kernel_CopyOp : Kernel_Op<"copy"> {
  let summary = "Copies one buffer into another of the same size (scatter-add destinations)";
  let arguments = (ins Kernel_Buffer:$source, Kernel_Buffer:$target);
  let assemblyFormat = "$source `->` $target attr-dict `:` qualified(type($source)) `->` qualified(type($target))";
}

def Kernel_LaunchOp : Kernel_Op<"launch", [AttrSizedOperandSegments]> {
  let summary = "Runs a generated kernel over symbolic launch dimensions";
  let description = [{
    Blocks = ceil(`items` / `items_per_block`) (kernels loop when the runtime
    caps the grid), `block` threads each, `shared` bytes of dynamic shared
    memory. The runtime evaluates `items` and `shared` with the step's symbol
    values and passes the kernel's `symbols` after the buffers.

    A tiled attention launch may carry `attention`: the roles of its buffers
    (`q`, `k`, `v`, `o`, and for the backward `do`, `dq`, `dk`, `dv`, as
    positions in ins-then-outs), `direction`, `causal` and the resolved
    `scale`. The runtime may then run another implementation of the same
    attention (cuDNN's fused attention) instead of the kernel.

    ```mlir
    kiln_kernel.launch @fused_3 ins(%a, %b : ...) outs(%c : ...)
        items = #kiln.expr<batch*seq*64> per 1024 block 256 shared #kiln.expr<0>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$kernel, Variadic<Kernel_Buffer>:$ins,
                       Variadic<Kernel_Buffer>:$outs, Kernel_SymExpr:$items,
                       I64Attr:$items_per_block, I64Attr:$block,
                       Kernel_SymExpr:$shared, OptionalAttr<DictionaryAttr>:$attention);
  let builders = [OpBuilder<(ins "::llvm::StringRef":$kernel, "::mlir::ValueRange":$ins,
      "::mlir::ValueRange":$outs, "::kiln::SymExprAttr":$items, "int64_t":$itemsPerBlock,
      "int64_t":$block, "::kiln::SymExprAttr":$shared), [{
    build($_builder, $_state, kernel, ins, outs, items, itemsPerBlock, block, shared,
          ::mlir::DictionaryAttr());
  }]>];
  let assemblyFormat = [{
    $kernel (`ins` `(` $ins^ `:` type($ins) `)`)? `outs` `(` $outs `:` type($outs) `)`
    `items` `=` qualified($items) `per` $items_per_block `block` $block `shared` qualified($shared) attr-dict
  }];
}

def Kernel_GemmOp : Kernel_Op<"gemm"> {
  let summary = "A cuBLASLt matmul: C[b] = op(A[b]) op(B[b]) (+ epilogue), row-major";
  let description = [{
    Row-major semantics: C is m x n, op(A) is m x k, op(B) is k x n, for each
    of `batch` matrices at element strides `stride_a/b/c` (0 broadcasts one
    matrix to every batch). `trans_a` means A is stored k x m. The runtime
    maps this onto column-major cuBLASLt by computing C^T = op(B)^T op(A)^T.
    Accumulation is fp32 for every element type (`compute`). `alpha`
    (default 1) scales the product; `accumulate` adds it to what C holds
    (cuBLASLt's beta = 1, C read and written in place), so a sum of
    products needs no add kernel and no buffer per product.

    `lds` (optional) are the leading dimensions `[lda, ldb, ldc]`: the row
    stride, in elements, of each matrix as stored (A is m x k, or k x m with
    `trans_a`; B k x n, or n x k with `trans_b`; C m x n). Absent, every
    matrix is packed (its row stride is its width). A row stride larger
    than the width reads or writes columns of a wider buffer: the
    K-concatenated LoRA GEMMs (docs/design/lora-k-concat.md) read `[x | t]`
    and write `t` beside `x`.

    ```mlir
    kiln_kernel.gemm ins(%x, %w : ...) outs(%y : ...) m = #kiln.expr<batch*seq>
        n = #kiln.expr<128> k = #kiln.expr<64> batch = #kiln.expr<1>
        strides = #kiln.dims<[0, 0, 0]> {trans_b} epilogue <none>
    ```
  }];
  let arguments = (ins Kernel_Buffer:$a, Kernel_Buffer:$b,
                       Optional<Kernel_Buffer>:$bias, Kernel_Buffer:$c,
                       UnitAttr:$trans_a, UnitAttr:$trans_b,
                       Kernel_SymExpr:$m, Kernel_SymExpr:$n, Kernel_SymExpr:$k,
                       Kernel_SymExpr:$batch, Kernel_Dims:$strides,
                       Kernel_EpilogueAttr:$epilogue, TypeAttr:$compute,
                       OptionalAttr<F64Attr>:$alpha, UnitAttr:$accumulate,
                       OptionalAttr<Kernel_Dims>:$lds);
  let assemblyFormat = [{
    $a `,` $b (`bias` $bias^)? `->` $c `m` `=` qualified($m) `n` `=` qualified($n)
    `k` `=` qualified($k) `batch` `=` qualified($batch) `strides` `=` qualified($strides)
    `epilogue` $epilogue `compute` $compute
    attr-dict `:` qualified(type($a)) `,` qualified(type($b)) (`,` qualified(type($bias))^)?
    `->` qualified(type($c))
  }];
  let hasVerifier = 1;
}

def Kernel_AllReduceOp : Kernel_Op<"all_reduce", [SameVariadicOperandSize]> {
  let summary = "Starts the mean over the data-parallel ranks of one bucket of buffers";
  let description = [{
    `outs[i]` becomes the mean of `ins[i]` over the ranks (NCCL's ncclAvg;
    the same buffer for both when the reduction is in place). The runtime
    issues it on a communication stream after everything before it on the
    compute stream, and returns at once: the compute stream goes on with
    the next ops, and waits for the bucket only at its
    `kiln_kernel.all_reduce_wait`. Nothing between the two may touch these
    buffers. With one rank and no communicator the runtime copies `ins`
    into `outs` (nothing for in place).

    ```mlir
    kiln_kernel.all_reduce ins(%g : ...) outs(%g : ...) bucket 0
    ```
  }];
  let arguments = (ins Variadic<Kernel_Buffer>:$ins, Variadic<Kernel_Buffer>:$outs,
                       I64Attr:$bucket, UnitAttr:$loss);
  let assemblyFormat = [{
    `ins` `(` $ins `:` type($ins) `)` `outs` `(` $outs `:` type($outs) `)` `bucket` $bucket attr-dict
  }];
  let hasVerifier = 1;
}

def Kernel_AllReduceWaitOp : Kernel_Op<"all_reduce_wait"> {
  let summary = "The compute stream waits for an all-reduce bucket";
  let description = [{
    Placed before the first op that reads the bucket's results. Its
    operands are the bucket's buffers (inputs and outputs), so they stay
    live, in the memory plan too, until the exchange is known to be done.

    ```mlir
    kiln_kernel.all_reduce_wait %g bucket 0 : !kiln_kernel.buffer<tensor<8x4xf32>>
    ```
  }];
  let arguments = (ins Variadic<Kernel_Buffer>:$buffers, I64Attr:$bucket);
  let assemblyFormat = "$buffers `bucket` $bucket attr-dict `:` type($buffers)";
}

def Kernel_LinearCrossEntropyOp : Kernel_Op<"linear_cross_entropy",
    [AttrSizedOperandSegments]> {
  let summary = "The fused LM head and mean cross entropy, run by the runtime chunk by chunk";
  let description = [{
    `hidden` [N, H], `weight` [H, V] (or [V, H] with `transpose_weight`),
    `labels` [N]. The runtime runs ceil(N / `chunk_tokens`) chunks of at most
    `chunk_tokens` rows (docs/artifact.md, "The fused LM head"): the logits
    GEMM into `chunk` (fp32 [chunk_tokens, V]), a row kernel (logsumexp, the
    row's loss into `stats`, the chunk overwritten by its gradient), then
    the `hidden_grad` rows and the `weight_grad` accumulation GEMMs (into the
    fp32 `weight_accum` first when the weight is 16-bit). `stats` is fp32
    [N + 1]: per-row losses, then the counted rows. Without `grad` only
    `loss` is computed. `softcap` 0 means none.

    ```mlir
    kiln_kernel.linear_cross_entropy %h, %w, %y grad %g -> %loss, %dh
        chunk %c stats %s {chunk_tokens = 512 : i64, ignore_index = -100 : i64,
        softcap = 0.0 : f64} : ...
    ```
  }];
  let arguments = (ins Kernel_Buffer:$hidden, Kernel_Buffer:$weight, Kernel_Buffer:$labels,
                       Optional<Kernel_Buffer>:$grad, Kernel_Buffer:$loss,
                       Optional<Kernel_Buffer>:$hidden_grad, Optional<Kernel_Buffer>:$weight_grad,
                       Kernel_Buffer:$chunk, Kernel_Buffer:$stats,
                       Optional<Kernel_Buffer>:$weight_accum,
                       UnitAttr:$transpose_weight, I64Attr:$ignore_index, F64Attr:$softcap,
                       I64Attr:$chunk_tokens);
  let assemblyFormat = [{
    $hidden `,` $weight `,` $labels (`grad` $grad^)? `->` $loss
    (`hidden_grad` $hidden_grad^)? (`weight_grad` $weight_grad^)?
    `chunk` $chunk `stats` $stats (`weight_accum` $weight_accum^)? attr-dict `:`
    qualified(type($hidden)) `,` qualified(type($weight)) `,` qualified(type($labels))
    (`grad` qualified(type($grad))^)? `->` qualified(type($loss))
    (`hidden_grad` qualified(type($hidden_grad))^)? (`weight_grad` qualified(type($weight_grad))^)?
    `chunk` qualified(type($chunk)) `stats` qualified(type($stats))
    (`weight_accum` qualified(type($weight_accum))^)?
  }];
}

#endif // KILN_KERNEL_OPS_TD
