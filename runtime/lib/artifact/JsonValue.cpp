//===- JsonValue.cpp - JSON values: construction and access ---------------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "kiln/artifact/Json.h"

#include <new>

using namespace kiln::artifact;

void Json::destroy() noexcept {
  switch (kind) {
  case Kind::String: stringValue.~basic_string(); break;
  case Kind::Array: elements.~vector(); break;
  case Kind::Object: members.~vector(); break;
  default: break;
  }
  kind = Kind::Null;
  integerValue = 0;
}

/// *this holds nothing (Null) on entry; \p other is Null on exit.
void Json::moveFrom(Json &other) noexcept {
  kind = other.kind;
  switch (kind) {
  case Kind::String: new (&stringValue) std::string(std::move(other.stringValue)); break;
  case Kind::Array: new (&elements) std::vector<Json>(std::move(other.elements)); break;
  case Kind::Object: new (&members) std::vector<JsonMember>(std::move(other.members)); break;
  default:
    integerValue = other.integerValue; // the widest scalar: all of them
    break;
  }
  other.destroy();
}

/// *this holds nothing (Null) on entry.
void Json::copyFrom(const Json &other) {
  switch (other.kind) {
  case Kind::String: new (&stringValue) std::string(other.stringValue); break;
  case Kind::Array: new (&elements) std::vector<Json>(other.elements); break;
  case Kind::Object: new (&members) std::vector<JsonMember>(other.members); break;
  default: integerValue = other.integerValue; break;
  }
  kind = other.kind;
}

Json::Json(const Json &other) : integerValue(0) { copyFrom(other); }

Json::Json(Json &&other) noexcept : integerValue(0) { moveFrom(other); }

Json &Json::operator=(const Json &other) {
  if (this != &other) {
    Json copy(other);
    *this = std::move(copy);
  }
  return *this;
}

Json &Json::operator=(Json &&other) noexcept {
  if (this != &other) {
    // \p other may live inside *this (json = json.getElements()[0]).
    Json taken;
    taken.moveFrom(other);
    destroy();
    moveFrom(taken);
  }
  return *this;
}

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
  new (&json.stringValue) std::string(std::move(value));
  json.kind = Kind::String;
  return json;
}

Json Json::array(std::vector<Json> elements) {
  Json json;
  new (&json.elements) std::vector<Json>(std::move(elements));
  json.kind = Kind::Array;
  return json;
}

Json Json::object(std::vector<JsonMember> members) {
  Json json;
  new (&json.members) std::vector<JsonMember>(std::move(members));
  json.kind = Kind::Object;
  return json;
}

const std::string &Json::getString() const {
  static const std::string empty;
  return kind == Kind::String ? stringValue : empty;
}

const std::vector<Json> &Json::getElements() const {
  static const std::vector<Json> empty;
  return kind == Kind::Array ? elements : empty;
}

std::vector<Json> &Json::getElements() {
  if (kind != Kind::Array)
    *this = array();
  return elements;
}

const std::vector<JsonMember> &Json::getMembers() const {
  static const std::vector<JsonMember> empty;
  return kind == Kind::Object ? members : empty;
}

const Json *Json::get(std::string_view key) const {
  for (const JsonMember &member : getMembers())
    if (member.key == key)
      return &member.value;
  return nullptr;
}

Json &Json::set(std::string key, Json value) {
  if (kind == Kind::Object)
    for (JsonMember &member : members)
      if (member.key == key)
        return member.value = std::move(value);
  return append(std::move(key), std::move(value));
}

Json &Json::append(std::string key, Json value) {
  if (kind != Kind::Object)
    *this = object();
  members.push_back({std::move(key), std::move(value)});
  return members.back().value;
}

void Json::push(Json value) {
  if (kind != Kind::Array)
    *this = array();
  elements.push_back(std::move(value));
}

const char *Json::kindName(Kind kind) {
  switch (kind) {
  case Kind::Null: return "null";
  case Kind::Bool: return "boolean";
  case Kind::Integer: return "integer";
  case Kind::Number: return "number";
  case Kind::String: return "string";
  case Kind::Array: return "array";
  case Kind::Object: return "object";
  }
  return "?";
}
