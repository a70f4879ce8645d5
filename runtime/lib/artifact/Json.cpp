//===- Json.cpp - A minimal JSON value, parser and printer ------*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "kiln/artifact/Json.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

using namespace kiln::artifact;
using kiln::runtime::Error;

Json Json::boolean(bool value) {
  Json json;
  json.kind = Kind::Bool;
  json.boolValue = value;
  return json;
}

Json Json::integer(int64_t value) {
  Json json;
  json.kind = Kind::Integer;
  json.integerValue = value;
  return json;
}

Json Json::number(double value) {
  Json json;
  json.kind = Kind::Number;
  json.numberValue = value;
  return json;
}

Json Json::string(std::string value) {
  Json json;
  json.kind = Kind::String;
  json.stringValue = std::move(value);
  return json;
}

Json Json::array(std::vector<Json> elements) {
  Json json;
  json.kind = Kind::Array;
  json.elements = std::move(elements);
  return json;
}

Json Json::object() {
  Json json;
  json.kind = Kind::Object;
  return json;
}

const Json *Json::get(std::string_view key) const {
  for (const JsonMember &member : members)
    if (member.key == key)
      return &member.value;
  return nullptr;
}

Json &Json::set(std::string key, Json value) {
  for (JsonMember &member : members)
    if (member.key == key)
      return member.value = std::move(value);
  members.push_back({std::move(key), std::move(value)});
  return members.back().value;
}

const char *Json::kindName(Kind kind) {
  switch (kind) {
  case Kind::Null:
    return "null";
  case Kind::Bool:
    return "boolean";
  case Kind::Integer:
    return "integer";
  case Kind::Number:
    return "number";
  case Kind::String:
    return "string";
  case Kind::Array:
    return "array";
  case Kind::Object:
    return "object";
  }
  return "?";
}

//===----------------------------------------------------------------------===//
// Parser
//===----------------------------------------------------------------------===//

namespace {
class Parser {
public:
  Parser(std::string_view text, int maxDepth)
      : text(text), maxDepth(maxDepth) {}

  bool parseDocument(Json &out) {
    skipSpace();
    if (!parseValue(out, 0))
      return false;
    skipSpace();
    if (pos != text.size())
      return fail("unexpected text after the JSON value");
    return true;
  }

  std::string error;

private:
  bool fail(const std::string &what) {
    if (error.empty())
      error = "invalid JSON at byte " + std::to_string(pos) + ": " + what;
    return false;
  }

