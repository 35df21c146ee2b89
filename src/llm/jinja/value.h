#pragma once
// The values a chat template computes with, and how they print: Jinja's
// kinds as @huggingface/jinja holds them (Note [Chat templates follow
// @huggingface/jinja] in chat_template.cpp), JSON in and out, and the text
// helpers the filters and methods share.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace tessera::llm::jinja {

class Sandbox;

enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, Array, Object, Namespace, Function };

struct Value;
struct Object;
struct Callable;
using Array = std::vector<Value>;

// Lists, dicts and functions are shared (as references are in JavaScript);
// strings are copied.
struct Value {
  Kind kind = Kind::Undefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::shared_ptr<Array> a;            // Array
  std::shared_ptr<Object> o;           // Object, Namespace
  std::shared_ptr<const Callable> fn;  // Function

  static Value none() { return with(Kind::None); }
  static Value boolean(bool v) { Value x = with(Kind::Bool); x.b = v; return x; }
  static Value integer(int64_t v) { Value x = with(Kind::Int); x.i = v; return x; }
  static Value number(double v) { Value x = with(Kind::Float); x.f = v; return x; }
  static Value string(std::string v) { Value x = with(Kind::String); x.s = std::move(v); return x; }
  static Value array(Array v = {}) { Value x = with(Kind::Array); x.a = std::make_shared<Array>(std::move(v)); return x; }
  static Value object(Kind k = Kind::Object);
  static Value with(Kind k) { Value x; x.kind = k; return x; }
  bool is_number() const { return kind == Kind::Int || kind == Kind::Float; }
  double num() const { return kind == Kind::Float ? f : static_cast<double>(i); }
  bool attributes() const { return kind == Kind::Object || kind == Kind::Namespace; }
};

// Keys in insertion order, as JavaScript's Map keeps them.
struct Object {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(std::string_view k) const;
  Value* find(std::string_view k);
  void set(const std::string& k, Value v);  // replaces the value of a key it has, else appends
};

const char* kind_name(Kind k);
Value from_json(const nlohmann::ordered_json& j);
bool truthy(const Value& v);
bool same(const Value& x, const Value& y);           // `==`: JavaScript's loose equality of the values
bool strictly_same(const Value& x, const Value& y);  // the equalto test: JavaScript's ===

// The bytes a value holds beyond what it shares: its string, or a list's
// elements and their strings (nested lists are shared, not copied).
int64_t footprint(const Value& v);

// JavaScript's Number.prototype.toString.
std::string js_number(double d);

struct JsonStyle {
  int indent = 0;
  bool ensure_ascii = false, sort_keys = false, undefined_as_null = true;
  std::string item_sep = ", ", key_sep = ": ";
};
// JSON.stringify's text of `v`, appended to `out`; `box` bounds what it
// writes (a list that holds itself many times over is written out whole).
void to_json(const Value& v, const JsonStyle& st, const Sandbox& box, int line, std::string& out);
// What {{ x }} and `string` write.
std::string to_text(const Value& v, const Sandbox& box, int line);

// ---- text helpers: strings are UTF-8 and count in code points ----

bool js_space(uint32_t c);  // JavaScript's \s and String.prototype.trim
std::string encode(const std::vector<uint32_t>& cpts, size_t begin, size_t end);
std::string trim(const std::string& s, bool left, bool right);
std::string map_case(const std::string& s, bool upper);
std::string capitalize(const std::string& s);
std::string title(const std::string& s);  // each word (after white space) capitalized
// A string's code points, each a string value (a for loop over a string, its
// `list`), checked against the sandbox's budget before they are made.
Array characters(const std::string& s, const Sandbox& box, int line);
// Where `needle` (not empty) occurs in `s`, left to right without overlaps,
// at most `count` times (all when negative): in time linear in both.
std::vector<size_t> occurrences(std::string_view s, std::string_view needle, int64_t count = -1);

}  // namespace tessera::llm::jinja
