//===- kiln-opt.cpp - Kiln's mlir-opt -------------------------------------===//
//
// Parses, verifies, runs passes over and prints IR with every Kiln dialect
// and pass registered; the driver of the lit tests.
//
//===----------------------------------------------------------------------===//

#include "kiln/InitAll.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  kiln::registerAllDialects(registry);
  kiln::registerAllPasses();
  return mlir::asMainReturnCode(mlir::MlirOptMain(argc, argv, "Kiln optimizer driver\n", registry));
}
