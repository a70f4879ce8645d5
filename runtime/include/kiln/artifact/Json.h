//===- Json.h - A minimal JSON value, parser and printer --------*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Enough JSON for safetensors headers and the artifact's text sections,
// without a dependency: the runtime must build from the CUDA toolkit alone.
// Objects keep their member order (so printing is deterministic) and reject
// duplicate keys (a header naming a tensor twice is ambiguous). Integers
// without fraction or exponent are kept exactly as int64. Headers come from
// untrusted files: parsing is linear in time and compact in memory (a value
// is 40 bytes, containers hold no spare capacity).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_ARTIFACT_JSON_H
#define KILN_ARTIFACT_JSON_H

#include "kiln/artifact/Expected.h"

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::artifact {

struct JsonMember;

class Json {
public:
  enum class Kind : uint8_t { Null, Bool, Integer, Number, String, Array, Object };

  Json() noexcept : integerValue(0) {}
  Json(const Json &other);
  Json(Json &&other) noexcept;
  Json &operator=(const Json &other);
  Json &operator=(Json &&other) noexcept;
  ~Json() { destroy(); }

  static Json boolean(bool value);
  static Json integer(int64_t value);
  static Json number(double value);
  static Json string(std::string value);
  static Json array(std::vector<Json> elements = {});
  static Json object(std::vector<JsonMember> members = {});

  /// Parses one JSON document (surrounding whitespace allowed). The error is
  /// "invalid JSON at byte N: <what>". Nesting deeper than \p maxDepth is an
  /// error, so hostile input cannot exhaust the stack. Strings must be valid
  /// UTF-8. Time is linear in the text (duplicate keys of a large object are
  /// found by sorting), and arrays and objects hold exactly their elements,
  /// so memory stays a small multiple of the text.
  static Expected<Json> parse(std::string_view text, int maxDepth = 64);

  /// Parses \p text, a JSON array, handing each element to \p each as soon
  /// as it is complete (with its index) and then dropping it: memory is one
  /// element, not the whole array. An error of \p each stops the parse and
  /// is returned as is; a syntax error reads as parse()'s; valid JSON that
  /// is not an array is exactly "expected a JSON array".
  static Status forEachElement(std::string_view text,
                               const std::function<Status(Json &, size_t)> &each,
                               int maxDepth = 64);
  /// The same for the members of \p text, a JSON object, in order (keys
  /// are checked for duplicates; "expected a JSON object" otherwise).
  static Status forEachMember(std::string_view text,
                              const std::function<Status(const std::string &, Json &)> &each,
                              int maxDepth = 64);

  /// Compact JSON text (no spaces), or indented by two spaces per level.
  std::string print(bool pretty = false) const;

  Kind getKind() const { return kind; }
  bool isNull() const { return kind == Kind::Null; }
  bool isBool() const { return kind == Kind::Bool; }
  bool isInteger() const { return kind == Kind::Integer; }
  /// Integer or Number.
  bool isNumber() const { return kind == Kind::Integer || kind == Kind::Number; }
  bool isString() const { return kind == Kind::String; }
  bool isArray() const { return kind == Kind::Array; }
  bool isObject() const { return kind == Kind::Object; }

  /// The value; false, 0 or empty for another kind.
  bool getBool() const { return kind == Kind::Bool && boolValue; }
  int64_t getInteger() const { return kind == Kind::Integer ? integerValue : 0; }
  double getNumber() const {
    return kind == Kind::Integer  ? static_cast<double>(integerValue)
           : kind == Kind::Number ? numberValue
                                  : 0.0;
  }
  const std::string &getString() const;
  const std::vector<Json> &getElements() const;
  /// An array's elements (a non-array becomes an empty array first).
  std::vector<Json> &getElements();
  const std::vector<JsonMember> &getMembers() const;

  /// The member named \p key of an object, or null if absent.
  const Json *get(std::string_view key) const;
  /// Replaces the member \p key of an object, or appends it (a non-object
  /// becomes an empty object first). Linear in the members: builders of
  /// large objects whose keys are known to be distinct use append().
  Json &set(std::string key, Json value);
  /// Appends the member \p key without looking for an existing one.
  Json &append(std::string key, Json value);
  /// Appends an element to an array (a non-array becomes an empty one first).
  void push(Json value);

  /// "null", "boolean", "integer", "number", "string", "array", "object".
  static const char *kindName(Kind kind);

private:
  void printTo(std::string &out, int indent) const;
  void destroy() noexcept;
  void moveFrom(Json &other) noexcept;
  void copyFrom(const Json &other);

  // One of these lives, as `kind` says: a value is 40 bytes.
  Kind kind = Kind::Null;
  union {
    bool boolValue;
    int64_t integerValue;
    double numberValue;
    std::string stringValue;
    std::vector<Json> elements;
    std::vector<JsonMember> members;
  };
};

struct JsonMember {
  std::string key;
  Json value;
};

/// Appends \p text to \p out as a quoted JSON string.
void appendJsonString(std::string &out, std::string_view text);

} // namespace kiln::artifact

#endif // KILN_ARTIFACT_JSON_H
