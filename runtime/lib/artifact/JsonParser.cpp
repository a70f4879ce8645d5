//===- JsonParser.cpp - The JSON parser, whole or streaming ---------------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "kiln/artifact/Json.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iterator>
#include <new>

using namespace kiln::artifact;

namespace {
/// Objects up to this size check duplicate keys as they go (quadratic, but
/// small); larger ones sort their keys once at the end.
constexpr size_t kLinearKeyCheck = 16;

class Parser {
public:
  Parser(std::string_view text, int maxDepth) : text(text), maxDepth(maxDepth) {}

  bool parseDocument(Json &out) {
    skipSpace();
    if (!parseValue(out, 0))
      return false;
    skipSpace();
    if (pos != text.size())
      return fail("unexpected text after the JSON value");
    return true;
  }

  /// The top-level array (or object) of the text, one element (member) at
  /// a time: each is handed to \p each when complete and then dropped.
  /// False on a syntax error (in `error`) or when \p each failed (its
  /// error in \p stopped).
  bool parseEachElement(const std::function<Status(Json &, size_t)> &each, Status &stopped) {
    skipSpace();
    if (pos >= text.size() || text[pos] != '[')
      return notA("array");
    ++pos;
    skipSpace();
    if (pos < text.size() && text[pos] == ']') {
      ++pos;
      return finishDocument();
    }
    for (size_t index = 0;; ++index) {
      skipSpace();
      Json value;
      if (!parseValue(value, 1))
        return false;
      if (Status status = each(value, index); !status) {
        stopped = std::move(status);
        return false;
      }
      skipSpace();
      if (pos < text.size() && text[pos] == ',') {
        ++pos;
        continue;
      }
      if (pos < text.size() && text[pos] == ']') {
        ++pos;
        return finishDocument();
      }
      return fail("expected ',' or ']'");
    }
  }

  bool parseEachMember(const std::function<Status(const std::string &, Json &)> &each,
                       Status &stopped) {
    skipSpace();
    if (pos >= text.size() || text[pos] != '{')
      return notA("object");
    ++pos;
    skipSpace();
    if (pos < text.size() && text[pos] == '}') {
      ++pos;
      return finishDocument();
    }
    // Only the keys are kept, for the duplicate check.
    std::vector<JsonMember> &keys = memberStack;
    while (true) {
      skipSpace();
      if (pos >= text.size() || text[pos] != '"')
        return fail("expected a string key");
      size_t keyPos = pos;
      std::string key;
      if (!parseString(key))
        return false;
      if (keys.size() < kLinearKeyCheck)
        for (const JsonMember &seen : keys)
          if (seen.key == key)
            return failAt(keyPos, "duplicate key \"" + key + "\"");
      skipSpace();
      if (pos >= text.size() || text[pos] != ':')
        return fail("expected ':'");
      ++pos;
      skipSpace();
      Json value;
      if (!parseValue(value, 1))
        return false;
      if (Status status = each(key, value); !status) {
        stopped = std::move(status);
        return false;
      }
      keys.push_back({std::move(key), Json()});
      keyPositions.push_back(keyPos);
      skipSpace();
      if (pos < text.size() && text[pos] == ',') {
        ++pos;
        continue;
      }
      if (pos < text.size() && text[pos] == '}') {
        ++pos;
        break;
      }
      return fail("expected ',' or '}'");
    }
    if (keys.size() > kLinearKeyCheck && !checkDuplicateKeys(0))
      return false;
    return finishDocument();
  }

  std::string error;

private:
  bool finishDocument() {
    skipSpace();
    if (pos != text.size())
      return fail("unexpected text after the JSON value");
    return true;
  }

  /// The document is not a \p kind: a syntax error if it is not JSON at
  /// all, else exactly "expected a JSON <kind>" (callers add their name).
  bool notA(const char *kind) {
    Json whole;
    pos = 0;
    if (parseDocument(whole))
      error = std::string("expected a JSON ") + kind;
    return false;
  }

  bool fail(const std::string &what) {
    if (error.empty())
      error = "invalid JSON at byte " + std::to_string(pos) + ": " + what;
    return false;
  }
  bool failAt(size_t at, const std::string &what) {
    pos = at;
    return fail(what);
  }

