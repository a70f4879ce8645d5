//===- Expected.h - Value-or-error results ----------------------*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// The runtime (and the artifact library the compiler shares) depends on
// nothing but the C++ standard library, and builds without exceptions, so
// fallible calls return these instead of throwing. Every message is one
// human-readable line.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_ARTIFACT_EXPECTED_H
#define KILN_ARTIFACT_EXPECTED_H

#include <optional>
#include <string>
#include <utility>

namespace kiln::artifact {

/// \p text with every control character (a newline in a hostile tensor or
/// section name, say) written as \xHH: one line, whatever it quotes.
inline std::string oneLine(std::string text) {
  static const char digits[] = "0123456789abcdef";
  size_t at = 0;
  while (at < text.size()) {
    unsigned char c = static_cast<unsigned char>(text[at]);
    if (c >= 0x20 && c != 0x7f) {
      ++at;
      continue;
    }
    text.replace(at, 1, std::string{'\\', 'x', digits[c >> 4], digits[c & 15]});
    at += 4;
  }
  return text;
}

/// A one-line, human-readable error message.
struct Error {
  Error() = default;
  Error(std::string text) : message(oneLine(std::move(text))) {}
  std::string message;
};

/// Either a T or an Error. A minimal stand-in for llvm::Expected.
template <typename T> class [[nodiscard]] Expected {
public:
  Expected(T value) : value(std::move(value)) {}
  Expected(Error error) : error(std::move(error)) {}

  explicit operator bool() const { return value.has_value(); }
  T &operator*() { return *value; }
  const T &operator*() const { return *value; }
  T *operator->() { return &*value; }
  const T *operator->() const { return &*value; }

  /// The error message; empty when this holds a value.
  const std::string &getError() const { return error.message; }
  /// The error, to pass up unchanged (`return result.takeError();`).
  Error takeError() { return std::move(error); }

private:
  std::optional<T> value;
  Error error;
};

/// Success or an Error, for calls that produce no value.
class [[nodiscard]] Status {
public:
  Status() = default;
  Status(Error error) : error(std::move(error)) {}
  static Status success() { return Status(); }

  /// True on success.
  explicit operator bool() const { return !error.has_value(); }
  const std::string &getError() const {
    static const std::string none;
    return error ? error->message : none;
  }
  Error takeError() { return std::move(*error); }

private:
  std::optional<Error> error;
};

} // namespace kiln::artifact

#endif // KILN_ARTIFACT_EXPECTED_H
