//===- Diagnostics.cpp - kiln's error lines -------------------------------===//

#include "Diagnostics.h"

#include "Driver.h"
#include "Progress.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;
using namespace mlir;

namespace kiln::driver {
namespace {

std::string &diagnosticInput() {
  static std::string input;
  return input;
}

/// One named value or node, and the file it came from, found in `loc`.
struct Named {
  std::string name, opType, file;
};

/// The file of `loc` (a FileLineColLoc anywhere inside it), or "".
std::string fileOf(Location loc) {
  std::string file;
  loc->walk([&](Location inner) {
    if (auto position = dyn_cast<FileLineColLoc>(inner)) {
      file = position.getFilename().str();
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  return file;
}

/// The NameLocs of `loc`, outermost first; the importer wraps a node's file
/// position in a FusedLoc whose metadata is its ONNX op type.
void collectNames(Location loc, SmallVectorImpl<Named> &names) {
  if (auto named = dyn_cast<NameLoc>(loc)) {
    Named entry{named.getName().str(), "", fileOf(named.getChildLoc())};
    if (auto fused = dyn_cast<FusedLoc>(named.getChildLoc()))
      if (auto opType = dyn_cast_or_null<StringAttr>(fused.getMetadata()))
        entry.opType = opType.str();
    names.push_back(entry);
    return;
  }
  if (auto fused = dyn_cast<FusedLoc>(loc))
    for (Location inner : fused.getLocations())
      collectNames(inner, names);
  if (auto call = dyn_cast<CallSiteLoc>(loc))
    collectNames(call.getCallee(), names);
  if (auto opaque = dyn_cast<OpaqueLoc>(loc))
    collectNames(opaque.getFallbackLocation(), names);
}

/// The first real position (line > 0) in `loc`.
std::optional<FileLineColLoc> positionOf(Location loc) {
  std::optional<FileLineColLoc> found;
  loc->walk([&](Location inner) {
    auto position = dyn_cast<FileLineColLoc>(inner);
    if (position && position.getLine() > 0) {
      found = position;
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  return found;
}

} // namespace

void setDiagnosticInput(StringRef path) { diagnosticInput() = path.str(); }

std::string describeLocation(Location location, StringRef input) {
  std::string text;
  raw_string_ostream os(text);
  if (std::optional<FileLineColLoc> position = positionOf(location)) {
    os << position->getFilename().getValue() << ":" << position->getLine() << ":"
       << position->getColumn();
    return os.str();
  }
  SmallVector<Named> names;
  collectNames(location, names);
  std::string file = fileOf(location);
  os << (file.empty() ? input.str() : file);
  if (names.empty())
    return os.str();
  bool nodes = llvm::all_of(names, [](const Named &n) { return !n.opType.empty(); });
  os << ": " << (nodes ? names.size() == 1 ? "node " : "nodes " : "");
  constexpr size_t kShown = 3;
  for (auto [i, entry] : llvm::enumerate(names)) {
    if (i == kShown) {
      os << " and " << names.size() - kShown << " more";
      break;
    }
    os << (i ? ", " : "") << "'" << entry.name << "'";
    if (!entry.opType.empty())
      os << " (" << entry.opType << ")";
  }
  return os.str();
}

CommandDiagnostics::CommandDiagnostics(MLIRContext &context)
    : handler(&context, [](Diagnostic &diag) {
        std::string where = describeLocation(diag.getLocation(), diagnosticInput());
        std::string message = diag.str();
        for (Diagnostic &note : diag.getNotes())
          message += "; " + note.str();
        std::string line = where.empty() ? message : where + ": " + message;
        switch (diag.getSeverity()) {
        case DiagnosticSeverity::Error: fail(line); break;
        case DiagnosticSeverity::Warning:
          CompileProgress::clearCurrent();
          errs() << "kiln: warning: " << line << "\n";
          break;
        default:
          CompileProgress::clearCurrent();
          errs() << "kiln: note: " << line << "\n";
          break;
        }
        return success();
      }) {
  // "see current operation: <the op's IR>" is for compiler developers.
  context.printOpOnDiagnostic(false);
}

} // namespace kiln::driver