  void skipSpace() {
    while (pos < text.size() &&
           (text[pos] == ' ' || text[pos] == '\t' || text[pos] == '\n' || text[pos] == '\r'))
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
      return c == '{' ? parseObject(out, depth + 1) : parseArray(out, depth + 1);
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

  // Elements and members are parsed onto one stack each (shared by every
  // nesting level) and moved into an exactly sized vector when their
  // container closes: no container keeps spare capacity.

  bool parseObject(Json &out, int depth) {
    ++pos; // '{'
    size_t first = memberStack.size();
    skipSpace();
    if (pos < text.size() && text[pos] == '}') {
      ++pos;
      out = Json::object();
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
      size_t count = memberStack.size() - first;
      if (count < kLinearKeyCheck)
        for (size_t i = first; i < memberStack.size(); ++i)
          if (memberStack[i].key == key)
            return failAt(keyPos, "duplicate key \"" + key + "\"");
      skipSpace();
      if (pos >= text.size() || text[pos] != ':')
        return fail("expected ':'");
      ++pos;
      skipSpace();
      Json value;
      if (!parseValue(value, depth))
        return false;
      memberStack.push_back({std::move(key), std::move(value)});
      keyPositions.push_back(keyPos);
      skipSpace();
      if (pos < text.size() && text[pos] == ',') {
        ++pos;
        continue;
      }
      if (pos < text.size() && text[pos] == '}') {
        ++pos;
        break;
      }
      return fail("expected ',' or '}'");
    }
    size_t count = memberStack.size() - first;
    if (count > kLinearKeyCheck && !checkDuplicateKeys(first))
      return false;
    std::vector<JsonMember> members(std::make_move_iterator(memberStack.begin() + first),
                                    std::make_move_iterator(memberStack.end()));
    memberStack.erase(memberStack.begin() + first, memberStack.end());
    keyPositions.erase(keyPositions.begin() + first, keyPositions.end());
    out = Json::object(std::move(members));
    return true;
  }

  /// Sorts the keys of the object whose members start at \p first: the
  /// earliest second occurrence of a key is the error, as a linear check
  /// would have found it.
  bool checkDuplicateKeys(size_t first) {
    std::vector<size_t> order(memberStack.size() - first);
    for (size_t i = 0; i < order.size(); ++i)
      order[i] = first + i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      int c = memberStack[a].key.compare(memberStack[b].key);
      return c != 0 ? c < 0 : a < b;
    });
    size_t duplicate = SIZE_MAX;
    for (size_t i = 1; i < order.size(); ++i)
      if (memberStack[order[i]].key == memberStack[order[i - 1]].key &&
          (duplicate == SIZE_MAX || order[i] < duplicate))
        duplicate = order[i];
    if (duplicate == SIZE_MAX)
      return true;
    return failAt(keyPositions[duplicate], "duplicate key \"" + memberStack[duplicate].key + "\"");
  }

