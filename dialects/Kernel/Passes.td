//===- Passes.td - Kernel dialect passes -------------------*- tablegen -*-===//

#ifndef KILN_KERNEL_PASSES_TD
#define KILN_KERNEL_PASSES_TD

include "mlir/Pass/PassBase.td"

//===----------------------------------------------------------------------===//
// Fusion and lowering to the step program
//===----------------------------------------------------------------------===//

def FusePass : Pass<"kiln-fuse", "::mlir::func::FuncOp"> {
  let summary = "Group the graph ops of a step into kiln_kernel.fusion regions";
  let description = [{
    Every graph op except `kiln.matmul` (a GEMM), `kiln.parameter`,
    `kiln.constant` and shape-only reshapes ends up in exactly one fusion.
    Greedy producer-into-consumer merging in program order:

    - pointwise and index-mapping ops (elementwise, casts, broadcasts,
      transposes, slices, concat, pad, gathers, iota) chain into `loop`
      fusions; a producer whose results are also used later stays an extra
      output when it has the same shape (multi-output fusion);
    - softmax, log_softmax, layer_norm, rms_norm, their gradients and
      cross_entropy (+ its gradient on the same logits, one kernel) start
      `row` fusions that absorb pointwise producers of their inputs and
      pointwise consumers of the same shape (not index-mapping ones such as
      a head transpose: the row kernel has its result only at its row);
    - a `kiln.split` becomes one `kiln.slice` per piece before grouping;
    - reductions join a loop fusion as inner loops when they do not make a
      producer recompute more often;
    - attention / attention_grad are `attention` fusions (no S x S buffer),
      which absorb the computation of the mask;
    - a loop producer read by several ops of one group joins once all its
      readers are inside (the head transpose before both RoPE halves);
      a group that reads nothing (a zero fill) is computed by its readers;
    - sibling loop groups over one element count that read one input of
      that size become one kernel (the SiLU-and-product gradient), and an
      elementwise value whose operands a loop or row group reads anyway (or
      reads in fewer bytes) is recomputed there instead of stored and read
      back (silu(gate); the fp32 norm input cast from the bf16 sum);
    - the small loop groups that read only arguments and parameters (the
      bf16 copies of fp32 LoRA adapters) are one multi-tensor kernel.

    Before:
    ```mlir
    %0 = kiln.matmul %x, %w : (...) -> tensor<?x64xf32, #kiln.dims<[n]>>
    %1 = kiln.add %0, %b : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64xf32>) -> ...
    %2 = kiln.silu %1 : tensor<?x64xf32, #kiln.dims<[n]>>
    ```
    After:
    ```mlir
    %0 = kiln.matmul %x, %w : (...) -> tensor<?x64xf32, #kiln.dims<[n]>>
    %1 = kiln_kernel.fusion <loop> (%0, %b) : (...) -> tensor<?x64xf32, #kiln.dims<[n]>> {
    ^bb0(%a: tensor<?x64xf32, #kiln.dims<[n]>>, %c: tensor<64xf32>):
      %s = kiln.add %a, %c : ...
      %t = kiln.silu %s : tensor<?x64xf32, #kiln.dims<[n]>>
      kiln_kernel.yield %t : tensor<?x64xf32, #kiln.dims<[n]>>
    }
    ```
  }];
  let dependentDialects = ["::kiln::kernel::KernelDialect"];
  let statistics = [
    Statistic<"numOpsBefore", "ops-before", "Graph ops that each would be a kernel unfused">,
    Statistic<"numFusions", "fusions", "Fused kernels">,
    Statistic<"numGemms", "gemms", "Matmuls left for cuBLASLt">,
  ];
}