  void skipSpace() {
    while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\t' ||
                                 text[pos] == '\n' || text[pos] == '\r'))
      ++pos;
  }

  bool consume(std::string_view word) {
    if (text.substr(pos, word.size()) != word)
      return false;
    pos += word.size();
    return true;
  }

  bool parseValue(Json &out, int depth) {
    if (pos >= text.size())
      return fail("unexpected end of input");
    char c = text[pos];
    if (c == '{' || c == '[') {
      if (depth >= maxDepth)
        return fail("nesting deeper than " + std::to_string(maxDepth));
      return c == '{' ? parseObject(out, depth + 1)
                      : parseArray(out, depth + 1);
    }
    if (c == '"') {
      std::string value;
      if (!parseString(value))
        return false;
      out = Json::string(std::move(value));
      return true;
    }
    if (c == '-' || (c >= '0' && c <= '9'))
      return parseNumber(out);
    if (consume("true")) {
      out = Json::boolean(true);
      return true;
    }
    if (consume("false")) {
      out = Json::boolean(false);
      return true;
    }
    if (consume("null")) {
      out = Json();
      return true;
    }
    return fail("unexpected character");
  }

  bool parseObject(Json &out, int depth) {
    ++pos; // '{'
    out = Json::object();
    skipSpace();
    if (pos < text.size() && text[pos] == '}') {
      ++pos;
      return true;
    }
    while (true) {
      skipSpace();
      if (pos >= text.size() || text[pos] != '"')
        return fail("expected a string key");
      size_t keyPos = pos;
      std::string key;
      if (!parseString(key))
        return false;
      if (out.get(key)) {
        pos = keyPos;
        return fail("duplicate key \"" + key + "\"");
      }
      skipSpace();
      if (pos >= text.size() || text[pos] != ':')
        return fail("expected ':'");
      ++pos;
      skipSpace();
      Json value;
      if (!parseValue(value, depth))
        return false;
      out.set(std::move(key), std::move(value));
      skipSpace();
      if (pos < text.size() && text[pos] == ',') {
        ++pos;
        continue;
      }
      if (pos < text.size() && text[pos] == '}') {
        ++pos;
        return true;
      }
      return fail("expected ',' or '}'");
    }
  }

  bool parseArray(Json &out, int depth) {
    ++pos; // '['
    out = Json::array();
    skipSpace();
    if (pos < text.size() && text[pos] == ']') {
      ++pos;
      return true;
    }
    while (true) {
      skipSpace();
      Json value;
      if (!parseValue(value, depth))
        return false;
      out.push(std::move(value));
      skipSpace();
      if (pos < text.size() && text[pos] == ',') {
        ++pos;
        continue;
      }
      if (pos < text.size() && text[pos] == ']') {
        ++pos;
        return true;
      }
      return fail("expected ',' or ']'");
    }
  }

  bool parseHex4(uint32_t &value) {
    if (text.size() - pos < 4)
      return fail("truncated \\u escape");
    value = 0;
    for (int i = 0; i < 4; ++i) {
      char c = text[pos++];
      value <<= 4;
      if (c >= '0' && c <= '9')
        value |= c - '0';
      else if (c >= 'a' && c <= 'f')
        value |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F')
        value |= c - 'A' + 10;
      else
        return fail("bad hex digit in \\u escape");
    }
    return true;
  }

  static void appendUtf8(std::string &out, uint32_t code) {
    if (code < 0x80) {
      out += static_cast<char>(code);
    } else if (code < 0x800) {
      out += static_cast<char>(0xC0 | code >> 6);
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else if (code < 0x10000) {
      out += static_cast<char>(0xE0 | code >> 12);
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | code >> 18);
      out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    }
  }

  bool parseString(std::string &out) {
    ++pos; // '"'
    while (true) {
      if (pos >= text.size())
        return fail("unterminated string");
      unsigned char c = text[pos];
      if (c == '"') {
        ++pos;
        return true;
      }
      if (c < 0x20)
        return fail("control character in string");
      if (c != '\\') {
        out += static_cast<char>(c);
        ++pos;
        continue;
      }
      if (++pos >= text.size())
        return fail("unterminated string");
      char escape = text[pos++];
      switch (escape) {
      case '"':
      case '\\':
      case '/':
        out += escape;
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'u': {
        uint32_t code = 0;
        if (!parseHex4(code))
          return false;
        if (code >= 0xD800 && code < 0xDC00) {
          // A high surrogate must be followed by a low one.
          uint32_t low = 0;
          if (!consume("\\u") || !parseHex4(low) || low < 0xDC00 ||
              low >= 0xE000)
            return fail("unpaired surrogate in \\u escape");
          code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
        } else if (code >= 0xDC00 && code < 0xE000) {
          return fail("unpaired surrogate in \\u escape");
        }
        appendUtf8(out, code);
        break;
      }
      default:
        --pos;
        return fail("bad escape in string");
      }
    }
  }

  bool parseNumber(Json &out) {
    size_t start = pos;
    bool isInteger = true;
    if (text[pos] == '-')
      ++pos;
    auto digits = [&] {
      size_t first = pos;
      while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9')
        ++pos;
      return pos - first;
    };
    size_t intDigits = digits();
    if (intDigits == 0)
      return fail("expected digits");
    if (intDigits > 1 && text[pos - intDigits] == '0')
      return fail("leading zero in number");
    if (pos < text.size() && text[pos] == '.') {
      ++pos;
      isInteger = false;
      if (digits() == 0)
        return fail("expected digits after '.'");
    }
    if (pos < text.size() && (text[pos] == 'e' || text[pos] == 'E')) {
      ++pos;
      isInteger = false;
      if (pos < text.size() && (text[pos] == '+' || text[pos] == '-'))
        ++pos;
      if (digits() == 0)
        return fail("expected digits in exponent");
    }
    std::string literal(text.substr(start, pos - start));
    errno = 0;
    if (isInteger) {
      long long value = std::strtoll(literal.c_str(), nullptr, 10);
      if (errno == ERANGE) {
        pos = start;
        return fail("integer out of range");
      }
      out = Json::integer(value);
    } else {
      double value = std::strtod(literal.c_str(), nullptr);
      if (errno == ERANGE && std::isinf(value)) {
        pos = start;
        return fail("number out of range");
      }
      out = Json::number(value);
    }
    return true;
  }

  std::string_view text;
  int maxDepth;
  size_t pos = 0;
};
} // namespace

Expected<Json> Json::parse(std::string_view text, int maxDepth) {
  Parser parser(text, maxDepth);
  Json result;
  if (!parser.parseDocument(result))
    return Error{parser.error};
  return result;
}

//===----------------------------------------------------------------------===//
// Printer
//===----------------------------------------------------------------------===//

void kiln::artifact::appendJsonString(std::string &out, std::string_view text) {
  out += '"';
  for (unsigned char c : text) {
    switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\r':
      out += "\\r";
      break;
    case '\t':
      out += "\\t";
      break;
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
  case Kind::Null:
    out += "null";
    return;
  case Kind::Bool:
    out += boolValue ? "true" : "false";
    return;
  case Kind::Integer:
    out += std::to_string(integerValue);
    return;
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
  case Kind::String:
    appendJsonString(out, stringValue);
    return;
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
