//===- JsonPrinter.cpp - JSON text from a value ---------------------------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "kiln/artifact/Json.h"

#include <cmath>
#include <cstdio>

using namespace kiln::artifact;

void kiln::artifact::appendJsonString(std::string &out, std::string_view text) {
  out += '"';
  for (unsigned char c : text) {
    switch (c) {
    case '"': out += "\\\""; break;
    case '\\': out += "\\\\"; break;
    case '\n': out += "\\n"; break;
    case '\r': out += "\\r"; break;
    case '\t': out += "\\t"; break;
    default:
      if (c < 0x20) {
        char escape[7];
        std::snprintf(escape, sizeof(escape), "\\u%04x", c);
        out += escape;
      } else {
        out += static_cast<char>(c);
      }
    }
  }
  out += '"';
}

std::string Json::print(bool pretty) const {
  std::string out;
  printTo(out, pretty ? 0 : -1);
  return out;
}

/// \p indent < 0 prints compactly; otherwise the current indentation level.
void Json::printTo(std::string &out, int indent) const {
  auto newline = [&](int level) {
    if (indent < 0)
      return;
    out += '\n';
    out.append(2 * level, ' ');
  };
  int inner = indent < 0 ? -1 : indent + 1;
  switch (kind) {
  case Kind::Null: out += "null"; return;
  case Kind::Bool: out += boolValue ? "true" : "false"; return;
  case Kind::Integer: out += std::to_string(integerValue); return;
  case Kind::Number: {
    // JSON has no NaN or infinity.
    if (!std::isfinite(numberValue)) {
      out += "null";
      return;
    }
    char text[32];
    std::snprintf(text, sizeof(text), "%.17g", numberValue);
    out += text;
    return;
  }
  case Kind::String: appendJsonString(out, stringValue); return;
  case Kind::Array:
    out += '[';
    for (size_t i = 0; i < elements.size(); ++i) {
      if (i)
        out += ',';
      newline(inner);
      elements[i].printTo(out, inner);
    }
    if (!elements.empty())
      newline(indent);
    out += ']';
    return;
  case Kind::Object:
    out += '{';
    for (size_t i = 0; i < members.size(); ++i) {
      if (i)
        out += ',';
      newline(inner);
      appendJsonString(out, members[i].key);
      out += indent < 0 ? ":" : ": ";
      members[i].value.printTo(out, inner);
    }
    if (!members.empty())
      newline(indent);
    out += '}';
    return;
  }
}