  bool parseArray(Json &out, int depth) {
    ++pos; // '['
    size_t first = elementStack.size();
    skipSpace();
    if (pos < text.size() && text[pos] == ']') {
      ++pos;
      out = Json::array();
      return true;
    }
    while (true) {
      skipSpace();
      // Into a local: a nested container grows the shared stack.
      Json value;
      if (!parseValue(value, depth))
        return false;
      elementStack.push_back(std::move(value));
      skipSpace();
      if (pos < text.size() && text[pos] == ',') {
        ++pos;
        continue;
      }
      if (pos < text.size() && text[pos] == ']') {
        ++pos;
        break;
      }
      return fail("expected ',' or ']'");
    }
    std::vector<Json> elements(std::make_move_iterator(elementStack.begin() + first),
                               std::make_move_iterator(elementStack.end()));
    elementStack.erase(elementStack.begin() + first, elementStack.end());
    out = Json::array(std::move(elements));
    return true;
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

  /// The length of the well-formed UTF-8 sequence at \p at (RFC 3629: no
  /// overlong forms, no surrogates, nothing above U+10FFFF), or 0.
  size_t utf8Length(size_t at) const {
    auto byte = [&](size_t i) {
      return at + i < text.size() ? static_cast<unsigned char>(text[at + i]) : 0u;
    };
    auto continuation = [](unsigned b) { return (b & 0xC0) == 0x80; };
    unsigned lead = byte(0);
    if (lead >= 0xC2 && lead <= 0xDF)
      return continuation(byte(1)) ? 2 : 0;
    if (lead >= 0xE0 && lead <= 0xEF) {
      unsigned second = byte(1);
      unsigned low = lead == 0xE0 ? 0xA0 : 0x80, high = lead == 0xED ? 0x9F : 0xBF;
      return second >= low && second <= high && continuation(byte(2)) ? 3 : 0;
    }
    if (lead >= 0xF0 && lead <= 0xF4) {
      unsigned second = byte(1);
      unsigned low = lead == 0xF0 ? 0x90 : 0x80, high = lead == 0xF4 ? 0x8F : 0xBF;
      return second >= low && second <= high && continuation(byte(2)) && continuation(byte(3)) ? 4
                                                                                               : 0;
    }
    return 0;
  }

  bool parseString(std::string &out) {
    ++pos; // '"'
    while (true) {
      // A run of plain characters, appended at once.
      size_t run = pos;
      while (run < text.size()) {
        unsigned char c = text[run];
        if (c == '"' || c == '\\' || c < 0x20 || c >= 0x80)
          break;
        ++run;
      }
      out.append(text.data() + pos, run - pos);
      pos = run;
      if (pos >= text.size())
        return fail("unterminated string");
      unsigned char c = text[pos];
      if (c == '"') {
        ++pos;
        return true;
      }
      if (c < 0x20)
        return fail("control character in string");
      if (c >= 0x80) {
        size_t length = utf8Length(pos);
        if (!length)
          return fail("invalid UTF-8 in string");
        out.append(text.data() + pos, length);
        pos += length;
        continue;
      }
      if (++pos >= text.size())
        return fail("unterminated string");
      char escape = text[pos++];
      switch (escape) {
      case '"':
      case '\\':
      case '/': out += escape; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'u': {
        uint32_t code = 0;
        if (!parseHex4(code))
          return false;
        if (code >= 0xD800 && code < 0xDC00) {
          // A high surrogate must be followed by a low one.
          uint32_t low = 0;
          if (!consume("\\u") || !parseHex4(low) || low < 0xDC00 || low >= 0xE000)
            return fail("unpaired surrogate in \\u escape");
          code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
        } else if (code >= 0xDC00 && code < 0xE000) {
          return fail("unpaired surrogate in \\u escape");
        }
        appendUtf8(out, code);
        break;
      }
      default: --pos; return fail("bad escape in string");
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
    const char *begin = text.data() + start, *end = text.data() + pos;
    if (isInteger) {
      int64_t value = 0;
      std::from_chars_result parsed = std::from_chars(begin, end, value);
      if (parsed.ec != std::errc() || parsed.ptr != end)
        return failAt(start, "integer out of range");
      out = Json::integer(value);
      return true;
    }
    // strtod wants a terminated string; numbers with a fraction or an
    // exponent are few.
    std::string literal(begin, end);
    errno = 0;
    double value = std::strtod(literal.c_str(), nullptr);
    if (errno == ERANGE && std::isinf(value))
      return failAt(start, "number out of range");
    out = Json::number(value);
    return true;
  }

  std::string_view text;
  int maxDepth;
  size_t pos = 0;
  std::vector<Json> elementStack;
  std::vector<JsonMember> memberStack;
  std::vector<size_t> keyPositions; ///< Beside memberStack: where each key began.
};
} // namespace

Expected<Json> Json::parse(std::string_view text, int maxDepth) {
  Parser parser(text, maxDepth);
  Json result;
  if (!parser.parseDocument(result))
    return Error{parser.error};
  return result;
}

Status Json::forEachElement(std::string_view text,
                            const std::function<Status(Json &, size_t)> &each, int maxDepth) {
  Parser parser(text, maxDepth);
  Status stopped;
  if (!parser.parseEachElement(each, stopped))
    return stopped ? Status(Error{parser.error}) : stopped;
  return Status::success();
}

Status Json::forEachMember(std::string_view text,
                           const std::function<Status(const std::string &, Json &)> &each,
                           int maxDepth) {
  Parser parser(text, maxDepth);
  Status stopped;
  if (!parser.parseEachMember(each, stopped))
    return stopped ? Status(Error{parser.error}) : stopped;
  return Status::success();
}
