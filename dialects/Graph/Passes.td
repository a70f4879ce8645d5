//===- Passes.td - Graph dialect passes --------------------*- tablegen -*-===//

#ifndef KILN_GRAPH_PASSES_TD
#define KILN_GRAPH_PASSES_TD

include "mlir/Pass/PassBase.td"

//===----------------------------------------------------------------------===//
// Import cleanup
//===----------------------------------------------------------------------===//

def RaiseCompositesPass : Pass<"kiln-raise-composites", "::mlir::func::FuncOp"> {
  let summary = "Recognize RMSNorm, SiLU and eager attention spelled as primitives";
  let description = [{
    Exporters decompose the ops Kiln treats as units. This pass rebuilds them
    so autodiff uses their fused-friendly gradients and fusion sees them
    whole. Anything that does not match exactly is left as it is, which is
    still correct.

    - `x * sigmoid(x)` becomes `kiln.silu`.
    - `x * reciprocal(sqrt(mean(x^2, trailing dims) + eps))` (or `rsqrt`),
      optionally times a weight, becomes `kiln.rms_norm`.
    - `softmax(q k^T * scale + mask) v` over rank-4 tensors becomes
      `kiln.attention`; a grouped-query `repeat_kv` expansion of k and v
      (unsqueeze, expand, reshape) is dropped because the op reads kv heads
      directly. PyTorch's exported SDPA spelling is matched too: the scale
      split as sqrt(scale) on q and on k^T (their product becomes `scale`),
      k^T as reshape to [B*H, L, D], transpose, reshape back, and a causal
      mask `select(trilu(ones) == 0, lowest, 0)` (lowest: -inf or the dtype's
      minimum), which becomes the `causal` attribute instead of a mask.
    - A float mask `select(keep, 0, -inf)` becomes its i1 `keep` (with a
      finite lowest only under the NaN guard, which says fully dropped rows
      are meant to be 0; without it such rows are uniform). An i1
      mask is evaluated symbolically (MaskAnalysis.cpp: positions from iota
      compared, broadcast, and/or/not) as linear facts over the mask's
      indices: exactly `j <= i` gives `causal`, always-true gives no mask,
      anything else stays the mask operand (sliding windows, padding).
    - The softmax guard `select(is_nan(p), 0, p)` (fully masked rows give 0)
      is dropped where no row can be fully masked (causal or no mask) and
      kept on the attention's output otherwise.

    Before:
    ```mlir
    %s = kiln.sigmoid %x : tensor<?x176xf32, #kiln.dims<[n]>>
    %y = kiln.mul %x, %s : (tensor<?x176xf32, #kiln.dims<[n]>>,
        tensor<?x176xf32, #kiln.dims<[n]>>) -> tensor<?x176xf32, #kiln.dims<[n]>>
    %p = kiln.pow %h, %two : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<f32>)
        -> tensor<?x64xf32, #kiln.dims<[n]>>
    %m = kiln.reduce_mean %p {axes = array<i64: 1>, keepdim}
        : (tensor<?x64xf32, #kiln.dims<[n]>>) -> tensor<?x1xf32, #kiln.dims<[n]>>
    %v = kiln.add %m, %eps : (tensor<?x1xf32, #kiln.dims<[n]>>, tensor<f32>)
        -> tensor<?x1xf32, #kiln.dims<[n]>>
    %r = kiln.rsqrt %v : tensor<?x1xf32, #kiln.dims<[n]>>
    %z = kiln.mul %h, %r : (tensor<?x64xf32, #kiln.dims<[n]>>,
        tensor<?x1xf32, #kiln.dims<[n]>>) -> tensor<?x64xf32, #kiln.dims<[n]>>
    %o = kiln.mul %w, %z : (tensor<64xf32>, tensor<?x64xf32, #kiln.dims<[n]>>)
        -> tensor<?x64xf32, #kiln.dims<[n]>>
    ```
    After:
    ```mlir
    %y = kiln.silu %x : tensor<?x176xf32, #kiln.dims<[n]>>
    %o = kiln.rms_norm %h, %w {axis = 1 : i64, epsilon = 9.9999999747524271E-7 : f64}
        : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64xf32>)
        -> tensor<?x64xf32, #kiln.dims<[n]>>
    ```
  }];
  let dependentDialects = ["::kiln::GraphDialect"];
}

//===----------------------------------------------------------------------===//
// Dynamic shapes
//===----------------------------------------------------------------------===//

def SpecializeSymbolsPass : Pass<"kiln-specialize-symbols", "::mlir::ModuleOp"> {
  let summary = "Pin size symbols to values (`--static batch=4`)";
  let description = [{
    Substitutes each named symbol in every type and size expression of the
    module; dims that become constants turn into static sizes.

    Before (`values=batch=4`):
    ```mlir
    %0 = kiln.exp %x : tensor<?x?xf32, #kiln.dims<[batch, seq]>>
    ```
    After:
    ```mlir
    %0 = kiln.exp %x : tensor<4x?xf32, #kiln.dims<[seq]>>
    ```
  }];
  let options = [
    Option<"values", "values", "std::string", /*default=*/"\"\"",
           "comma-separated symbol=value pairs">
  ];
}

def ShapeGuardsPass : Pass<"kiln-shape-guards", "::mlir::func::FuncOp"> {
  let summary = "Record the run-time guards the compiled step relies on";
  let description = [{
    Collects, as the function attribute `kiln.guards`, every assumption a
    compiled step makes about its symbols, each with its origin:
    - user ranges and divisibility from `dynamic` (`seq=16..8192:8`);
    - every symbol is at least 1;
    - element counts stay within int32 (generated kernels index with int32):
      one guard on the largest tensor's element count.
    The runtime and `kiln interp` evaluate them before each step; a
    violation names the input, the symbol, its value and the condition.

    Before (`dynamic=seq=16..8192:8`):
    ```mlir
    func.func @main(%ids: tensor<?x?xi64, #kiln.dims<[batch, seq]>>) ...
    ```
    After:
    ```mlir
    func.func @main(%ids: tensor<?x?xi64, #kiln.dims<[batch, seq]>>) ...
        attributes {kiln.guards = [
          {expr = #kiln.expr<seq>, kind = "range", min = 16, max = 8192,
           origin = "--dynamic seq=16..8192:8"},
          {expr = #kiln.expr<seq>, kind = "divisible", divisor = 8,
           origin = "--dynamic seq=16..8192:8"}, ...]}
    ```
  }];
  let options = [
    Option<"dynamic", "dynamic", "std::string", /*default=*/"\"\"",
           "comma-separated symbol=MIN..MAX[:DIVISOR] ranges">
  ];
}

def ShapeBucketsPass : Pass<"kiln-shape-buckets", "::mlir::ModuleOp"> {
  let summary = "Specialized copies of the step for chosen symbol values";
  let description = [{
    For `buckets=seq=512,1024;batch=4` (symbols separated by `;`) clones
    `@main` once per combination of values, pins the symbols in the clone
    (static shapes: better kernels) and lists the clones in
    `kiln.buckets` on `@main`, which stays the symbolic fallback. At run
    time the guards of `@main` are checked first; then the bucket whose
    values equal the bound symbols runs, or `@main` when none does. A new
    value never recompiles.

    Before (`buckets=seq=16`):
    ```mlir
    func.func @main(%ids: tensor<?x?xi64, #kiln.dims<[batch, seq]>>) ...
    ```
    After:
    ```mlir
    func.func @main(%ids: tensor<?x?xi64, #kiln.dims<[batch, seq]>>) ...
        attributes {kiln.buckets = [@main__seq_16]}
    func.func @main__seq_16(%ids: tensor<?x16xi64, #kiln.dims<[batch]>>) ...
        attributes {kiln.bucket = {seq = 16 : i64}}
    ```
  }];
  let options = [
    Option<"buckets", "buckets", "std::string", /*default=*/"\"\"",
           "symbol=v1,v2,...;symbol2=...">
  ];
}

