#!/usr/bin/env bash
# README command (2): set up, build, and run every test that needs no GPU
# (lit + GoogleTest for the compiler, ctest for the runtime).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
ninja -C build check-kiln
(cd build-rt && ctest --output-on-failure -LE gpu)
