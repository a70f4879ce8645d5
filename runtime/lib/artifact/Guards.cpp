//===- Guards.cpp - Size expressions and run-time shape guards --*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "kiln/artifact/Guards.h"

#include "kiln/artifact/Json.h"

#include <algorithm>
#include <cctype>
#include <climits>

using namespace kiln::artifact;
using kiln::artifact::Error;

namespace {
bool isSymbolStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool isSymbolChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.';
}
} // namespace

Expected<SizeExpr> SizeExpr::parse(std::string_view text) {
  SizeExpr expr;
  expr.text = std::string(text);
  size_t pos = 0;
  auto fail = [&](const std::string &what) {
    return Error{"bad size expression '" + std::string(text) + "' at byte " + std::to_string(pos) +
                 ": " + what};
  };
  auto skipSpace = [&] {
    while (pos < text.size() && text[pos] == ' ')
      ++pos;
  };

  bool negate = false;
  skipSpace();
  if (pos < text.size() && text[pos] == '-') {
    negate = true;
    ++pos;
  }
  while (true) {
    Term term;
    term.coefficient = negate ? -1 : 1;
    bool needFactor = true;
    while (needFactor) {
      skipSpace();
      if (pos >= text.size())
        return fail("expected an integer or a symbol");
      if (std::isdigit(static_cast<unsigned char>(text[pos]))) {
        int64_t value = 0;
        while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) {
          if (__builtin_mul_overflow(value, 10, &value) ||
              __builtin_add_overflow(value, text[pos] - '0', &value))
            return fail("integer out of range");
          ++pos;
        }
        if (__builtin_mul_overflow(term.coefficient, value, &term.coefficient))
          return fail("coefficient out of range");
      } else if (isSymbolStart(text[pos])) {
        size_t start = pos;
        while (pos < text.size() && isSymbolChar(text[pos]))
          ++pos;
        term.factors.emplace_back(text.substr(start, pos - start));
      } else {
        return fail("expected an integer or a symbol");
      }
      skipSpace();
      needFactor = pos < text.size() && text[pos] == '*';
      if (needFactor)
        ++pos;
    }
    expr.terms.push_back(std::move(term));
    if (pos == text.size())
      return expr;
    if (text[pos] != '+' && text[pos] != '-')
      return fail("expected '+', '-' or '*'");
    negate = text[pos] == '-';
    ++pos;
  }
}

Expected<SizeExpr> SizeExpr::product(const std::vector<SizeExpr> &factors, int64_t scale) {
  // Monomial (sorted symbols) -> coefficient.
  std::map<std::vector<std::string>, int64_t> sum{{{}, scale}};
  for (const SizeExpr &factor : factors) {
    std::map<std::vector<std::string>, int64_t> next;
    for (const auto &[symbols, coefficient] : sum)
      for (const Term &term : factor.terms) {
        std::vector<std::string> monomial = symbols;
        monomial.insert(monomial.end(), term.factors.begin(), term.factors.end());
        std::sort(monomial.begin(), monomial.end());
        int64_t c;
        if (__builtin_mul_overflow(coefficient, term.coefficient, &c) ||
            __builtin_add_overflow(next[monomial], c, &next[monomial]))
          return Error{"size expression product overflows int64"};
      }
    sum = std::move(next);
  }
  // Highest degree first, as the compiler prints: "2*batch*seq + 2*batch".
  std::vector<std::pair<std::vector<std::string>, int64_t>> terms;
  for (const auto &entry : sum)
    if (entry.second != 0)
      terms.push_back(entry);
  std::sort(terms.begin(), terms.end(), [](const auto &a, const auto &b) {
    return a.first.size() != b.first.size() ? a.first.size() > b.first.size() : a.first < b.first;
  });
  std::string text;
  for (const auto &[symbols, coefficient] : terms) {
    if (coefficient == INT64_MIN)
      return Error{"size expression product overflows int64"};
    int64_t magnitude = coefficient < 0 ? -coefficient : coefficient;
    text += text.empty() ? (coefficient < 0 ? "-" : "") : (coefficient < 0 ? " - " : " + ");
    std::string monomial;
    for (const std::string &symbol : symbols)
      monomial += (monomial.empty() ? "" : "*") + symbol;
    if (monomial.empty())
      text += std::to_string(magnitude);
    else if (magnitude == 1)
      text += monomial;
    else
      text += std::to_string(magnitude) + "*" + monomial;
  }
  return parse(text.empty() ? "0" : text);
}

