# Thin wrappers so each dialect's CMakeLists stays a few lines.

# add_kiln_dialect(Graph kiln): ops, types, attrs, and the dialect doc.
function(add_kiln_dialect dialect dialect_namespace)
  set(LLVM_TARGET_DEFINITIONS ${dialect}Ops.td)
  mlir_tablegen(${dialect}Ops.h.inc -gen-op-decls)
  mlir_tablegen(${dialect}Ops.cpp.inc -gen-op-defs)
  mlir_tablegen(${dialect}Dialect.h.inc -gen-dialect-decls -dialect=${dialect_namespace})
  mlir_tablegen(${dialect}Dialect.cpp.inc -gen-dialect-defs -dialect=${dialect_namespace})
  mlir_tablegen(${dialect}Attrs.h.inc -gen-attrdef-decls -attrdefs-dialect=${dialect_namespace})
  mlir_tablegen(${dialect}Attrs.cpp.inc -gen-attrdef-defs -attrdefs-dialect=${dialect_namespace})
  mlir_tablegen(${dialect}Enums.h.inc -gen-enum-decls)
  mlir_tablegen(${dialect}Enums.cpp.inc -gen-enum-defs)
  set(LLVM_TARGET_DEFINITIONS ${dialect}Interfaces.td)
  mlir_tablegen(${dialect}Interfaces.h.inc -gen-op-interface-decls)
  mlir_tablegen(${dialect}Interfaces.cpp.inc -gen-op-interface-defs)
  set(LLVM_TARGET_DEFINITIONS ${dialect}Ops.td)
  add_public_tablegen_target(Kiln${dialect}IncGen)
  add_kiln_doc(${dialect}Ops ${dialect}Dialect Dialects/ -gen-dialect-doc -dialect=${dialect_namespace})
endfunction()

# add_kiln_passes(Graph): Passes.td -> declarations + pass doc.
function(add_kiln_passes dialect)
  set(LLVM_TARGET_DEFINITIONS Passes.td)
  mlir_tablegen(Passes.h.inc -gen-pass-decls -name ${dialect})
  add_public_tablegen_target(Kiln${dialect}PassIncGen)
  add_kiln_doc(Passes ${dialect}Passes Passes/ -gen-pass-doc)
endfunction()

# Generated markdown lands in build/docs/<dir>; the `kiln-doc` target builds all.
function(add_kiln_doc td_filename output_file output_directory command)
  set(LLVM_TARGET_DEFINITIONS ${td_filename}.td)
  tablegen(MLIR ${output_file}.md ${command} ${ARGN})
  set(GEN_DOC_FILE ${PROJECT_BINARY_DIR}/docs/${output_directory}${output_file}.md)
  add_custom_command(
    OUTPUT ${GEN_DOC_FILE}
    COMMAND ${CMAKE_COMMAND} -E copy
            ${CMAKE_CURRENT_BINARY_DIR}/${output_file}.md ${GEN_DOC_FILE}
    DEPENDS ${CMAKE_CURRENT_BINARY_DIR}/${output_file}.md)
  add_custom_target(${output_file}DocGen DEPENDS ${GEN_DOC_FILE})
  if(NOT TARGET kiln-doc)
    add_custom_target(kiln-doc)
  endif()
  add_dependencies(kiln-doc ${output_file}DocGen)
endfunction()