def LowerToStepPass : Pass<"kiln-lower-to-step", "::mlir::ModuleOp"> {
  let summary = "Turn a fused step into buffers, kernel launches and GEMMs";
  let description = [{
    Tensors become `!kiln_kernel.buffer`s; each fusion is outlined into a
    `kiln_kernel.kernel` symbol and replaced by allocations of its outputs
    and one `kiln_kernel.launch`; each `kiln.matmul` becomes a
    `kiln_kernel.gemm` whose batch dims fold into m when the right operand
    is shared, and a weight-gradient `matmul {transpose_a}` summed over the
    batch becomes one GEMM with k = batch*seq, and a bias add (+ ReLU or
    tanh-GELU) on a GEMM's only use is its cuBLASLt epilogue. Reshapes
    become views,
    frozen parameters weights. Accumulators of atomic adds are zero-filled
    right before their launch. A `kiln.all_reduce` (kiln-data-parallel)
    becomes a `kiln_kernel.all_reduce` — in place on a gradient buffer only
    it reads, else into a fresh buffer — and a `kiln_kernel.all_reduce_wait`
    on the bucket's buffers right before the first op that reads a result
    (before the return for the loss).

    Before:
    ```mlir
    func.func @f(%x: tensor<?x64xf32, #kiln.dims<[n]>>, %w: tensor<64x64xf32>) -> tensor<?x64xf32, #kiln.dims<[n]>> {
      %0 = kiln.matmul %x, %w : (...) -> tensor<?x64xf32, #kiln.dims<[n]>>
      %1 = kiln_kernel.fusion <loop> (%0) : (...) -> tensor<?x64xf32, #kiln.dims<[n]>> {...}
      return %1 : tensor<?x64xf32, #kiln.dims<[n]>>
    }
    ```
    After:
    ```mlir
    kiln_kernel.kernel @f_k0 <loop> symbols ["n"] {...}
    func.func @f(%x: !kiln_kernel.buffer<tensor<?x64xf32, #kiln.dims<[n]>>>, %w: !kiln_kernel.buffer<tensor<64x64xf32>>) -> ... {
      %0 = kiln_kernel.alloc : !kiln_kernel.buffer<tensor<?x64xf32, #kiln.dims<[n]>>>
      kiln_kernel.gemm %x, %w -> %0 m = #kiln.expr<n> n = #kiln.expr<64> k = #kiln.expr<64> ...
      %1 = kiln_kernel.alloc : !kiln_kernel.buffer<tensor<?x64xf32, #kiln.dims<[n]>>>
      kiln_kernel.launch @f_k0 ins(%0 : ...) outs(%1 : ...) items = #kiln.expr<64*n> per 1024 block 256 shared #kiln.expr<0>
      return %1 : !kiln_kernel.buffer<tensor<?x64xf32, #kiln.dims<[n]>>>
    }
    ```
  }];
  let dependentDialects = ["::kiln::kernel::KernelDialect"];
  let statistics = [
    Statistic<"numLaunches", "launches", "Kernel launches per step">,
    Statistic<"numGemms", "gemms", "cuBLASLt GEMMs per step">,
    Statistic<"numAllReduces", "all-reduces", "All-reduce buckets per step">,
  ];
}

def UpdateInPlacePass : Pass<"kiln-update-in-place", "::mlir::func::FuncOp"> {
  let summary = "Write new parameters and optimizer state over the old ones";
  let description = [{
    After `kiln-lower-to-step`, a train step's new parameters and optimizer
    state are fresh buffers the runtime copies back over the old ones after
    the step: one more copy of every trained tensor live at the end of the
    step, and a copy per tensor. When the buffer of a `kiln.param` /
    `kiln.state` result is written by one pointwise loop kernel (every op
    elementwise, every output the shape of the result) that reads the
    argument of the same name at the element it writes, and nothing reads
    that argument after the launch, the result becomes a view of the
    argument: the kernel updates it in place (each thread reads its element
    before writing it), and the runtime has nothing to copy.

    Before:
    ```mlir
    func.func @step(%p: !kiln_kernel.buffer<tensor<8xf32>> {kiln.param = "w"}, %g: ...)
        -> (!kiln_kernel.buffer<tensor<8xf32>> {kiln.param = "w"}) {
      %0 = kiln_kernel.alloc : !kiln_kernel.buffer<tensor<8xf32>>
      kiln_kernel.launch @step_k0_mul_sub ins(%p, %g : ...) outs(%0 : ...) ...
      return %0 : ...
    }
    ```
    After:
    ```mlir
      %0 = kiln_kernel.view %p : !kiln_kernel.buffer<tensor<8xf32>> -> !kiln_kernel.buffer<tensor<8xf32>>
      kiln_kernel.launch @step_k0_mul_sub ins(%p, %g : ...) outs(%0 : ...) ...
    ```
  }];
  let statistics = [
    Statistic<"numInPlace", "in-place", "Parameters and state updated in place">,
  ];
}

