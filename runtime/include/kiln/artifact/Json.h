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
// without fraction or exponent are kept exactly as int64.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_ARTIFACT_JSON_H
#define KILN_ARTIFACT_JSON_H

#include "kiln/runtime/Expected.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::artifact {

using runtime::Expected;

struct JsonMember;

class Json {
public:
  enum class Kind { Null, Bool, Integer, Number, String, Array, Object };

  Json() = default;
  static Json boolean(bool value);
  static Json integer(int64_t value);
  static Json number(double value);
  static Json string(std::string value);
  static Json array(std::vector<Json> elements = {});
  static Json object();

  /// Parses one JSON document (surrounding whitespace allowed). The error is
  /// "invalid JSON at byte N: <what>". Nesting deeper than \p maxDepth is an
  /// error, so hostile input cannot exhaust the stack.
  static Expected<Json> parse(std::string_view text, int maxDepth = 64);

  /// Compact JSON text (no spaces), or indented by two spaces per level.
  std::string print(bool pretty = false) const;

  Kind getKind() const { return kind; }
  bool isNull() const { return kind == Kind::Null; }
  bool isBool() const { return kind == Kind::Bool; }
  bool isInteger() const { return kind == Kind::Integer; }
  /// Integer or Number.
  bool isNumber() const {
    return kind == Kind::Integer || kind == Kind::Number;
  }
  bool isString() const { return kind == Kind::String; }
  bool isArray() const { return kind == Kind::Array; }
  bool isObject() const { return kind == Kind::Object; }

  bool getBool() const { return boolValue; }
  int64_t getInteger() const { return integerValue; }
  double getNumber() const {
    return kind == Kind::Integer ? static_cast<double>(integerValue)
                                 : numberValue;
  }
  const std::string &getString() const { return stringValue; }
  const std::vector<Json> &getElements() const { return elements; }
  std::vector<Json> &getElements() { return elements; }
  const std::vector<JsonMember> &getMembers() const { return members; }

  /// The member named \p key of an object, or null if absent.
  const Json *get(std::string_view key) const;
  /// Appends (or replaces) the member \p key of an object.
  Json &set(std::string key, Json value);
  /// Appends an element to an array.
  void push(Json value) { elements.push_back(std::move(value)); }

  /// "null", "boolean", "integer", "number", "string", "array", "object".
  static const char *kindName(Kind kind);

private:
  void printTo(std::string &out, int indent) const;

  Kind kind = Kind::Null;
  bool boolValue = false;
  int64_t integerValue = 0;
  double numberValue = 0;
  std::string stringValue;
  std::vector<Json> elements;
  std::vector<JsonMember> members;
};

struct JsonMember {
  std::string key;
  Json value;
};

/// Appends \p text to \p out as a quoted JSON string.
void appendJsonString(std::string &out, std::string_view text);

} // namespace kiln::artifact

#endif // KILN_ARTIFACT_JSON_H
