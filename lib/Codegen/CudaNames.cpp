//===- CudaNames.cpp - C identifiers for a kernel -------------------------===//
//
// Parameters are named by role (in0, out1) with the source of the value in
// a comment; size symbols keep their names unless they clash with C++ or
// with the printer's own locals.
//
//===----------------------------------------------------------------------===//

#include "kiln/Codegen/Cuda.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"

using namespace mlir;

namespace kiln::codegen {

static std::string sanitize(StringRef name) {
  std::string out;
  for (char c : name)
    out += llvm::isAlnum(c) || c == '_' ? c : '_';
  if (out.empty() || llvm::isDigit(out[0]))
    out = "_" + out;
  return out;
}

NameTable legalizeNames(const KernelPlan &plan) {
  static const llvm::StringSet<> reserved = {
      "auto", "bool", "break", "case", "char", "const", "continue", "default", "do", "double",
      "else", "enum", "extern", "float", "for", "goto", "if", "int", "long", "return", "short",
      "signed", "sizeof", "static", "struct", "switch", "typedef", "union", "unsigned", "void",
      "volatile", "while", "class", "new", "delete", "this", "template", "namespace", "true",
      "false", "row", "col", "flat", "rows", "cols", "red", "line", "stride", "half", "int64_t",
      "threadIdx", "blockIdx", "blockDim", "gridDim",
      // locals of the kernel templates
      "n", "i", "j", "b", "h", "hk", "e", "d", "t", "s", "p", "dp", "mx", "se", "inv", "pdp",
      "lines", "sum", "label", "counts", "counted", "scale", "mean", "var", "ms", "mg", "mgx",
      "rstd", "group", "score", "dscore", "loss", "acc", "g", "chunk", "lane", "begin", "amax",
      "inverse", "high", "low", "blocks",
      // the flash attention kernels' accessors
      "x", "mask", "loadQ", "loadK", "loadV", "loadDO", "storeO", "storeDQ", "addDK", "addDV"};
  NameTable names;
  names.kernel = sanitize(plan.kernel.getSymName());
  unsigned i = 0;
  for (BlockArgument arg : plan.inputs)
    names.params[arg] = "in" + std::to_string(i++);
  i = 0;
  for (Value v : plan.outputs)
    if (!names.params.count(v)) // a value yielded twice keeps one name
      names.params[v] = "out" + std::to_string(i++);
  llvm::StringSet<> used;
  for (const std::string &symbol : plan.symbols) {
    std::string name = sanitize(symbol);
    // Printer locals look like v12, ix3_0, acc4: keep symbols apart from them.
    if (reserved.contains(name) || name.rfind("kiln_", 0) == 0 ||
        (name.size() > 1 && llvm::isDigit(name.back())))
      name = "sym_" + name;
    while (!used.insert(name).second)
      name += "_";
    names.symbols[symbol] = name;
  }
  return names;
}

} // namespace kiln::codegen