def RowDotPass : Pass<"kiln-row-dot", "::mlir::ModuleOp"> {
  let summary = "Compute thin GEMMs of a loop kernel's rows in the kernel that produced them";
  let description = [{
    After `kiln-lower-to-step`, a GEMM whose A is an output of the
    vectorized bf16 loop kernel launched before it — the kernel's rows as
    its rows, their whole width K (a multiple of 256, at least `min-k`) as
    its k — and whose B is a packed `[K, n]` matrix (or `[n, K]` read
    transposed) with n <= 64 (a LoRA adapter's `dT = s dy B`, or the
    forward's `t = h Aᵀ`) becomes part of that launch: B an input, C an
    output, the body `kiln.matmul`s in f32 of the yielded value, times alpha
    (an f32 constant), cast to C's type. Later GEMMs that accumulate into
    the same C with the same alpha join it as terms of one sum. Nothing may
    read or write C, or write A, between the launch and the GEMMs; a B
    written after the launch by a launch that can move (q/k/v's stacked
    adapters) moves before it, and so do C's alloc and views. The kernel
    gets `kiln.row_dot` = rows per block (16 when it reads three or more
    inputs along the rows, to keep the registers of one CTA per SM under 128,
    else 32); lib/Codegen/RowDotKernel.cpp computes the products on tensor
    cores from the registers that hold the rows (docs/codegen.md). `kiln
    compile --row-dot=false` leaves the GEMMs, `--row-dot-min-k=N` takes
    only rows at least N wide, `--row-dot-max-inputs=N` only kernels that
    read at most N inputs along the rows, and `--row-dot-prefetch` (option
    `prefetch`, `kiln.row_dot_prefetch`) makes each 256-column step load
    the next step's inputs before its barrier and products.

    Before:
    ```mlir
    kiln_kernel.kernel @k0_mul <loop> symbols ["n"] {
    ^bb0(%x: tensor<?x512xbf16, #kiln.dims<[n]>>, %y: tensor<?x512xbf16, #kiln.dims<[n]>>):
      %z = kiln.mul %x, %y : ...
      kiln_kernel.yield %z : tensor<?x512xbf16, #kiln.dims<[n]>>
    }
    ...
    kiln_kernel.launch @k0_mul ins(%x, %y : ...) outs(%z : ...)
        items = #kiln.expr<64*n> per 256 block 256 shared #kiln.expr<0>
    %d = kiln_kernel.alloc : !kiln_kernel.buffer<tensor<?x16xbf16, #kiln.dims<[n]>>>
    kiln_kernel.gemm %z, %b -> %d m = #kiln.expr<n> n = #kiln.expr<16>
        k = #kiln.expr<512> ... {alpha = 2.0 : f64} : ..., !kiln_kernel.buffer<tensor<512x16xbf16>> -> ...
    ```
    After:
    ```mlir
    kiln_kernel.kernel @k0_mul_dot <loop> symbols ["n"] attributes {kiln.row_dot = 32 : i64} {
    ^bb0(%x: ..., %y: ..., %b: tensor<512x16xbf16>):
      %z = kiln.mul %x, %y : ...
      %zf = kiln.cast %z : tensor<?x512xbf16, ...> -> tensor<?x512xf32, ...>
      %bf = kiln.cast %b : tensor<512x16xbf16> -> tensor<512x16xf32>
      %p = kiln.matmul %zf, %bf : ... -> tensor<?x16xf32, #kiln.dims<[n]>>
      %c = kiln.constant dense<2.000000e+00> : tensor<f32>
      %s = kiln.mul %p, %c : ...
      %d = kiln.cast %s : tensor<?x16xf32, ...> -> tensor<?x16xbf16, ...>
      kiln_kernel.yield %z, %d : ...
    }
    ...
    %d = kiln_kernel.alloc : !kiln_kernel.buffer<tensor<?x16xbf16, #kiln.dims<[n]>>>
    kiln_kernel.launch @k0_mul_dot ins(%x, %y, %b : ...) outs(%z, %d : ...)
        items = #kiln.expr<n> per 32 block 256 shared #kiln.expr<0>
    ```
  }];
  let options = [
    Option<"minK", "min-k", "int64_t", /*default=*/"256",
           "Only rows at least this wide (the GEMMs' k; a multiple of 256 always)">,
    Option<"maxInputs", "max-inputs", "int64_t", /*default=*/"0",
           "Only kernels reading at most this many inputs of the rows' own shape (0: any)">,
    Option<"prefetch", "prefetch", "bool", /*default=*/"false",
           "Each 256-column step loads the next step's inputs before its barrier and "
           "products (kiln.row_dot_prefetch)">,
  ];
  let statistics = [
    Statistic<"numKernels", "kernels", "Launches that now compute GEMMs of their rows">,
    Statistic<"numGemms", "gemms", "GEMMs computed inside those launches">,
  ];
}

def DedupeKernelsPass : Pass<"kiln-dedupe-kernels", "::mlir::ModuleOp"> {
  let summary = "One kernel per distinct body: identical kernels become one launched many times";
  let description = [{
    `kiln-lower-to-step` outlines every fusion into a kernel of its own, so
    the 16 decoder layers of a Llama step make 16 copies of each layer
    kernel under new names (and NVRTC compiled each). Kernels whose kind,
    size symbols and body are identical up to their name (locations
    ignored) become the first of them; every launch of a copy launches it.
    Bodies are compared structurally (ops, attributes, types, operand
    wiring) after a hash of the same narrows the candidates. Runs on the
    whole module: the init program and shape buckets share kernels too.

    Before:
    ```mlir
    kiln_kernel.kernel @step_k0_silu <loop> symbols ["n"] {...}
    kiln_kernel.kernel @step_k1_silu <loop> symbols ["n"] {...}  // the same body
    func.func @step(...) {
      kiln_kernel.launch @step_k0_silu ins(%a : ...) outs(%b : ...) ...
      kiln_kernel.launch @step_k1_silu ins(%c : ...) outs(%d : ...) ...
    }
    ```
    After:
    ```mlir
    kiln_kernel.kernel @step_k0_silu <loop> symbols ["n"] {...}
    func.func @step(...) {
      kiln_kernel.launch @step_k0_silu ins(%a : ...) outs(%b : ...) ...
      kiln_kernel.launch @step_k0_silu ins(%c : ...) outs(%d : ...) ...
    }
    ```
  }];
  let statistics = [
    Statistic<"numDuplicates", "duplicates", "Kernels replaced by an identical earlier one">,
    Statistic<"numKernels", "kernels", "Distinct kernels left">,
  ];
}

#endif // KILN_KERNEL_PASSES_TD
