//===- Sections.h - Encode compiled-step facts as .kiln sections -*- C++
//-*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// The compiler's side of the artifact sections whose payload the runtime
// already decodes (docs/artifact.md). Each function turns what a pass
// recorded on the step function into the section's JSON, in the encoding
// runtime/lib/artifact parses, so the two cannot drift apart
// (test/Unit/ArtifactInteropTest.cpp runs both).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_ARTIFACTEMIT_SECTIONS_H
#define KILN_ARTIFACTEMIT_SECTIONS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <string>

namespace kiln {

/// The "guards" section for \p func's `kiln.guards` (recorded by
/// --kiln-shape-guards): a JSON array, `[]` when there are none. Fails with a
/// diagnostic on \p func for a malformed guard.
mlir::FailureOr<std::string> emitGuardsSection(mlir::func::FuncOp func);

} // namespace kiln

#endif // KILN_ARTIFACTEMIT_SECTIONS_H
