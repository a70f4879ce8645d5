# Kiln's version, one number for the compiler (the top-level project) and
# the runtime (this project): both include this file before project().
set(KILN_VERSION 0.1.0)

# kiln_version_header(TARGET HEADER): a target, run on every build, that
# writes HEADER (KILN_VERSION, KILN_GIT_HASH) and touches it only when the
# commit (or its "-dirty" state) changed, so only its includers rebuild.
set(KILN_VERSION_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/WriteVersionHeader.cmake)
function(kiln_version_header target header)
  add_custom_target(${target}
    COMMAND ${CMAKE_COMMAND} -DSOURCE_DIR=${CMAKE_SOURCE_DIR} -DOUTPUT=${header}
            -DVERSION=${PROJECT_VERSION} -P ${KILN_VERSION_SCRIPT}
    BYPRODUCTS ${header}
    COMMENT "Kiln version header"
    VERBATIM)
endfunction()
