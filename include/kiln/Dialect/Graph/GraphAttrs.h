//===- GraphAttrs.h - Kiln graph dialect attributes -------------*- C++ -*-===//

#ifndef KILN_DIALECT_GRAPH_GRAPHATTRS_H
#define KILN_DIALECT_GRAPH_GRAPHATTRS_H

#include "kiln/Dialect/Graph/GraphDialect.h"
#include "kiln/Dialect/Graph/SymTerm.h"
#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributeInterfaces.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/TensorEncoding.h"

#include "kiln/Dialect/Graph/GraphEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "kiln/Dialect/Graph/GraphAttrs.h.inc"

#endif // KILN_DIALECT_GRAPH_GRAPHATTRS_H
