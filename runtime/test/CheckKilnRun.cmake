# Runs kiln-run for one test case and checks its exit code and output exactly.
# Usage: cmake -DKILN_RUN=<path> -DCASE=<case> -P CheckKilnRun.cmake
# (A script rather than PASS_REGULAR_EXPRESSION: that ignores the exit code,
# and `devices` has two valid outcomes depending on the machine.)

set(args)
if(CASE STREQUAL "help")
  set(args --help)
elseif(CASE STREQUAL "version")
  set(args --version)
elseif(CASE STREQUAL "unknown-command")
  set(args frobnicate)
elseif(CASE MATCHES "^devices")
  set(args devices)
elseif(NOT CASE STREQUAL "no-command")
  message(FATAL_ERROR "unknown CASE '${CASE}'")
endif()

execute_process(COMMAND "${KILN_RUN}" ${args}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "kiln-run ${args}: exit ${rc}\nstdout: ${out}\nstderr: ${err}")

function(fail why)
  message(FATAL_ERROR "${CASE}: ${why}")
endfunction()

# Exit 127 or a signal means the binary did not start, e.g. because it was
# linked against libcuda on a machine without the driver.
if(NOT rc MATCHES "^[0-9]+$" OR rc EQUAL 127)
  fail("kiln-run did not run (${rc})")
endif()

set(device_lines "^device 0: ([^\n]+, sm_[0-9]+, [0-9]+\\.[0-9] GiB, [0-9]+ SMs\n)+$")
# Without a GPU: no driver at all, or a driver that sees no device (e.g.
# CUDA_VISIBLE_DEVICES=""). The `gpu` case accepts neither.
set(no_gpu "^kiln-run: error: (\
no CUDA driver found \\(libcuda\\.so\\.1: [^\n]+\\); kiln-run needs an NVIDIA GPU and driver|\
cuInit failed: CUDA_ERROR_[A-Z_]+ \\([^\n]+\\)|\
no CUDA device visible)\n$")

if(CASE STREQUAL "help")
  if(NOT rc EQUAL 0 OR NOT err STREQUAL "" OR
     NOT out MATCHES "^USAGE: kiln-run <command> \\[arguments\\]\n" OR
     NOT out MATCHES "\nCOMMANDS:\n  devices +List the visible CUDA devices\n  inspect ")
    fail("expected usage on stdout and exit 0")
  endif()
elseif(CASE STREQUAL "version")
  # The project's version, the commit (or "unknown" outside a checkout),
  # the toolkit it was built with, and what loads here.
  string(REPLACE "." "\\." version "${KILN_VERSION}")
  if(NOT rc EQUAL 0 OR NOT err STREQUAL "" OR
     NOT out MATCHES "^kiln-run \\(Kiln ${version}, git ([0-9a-f]+(-dirty)?|unknown)\\)\n" OR
     NOT out MATCHES "\n  CUDA toolkit [0-9]+\\.[0-9]+ \\(built with\\)\n" OR
     NOT out MATCHES "\n  cuBLASLt ([0-9]+\\.[0-9]+\\.[0-9]+ \\([^)]+\\)|not found)\n" OR
     NOT out MATCHES "\n  CUDA driver ([0-9]+\\.[0-9]+|not found)\n$")
    fail("expected the version lines and exit 0")
  endif()
elseif(CASE STREQUAL "no-command")
  if(NOT rc EQUAL 2 OR NOT out STREQUAL "" OR NOT err MATCHES "^USAGE: kiln-run")
    fail("expected usage on stderr and exit 2")
  endif()
elseif(CASE STREQUAL "unknown-command")
  if(NOT rc EQUAL 2 OR NOT out STREQUAL "" OR NOT err STREQUAL
     "kiln-run: error: unknown command 'frobnicate' (see 'kiln-run --help')\n")
    fail("expected one error line and exit 2")
  endif()
elseif(rc EQUAL 0 AND err STREQUAL "" AND out MATCHES "${device_lines}")
  # Devices listed: valid for both `devices` and `devices-gpu`.
elseif(CASE STREQUAL "devices" AND rc EQUAL 3 AND out STREQUAL "" AND
       err MATCHES "${no_gpu}")
  # No GPU here: one error line and exit 3.
else()
  fail("expected device lines and exit 0, or (without a GPU) one error line and exit 3")
endif()