def VerifyShapesPass : Pass<"kiln-verify-shapes", "::mlir::func::FuncOp"> {
  let summary = "Contract check: every dim is static or a symbolic expression";
  let description = [{
    Fails on the first value with an unknown (`?` without an expression)
    dim, naming the op. Later stages size buffers and launch grids from
    these expressions, so none may be missing. Changes nothing.
  }];
}

//===----------------------------------------------------------------------===//
// Training step
//===----------------------------------------------------------------------===//

def SelectTrainablePass : Pass<"kiln-select-trainable", "::mlir::func::FuncOp"> {
  let summary = "Mark which parameters train (`all` or a regex over their names)";
  let description = [{
    `train=all` (the default) trains every floating-point parameter of rank
    >= 1 — what the importer creates for float initializers that are not
    scalars or shape constants. Any other value is a regular expression
    searched in each parameter's name (anchor it with `^...$` to match whole
    names); integer parameters never train. `train=none` freezes every
    parameter (what `kiln compile --lora` without `--train` asks for, so
    only the adapters train).

    Before (`--kiln-select-trainable="train=^l1\."`):
    ```mlir
    %w1 = kiln.parameter "l1.weight" trainable : tensor<64x32xf32>
    %w2 = kiln.parameter "l2.weight" trainable : tensor<10x64xf32>
    ```
    After:
    ```mlir
    %w1 = kiln.parameter "l1.weight" trainable : tensor<64x32xf32>
    %w2 = kiln.parameter "l2.weight" : tensor<10x64xf32>
    ```
  }];
  let options = [
    Option<"train", "train", "std::string", /*default=*/"\"all\"",
           "`all`, `none`, or a regex over parameter names">
  ];
}

def PrecisionPass : Pass<"kiln-precision", "::mlir::func::FuncOp"> {
  let summary = "Mixed precision: compute in bf16, keep fp32 master weights "
                "and fp32 numerics-sensitive ops";
  let description = [{
    Runs on the forward graph, before autodiff, so every cast is explicit
    and differentiated like any op. With `compute=bf16`:
    - float ops compute in bf16 (their operands are cast down once per
      value), except the ops named in `fp32-ops` (default: softmax,
      log_softmax, layer_norm, rms_norm, cross_entropy), which get fp32
      operands and produce fp32;
    - trainable parameters stay fp32 (master weights; optimizer state
      follows them) and are cast to bf16 where used, so their gradients come
      back to fp32 through the cast;
    - frozen float parameters are stored as bf16;
    - function results keep their original types.
    `compute=fp32` leaves the function unchanged.

    Before (`compute=bf16`):
    ```mlir
    %w = kiln.parameter "w" trainable : tensor<8x8xf32>
    %f = kiln.parameter "f" : tensor<8x8xf32>
    %h = kiln.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
    %y = kiln.matmul %h, %f : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
    %p = kiln.softmax %y {axis = 1 : i64} : tensor<4x8xf32>
    ```
    After:
    ```mlir
    %w = kiln.parameter "w" trainable : tensor<8x8xf32>
    %f = kiln.parameter "f" : tensor<8x8xbf16>
    %xl = kiln.cast %x : tensor<4x8xf32> -> tensor<4x8xbf16>
    %wl = kiln.cast %w : tensor<8x8xf32> -> tensor<8x8xbf16>
    %h = kiln.matmul %xl, %wl : (tensor<4x8xbf16>, tensor<8x8xbf16>) -> tensor<4x8xbf16>
    %y = kiln.matmul %h, %f : (tensor<4x8xbf16>, tensor<8x8xbf16>) -> tensor<4x8xbf16>
    %yf = kiln.cast %y : tensor<4x8xbf16> -> tensor<4x8xf32>
    %p = kiln.softmax %yf {axis = 1 : i64} : tensor<4x8xf32>
    ```
  }];
  let options = [
    Option<"compute", "compute", "std::string", /*default=*/"\"bf16\"",
           "bf16 or fp32">,
    ListOption<"fp32Ops", "fp32-ops", "std::string",
               "ops (by name without `kiln.`) that keep fp32">
  ];
}

