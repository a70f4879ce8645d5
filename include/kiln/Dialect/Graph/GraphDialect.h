//===- GraphDialect.h - Kiln graph dialect ----------------------*- C++ -*-===//

#ifndef KILN_DIALECT_GRAPH_GRAPHDIALECT_H
#define KILN_DIALECT_GRAPH_GRAPHDIALECT_H

#include "mlir/IR/Dialect.h"

#include "kiln/Dialect/Graph/GraphDialect.h.inc"

#endif // KILN_DIALECT_GRAPH_GRAPHDIALECT_H
