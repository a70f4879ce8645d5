//===- PassNames.cpp - The passes --dump-ir-after can name ----------------===//
//
// --dump-ir-after takes pass arguments (kiln-lora), the names the pipelines
// are registered under; --timing shows class names (LoraPass). A name that
// is neither would print nothing, so it is an error listing the passes kiln
// compile can run: those of its pipelines built with every option on.
//
//===----------------------------------------------------------------------===//

#include "Driver.h"

#include "mlir/Pass/PassRegistry.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <set>

using namespace llvm;
using namespace mlir;

namespace kiln::driver {
namespace {

/// Pass names in a textual pipeline: `builtin.module(canonicalize{...},
/// func.func(kiln-fuse))` holds canonicalize and kiln-fuse; the names
/// before '(' anchor nested pipelines; options in braces are skipped.
void collectPassNames(StringRef text, std::set<std::string> &names) {
  std::string word;
  int braces = 0;
  for (char c : text) {
    if (braces > 0) {
      braces += c == '{' ? 1 : c == '}' ? -1 : 0;
      continue;
    }
    if (c == '{' || c == ',' || c == ')') {
      if (!StringRef(word).trim().empty())
        names.insert(StringRef(word).trim().str());
      word.clear();
      braces = c == '{';
    } else if (c == '(') {
      word.clear(); // an anchor op name
    } else {
      word += c;
    }
  }
}

/// Every pass kiln compile's train-step and kernel pipelines can add.
std::set<std::string> compilePassNames() {
  PipelineOptions all;
  all.until = "step";
  all.staticSymbols = "batch=1";
  all.lora = "r=8";
  all.loraKConcat = true;
  all.attentionLayout = "bshd";
  all.precision = "bf16";
  all.quant = "nf4";
  all.rematBudget = "auto";
  all.buckets = "seq=1";
  OpPassManager pm("builtin.module");
  buildTrainStepPipeline(pm, all);
  buildKernelPipeline(pm, all);
  std::string text;
  raw_string_ostream os(text);
  pm.printAsTextualPipeline(os);
  std::set<std::string> names;
  collectPassNames(os.str(), names);
  return names;
}

/// The argument of the registered pass whose class is `className`.
std::optional<std::string> argumentOfClass(StringRef className,
                                           const std::set<std::string> &arguments) {
  for (const std::string &argument : arguments) {
    const PassInfo *info = PassInfo::lookup(argument);
    if (!info)
      continue;
    OpPassManager one;
    if (failed(info->addToPipeline(one, "", [](const Twine &) { return failure(); })))
      continue;
    for (Pass &pass : one.getPasses())
      if (pass.getName() == className)
        return argument;
  }
  return std::nullopt;
}

} // namespace

LogicalResult checkPassNames(ArrayRef<std::string> names, StringRef flag, std::string &error) {
  std::set<std::string> known = compilePassNames();
  for (const std::string &name : names) {
    if (known.count(name))
      continue;
    std::string hint;
    if (std::optional<std::string> argument = argumentOfClass(name, known))
      hint = " ('" + name + "' is the class name of " + *argument + ")";
    error = (flag + ": unknown pass '" + name + "'" + hint +
             "; kiln compile's passes: " + join(known, ", "))
                .str();
    return failure();
  }
  return success();
}

} // namespace kiln::driver