def FuseLinearCrossEntropyPass
    : Pass<"kiln-fuse-linear-cross-entropy", "::mlir::func::FuncOp"> {
  let summary = "LM head matmul + mean cross entropy as one op chunked over tokens";
  let description = [{
    Runs on the forward graph after precision and NF4, before autodiff. It
    matches `kiln.cross_entropy` (mean reduction, fp32 logits) whose logits
    are `hidden · W` (`kiln.matmul` with a 2-D right operand: the folded
    [H, V] head weight, or [V, H] with `transpose_b`, e.g. a tied
    embedding), seen through reshapes to [tokens, V], float casts (bf16
    compute, an exporter's `.float()`) and a soft-cap `c · tanh(x / c)` with
    a scalar constant `c` (Gemma 2), each value used once. Such a chain becomes
    `kiln.linear_cross_entropy` on `hidden` reshaped to [tokens, H]; autodiff
    differentiates it into `kiln.linear_cross_entropy_grad`, which also
    yields the loss, and the canonicalizer then drops the forward op, so
    the train step computes the loss and the gradients in one pass over
    chunks of `chunk-tokens` rows: no [tokens × vocab] tensor exists, only
    one [chunk × vocab] fp32 chunk. The logits are accumulated in fp32 from
    bf16 operands without the bf16 rounding the unfused graph applies;
    with `bf16-logits` and a matmul whose result is bf16, the op gets
    `bf16_logits`: the chunk is bf16, rounded where the unfused graph
    rounds (PyTorch autocast's bf16 logits), the statistics stay fp32, and
    the chunk's bytes halve. An fp32 matmul keeps fp32 logits either way.

    Anything else stays as it is (still correct): a logits value used twice,
    a sum/none reduction, a LoRA adapter on the head (an add after the
    matmul), a scale or bias between matmul and loss.

    `chunk-tokens=0` (default) picks the largest power of two up to 4096
    whose chunk [chunk, V], in the type it keeps (bf16 under `bf16-logits`,
    else fp32), fits 256 MiB (V = 128256: 1024 tokens in bf16, 512 in
    fp32; V = 256: 4096).

    Before:
    ```mlir
    %l = kiln.matmul %h, %w : (tensor<?x?x64xbf16, #kiln.dims<[batch, seq]>>,
        tensor<64x256xbf16>) -> tensor<?x?x256xbf16, #kiln.dims<[batch, seq]>>
    %r = kiln.reshape %l : tensor<?x?x256xbf16, #kiln.dims<[batch, seq]>>
        -> tensor<?x256xbf16, #kiln.dims<[batch*seq]>>
    %f = kiln.cast %r : tensor<?x256xbf16, #kiln.dims<[batch*seq]>>
        -> tensor<?x256xf32, #kiln.dims<[batch*seq]>>
    %loss = kiln.cross_entropy %f, %y : (tensor<?x256xf32, #kiln.dims<[batch*seq]>>,
        tensor<?xi64, #kiln.dims<[batch*seq]>>) -> tensor<f32>
    ```
    After (`chunk-tokens=0`: 4096 tokens at V = 256):
    ```mlir
    %h2 = kiln.reshape %h : tensor<?x?x64xbf16, #kiln.dims<[batch, seq]>>
        -> tensor<?x64xbf16, #kiln.dims<[batch*seq]>>
    %loss = kiln.linear_cross_entropy %h2, %w, %y {chunk_tokens = 4096 : i64}
        : (tensor<?x64xbf16, #kiln.dims<[batch*seq]>>, tensor<64x256xbf16>,
           tensor<?xi64, #kiln.dims<[batch*seq]>>) -> tensor<f32>
    ```
  }];
  let options = [
    Option<"chunkTokens", "chunk-tokens", "int64_t", /*default=*/"0",
           "tokens per chunk (0: the largest power of two up to 4096 whose chunk, bf16 or fp32 as "
           "kept, fits 256 MiB)">,
    Option<"bf16Logits", "bf16-logits", "bool", /*default=*/"false",
           "where the head matmul yields bf16 logits, keep the fused op's logits chunk in bf16 "
           "(bf16_logits: half the chunk's bytes, fp32 statistics) instead of fp32">
  ];
  let dependentDialects = ["::kiln::GraphDialect"];
}

def AutodiffPass : Pass<"kiln-autodiff", "::mlir::func::FuncOp"> {
  let summary = "Reverse-mode differentiation: return the loss and the "
                "gradient of every trainable parameter";
  let description = [{
    The function's first result is the loss (a float scalar). Values that
    depend on a trainable parameter through float ops are active
    (`kiln.stop_gradient` and integer values cut the dependence). Walking
    the body backwards from a seed of 1, each op on the active path is asked
    for its vector-Jacobian product through `DifferentiableOpInterface`;
    gradients of values used several times are summed. The pass has no
    op-specific code: an active op without the interface is an error naming
    the op. A frozen parameter is never active, so no gradient is built for
    it (a frozen matmul weight gets only the input gradient).

    The function then returns `(loss, d loss / d p for each trainable p)`,
    each gradient result tagged `kiln.grad_of = "<parameter name>"`.

    Before:
    ```mlir
    func.func @main(%x: tensor<4x8xf32>) -> (tensor<f32> {kiln.name = "loss"}) {
      %w = kiln.parameter "w" trainable : tensor<8xf32>
      %y = kiln.mul %x, %w : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
      %l = kiln.reduce_sum %y {axes = array<i64: 0, 1>} : (tensor<4x8xf32>) -> tensor<f32>
      return %l : tensor<f32>
    }
    ```
    After:
    ```mlir
    func.func @main(%x: tensor<4x8xf32>) -> (tensor<f32> {kiln.name = "loss"},
                                            tensor<8xf32> {kiln.grad_of = "w"}) {
      ...
      %one = kiln.constant dense<1.0> : tensor<f32>
      %dy = kiln.expand %one : tensor<f32> -> tensor<4x8xf32>
      %dw0 = kiln.mul %dy, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
      %dw = kiln.reduce_sum %dw0 {axes = array<i64: 0>} : (tensor<4x8xf32>) -> tensor<8xf32>
      return %l, %dw : tensor<f32>, tensor<8xf32>
    }
    ```
  }];
  let dependentDialects = ["::kiln::GraphDialect"];
}

def GradAccumPass : Pass<"kiln-grad-accum", "::mlir::func::FuncOp"> {
  let summary = "Accumulate gradients over micro-batches inside one step";
  let description = [{
    Runs after `kiln-autodiff`. The step takes `micro-batches` sets of data
    inputs (argument k of micro-batch i is tagged `kiln.micro_batch = i`),
    computes the loss and gradients of each with shared parameters, and
    returns their means — what a mean-reduced loss over the concatenated
    batch gives when micro-batches carry equal weight. Later stages
    schedule the copies one after another, so activations of only one
    micro-batch are live at a time.

    Before (`micro-batches=2`):
    ```mlir
    func.func @main(%x: tensor<?x8xf32, #kiln.dims<[b]>>)
        -> (tensor<f32>, tensor<8xf32> {kiln.grad_of = "w"})
    ```
    After:
    ```mlir
    func.func @main(%x0: tensor<?x8xf32, #kiln.dims<[b]>> {kiln.micro_batch = 0 : i64},
                    %x1: tensor<?x8xf32, #kiln.dims<[b]>> {kiln.micro_batch = 1 : i64})
        -> (tensor<f32>, tensor<8xf32> {kiln.grad_of = "w"})
    // loss = (l0 + l1) / 2, dw = (dw0 + dw1) / 2
    ```
  }];
  let options = [
    Option<"microBatches", "micro-batches", "int64_t", /*default=*/"1",
           "number of micro-batches per step">
  ];
}

def DataParallelPass : Pass<"kiln-data-parallel", "::mlir::func::FuncOp"> {
  let summary = "Average the gradients (and the logged loss) over data-parallel ranks";
  let description = [{
    Runs after `kiln-autodiff` and `kiln-grad-accum`, before
    `kiln-train-step`: each gradient result (`kiln.grad_of`) becomes the
    result of a `kiln.all_reduce` (the mean over the ranks), so the
    optimizer, gradient clipping included, sees the averaged gradient, the
    same on every rank. Gradients are grouped into buckets of at most
    `bucket-mb` MiB (a larger one is a bucket of its own) in the order the
    backward produces them, the last layers' first; each bucket's
    all-reduce sits right after the op producing its last gradient, so the
    runtime starts it while the backward of the earlier layers still runs.
    The loss (result 0) gets the last bucket, right before the return:
    what every rank logs is the mean loss. Only the results are replaced:
    the backward keeps reading its own local values.

    Before (`bucket-mb=0.0001`, 104 bytes):
    ```mlir
    func.func @main(...) -> (tensor<f32>, tensor<4x4xf32> {kiln.grad_of = "w1"},
                             tensor<4x4xf32> {kiln.grad_of = "w2"}) {
      ...
      %dw2 = kiln.matmul %h, %dy {transpose_a} : ...   // produced first
      ...
      %dw1 = kiln.matmul %x, %dh {transpose_a} : ...
      return %loss, %dw1, %dw2 : ...
    }
    ```
    After:
    ```mlir
      %dw2 = kiln.matmul %h, %dy {transpose_a} : ...
      %r0 = kiln.all_reduce %dw2 bucket 0 : tensor<4x4xf32>
      ...
      %dw1 = kiln.matmul %x, %dh {transpose_a} : ...
      %r1 = kiln.all_reduce %dw1 bucket 1 : tensor<4x4xf32>
      %l = kiln.all_reduce %loss bucket 2 {loss} : tensor<f32>
      return %l, %r1, %r0 : ...
    ```
    The function gets `kiln.data_parallel = {bucket_mb, buckets}`.
    Gradients need static shapes (parameters have them).
  }];
  let options = [
    Option<"bucketMb", "bucket-mb", "double", /*default=*/"25.0",
           "largest bucket in MiB (2^20 bytes)">
  ];
}

def LoopProgramsPass : Pass<"kiln-loop-programs", "::mlir::ModuleOp"> {
  let summary = "Accumulate, apply and eval programs for the run-time loop";
  let description = [{
    Runs after `kiln-autodiff`, before `kiln-train-step`, on `@main` in its
    `(loss, gradients)` form. Adds three functions, so that the runtime
    chooses the number of micro-batches per optimizer step and evaluates
    held-out data without recompiling:

    - `@main__accum` (`kiln.loop_program = "accum"`): the forward and
      backward pass of one micro-batch. Trainable parameters are `kiln.param`
      arguments (read, never written); the accumulators are arguments and
      results tagged `kiln.accum`: `grad/<param>` (fp32), `loss` and
      `tokens` (fp32 scalars). With `n` the micro-batch's counted tokens
      (labels other than `ignore_index` of the mean-reduced
      `kiln.cross_entropy` that is the loss; 1 when the loss is anything
      else), it adds `n * grad` to each gradient accumulator, `n * loss` to
      `loss` (0 when `n` is 0) and `n` to `tokens`; it also returns the
      micro-batch's loss and `n` (`kiln.name = "loss"`, `"tokens"`).
    - `@main__apply` (`kiln.loop_program = "apply"`): the accumulated mean
      over all counted tokens of the optimizer step (`grad/<p> / tokens`,
      `loss / tokens`, what HF Trainer gets by dividing summed token losses
      by `num_items_in_batch`), as `(loss, gradients)` for
      `kiln-train-step`, plus zeros for every accumulator (`kiln.accum`
      results: the program clears them).
    - `@main__eval` (`kiln.loop_program = "eval"`): the forward pass alone,
      `(inputs, params) -> (loss, tokens)`, dropout removed, no gradients,
      no optimizer.

    Before:
    ```mlir
    func.func @main(%x: tensor<?x8xf32, #kiln.dims<[b]>>, %y: tensor<?xi64, #kiln.dims<[b]>>)
        -> (tensor<f32> {kiln.name = "loss"}, tensor<8x4xf32> {kiln.grad_of = "w"}) {
      %w = kiln.parameter "w" trainable : tensor<8x4xf32>
      ...
      %loss = kiln.cross_entropy %logits, %y : ...
    ```
    After (`@main` unchanged):
    ```mlir
    func.func @main__accum(%x: ..., %y: ...,
        %gw: tensor<8x4xf32> {kiln.accum = "grad/w"}, %l: tensor<f32> {kiln.accum = "loss"},
        %n: tensor<f32> {kiln.accum = "tokens"}, %w: tensor<8x4xf32> {kiln.param = "w"})
        -> (tensor<f32> {kiln.name = "loss"}, tensor<f32> {kiln.name = "tokens"},
            tensor<8x4xf32> {kiln.accum = "grad/w"}, tensor<f32> {kiln.accum = "loss"},
            tensor<f32> {kiln.accum = "tokens"})
        attributes {kiln.loop_program = "accum"}
    func.func @main__apply(%gw: tensor<8x4xf32> {kiln.accum = "grad/w"},
        %l: tensor<f32> {kiln.accum = "loss"}, %n: tensor<f32> {kiln.accum = "tokens"})
        -> (tensor<f32> {kiln.name = "loss"}, tensor<8x4xf32> {kiln.grad_of = "w"},
            tensor<8x4xf32> {kiln.accum = "grad/w"}, tensor<f32> {kiln.accum = "loss"},
            tensor<f32> {kiln.accum = "tokens"})
        attributes {kiln.loop_program = "apply"}
    func.func @main__eval(%x: ..., %y: ..., %w: tensor<8x4xf32> {kiln.param = "w"})
        -> (tensor<f32> {kiln.name = "loss"}, tensor<f32> {kiln.name = "tokens"})
        attributes {kiln.loop_program = "eval"}
    ```
  }];
}

def TrainStepPass : Pass<"kiln-train-step", "::mlir::func::FuncOp"> {
  let summary = "Turn (loss, gradients) into one optimizer step";
  let description = [{
    Runs after `kiln-autodiff`. Trainable parameters stop being
    `kiln.parameter` reads and become state threaded through the step:

    `train_step(inputs..., params..., optimizer state..., lr, step)
       -> (loss, new params..., new state...)`

    Parameter arguments/results carry `kiln.param = "<name>"`, optimizer
    state `kiln.state = "<name>/exp_avg"` (AdamW: `exp_avg`, `exp_avg_sq`;
    SGD with momentum: `momentum_buffer`); `lr` (the schedule is a step
    input) and `step` (1 for the first step) are f32 scalars tagged
    `kiln.lr` and `kiln.step`. Frozen parameters stay `kiln.parameter`.

    AdamW follows torch.optim.AdamW: decoupled decay `p *= 1 - lr*wd`, then
    `m = lerp(m, g, 1-b1)`, `v = b2 v + (1-b2) g^2`,
    `p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)`. SGD follows
    torch.optim.SGD (weight decay added to the gradient, momentum buffer
    starting as the first gradient, dampening, Nesterov). With
    `max-grad-norm > 0` gradients are first scaled by
    `min(1, max / (global L2 norm + 1e-6))`, as clip_grad_norm_ does.

    Before (after autodiff):
    ```mlir
    func.func @main(%x: tensor<4x8xf32>) -> (tensor<f32>, tensor<8xf32> {kiln.grad_of = "w"}) {
      %w = kiln.parameter "w" trainable : tensor<8xf32>
      ...
      return %loss, %dw : tensor<f32>, tensor<8xf32>
    }
    ```
    After (`optimizer=sgd lr=0.1`):
    ```mlir
    func.func @main(%x: tensor<4x8xf32>, %w: tensor<8xf32> {kiln.param = "w"},
                    %lr: tensor<f32> {kiln.lr}, %step: tensor<f32> {kiln.step})
        -> (tensor<f32>, tensor<8xf32> {kiln.param = "w"})
        attributes {kiln.optimizer = "sgd", kiln.default_lr = 1.000000e-01 : f64} {
      ...
      %upd = kiln.mul %lr, %dw : (tensor<f32>, tensor<8xf32>) -> tensor<8xf32>
      %new = kiln.sub %w, %upd : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
      return %loss, %new : tensor<f32>, tensor<8xf32>
    }
    ```
  }];
  let options = [
    Option<"optimizer", "optimizer", "std::string", /*default=*/"\"adamw\"",
           "adamw or sgd">,
    Option<"lr", "lr", "double", /*default=*/"1e-3",
           "default learning rate (recorded; the step takes lr as an input)">,
    Option<"beta1", "beta1", "double", /*default=*/"0.9", "AdamW beta1">,
    Option<"beta2", "beta2", "double", /*default=*/"0.999", "AdamW beta2">,
    Option<"eps", "eps", "double", /*default=*/"1e-8", "AdamW epsilon">,
    Option<"weightDecay", "weight-decay", "double", /*default=*/"0.01",
           "AdamW: decoupled decay; SGD: L2 term added to the gradient">,
    Option<"momentum", "momentum", "double", /*default=*/"0", "SGD momentum">,
    Option<"dampening", "dampening", "double", /*default=*/"0", "SGD dampening">,
    Option<"nesterov", "nesterov", "bool", /*default=*/"false", "SGD Nesterov">,
    Option<"maxGradNorm", "max-grad-norm", "double", /*default=*/"0",
           "clip the global gradient norm to this (0: off)">,
    Option<"gradNorm", "grad-norm", "bool", /*default=*/"false",
           "also return the global L2 norm of the gradients (before clipping) "
           "as a result named grad_norm">
  ];
}

def LoraPass : Pass<"kiln-lora", "::mlir::ModuleOp"> {
  let summary = "Insert LoRA adapters on linear layers whose weight name matches";
  let description = [{
    PEFT's LoRA Linear: every `kiln.matmul` whose right operand is a 2-D
    parameter (directly or through a transpose) and whose weight name
    matches `targets` (and not `skip`) computes
    `y = x W^T + (alpha / rank) * (dropout(x) A^T) B^T`. The weight's name is
    its PyTorch name when the importer knows it (`kiln.source_name` of a
    pre-transposed `val_N`, or the ONNX node scope), else the initializer
    name; both are searched. Adapters are named as PEFT names them,
    `<module>.lora_A.weight` [rank, in] and `<module>.lora_B.weight`
    [out, rank]; the init program `@kiln_init` creates A Kaiming-uniform
    (a = sqrt(5), i.e. U(-1/sqrt(in), 1/sqrt(in)) drawn by Philox from its
    seed) and B zero. Base weights are frozen; adapters train. With
    `dropout` > 0 the function gets a `kiln.rng_seed` argument and each
    adapter its own Philox stream.

    Before (`--kiln-lora="rank=4 alpha=8 targets=^l1"`):
    ```mlir
    %w = kiln.parameter "l1.weight" trainable : tensor<64x32xf32>
    %y = kiln.matmul %x, %w {transpose_b} : (tensor<?x32xf32>, tensor<64x32xf32>) -> tensor<?x64xf32>
    ```
    After:
    ```mlir
    %w = kiln.parameter "l1.weight" : tensor<64x32xf32>
    %y = kiln.matmul %x, %w {transpose_b} : ... -> tensor<?x64xf32>
    %a = kiln.parameter "l1.lora_A.weight" trainable {kiln.init = "kaiming_uniform(a=sqrt(5))"} : tensor<4x32xf32>
    %b = kiln.parameter "l1.lora_B.weight" trainable {kiln.init = "zeros"} : tensor<64x4xf32>
    %t = kiln.matmul %x, %a {transpose_b} : ... -> tensor<?x4xf32>
    %u = kiln.matmul %t, %b {transpose_b} : ... -> tensor<?x64xf32>
    %s = kiln.constant dense<2.0> : tensor<f32>
    %v = kiln.mul %u, %s : (tensor<?x64xf32>, tensor<f32>) -> tensor<?x64xf32>
    %z = kiln.add %y, %v : ...            // every former use of %y reads %z
    func.func @kiln_init(%seed: tensor<i64> {kiln.rng_seed}) -> (tensor<4x32xf32> {kiln.param = "l1.lora_A.weight"}, tensor<64x4xf32> {kiln.param = "l1.lora_B.weight"})
    ```
  }];
  let options = [
    Option<"rank", "rank", "int64_t", /*default=*/"16", "adapter rank r">,
    Option<"alpha", "alpha", "double", /*default=*/"8", "scaling numerator (scale = alpha / r; PEFT's default 8)">,
    Option<"dropout", "dropout", "double", /*default=*/"0", "dropout on the adapter input">,
    Option<"targets", "targets", "std::string",
           /*default=*/"\"(^|[./])(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj|qkv_proj|gate_up_proj|query|key|value|query_key_value|c_attn|c_proj|c_fc|out_proj|fc1|fc2|wq|wk|wv|wo|w1|w2|w3)([./]weight)?$\"",
           "regex searched in the weight's PyTorch and ONNX names">,
    Option<"skip", "skip", "std::string", /*default=*/"\"\"",
           "regex of weights to leave without adapters">
  ];
}

def LoraConcatPass : Pass<"kiln-lora-concat", "::mlir::func::FuncOp"> {
  let summary = "One down-projection GEMM for the LoRA adapters that share an input";
  let description = [{
    Runs after `kiln-lora` (and precision, NF4), before autodiff. The
    adapters of linear layers that read the same input (q/k/v; gate/up)
    project it down with GEMMs of n = r each, which run far below the GPU's
    rate. Their `lora_A` matrices (each seen through its casts) are
    concatenated along the rank into one `[sum r, in]` operand and one GEMM
    computes every adapter's down projection `t`. An up projection
    `t_i B_i^T` that is the only use of its down projection reads the whole
    `t` against `B_i` padded with zero columns (`t [0 | B_i | 0]^T`, the
    same sum): no kernel copies columns out, and after autodiff the group's
    dT products add into one `[tokens, sum r]` gradient, dA is one GEMM and
    the group's share of dX another. Any other down projection reads its
    columns through a slice. The parameters, their names and their
    optimizer state stay separate. Inputs seen through a cast count as one
    input; adapters with dropout read their own masked input and stay apart.

    Before:
    ```mlir
    %aq = kiln.cast %pq : tensor<16x64xf32> -> tensor<16x64xbf16>
    %tq = kiln.matmul %x, %aq {transpose_b} : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<16x64xbf16>) -> tensor<?x16xbf16, #kiln.dims<[n]>>
    %uq = kiln.matmul %tq, %bq {transpose_b} : (tensor<?x16xbf16, #kiln.dims<[n]>>, tensor<64x16xbf16>) -> tensor<?x64xbf16, #kiln.dims<[n]>>
    %ak = kiln.cast %pk : tensor<16x64xf32> -> tensor<16x64xbf16>
    %tk = kiln.matmul %x, %ak {transpose_b} : (...) -> tensor<?x16xbf16, #kiln.dims<[n]>>
    %uk = kiln.matmul %tk, %bk {transpose_b} : (tensor<?x16xbf16, #kiln.dims<[n]>>, tensor<32x16xbf16>) -> tensor<?x32xbf16, #kiln.dims<[n]>>
    ```
    After:
    ```mlir
    %aq = kiln.cast %pq : ...
    %ak = kiln.cast %pk : ...
    %a = kiln.concat %aq, %ak {axis = 0 : i64} : (...) -> tensor<32x64xbf16>
    %t = kiln.matmul %x, %a {transpose_b} : (...) -> tensor<?x32xbf16, #kiln.dims<[n]>>
    %bq2 = kiln.pad %bq {pads = array<i64: 0, 0, 0, 16>} : (tensor<64x16xbf16>) -> tensor<64x32xbf16>
    %uq = kiln.matmul %t, %bq2 {transpose_b} : (...) -> tensor<?x64xbf16, #kiln.dims<[n]>>
    %bk2 = kiln.pad %bk {pads = array<i64: 0, 16, 0, 0>} : (tensor<32x16xbf16>) -> tensor<32x32xbf16>
    %uk = kiln.matmul %t, %bk2 {transpose_b} : (...) -> tensor<?x32xbf16, #kiln.dims<[n]>>
    ```
  }];
}

def AttentionLayoutPass : Pass<"kiln-attention-layout", "::mlir::func::FuncOp"> {
  let summary = "Attention reads and writes [B, S, H, D]: the layout transposes around it fold away";
  let description = [{
    A `[0, 2, 1, 3]` transpose that feeds a `kiln.attention` or
    `kiln.attention_grad` tensor operand (query, key, value, grad, out), or
    that reads one of its results, folds into the op's `seq_major` flags: the
    op then reads or writes that tensor `[B, S, H, D]` itself. A result that
    also has other users keeps one transpose for them; in program order the
    forward's output reaches `attention_grad`'s `out` through such a
    transpose, which folds there. The mask keeps `[B, Hq, S, L]`. Values are
    unchanged (the interpreter runs the ops on head-major copies). Runs on
    the finished step; `kiln compile` adds it with `--attention-layout=bshd`.

    Before:
    ```mlir
    %vt = kiln.transpose %v {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x16xf32>) -> tensor<2x4x8x16xf32>
    %o = kiln.attention %q, %k, %vt {causal} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
    %ot = kiln.transpose %o {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x8x16xf32>) -> tensor<2x8x4x16xf32>
    ```
    After:
    ```mlir
    %ot = kiln.attention %q, %k, %v {causal, seq_major = array<i1: false, false, true, true>} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x8x4x16xf32>) -> tensor<2x8x4x16xf32>
    ```

    With `through-elementwise` (off by default: measured neutral on the
    H200, docs/benchmarks.md), a swap transpose separated from
    the attention op by layout-neutral ops (elementwise ops with
    broadcasts, slices and concats: RoPE's rotation of q and k, and its
    gradient of dQ and dK) moves through them first: when a connected
    group of such ops is bounded only by swap transposes, attention
    operands and results, and broadcast inputs without both head and
    sequence extents (RoPE's cos and sin), the group is rebuilt in the
    other layout (those inputs reshaped), its transposes vanish and the
    attention ends take the `seq_major` flags.
  }];
  let options = [
    Option<"throughElementwise", "through-elementwise", "bool", /*default=*/"false",
           "also move the layout through the elementwise, slice and concat ops "
           "(RoPE) between a head transpose and attention">
  ];
}

def LoraKConcatPass : Pass<"kiln-lora-k-concat", "::mlir::func::FuncOp"> {
  let summary = "A frozen and a LoRA product summed into one GEMM over concatenated K";
  let description = [{
    Runs after autodiff, train-step and CSE. A sum whose terms include a
    LoRA product (a matmul whose right operand comes from `lora_A`/`lora_B`
    parameters alone, optionally times a scalar) and a frozen product with a
    larger contraction that reads rows of the same shape becomes one
    product over the concatenated contraction:
    `x W + s (t B^T) = [x | t] [W ; s B^T]` in the forward (a `[tokens,
    in + r]` left operand, the frozen weight with the scaled adapter matrix
    below it, or beside it for a transposed weight) and `dy W^T + dT A =
    [dy | dT] [W | A^T]^T` for the input gradient. The other terms of the
    sum stay, in their order; the adapters of a group (q/k/v, gate/up, after
    `kiln-lora-concat`) share one `[x | t]`. The rank-r GEMM that read and
    wrote the whole `[tokens, out]` output is gone; the frozen GEMM does r
    more columns. The concatenations are graph ops: they cost a copy unless
    the lowering writes their inputs in place, which it does not yet
    (`docs/design/lora-k-concat.md`), so `kiln compile` runs this pass only
    with `--lora-k-concat`.

    Before:
    ```mlir
    %y = kiln.matmul %x, %w : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<64x176xbf16>) -> tensor<?x176xbf16, #kiln.dims<[n]>>
    %u = kiln.matmul %t, %b {transpose_b} : (tensor<?x16xbf16, #kiln.dims<[n]>>, tensor<176x16xbf16>) -> tensor<?x176xbf16, #kiln.dims<[n]>>
    %v = kiln.mul %u, %s : (tensor<?x176xbf16, #kiln.dims<[n]>>, tensor<bf16>) -> tensor<?x176xbf16, #kiln.dims<[n]>>
    %z = kiln.add %y, %v : (tensor<?x176xbf16, #kiln.dims<[n]>>, tensor<?x176xbf16, #kiln.dims<[n]>>) -> tensor<?x176xbf16, #kiln.dims<[n]>>
    ```
    After:
    ```mlir
    %xt = kiln.concat %x, %t {axis = 1 : i64} : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<?x16xbf16, #kiln.dims<[n]>>) -> tensor<?x80xbf16, #kiln.dims<[n]>>
    %bt = kiln.transpose %b {perm = array<i64: 1, 0>} : (tensor<176x16xbf16>) -> tensor<16x176xbf16>
    %bs = kiln.mul %bt, %s : (tensor<16x176xbf16>, tensor<bf16>) -> tensor<16x176xbf16>
    %wb = kiln.concat %w, %bs {axis = 0 : i64} : (tensor<64x176xbf16>, tensor<16x176xbf16>) -> tensor<80x176xbf16>
    %z = kiln.matmul %xt, %wb : (tensor<?x80xbf16, #kiln.dims<[n]>>, tensor<80x176xbf16>) -> tensor<?x176xbf16, #kiln.dims<[n]>>
    ```

    With `group-frozen`, the other frozen products of the sum that read rows
    of the same shape, each through a frozen 2-D parameter in the wide
    product's orientation, join the same product: q/k/v's input gradient
    `dq Wq^T + dk Wk^T + dv Wv^T + dT A` becomes `[dq | dk | dv | dT] [Wq |
    Wk | Wv | A^T]^T`, one GEMM over K = 3 projections + r instead of three
    (the lowering keeps the frozen weights side by side in one padded
    buffer). The frozen products join in program order after the wide one.
  }];
  let options = [
    Option<"groupFrozen", "group-frozen", "bool", /*default=*/"false",
           "also concatenate the sum's other frozen products over the same rows "
           "(the input gradients of q/k/v and of gate/up) into the same GEMM">
  ];
}

def LoraGroupGradsPass : Pass<"kiln-lora-group-grads", "::mlir::func::FuncOp"> {
  let summary = "A LoRA group's dT and dB products over its concatenated output gradients";
  let description = [{
    Runs after `kiln-lora-k-concat` with `group-frozen`. An input-gradient
    concatenation `[d_1 | .. | d_n | dT]` (along the last axis) whose last
    operand is a sum of one product per piece, `dT = sum_i (d_i s) R_i` (one
    rank-0 scale s or none; each R_i a static `[width of d_i, r]` matrix:
    the group's padded B), becomes `[P | (P s) [R_1 ; .. ; R_n]]` with `P =
    [d_1 | .. | d_n]`. Where each `d_i s` is also read by `(d_i s)^T T`
    (the padded dB, summed over the batch by a `reduce_sum`) with one T for
    all, those become row slices of one `(P s)^T T`. q/k/v's six thin GEMMs
    (three for dT, two of them accumulating, and three dB) become two, and
    the lowering writes P in place inside the input gradient's buffer (a
    concatenation in a concatenation). By default only groups with a piece
    at most 1024 wide (GQA's k and v); `all-groups` takes gate/up too.

    Before:
    ```mlir
    %sq = kiln.mul %dq, %s : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<bf16>) -> tensor<?x64xbf16, #kiln.dims<[n]>>
    %tq = kiln.matmul %sq, %rq : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<64x32xbf16>) -> tensor<?x32xbf16, #kiln.dims<[n]>>
    %bq = kiln.matmul %sq, %t {transpose_a} : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<?x32xbf16, #kiln.dims<[n]>>) -> tensor<64x32xbf16>
    %sk = kiln.mul %dk, %s : (tensor<?x16xbf16, #kiln.dims<[n]>>, tensor<bf16>) -> tensor<?x16xbf16, #kiln.dims<[n]>>
    %tk = kiln.matmul %sk, %rk : (tensor<?x16xbf16, #kiln.dims<[n]>>, tensor<16x32xbf16>) -> tensor<?x32xbf16, #kiln.dims<[n]>>
    %bk = kiln.matmul %sk, %t {transpose_a} : (tensor<?x16xbf16, #kiln.dims<[n]>>, tensor<?x32xbf16, #kiln.dims<[n]>>) -> tensor<16x32xbf16>
    %dt = kiln.add %tq, %tk : (tensor<?x32xbf16, #kiln.dims<[n]>>, tensor<?x32xbf16, #kiln.dims<[n]>>) -> tensor<?x32xbf16, #kiln.dims<[n]>>
    %l = kiln.concat %dq, %dk, %dt {axis = 1 : i64} : (...) -> tensor<?x112xbf16, #kiln.dims<[n]>>
    ```
    After:
    ```mlir
    %p = kiln.concat %dq, %dk {axis = 1 : i64} : (...) -> tensor<?x80xbf16, #kiln.dims<[n]>>
    %sp = kiln.mul %p, %s : (tensor<?x80xbf16, #kiln.dims<[n]>>, tensor<bf16>) -> tensor<?x80xbf16, #kiln.dims<[n]>>
    %r = kiln.concat %rq, %rk {axis = 0 : i64} : (tensor<64x32xbf16>, tensor<16x32xbf16>) -> tensor<80x32xbf16>
    %dt = kiln.matmul %sp, %r : (tensor<?x80xbf16, #kiln.dims<[n]>>, tensor<80x32xbf16>) -> tensor<?x32xbf16, #kiln.dims<[n]>>
    %b = kiln.matmul %sp, %t {transpose_a} : (tensor<?x80xbf16, #kiln.dims<[n]>>, tensor<?x32xbf16, #kiln.dims<[n]>>) -> tensor<80x32xbf16>
    %bq = kiln.slice %b {starts = #kiln.dims<[0, 0]>, steps = array<i64: 1, 1>} : tensor<80x32xbf16> -> tensor<64x32xbf16>
    %bk = kiln.slice %b {starts = #kiln.dims<[64, 0]>, steps = array<i64: 1, 1>} : tensor<80x32xbf16> -> tensor<16x32xbf16>
    %l = kiln.concat %p, %dt {axis = 1 : i64} : (...) -> tensor<?x112xbf16, #kiln.dims<[n]>>
    ```
  }];
  let options = [
    Option<"allGroups", "all-groups", "bool", /*default=*/"false",
           "also groups whose pieces are all wider than 1024 (gate/up)">
  ];
}

def QuantizeNf4Pass : Pass<"kiln-quantize-nf4", "::mlir::ModuleOp"> {
  let summary = "Store frozen linear-layer weights as NF4 with explicit dequantization";
  let description = [{
    Every frozen 2-D parameter used only as linear-layer weights (see
    `kiln-lora`) is replaced by its NF4 storage: `<name>.nf4_codes` (two
    4-bit codes per byte) and `<name>.nf4_absmax` (fp32 per block of
    `block-size`), dequantized right before use. Blocks run over the weight
    in PyTorch's [out, in] row-major layout whatever layout the exporter
    stored, so codes and absmax match bitsandbytes and pre-quantized QLoRA
    checkpoints. The init program quantizes the checkpoint weight when the
    weights are loaded. Weights with other uses (a tied embedding) and
    names matching `skip` keep their precision.

    With `double-quant` (QLoRA's double quantization), the absmax values
    are stored as `<name>.nf4_absmax_codes` (8-bit codes of the signed
    dynamic map, `kiln.quantize_blockwise_8bit` in blocks of 256),
    `<name>.nf4_absmax_scale` (fp32 per 256) and `<name>.nf4_absmax_offset`
    (their mean), and the step rebuilds them with
    `kiln.dequantize_blockwise_8bit` plus the offset.

    Before:
    ```mlir
    %w = kiln.parameter "val_95" {kiln.source_name = "m.q_proj.weight"} : tensor<64x32xf32>
    %y = kiln.matmul %x, %w : (tensor<?x64xf32>, tensor<64x32xf32>) -> tensor<?x32xf32>
    ```
    After:
    ```mlir
    %c = kiln.parameter "val_95.nf4_codes" {kiln.init = "nf4_quantize(val_95)"} : tensor<1024xui8>
    %s = kiln.parameter "val_95.nf4_absmax" {kiln.init = "nf4_quantize(val_95)"} : tensor<32xf32>
    %d = kiln.nf4_dequantize %c, %s {block_size = 64} : tensor<1024xui8>, tensor<32xf32> -> tensor<32x64xf32>
    %w = kiln.transpose %d {perm = array<i64: 1, 0>} : (tensor<32x64xf32>) -> tensor<64x32xf32>
    %y = kiln.matmul %x, %w : ...
    func.func @kiln_init(%seed: tensor<i64> {kiln.rng_seed}) -> (tensor<1024xui8> {kiln.param = "val_95.nf4_codes"}, tensor<32xf32> {kiln.param = "val_95.nf4_absmax"}) {
      %w = kiln.parameter "val_95" : tensor<64x32xf32>
      %t = kiln.transpose %w {perm = array<i64: 1, 0>} : ...
      %c, %s = kiln.nf4_quantize %t {block_size = 64} : tensor<32x64xf32> -> (tensor<1024xui8>, tensor<32xf32>)
      return %c, %s : ...
    }
    ```
  }];
  let options = [
    Option<"blockSize", "block-size", "int64_t", /*default=*/"64", "elements per absmax block">,
    Option<"doubleQuant", "double-quant", "bool", /*default=*/"false",
           "store the absmax values as 8-bit codes (blocks of 256) around their mean">,
    Option<"skip", "skip", "std::string", /*default=*/"\"\"",
           "regex of weights to keep unquantized">
  ];
}

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

def RecomputeDequantizedPass : Pass<"kiln-recompute-dequantized", "::mlir::func::FuncOp"> {
  let summary = "Dequantize quantized weights again in the backward pass "
                "instead of keeping their full-precision copies";
  let description = [{
    Runs on the joint function after `kiln-autodiff` (and `kiln-train-step`)
    and after CSE, which would merge the clones back. A value derived from
    quantized weights alone (`kiln.nf4_dequantize`,
    `kiln.dequantize_blockwise_8bit`, and the transposes, reshapes and
    casts of their results, with only parameters and constants as leaves)
    that the backward pass reads is computed again right before its first
    backward use (the clones are tagged `kiln.recomputed`), so the forward
    copy dies after its last forward use. The codes and scales are
    parameters, always at hand: QLoRA then keeps no bf16 weight from the
    forward to the backward pass, whatever the remat budget.

    Before (the backward's input-gradient matmul reads `%wt`):
    ```mlir
    %w = kiln.nf4_dequantize %codes, %absmax : tensor<2048xui8>, tensor<64xf32> -> tensor<64x64xbf16>
    %wt = kiln.transpose %w {perm = array<i64: 1, 0>} : (tensor<64x64xbf16>) -> tensor<64x64xbf16>
    %y = kiln.matmul %x, %wt : (tensor<8x64xbf16>, tensor<64x64xbf16>) -> tensor<8x64xbf16>
    ...
    %dx = kiln.matmul %dy, %wt {transpose_b} : (tensor<8x64xbf16>, tensor<64x64xbf16>) -> tensor<8x64xbf16>
    ```
    After:
    ```mlir
    %w = kiln.nf4_dequantize %codes, %absmax : ...
    %wt = kiln.transpose %w {perm = array<i64: 1, 0>} : ...
    %y = kiln.matmul %x, %wt : ...
    ...
    %w2 = kiln.nf4_dequantize %codes, %absmax {kiln.recomputed} : ...
    %wt2 = kiln.transpose %w2 {kiln.recomputed, perm = array<i64: 1, 0>} : ...
    %dx = kiln.matmul %dy, %wt2 {transpose_b} : ...
    ```
  }];
}

def NormGradFromOutputPass : Pass<"kiln-norm-grad-from-output", "::mlir::func::FuncOp"> {
  let summary = "RMSNorm gradients from the kept normalized output and a row "
                "statistic instead of the norm's input";
  let description = [{
    Runs on the joint function after `kiln-autodiff` (and `kiln-train-step`),
    before `kiln-remat`. `kiln.rms_norm_grad` reads the norm's input x (the
    residual stream, [tokens x hidden] per norm) only to recompute
    xhat = x * rstd. When the norm's output, optionally cast and multiplied
    by a frozen per-column scale (Hugging Face's `weight * x.to(dtype)`),
    is read by the backward pass anyway (the next projection's weight or
    LoRA gradient keeps it), xhat is that value divided by the scale:
    the forward norm becomes `kiln.rms_norm_with_rstd` (one f32 per row
    more) and the gradient `kiln.rms_norm_grad_from_output`, so x is no
    longer kept for it. The divisor is the frozen scale (the norm's own
    weight when there is no multiply) or a constant; it must have no zero
    element: a parameter gets `kiln.nonzero`, which the runtime checks when
    weights load, a constant with a zero is left alone, and trained weights
    (arguments) are never divisors.

    The rounding of the kept value (bf16) enters only the xhat * mean(g *
    xhat) term of dx (about 1/sqrt(hidden) of |dx|) and dweight.

    Before (bf16 step; `%h` feeds the next matmul and its LoRA gradient):
    ```mlir
    %y = kiln.rms_norm %x, %ones {axis = 2 : i64, epsilon = 1.0E-5 : f64} : (tensor<2x8x64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
    %yb = kiln.cast %y : tensor<2x8x64xf32> -> tensor<2x8x64xbf16>
    %h = kiln.mul %gamma, %yb : (tensor<64xbf16>, tensor<2x8x64xbf16>) -> tensor<2x8x64xbf16>
    ...
    %dx, %dw = kiln.rms_norm_grad %x, %ones, %dy {axis = 2 : i64, epsilon = 1.0E-5 : f64} : (...) -> (...)
    ```
    After (`%x` is no longer read by the backward pass):
    ```mlir
    %y, %rstd = kiln.rms_norm_with_rstd %x, %ones {axis = 2 : i64, epsilon = 1.0E-5 : f64} : (tensor<2x8x64xf32>, tensor<64xf32>) -> (tensor<2x8x64xf32>, tensor<2x8xf32>)
    ...
    %dx, %dw = kiln.rms_norm_grad_from_output %h, %gamma, %ones, %rstd, %dy {axis = 2 : i64} : (...) -> (...)
    ```
  }];
}

def RematerializePass : Pass<"kiln-remat", "::mlir::func::FuncOp"> {
  let summary = "Recompute forward values in the backward pass instead of "
                "keeping them (activation checkpointing by min-cut)";
  let description = [{
    Runs on the joint function after `kiln-autodiff` (and `kiln-train-step`)
    and after CSE, which would merge the clones back. The forward part is
    what the loss depends on; every forward value the rest reads must be
    kept from the forward pass or recomputed from kept values, parameters
    and inputs. A minimum s-t cut over the node-split forward graph (edge
    weight: the value's bytes at the symbol values) picks the cheapest set
    to keep; ops behind the cut are cloned (tagged `kiln.recomputed`) right
    before their first backward use.

    - `budget=none`: no change.
    - `budget=auto`: minimize kept bytes; matmul and attention are never
      recomputed (cheap pointwise, norm and shape ops are).
    - `budget=<GiB>`: recompute nothing if the planned peak (see
      `kiln compile --memory-report`) already fits; else the `auto` cut,
      then matmuls and attentions join the recomputable set one at a time,
      fewest FLOPs per result byte first, until the peak fits. A budget that
      no plan meets is an error naming the smallest peak.
    - `budget=min`: the same scan to its end; the plan with the smallest
      peak is applied (the earliest of equal ones). Its `peak_bytes` is the
      smallest GiB budget this pass can meet (`kiln report` shows it).

    Sizes come from `symbols` (`batch=4,seq=2048`), then the maxima of the
    `kiln.guards` range guards; `auto` sizes any other symbol at 1024,
    a GiB budget (and `min`) refuses to guess. The function gets `kiln.remat` recording
    kept and recomputed counts, bytes and the extra FLOPs.

    Before (`budget=auto`; backward reads `%a` and `%b`):
    ```mlir
    %h = kiln.matmul %x, %w : (tensor<64x128xf32>, tensor<128x128xf32>) -> tensor<64x128xf32>
    %a = kiln.tanh %h : tensor<64x128xf32>
    %b = kiln.exp %a : tensor<64x128xf32>
    %l = kiln.reduce_sum %b {axes = array<i64: 0, 1>} : (tensor<64x128xf32>) -> tensor<f32>
    %da = kiln.mul %b, %one : (tensor<64x128xf32>, tensor<f32>) -> tensor<64x128xf32>
    %t = kiln.mul %a, %a : (tensor<64x128xf32>, tensor<64x128xf32>) -> tensor<64x128xf32>
    ```
    After (only `%a` is kept for the backward pass; `exp` runs again):
    ```mlir
    %h = kiln.matmul %x, %w : (tensor<64x128xf32>, tensor<128x128xf32>) -> tensor<64x128xf32>
    %a = kiln.tanh %h : tensor<64x128xf32>
    %b = kiln.exp %a : tensor<64x128xf32>
    %l = kiln.reduce_sum %b {axes = array<i64: 0, 1>} : (tensor<64x128xf32>) -> tensor<f32>
    %b2 = kiln.exp %a {kiln.recomputed} : tensor<64x128xf32>
    %da = kiln.mul %b2, %one : (tensor<64x128xf32>, tensor<f32>) -> tensor<64x128xf32>
    %t = kiln.mul %a, %a : (tensor<64x128xf32>, tensor<64x128xf32>) -> tensor<64x128xf32>
    ```
  }];
  let options = [
    Option<"budget", "budget", "std::string", /*default=*/"\"auto\"",
           "none, auto, min, or the planned peak limit in GiB">,
    Option<"symbols", "symbols", "std::string", /*default=*/"\"\"",
           "comma-separated symbol=value pairs that size the tensors">
  ];
}

#endif // KILN_GRAPH_PASSES_TD
