//===- Check.h - Minimal test assertions for runtime tests ------*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// The runtime builds from the CUDA toolkit alone, so its tests use these few
// macros instead of a test framework. A failed check prints its location and
// counts; main() returns checkFailures() != 0.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_TEST_CHECK_H
#define KILN_RUNTIME_TEST_CHECK_H

#include <cstdio>
#include <string>

inline int &checkFailures() {
  static int failures = 0;
  return failures;
}

#define CHECK(condition)                                                                           \
  do {                                                                                             \
    if (!(condition)) {                                                                            \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #condition);           \
      ++checkFailures();                                                                           \
    }                                                                                              \
  } while (false)

#define CHECK_EQ(actual, expected)                                                                 \
  do {                                                                                             \
    std::string checkActual = (actual), checkExpected = (expected);                                \
    if (checkActual != checkExpected) {                                                            \
      std::fprintf(stderr,                                                                         \
                   "%s:%d: CHECK_EQ failed:\n  actual:   %s\n"                                     \
                   "  expected: %s\n",                                                             \
                   __FILE__, __LINE__, checkActual.c_str(), checkExpected.c_str());                \
      ++checkFailures();                                                                           \
    }                                                                                              \
  } while (false)

inline int finishChecks() {
  if (checkFailures())
    std::fprintf(stderr, "%d check(s) failed\n", checkFailures());
  return checkFailures() ? 1 : 0;
}

#endif // KILN_RUNTIME_TEST_CHECK_H