Expected<int64_t> SizeExpr::evaluate(const SymbolBindings &bindings) const {
  int64_t sum = 0;
  for (const Term &term : terms) {
    int64_t product = term.coefficient;
    for (const std::string &factor : term.factors) {
      auto it = bindings.find(factor);
      if (it == bindings.end())
        return Error{"size expression '" + text + "' uses symbol '" + factor +
                     "', which has no value"};
      if (__builtin_mul_overflow(product, it->second, &product))
        return Error{"size expression '" + text + "' overflows int64"};
    }
    if (__builtin_add_overflow(sum, product, &sum))
      return Error{"size expression '" + text + "' overflows int64"};
  }
  return sum;
}

std::vector<std::string> SizeExpr::getSymbols() const {
  std::vector<std::string> symbols;
  for (const Term &term : terms)
    symbols.insert(symbols.end(), term.factors.begin(), term.factors.end());
  std::sort(symbols.begin(), symbols.end());
  symbols.erase(std::unique(symbols.begin(), symbols.end()), symbols.end());
  return symbols;
}

Expected<std::vector<Guard>> kiln::artifact::parseGuards(std::string_view json) {
  // One entry at a time: a long list never exists twice (as JSON and as
  // guards).
  std::vector<Guard> guards;
  bool semantic = false; // an entry's error, already worded
  Status parsed = Json::forEachElement(json, [&](Json &entry, size_t i) -> Status {
    semantic = true;
    std::string where = "guards[" + std::to_string(i) + "]";
    auto integer = [&](const char *key, int64_t &out) -> bool {
      const Json *value = entry.get(key);
      if (!value || !value->isInteger())
        return false;
      out = value->getInteger();
      return true;
    };
    const Json *kind = entry.isObject() ? entry.get("kind") : nullptr;
    const Json *exprText = entry.isObject() ? entry.get("expr") : nullptr;
    if (!kind || !kind->isString() || !exprText || !exprText->isString())
      return Error{where + ": expected an object with string \"kind\" and "
                           "\"expr\""};
    Expected<SizeExpr> expr = SizeExpr::parse(exprText->getString());
    if (!expr)
      return Error{where + ": " + expr.getError()};
    Guard guard;
    guard.expr = std::move(*expr);
    if (const Json *origin = entry.get("origin"); origin && origin->isString())
      guard.origin = origin->getString();
    if (kind->getString() == "range") {
      guard.kind = Guard::Kind::Range;
      if (!integer("min", guard.min) || !integer("max", guard.max) || guard.min > guard.max)
        return Error{where + ": a range guard needs integers min <= max"};
    } else if (kind->getString() == "divisible") {
      guard.kind = Guard::Kind::Divisible;
      if (!integer("divisor", guard.divisor) || guard.divisor < 1)
        return Error{where + ": a divisible guard needs an integer divisor "
                             ">= 1"};
    } else {
      return Error{where + ": unknown guard kind '" + kind->getString() + "'"};
    }
    guards.push_back(std::move(guard));
    semantic = false;
    return Status::success();
  });
  if (!parsed)
    return Error{semantic ? parsed.getError() : "guards: " + parsed.getError()};
  return guards;
}

bool kiln::artifact::isSizeSymbol(std::string_view name) {
  if (name.empty() || !isSymbolStart(name[0]))
    return false;
  return std::all_of(name.begin(), name.end(), isSymbolChar);
}

std::string kiln::artifact::describeGuard(const Guard &guard) {
  const std::string &text = guard.expr.getText();
  if (guard.kind == Guard::Kind::Divisible)
    return text + " % " + std::to_string(guard.divisor) + " == 0";
  return std::to_string(guard.min) + " <= " + text + " <= " + std::to_string(guard.max);
}

Status kiln::artifact::checkGuards(const std::vector<Guard> &guards,
                                   const SymbolBindings &bindings) {
  for (const Guard &guard : guards) {
    Expected<int64_t> value = guard.expr.evaluate(bindings);
    if (!value)
      return value.takeError();
    bool ok = guard.kind == Guard::Kind::Divisible ? *value % guard.divisor == 0
                                                   : guard.min <= *value && *value <= guard.max;
    if (!ok)
      return Error{guard.expr.getText() + "=" + std::to_string(*value) + " violates " +
                   describeGuard(guard) + " (required by " +
                   (guard.origin.empty() ? "a compiled assumption" : guard.origin) + ")"};
  }
  return Status::success();
}
