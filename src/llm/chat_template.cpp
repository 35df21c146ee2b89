#include "tessera/llm/chat_template.h"

#include <unicode/uchar.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <ctime>
#include <functional>
#include <set>

#include "llm/pretokenize.h"
#include "tessera/core/error.h"
#include "tessera/llm/tokenizer.h"

// Note [Chat templates follow @huggingface/jinja]
// Models ship their chat template as Jinja source written for Python's
// jinja2, and llama.cpp's tooling and transformers.js render it with
// @huggingface/jinja. Where the two differ we follow @huggingface/jinja,
// whose output the compat script compares byte for byte: booleans print as
// true/false, floats with an integral value as "2.0", arrays and objects as
// JSON ({"a": 1, "b": [2, 3]}); `x is iterable` holds for strings and lists
// only; `==` on lists and dicts compares identity; filters bind tighter than
// `is`, which binds tighter than arithmetic. Strings are UTF-8 here and
// UTF-16 in JavaScript: lengths, indices and slices count code points, which
// agree for every character outside the supplementary planes.

namespace tessera::llm {
namespace {

// ---- values -----------------------------------------------------------------

enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, Array, Object, Namespace, Function };

struct Value;
struct Object;
struct Callable;
using Array = std::vector<Value>;

struct Value {
  Kind kind = Kind::Undefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::shared_ptr<Array> a;           // Array
  std::shared_ptr<Object> o;          // Object, Namespace
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
  const Value* find(std::string_view k) const {
    for (const auto& [key, v] : items)
      if (key == k) return &v;
    return nullptr;
  }
  void set(const std::string& k, Value v) {
    for (auto& [key, old] : items)
      if (key == k) {
        old = std::move(v);
        return;
      }
    items.emplace_back(k, std::move(v));
  }
};

Value Value::object(Kind k) {
  Value x = with(k);
  x.o = std::make_shared<Object>();
  return x;
}

const char* kind_name(Kind k) {
  static const char* const names[] = {"undefined", "none", "boolean", "integer", "float", "string", "list", "dict",
                                      "namespace", "function"};
  return names[static_cast<int>(k)];
}

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: return Value::integer(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float: {
      // JavaScript has one number type: an integral value is an integer there.
      const double d = j.get<double>();
      if (std::isfinite(d) && d == std::trunc(d) && std::abs(d) < 9007199254740992.0)
        return Value::integer(static_cast<int64_t>(d));
      return Value::number(d);
    }
    case nlohmann::ordered_json::value_t::string: return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      Value v = Value::array();
      for (const auto& e : j) v.a->push_back(from_json(e));
      return v;
    }
    case nlohmann::ordered_json::value_t::object: {
      Value v = Value::object();
      for (auto it = j.begin(); it != j.end(); ++it) v.o->set(it.key(), from_json(it.value()));
      return v;
    }
    default: return Value();
  }
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool: return v.b;
    case Kind::Int: return v.i != 0;
    case Kind::Float: return v.f != 0 && !std::isnan(v.f);
    case Kind::String: return !v.s.empty();
    case Kind::Array: return !v.a->empty();
    case Kind::Object: return !v.o->items.empty();
    default: return true;
  }
}

// JavaScript's Number.prototype.toString: the shortest digits that read back,
// in exponent form from 1e21 up and below 1e-6.
std::string js_number(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  if (d == 0) return "0";
  char buf[64];
  const double a = std::abs(d);
  if (a >= 1e21 || a < 1e-6) {
    auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
    std::string s(buf, r.ptr);
    const size_t e = s.find('e');
    std::string mant = s.substr(0, e), exp = s.substr(e + 1);
    const char sign = exp[0];
    exp = exp.substr(1);
    while (exp.size() > 1 && exp[0] == '0') exp.erase(0, 1);
    return mant + "e" + (sign == '-' ? "-" : "+") + exp;
  }
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::fixed);
  return std::string(buf, r.ptr);
}

// JSON.stringify's string quoting; ensure_ascii writes UTF-16 escapes.
void json_quote(const std::string& s, bool ensure_ascii, std::string& out) {
  out += '"';
  for (uint32_t c : utf8_code_points(s)) {
    switch (c) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      default: break;
    }
    char buf[16];
    if (c < 0x20 || (ensure_ascii && c >= 0x7F)) {
      auto unit = [&](uint32_t u) {
        std::snprintf(buf, sizeof buf, "\\u%04x", u);
        out += buf;
      };
      if (c >= 0x10000) {
        unit(0xD800 + ((c - 0x10000) >> 10));
        unit(0xDC00 + ((c - 0x10000) & 0x3FF));
      } else {
        unit(c);
      }
      continue;
    }
    append_utf8(c, out);
  }
  out += '"';
}

struct JsonStyle {
  int indent = 0;
  bool ensure_ascii = false, sort_keys = false, undefined_as_null = true;
  std::string item_sep = ", ", key_sep = ": ";
};

void to_json(const Value& v, const JsonStyle& st, int depth, std::string& out) {
  switch (v.kind) {
    case Kind::None: out += "null"; return;
    case Kind::Undefined: out += st.undefined_as_null ? "null" : "undefined"; return;
    case Kind::Bool: out += v.b ? "true" : "false"; return;
    case Kind::Int: out += std::to_string(v.i); return;
    case Kind::Float: out += js_number(v.f); return;
    case Kind::String: json_quote(v.s, st.ensure_ascii, out); return;
    case Kind::Function: TS_ERROR("chat template: a function cannot be written as JSON");
    default: break;
  }
  const std::string pad = st.indent > 0 ? std::string(static_cast<size_t>(st.indent), ' ') : "";
  std::string base = "\n", child = "\n";
  for (int d = 0; d < depth; ++d) base += pad;
  child = base + pad;
  if (v.kind == Kind::Array) {
    if (v.a->empty()) {
      out += "[]";
      return;
    }
    out += '[';
    for (size_t k = 0; k < v.a->size(); ++k) {
      if (k) out += st.item_sep;
      if (st.indent > 0) out += child;
      to_json((*v.a)[k], st, depth + 1, out);
    }
    if (st.indent > 0) out += base;
    out += ']';
    return;
  }
  std::vector<const std::pair<std::string, Value>*> items;
  for (const auto& kv : v.o->items) items.push_back(&kv);
  if (st.sort_keys)
    std::stable_sort(items.begin(), items.end(), [](auto* x, auto* y) { return x->first < y->first; });
  if (items.empty()) {
    out += "{}";
    return;
  }
  out += '{';
  for (size_t k = 0; k < items.size(); ++k) {
    if (k) out += st.item_sep;
    if (st.indent > 0) out += child;
    json_quote(items[k]->first, st.ensure_ascii, out);
    out += st.key_sep;
    to_json(items[k]->second, st, depth + 1, out);
  }
  if (st.indent > 0) out += base;
  out += '}';
}

// What {{ x }} and `string` write.
std::string to_text(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined:
    case Kind::None: return "";
    case Kind::Bool: return v.b ? "true" : "false";
    case Kind::Int: return std::to_string(v.i);
    case Kind::Float: {
      if (v.f == 0 && std::signbit(v.f)) return "-0.0";
      if (std::isfinite(v.f) && v.f == std::trunc(v.f) && std::abs(v.f) < 1e21) {
        char buf[400];
        std::snprintf(buf, sizeof buf, "%.1f", v.f);
        return buf;
      }
      return js_number(v.f);
    }
    case Kind::String: return v.s;
    case Kind::Function: return "function";
    default: {
      JsonStyle st;
      st.undefined_as_null = false;
      std::string out;
      to_json(v, st, 0, out);
      return out;
    }
  }
}

bool same(const Value& x, const Value& y) {  // `==`, JavaScript's loose equality of the values
  if (x.is_number() && y.is_number()) return x.num() == y.num();
  if ((x.kind == Kind::Bool && y.is_number()) || (y.kind == Kind::Bool && x.is_number()))
    return (x.kind == Kind::Bool ? x.b : x.num()) == (y.kind == Kind::Bool ? y.b : y.num());
  const bool nx = x.kind == Kind::None || x.kind == Kind::Undefined, ny = y.kind == Kind::None || y.kind == Kind::Undefined;
  if (nx || ny) return nx && ny;
  if (x.kind != y.kind) return false;
  switch (x.kind) {
    case Kind::Bool: return x.b == y.b;
    case Kind::String: return x.s == y.s;
    case Kind::Array: return x.a == y.a;
    case Kind::Object:
    case Kind::Namespace: return x.o == y.o;
    case Kind::Function: return x.fn == y.fn;
    default: return false;
  }
}

bool strictly_same(const Value& x, const Value& y) {  // the equalto test: JavaScript's ===
  if (x.is_number() && y.is_number()) return x.num() == y.num();
  return x.kind == y.kind && same(x, y);
}

// ---- text helpers -----------------------------------------------------------

bool js_space(uint32_t c) {  // JavaScript's \s and String.prototype.trim
  return c == ' ' || (c >= 9 && c <= 13) || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000 || c == 0xFEFF;
}

std::string encode(const std::vector<uint32_t>& cpts, size_t begin, size_t end) {
  std::string out;
  for (size_t k = begin; k < end; ++k) append_utf8(cpts[k], out);
  return out;
}

std::string trim(const std::string& s, bool left, bool right) {
  const std::vector<uint32_t> c = utf8_code_points(s);
  size_t b = 0, e = c.size();
  if (left)
    while (b < e && js_space(c[b])) ++b;
  if (right)
    while (e > b && js_space(c[e - 1])) --e;
  return encode(c, b, e);
}

std::string map_case(const std::string& s, int how) {  // 0 lower, 1 upper
  std::string out;
  for (uint32_t c : utf8_code_points(s))
    append_utf8(static_cast<uint32_t>(how ? u_toupper(static_cast<UChar32>(c)) : u_tolower(static_cast<UChar32>(c))), out);
  return out;
}

std::string capitalize(const std::string& s) {
  const std::vector<uint32_t> c = utf8_code_points(s);
  if (c.empty()) return "";
  std::string out;
  append_utf8(static_cast<uint32_t>(u_toupper(static_cast<UChar32>(c[0]))), out);
  return out + map_case(encode(c, 1, c.size()), 0);
}

std::string title(const std::string& s) {  // each word (after white space) capitalized
  std::string out;
  bool start = true;
  for (uint32_t c : utf8_code_points(s)) {
    append_utf8(static_cast<uint32_t>(start ? u_toupper(static_cast<UChar32>(c)) : u_tolower(static_cast<UChar32>(c))), out);
    start = js_space(c);
  }
  return out;
}

void replace_all(std::string& s, const std::string& from, const std::string& to, int64_t count) {
  if (from.empty()) {
    // Python inserts `to` between every character (and at both ends).
    const std::vector<uint32_t> c = utf8_code_points(s);
    std::string out;
    int64_t n = 0;
    for (size_t k = 0; k <= c.size(); ++k) {
      if (count < 0 || n < count) out += to, ++n;
      if (k < c.size()) append_utf8(c[k], out);
    }
    s = out;
    return;
  }
  std::string out;
  size_t pos = 0;
  int64_t n = 0;
  for (size_t m; (count < 0 || n < count) && (m = s.find(from, pos)) != std::string::npos; ++n) {
    out.append(s, pos, m - pos);
    out += to;
    pos = m + from.size();
  }
  out.append(s, pos, std::string::npos);
  s = out;
}

// ---- lexer ------------------------------------------------------------------

enum class Tok : uint8_t { Text, Comment, OpenStmt, CloseStmt, OpenExpr, CloseExpr, Name, String, Number, Punct };

struct Token {
  Tok type;
  std::string text;
  int line;
};

// trim_blocks and lstrip_blocks, and the final newline dropped, as
// @huggingface/jinja's preprocess does them.
std::string preprocess(std::string src) {
  if (!src.empty() && src.back() == '\n') src.pop_back();
  std::string a;
  a.reserve(src.size());
  for (size_t k = 0; k < src.size();) {
    const bool line_start = k == 0 || src[k - 1] == '\n' || src[k - 1] == '\r';
    if (line_start) {
      size_t e = k;
      while (e < src.size() && (src[e] == ' ' || src[e] == '\t')) ++e;
      if (e > k && e + 1 < src.size() && src[e] == '{' && (src[e + 1] == '#' || src[e + 1] == '%' || src[e + 1] == '-')) {
        k = e;
        continue;
      }
    }
    a += src[k++];
  }
  std::string b;
  b.reserve(a.size());
  for (size_t k = 0; k < a.size(); ++k) {
    b += a[k];
    if (a[k] == '}' && k > 0 && (a[k - 1] == '#' || a[k - 1] == '%' || a[k - 1] == '-') && k + 1 < a.size() &&
        a[k + 1] == '\n')
      ++k;  // the newline after a block tag
  }
  // {% generation %} and {% endgeneration %} (transformers' marks for the
  // assistant's tokens) are dropped, with their whitespace control.
  std::string c;
  c.reserve(b.size());
  for (size_t k = 0; k < b.size();) {
    if (b.compare(k, 2, "{%") == 0) {
      size_t e = k + 2;
      const bool lstrip = e < b.size() && b[e] == '-';
      e += lstrip;
      while (e < b.size() && std::isspace(static_cast<unsigned char>(b[e]))) ++e;
      if (b.compare(e, 3, "end") == 0) e += 3;
      if (b.compare(e, 10, "generation") == 0) {
        e += 10;
        while (e < b.size() && std::isspace(static_cast<unsigned char>(b[e]))) ++e;
        const bool rstrip = e < b.size() && b[e] == '-';
        e += rstrip;
        if (b.compare(e, 2, "%}") == 0) {
          e += 2;
          if (lstrip)
            while (!c.empty() && std::isspace(static_cast<unsigned char>(c.back()))) c.pop_back();
          if (rstrip)
            while (e < b.size() && std::isspace(static_cast<unsigned char>(b[e]))) ++e;
          k = e;
          continue;
        }
      }
    }
    c += b[k++];
  }
  return c;
}

bool word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

std::vector<Token> lex(const std::string& source, const std::string& what) {
  const std::string src = preprocess(source);
  std::vector<Token> out;
  int line = 1;
  size_t pos = 0;
  auto fail = [&](const std::string& msg) { TS_ERROR(what, ": line ", line, ": ", msg); };
  auto advance = [&](size_t to) {
    for (; pos < to && pos < src.size(); ++pos) line += src[pos] == '\n';
  };
  auto strip_last_text = [&] {
    if (!out.empty() && out.back().type == Tok::Text) {
      out.back().text = trim(out.back().text, false, true);
      if (out.back().text.empty()) out.pop_back();
    }
  };
  auto skip_space = [&] {
    while (pos < src.size()) {
      const size_t n = std::min<size_t>(src.size() - pos, 3);
      const std::vector<uint32_t> c = utf8_code_points(std::string_view(src).substr(pos, n));
      if (c.empty() || !js_space(c[0])) break;
      std::string one;
      append_utf8(c[0], one);
      advance(pos + one.size());
    }
  };
  static const char* const puncts[] = {"<=", ">=", "==", "!=", "**", "//", "(", ")", "{", "}", "[", "]", ",", ".",
                                       ":", "|", "<", ">", "+", "-", "~", "*", "/", "%", "="};
  while (pos < src.size()) {
    const Tok last = out.empty() ? Tok::CloseStmt : out.back().type;
    if (out.empty() || last == Tok::CloseStmt || last == Tok::CloseExpr || last == Tok::Comment) {
      size_t end = pos;
      for (;; ++end) {
        end = src.find('{', end);
        if (end == std::string::npos) {
          end = src.size();
          break;
        }
        if (end + 1 < src.size() && (src[end + 1] == '%' || src[end + 1] == '{' || src[end + 1] == '#')) break;
      }
      if (end > pos) {
        out.push_back({Tok::Text, src.substr(pos, end - pos), line});
        advance(end);
        continue;
      }
    }
    if (src.compare(pos, 2, "{#") == 0) {
      advance(pos + 2);
      const bool strip_before = pos < src.size() && src[pos] == '-';
      if (strip_before) advance(pos + 1);
      const size_t end = src.find("#}", pos);
      if (end == std::string::npos) fail("a comment {# is never closed with #}");
      std::string comment = src.substr(pos, end - pos);
      const bool strip_after = !comment.empty() && comment.back() == '-';
      if (strip_before) strip_last_text();
      out.push_back({Tok::Comment, comment, line});
      advance(end + 2);
      if (strip_after) skip_space();
      continue;
    }
    if (src.compare(pos, 2, "{%") == 0 || src.compare(pos, 2, "{{") == 0) {
      const bool stmt = src[pos + 1] == '%';
      if (pos + 2 < src.size() && src[pos + 2] == '-') {
        strip_last_text();
        out.push_back({stmt ? Tok::OpenStmt : Tok::OpenExpr, "", line});
        advance(pos + 3);
        continue;
      }
    }
    skip_space();
    if (pos >= src.size()) break;
    if (src[pos] == '-' && pos + 2 < src.size() && src[pos + 2] == '}' && (src[pos + 1] == '%' || src[pos + 1] == '}')) {
      out.push_back({src[pos + 1] == '%' ? Tok::CloseStmt : Tok::CloseExpr, "", line});
      advance(pos + 3);
      skip_space();
      continue;
    }
    if (src.compare(pos, 2, "{%") == 0) {
      out.push_back({Tok::OpenStmt, "", line});
      advance(pos + 2);
      continue;
    }
    if (src.compare(pos, 2, "%}") == 0) {
      out.push_back({Tok::CloseStmt, "", line});
      advance(pos + 2);
      continue;
    }
    if (src.compare(pos, 2, "{{") == 0) {
      out.push_back({Tok::OpenExpr, "", line});
      advance(pos + 2);
      continue;
    }
    if (src.compare(pos, 2, "}}") == 0) {
      // Inside an expression a dict literal may close with "}}": count braces.
      int depth = 0;
      for (size_t k = out.size(); k-- > 0 && out[k].type != Tok::OpenExpr;)
        if (out[k].type == Tok::Punct) depth += out[k].text == "{" ? 1 : out[k].text == "}" ? -1 : 0;
      if (depth <= 0) {
        out.push_back({Tok::CloseExpr, "", line});
        advance(pos + 2);
        continue;
      }
    }
    const char c = src[pos];
    if (c == '\'' || c == '"') {
      std::string s;
      size_t k = pos + 1;
      for (;; ++k) {
        if (k >= src.size()) fail("a string is never closed");
        if (src[k] == c) break;
        if (src[k] != '\\') {
          s += src[k];
          continue;
        }
        if (++k >= src.size()) fail("a string is never closed");
        const char e = src[k];
        if (e == 'x' || e == 'u') {
          const size_t n = e == 'x' ? 2 : 4;
          const std::string hex = src.substr(k + 1, n);
          if (hex.size() != n || hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
            fail("invalid escape \\" + std::string(1, e) + hex);
          append_utf8(static_cast<uint32_t>(std::stoul(hex, nullptr, 16)), s);
          k += n;
          continue;
        }
        static const std::string from = "ntrbfv'\"\\", to = "\n\t\r\b\f\v'\"\\";
        const size_t w = from.find(e);
        if (w == std::string::npos) fail(std::string("unknown escape \\") + e + " in a string");
        s += to[w];
      }
      out.push_back({Tok::String, s, line});
      advance(k + 1);
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t k = pos;
      while (k < src.size() && std::isdigit(static_cast<unsigned char>(src[k]))) ++k;
      if (k + 1 < src.size() && src[k] == '.' && std::isdigit(static_cast<unsigned char>(src[k + 1]))) {
        ++k;
        while (k < src.size() && std::isdigit(static_cast<unsigned char>(src[k]))) ++k;
      }
      out.push_back({Tok::Number, src.substr(pos, k - pos), line});
      advance(k);
      continue;
    }
    if (word_char(c)) {
      size_t k = pos;
      while (k < src.size() && word_char(src[k])) ++k;
      out.push_back({Tok::Name, src.substr(pos, k - pos), line});
      advance(k);
      continue;
    }
    bool matched = false;
    for (const char* p : puncts) {
      const size_t n = std::strlen(p);
      if (src.compare(pos, n, p) == 0) {
        out.push_back({Tok::Punct, p, line});
        advance(pos + n);
        matched = true;
        break;
      }
    }
    if (!matched) fail(std::string("unexpected character '") + c + "'");
  }
  return out;
}

// ---- syntax tree ------------------------------------------------------------

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class E : uint8_t {
  Literal, Name, List, Dict, Tuple, Unary, Binary, Ternary, Select, Attr, Index, Slice, Call, Filter, Test, Kwarg
};

struct Expr {
  E kind;
  int line = 0;
  Value literal;           // Literal
  std::string name;        // Name, Attr, Unary/Binary operator, Filter, Test, Kwarg key
  bool negate = false;     // Test
  std::vector<ExprPtr> a;  // operands, elements, arguments (Call: [callee, args...]; Filter: [operand, args...])
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

enum class S : uint8_t { Text, Output, If, For, Set, SetBlock, Macro, Break, Continue };

struct Stmt {
  S kind;
  int line = 0;
  std::string text;         // Text; Macro name
  ExprPtr target, value;    // Set/For: target; If/For/Output/Set: the expression
  ExprPtr cond;             // For: the `if` filter
  std::vector<ExprPtr> params;  // Macro: names or name=default
  Body body, alt;
};

const std::set<std::string>& known_filters() {
  static const std::set<std::string> f = {
      "safe", "tojson", "list", "first", "last", "length", "count", "reverse", "sort", "join", "string", "unique",
      "upper", "lower", "title", "capitalize", "trim", "indent", "int", "float", "abs", "items", "default", "d",
      "selectattr", "rejectattr", "select", "reject", "map", "replace", "bool", "dictsort", "wordcount", "min", "max",
      "sum", "round", "center"};
  return f;
}

const std::set<std::string>& known_tests() {
  static const std::set<std::string> t = {"boolean", "callable", "odd", "even", "false", "true", "none", "string",
                                          "number", "integer", "float", "iterable", "mapping", "sequence", "lower",
                                          "upper", "defined", "undefined", "equalto", "eq", "ne", "in",
                                          "divisibleby", "gt", "ge", "lt", "le", "greaterthan", "lessthan", "==", "!="};
  return t;
}

const std::set<std::string>& known_methods() {
  static const std::set<std::string> m = {"upper", "lower", "strip", "lstrip", "rstrip", "title", "capitalize",
                                          "startswith", "endswith", "split", "replace", "items", "keys", "values",
                                          "get", "append", "count", "find", "join"};
  return m;
}

const std::set<std::string>& known_functions() {
  static const std::set<std::string> f = {"raise_exception", "namespace", "range", "strftime_now", "dict"};
  return f;
}

class Parser {
 public:
  Parser(std::vector<Token> toks, const std::string& what, int max_depth)
      : t_(std::move(toks)), what_(what), max_depth_(max_depth) {}

  Body program() {
    Body out;
    while (pos_ < t_.size()) out.push_back(any());
    return out;
  }
  std::set<std::string> macros;  // names defined anywhere, for the call check
  std::vector<std::pair<std::string, int>> calls;  // plain function calls: name, line

 private:
  [[noreturn]] void fail(const std::string& msg) const {
    const int line = pos_ < t_.size() ? t_[pos_].line : t_.empty() ? 1 : t_.back().line;
    TS_ERROR(what_, ": line ", line, ": ", msg);
  }
  bool at(Tok type, std::string_view text = {}) const {
    return pos_ < t_.size() && t_[pos_].type == type && (text.empty() || t_[pos_].text == text);
  }
  bool at_name(std::string_view n, size_t ahead = 0) const {
    return pos_ + ahead < t_.size() && t_[pos_ + ahead].type == Tok::Name && t_[pos_ + ahead].text == n;
  }
  bool at_stmt(std::initializer_list<std::string_view> names) const {
    if (!at(Tok::OpenStmt) || pos_ + 1 >= t_.size() || t_[pos_ + 1].type != Tok::Name) return false;
    for (auto n : names)
      if (t_[pos_ + 1].text == n) return true;
    return false;
  }
  const Token& expect(Tok type, const char* what, std::string_view text = {}) {
    if (!at(type, text)) fail(std::string("expected ") + what + (pos_ < t_.size() ? ", found '" + describe(t_[pos_]) + "'" : " at the end"));
    return t_[pos_++];
  }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case Tok::OpenStmt: return "{%";
      case Tok::CloseStmt: return "%}";
      case Tok::OpenExpr: return "{{";
      case Tok::CloseExpr: return "}}";
      case Tok::Text: return "text";
      default: return t.text;
    }
  }
  void expect_name(std::string_view n) {
    if (!at_name(n)) fail("expected '" + std::string(n) + "'");
    ++pos_;
  }
  struct Deeper {
    Parser& p;
    explicit Deeper(Parser& pp) : p(pp) {
      if (++p.depth_ > p.max_depth_) p.fail("the template nests deeper than " + std::to_string(p.max_depth_) + " levels");
    }
    ~Deeper() { --p.depth_; }
  };
  ExprPtr make(E k) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = pos_ < t_.size() ? t_[pos_].line : 0;
    return e;
  }

  std::unique_ptr<Stmt> any() {
    Deeper d(*this);
    const Token& t = t_[pos_];
    if (t.type == Tok::Comment) {
      ++pos_;
      auto s = std::make_unique<Stmt>();
      s->kind = S::Text;
      return s;
    }
    if (t.type == Tok::Text) {
      auto s = std::make_unique<Stmt>();
      s->kind = S::Text;
      s->text = t.text;
      ++pos_;
      return s;
    }
    if (t.type == Tok::OpenExpr) {
      ++pos_;
      auto s = std::make_unique<Stmt>();
      s->kind = S::Output;
      s->line = t.line;
      s->value = expression();
      expect(Tok::CloseExpr, "'}}'");
      return s;
    }
    if (t.type == Tok::OpenStmt) return statement();
    fail("unexpected '" + describe(t) + "'");
  }

  Body block_until(std::initializer_list<std::string_view> ends, const char* opened) {
    Body b;
    while (!at_stmt(ends)) {
      if (pos_ >= t_.size()) fail(std::string("'") + opened + "' is never closed");
      b.push_back(any());
    }
    return b;
  }

  std::unique_ptr<Stmt> statement() {
    expect(Tok::OpenStmt, "'{%'");
    if (!at(Tok::Name)) fail("expected a statement name after '{%'");
    const std::string name = t_[pos_].text;
    const int line = t_[pos_].line;
    ++pos_;
    auto s = std::make_unique<Stmt>();
    s->line = line;
    if (name == "if") {
      if_rest(*s);
      expect(Tok::OpenStmt, "'{%'");
      expect_name("endif");
      expect(Tok::CloseStmt, "'%}'");
    } else if (name == "for") {
      s->kind = S::For;
      s->target = target_list();
      expect_name("in");
      s->value = logical_or();
      if (at_name("if")) {
        ++pos_;
        s->cond = logical_or();
      }
      expect(Tok::CloseStmt, "'%}'");
      s->body = block_until({"endfor", "else"}, "for");
      if (at_stmt({"else"})) {
        pos_ += 2;
        expect(Tok::CloseStmt, "'%}'");
        s->alt = block_until({"endfor"}, "for");
      }
      expect(Tok::OpenStmt, "'{%'");
      expect_name("endfor");
      expect(Tok::CloseStmt, "'%}'");
    } else if (name == "set") {
      s->target = target_list(true);
      if (at(Tok::Punct, "=")) {
        ++pos_;
        s->kind = S::Set;
        s->value = expression_tuple();
      } else {
        s->kind = S::SetBlock;
        expect(Tok::CloseStmt, "'%}'");
        s->body = block_until({"endset"}, "set");
        expect(Tok::OpenStmt, "'{%'");
        expect_name("endset");
      }
      expect(Tok::CloseStmt, "'%}'");
    } else if (name == "macro") {
      s->kind = S::Macro;
      s->text = expect(Tok::Name, "a macro name").text;
      macros.insert(s->text);
      expect(Tok::Punct, "'('", "(");
      while (!at(Tok::Punct, ")")) {
        ExprPtr p = make(E::Name);
        p->name = expect(Tok::Name, "a parameter name").text;
        if (at(Tok::Punct, "=")) {
          ++pos_;
          ExprPtr k = make(E::Kwarg);
          k->name = p->name;
          k->a.push_back(expression());
          p = std::move(k);
        }
        s->params.push_back(std::move(p));
        if (!at(Tok::Punct, ")")) expect(Tok::Punct, "',' or ')'", ",");
      }
      ++pos_;
      expect(Tok::CloseStmt, "'%}'");
      s->body = block_until({"endmacro"}, "macro");
      expect(Tok::OpenStmt, "'{%'");
      expect_name("endmacro");
      expect(Tok::CloseStmt, "'%}'");
    } else if (name == "break" || name == "continue") {
      s->kind = name == "break" ? S::Break : S::Continue;
      expect(Tok::CloseStmt, "'%}'");
    } else if (name == "endif" || name == "endfor" || name == "endmacro" || name == "endset" || name == "else" ||
               name == "elif") {
      fail("unexpected '" + name + "' (no open block here ends or continues with it)");
    } else {
      fail("the statement '" + name + "' is not in Tessera's Jinja subset (it has if, for, set, macro, break, "
           "continue)");
    }
    return s;
  }

  void if_rest(Stmt& s) {
    s.kind = S::If;
    s.value = expression();
    expect(Tok::CloseStmt, "'%}'");
    s.body = block_until({"elif", "else", "endif"}, "if");
    if (at_stmt({"elif"})) {
      pos_ += 2;
      auto e = std::make_unique<Stmt>();
      e->line = t_[pos_ - 1].line;
      if_rest(*e);
      s.alt.push_back(std::move(e));
    } else if (at_stmt({"else"})) {
      pos_ += 2;
      expect(Tok::CloseStmt, "'%}'");
      s.alt = block_until({"endif"}, "if");
    }
  }

  // A for or set target: a name, name.attr (set only), or a tuple of names.
  ExprPtr target_list(bool allow_attr = false) {
    ExprPtr first = target(allow_attr);
    if (!at(Tok::Punct, ",")) return first;
    ExprPtr tuple = make(E::Tuple);
    tuple->a.push_back(std::move(first));
    while (at(Tok::Punct, ",")) {
      ++pos_;
      tuple->a.push_back(target(false));
    }
    return tuple;
  }
  ExprPtr target(bool allow_attr) {
    ExprPtr e = make(E::Name);
    e->name = expect(Tok::Name, "a variable name").text;
    if (allow_attr && at(Tok::Punct, ".")) {
      ++pos_;
      ExprPtr attr = make(E::Attr);
      attr->name = expect(Tok::Name, "an attribute name").text;
      attr->a.push_back(std::move(e));
      return attr;
    }
    return e;
  }

  ExprPtr expression_tuple() {
    ExprPtr first = expression();
    if (!at(Tok::Punct, ",")) return first;
    ExprPtr tuple = make(E::Tuple);
    tuple->a.push_back(std::move(first));
    while (at(Tok::Punct, ",")) {
      ++pos_;
      tuple->a.push_back(expression());
    }
    return tuple;
  }

  ExprPtr expression() {
    Deeper d(*this);
    ExprPtr a = logical_or();
    if (!at_name("if")) return a;
    ++pos_;
    ExprPtr cond = logical_or();
    if (at_name("else")) {
      ++pos_;
      ExprPtr t = make(E::Ternary);
      t->a.push_back(std::move(cond));
      t->a.push_back(std::move(a));
      t->a.push_back(expression());
      return t;
    }
    ExprPtr s = make(E::Select);  // `a if cond`: undefined when cond is false
    s->a.push_back(std::move(cond));
    s->a.push_back(std::move(a));
    return s;
  }
  ExprPtr binary(std::string op, ExprPtr l, ExprPtr r) {
    ExprPtr e = make(E::Binary);
    e->name = op;
    e->a.push_back(std::move(l));
    e->a.push_back(std::move(r));
    return e;
  }
  ExprPtr logical_or() {
    ExprPtr l = logical_and();
    while (at_name("or")) {
      ++pos_;
      l = binary("or", std::move(l), logical_and());
    }
    return l;
  }
  ExprPtr logical_and() {
    ExprPtr l = logical_not();
    while (at_name("and")) {
      ++pos_;
      l = binary("and", std::move(l), logical_not());
    }
    return l;
  }
  ExprPtr logical_not() {
    if (at_name("not")) {
      Deeper d(*this);
      ++pos_;
      ExprPtr e = make(E::Unary);
      e->name = "not";
      e->a.push_back(logical_not());
      return e;
    }
    return comparison();
  }
  ExprPtr comparison() {
    ExprPtr l = additive();
    for (;;) {
      std::string op;
      if (at_name("not") && at_name("in", 1)) {
        pos_ += 2;
        op = "not in";
      } else if (at_name("in")) {
        ++pos_;
        op = "in";
      } else if (at(Tok::Punct) && (t_[pos_].text == "==" || t_[pos_].text == "!=" || t_[pos_].text == "<" ||
                                     t_[pos_].text == ">" || t_[pos_].text == "<=" || t_[pos_].text == ">=")) {
        op = t_[pos_++].text;
      } else {
        return l;
      }
      l = binary(op, std::move(l), additive());
    }
  }
  ExprPtr additive() {
    ExprPtr l = multiplicative();
    while (at(Tok::Punct, "+") || at(Tok::Punct, "-") || at(Tok::Punct, "~")) {
      const std::string op = t_[pos_++].text;
      l = binary(op, std::move(l), multiplicative());
    }
    return l;
  }
  ExprPtr multiplicative() {
    ExprPtr l = power();
    while (at(Tok::Punct, "*") || at(Tok::Punct, "/") || at(Tok::Punct, "//") || at(Tok::Punct, "%")) {
      const std::string op = t_[pos_++].text;
      l = binary(op, std::move(l), power());
    }
    return l;
  }
  ExprPtr power() {
    ExprPtr l = test();
    while (at(Tok::Punct, "**")) {
      ++pos_;
      l = binary("**", std::move(l), test());
    }
    return l;
  }
  ExprPtr test() {
    ExprPtr operand = filter();
    while (at_name("is")) {
      ++pos_;
      ExprPtr e = make(E::Test);
      if (at_name("not")) {
        ++pos_;
        e->negate = true;
      }
      if (at(Tok::Punct, "==") || at(Tok::Punct, "!=")) e->name = t_[pos_++].text;
      else e->name = expect(Tok::Name, "a test name after 'is'").text;
      if (!known_tests().count(e->name)) fail("the test '" + e->name + "' is not in Tessera's Jinja subset");
      e->a.push_back(std::move(operand));
      // A test's argument: `is divisibleby(3)`, `is equalto 3`, `is in list`.
      if (at(Tok::Punct, "(")) {
        args(*e);
      } else if (e->name != "defined" && e->name != "undefined" && e->name != "none" && pos_ < t_.size() &&
                 (at(Tok::Number) || at(Tok::String) || (at(Tok::Name) && !at_name("and") && !at_name("or") &&
                                                         !at_name("if") && !at_name("else") && !at_name("is")))) {
        e->a.push_back(primary());
      }
      operand = std::move(e);
    }
    return operand;
  }
  ExprPtr filter() {
    ExprPtr operand = unary();
    while (at(Tok::Punct, "|")) {
      ++pos_;
      ExprPtr e = make(E::Filter);
      e->name = expect(Tok::Name, "a filter name after '|'").text;
      if (!known_filters().count(e->name)) fail("the filter '" + e->name + "' is not in Tessera's Jinja subset");
      e->a.push_back(std::move(operand));
      if (at(Tok::Punct, "(")) args(*e);
      operand = std::move(e);
    }
    return operand;
  }
  ExprPtr unary() {
    if (at(Tok::Punct, "-") || at(Tok::Punct, "+")) {
      Deeper d(*this);
      ExprPtr e = make(E::Unary);
      e->name = t_[pos_++].text;
      e->a.push_back(unary());
      return e;
    }
    return postfix(primary());
  }
  // Call arguments into e->a (after what is already there); key=value as Kwarg.
  void args(Expr& e) {
    expect(Tok::Punct, "'('", "(");
    while (!at(Tok::Punct, ")")) {
      if (pos_ >= t_.size()) fail("a call's '(' is never closed");
      if (at(Tok::Name) && pos_ + 1 < t_.size() && t_[pos_ + 1].type == Tok::Punct && t_[pos_ + 1].text == "=") {
        ExprPtr k = make(E::Kwarg);
        k->name = t_[pos_].text;
        pos_ += 2;
        k->a.push_back(expression());
        e.a.push_back(std::move(k));
      } else {
        if (at(Tok::Punct, "*") || at(Tok::Punct, "**")) fail("argument unpacking (* and **) is not in Tessera's Jinja subset");
        e.a.push_back(expression());
      }
      if (!at(Tok::Punct, ")")) expect(Tok::Punct, "',' or ')'", ",");
    }
    ++pos_;
  }
  ExprPtr postfix(ExprPtr e) {
    for (;;) {
      if (at(Tok::Punct, ".")) {
        ++pos_;
        ExprPtr m = make(E::Attr);
        if (at(Tok::Number)) m->name = t_[pos_++].text;
        else m->name = expect(Tok::Name, "an attribute name after '.'").text;
        m->a.push_back(std::move(e));
        e = std::move(m);
      } else if (at(Tok::Punct, "[")) {
        ++pos_;
        std::vector<ExprPtr> parts;
        bool slice = false;
        while (!at(Tok::Punct, "]")) {
          if (pos_ >= t_.size()) fail("'[' is never closed");
          if (at(Tok::Punct, ":")) {
            parts.push_back(nullptr);
            ++pos_;
            slice = true;
          } else {
            parts.push_back(expression());
            if (at(Tok::Punct, ":")) {
              ++pos_;
              slice = true;
            }
          }
        }
        ++pos_;
        if (parts.empty()) fail("'[]' needs an index or a slice");
        ExprPtr m = make(slice ? E::Slice : E::Index);
        if (slice && parts.size() > 3) fail("a slice has at most start:stop:step");
        m->a.push_back(std::move(e));
        if (slice) {
          // HF's rule: each ':' ends a part; a part left empty is absent.
          parts.resize(3);
          for (auto& p : parts) m->a.push_back(std::move(p));
        } else {
          m->a.push_back(std::move(parts[0]));
        }
        e = std::move(m);
      } else if (at(Tok::Punct, "(")) {
        ExprPtr c = make(E::Call);
        if (e->kind == E::Attr) {
          if (!known_methods().count(e->name)) fail("the method '" + e->name + "()' is not in Tessera's Jinja subset");
        } else if (e->kind == E::Name) {
          calls.emplace_back(e->name, e->line);
        }
        c->a.push_back(std::move(e));
        args(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }
  ExprPtr primary() {
    Deeper d(*this);
    if (pos_ >= t_.size()) fail("the template ends inside an expression");
    const Token& t = t_[pos_++];
    switch (t.type) {
      case Tok::Number: {
        ExprPtr e = make(E::Literal);
        if (t.text.find('.') != std::string::npos) {
          // Digits and one point: strtod reads any length (overflow gives infinity, never an exception).
          e->literal = Value::number(std::strtod(t.text.c_str(), nullptr));
        } else {
          int64_t v = 0;
          auto r = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
          if (r.ec != std::errc()) fail("the integer " + t.text + " is too large");
          e->literal = Value::integer(v);
        }
        return e;
      }
      case Tok::String: {
        ExprPtr e = make(E::Literal);
        std::string s = t.text;
        while (at(Tok::String)) s += t_[pos_++].text;  // adjacent strings join
        e->literal = Value::string(std::move(s));
        return e;
      }
      case Tok::Name: {
        ExprPtr e = make(E::Name);
        e->name = t.text;
        return e;
      }
      case Tok::Punct:
        if (t.text == "(") {
          ExprPtr e = expression_tuple();
          expect(Tok::Punct, "')'", ")");
          return e;
        }
        if (t.text == "[") {
          ExprPtr e = make(E::List);
          while (!at(Tok::Punct, "]")) {
            if (pos_ >= t_.size()) fail("'[' is never closed");
            e->a.push_back(expression());
            if (!at(Tok::Punct, "]")) expect(Tok::Punct, "',' or ']'", ",");
          }
          ++pos_;
          return e;
        }
        if (t.text == "{") {
          ExprPtr e = make(E::Dict);
          while (!at(Tok::Punct, "}")) {
            if (pos_ >= t_.size()) fail("'{' is never closed");
            e->a.push_back(expression());
            expect(Tok::Punct, "':'", ":");
            e->a.push_back(expression());
            if (!at(Tok::Punct, "}")) expect(Tok::Punct, "',' or '}'", ",");
          }
          ++pos_;
          return e;
        }
        break;
      default: break;
    }
    --pos_;
    fail("unexpected '" + describe(t) + "' in an expression");
  }

  std::vector<Token> t_;
  const std::string& what_;
  size_t pos_ = 0;
  int depth_ = 0, max_depth_;
};

// ---- evaluation -------------------------------------------------------------

struct Callable {
  std::string name;
  const Stmt* macro = nullptr;  // null: a builtin, by name
};

struct Scope {
  Scope* parent = nullptr;
  std::vector<std::pair<std::string, Value>> vars;
  Value* find(const std::string& n) {
    for (Scope* s = this; s; s = s->parent)
      for (auto& [k, v] : s->vars)
        if (k == n) return &v;
    return nullptr;
  }
  void set(const std::string& n, Value v) {
    for (auto& [k, old] : vars)
      if (k == n) {
        old = std::move(v);
        return;
      }
    vars.emplace_back(n, std::move(v));
  }
};

struct LoopControl {
  bool brk;
};

class Renderer {
 public:
  Renderer(const ChatTemplateLimits& limits, const std::string& what) : lim_(limits), what_(what) {}

  void render(const Body& body, Scope& scope, std::string& out) {
    Deeper d(*this, 0);
    for (const auto& s : body) run(*s, scope, out);
  }

 private:
  [[noreturn]] void fail(int line, const std::string& msg) const { TS_ERROR(what_, ": line ", line, ": ", msg); }
  void step(int line) {
    if (++steps_ > lim_.max_steps)
      fail(line, "the template ran more than " + std::to_string(lim_.max_steps) + " steps (a limit of the sandbox)");
  }
  struct Deeper {
    Renderer& r;
    Deeper(Renderer& rr, int line) : r(rr) {
      if (++r.depth_ > r.lim_.max_depth)
        r.fail(line, "the template nests deeper than " + std::to_string(r.lim_.max_depth) + " levels when it runs");
    }
    ~Deeper() { --r.depth_; }
  };
  void emit(std::string& out, std::string_view s, int line) {
    out += s;
    if (static_cast<int64_t>(out.size()) > lim_.max_output)
      fail(line, "the output passed " + std::to_string(lim_.max_output) + " bytes (a limit of the sandbox)");
  }

  void run(const Stmt& s, Scope& scope, std::string& out) {
    step(s.line);
    switch (s.kind) {
      case S::Text: emit(out, s.text, s.line); return;
      case S::Output: {
        const Value v = eval(*s.value, scope);
        if (v.kind != Kind::None && v.kind != Kind::Undefined) emit(out, to_text(v), s.line);
        return;
      }
      case S::If: {
        Deeper d(*this, s.line);
        const Body& b = truthy(eval(*s.value, scope)) ? s.body : s.alt;
        for (const auto& x : b) run(*x, scope, out);
        return;
      }
      case S::For: run_for(s, scope, out); return;
      case S::Set: assign(*s.target, eval(*s.value, scope), scope, s.line); return;
      case S::SetBlock: {
        std::string inner;
        {
          Deeper d(*this, s.line);
          for (const auto& x : s.body) run(*x, scope, inner);
        }
        assign(*s.target, Value::string(std::move(inner)), scope, s.line);
        return;
      }
      case S::Macro: {
        Value f = Value::with(Kind::Function);
        f.fn = std::make_shared<Callable>(Callable{s.text, &s});
        scope.set(s.text, std::move(f));
        return;
      }
      case S::Break: throw LoopControl{true};
      case S::Continue: throw LoopControl{false};
    }
  }

  void bind(const Expr& target, const Value& v, Scope& scope, int line) {
    if (target.kind == E::Name) {
      scope.set(target.name, v);
      return;
    }
    if (v.kind != Kind::Array) fail(line, std::string("cannot unpack a ") + kind_name(v.kind) + " into " +
                                              std::to_string(target.a.size()) + " names");
    if (v.a->size() != target.a.size())
      fail(line, "too " + std::string(v.a->size() < target.a.size() ? "few" : "many") + " items to unpack (" +
                     std::to_string(v.a->size()) + " into " + std::to_string(target.a.size()) + ")");
    for (size_t k = 0; k < target.a.size(); ++k) scope.set(target.a[k]->name, (*v.a)[k]);
  }

  void assign(const Expr& target, Value v, Scope& scope, int line) {
    if (target.kind == E::Attr) {
      Value* ns = scope.find(target.a[0]->name);
      if (!ns || ns->kind != Kind::Namespace)
        fail(line, "'" + target.a[0]->name + "." + target.name + "' can be set only on a namespace()");
      ns->o->set(target.name, std::move(v));
      return;
    }
    bind(target, v, scope, line);
  }

  void run_for(const Stmt& s, Scope& scope, std::string& out) {
    Deeper d(*this, s.line);
    Scope inner;
    inner.parent = &scope;
    Value it = eval(*s.value, inner);
    Array items;
    if (it.kind == Kind::Array) items = *it.a;
    else if (it.kind == Kind::Object)
      for (const auto& [k, v] : it.o->items) items.push_back(Value::string(k));
    else if (it.kind == Kind::String)
      for (uint32_t c : utf8_code_points(it.s)) {
        std::string ch;
        append_utf8(c, ch);
        items.push_back(Value::string(ch));
      }
    else fail(s.line, std::string("a for loop needs a list or a dict, not a ") + kind_name(it.kind));
    if (s.cond) {
      Array kept;
      for (const Value& v : items) {
        step(s.line);
        Scope test;
        test.parent = &inner;
        bind(*s.target, v, test, s.line);
        if (truthy(eval(*s.cond, test))) kept.push_back(v);
      }
      items = std::move(kept);
    }
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t k = 0; k < n; ++k) {
      step(s.line);
      Value loop = Value::object();
      loop.o->set("index", Value::integer(k + 1));
      loop.o->set("index0", Value::integer(k));
      loop.o->set("revindex", Value::integer(n - k));
      loop.o->set("revindex0", Value::integer(n - k - 1));
      loop.o->set("first", Value::boolean(k == 0));
      loop.o->set("last", Value::boolean(k == n - 1));
      loop.o->set("length", Value::integer(n));
      loop.o->set("previtem", k > 0 ? items[k - 1] : Value());
      loop.o->set("nextitem", k < n - 1 ? items[k + 1] : Value());
      inner.set("loop", std::move(loop));
      bind(*s.target, items[k], inner, s.line);
      try {
        for (const auto& x : s.body) run(*x, inner, out);
      } catch (const LoopControl& c) {
        if (c.brk) break;
      }
    }
    if (n == 0)
      for (const auto& x : s.alt) run(*x, inner, out);
  }

  // ---- expressions ----

  Value eval(const Expr& e, Scope& scope) {
    Deeper d(*this, e.line);
    switch (e.kind) {
      case E::Literal: return e.literal;
      case E::Name: return name(e.name, scope);
      case E::List:
      case E::Tuple: {
        Value v = Value::array();
        for (const auto& x : e.a) v.a->push_back(eval(*x, scope));
        return v;
      }
      case E::Dict: {
        Value v = Value::object();
        for (size_t k = 0; k + 1 < e.a.size(); k += 2) {
          const Value key = eval(*e.a[k], scope);
          if (key.kind != Kind::String && key.kind != Kind::Int) fail(e.line, "a dict key must be a string");
          v.o->set(to_text(key), eval(*e.a[k + 1], scope));
        }
        return v;
      }
      case E::Unary: {
        const Value v = eval(*e.a[0], scope);
        if (e.name == "not") return Value::boolean(!truthy(v));
        if (v.kind == Kind::Int || v.kind == Kind::Bool)
          return Value::integer((e.name == "-" ? -1 : 1) * (v.kind == Kind::Bool ? v.b : v.i));
        if (v.kind == Kind::Float) return Value::number(e.name == "-" ? -v.f : v.f);
        fail(e.line, "unary " + e.name + " needs a number, not a " + kind_name(v.kind));
      }
      case E::Binary: return binary(e, scope);
      case E::Ternary: return truthy(eval(*e.a[0], scope)) ? eval(*e.a[1], scope) : eval(*e.a[2], scope);
      case E::Select: return truthy(eval(*e.a[0], scope)) ? eval(*e.a[1], scope) : Value();
      case E::Attr: return member(eval(*e.a[0], scope), Value::string(e.name), e.line, true);
      case E::Index: return member(eval(*e.a[0], scope), eval(*e.a[1], scope), e.line, false);
      case E::Slice: return slice(e, scope);
      case E::Call: return call(e, scope);
      case E::Filter: return filter(e, scope);
      case E::Test: {
        const bool r = test(e, scope);
        return Value::boolean(e.negate ? !r : r);
      }
      case E::Kwarg: fail(e.line, "a keyword argument outside a call");
    }
    return Value();
  }

  Value name(const std::string& n, Scope& scope) {
    if (Value* v = scope.find(n)) return *v;
    if (n == "true" || n == "True") return Value::boolean(true);
    if (n == "false" || n == "False") return Value::boolean(false);
    if (n == "none" || n == "None") return Value::none();
    if (known_functions().count(n)) {
      Value f = Value::with(Kind::Function);
      f.fn = std::make_shared<Callable>(Callable{n, nullptr});
      return f;
    }
    return Value();
  }

  Value binary(const Expr& e, Scope& scope) {
    const std::string& op = e.name;
    Value l = eval(*e.a[0], scope);
    if (op == "and") return truthy(l) ? eval(*e.a[1], scope) : l;
    if (op == "or") return truthy(l) ? l : eval(*e.a[1], scope);
    const Value r = eval(*e.a[1], scope);
    if (op == "==") return Value::boolean(same(l, r));
    if (op == "!=") return Value::boolean(!same(l, r));
    if (l.is_number() && r.is_number() && op != "~") {
      const bool fl = l.kind == Kind::Float || r.kind == Kind::Float;
      if (op == "+" || op == "-" || op == "*") {
        if (!fl) {
          int64_t out = 0;
          const bool overflow = op == "+" ? __builtin_add_overflow(l.i, r.i, &out)
                                : op == "-" ? __builtin_sub_overflow(l.i, r.i, &out)
                                            : __builtin_mul_overflow(l.i, r.i, &out);
          if (overflow) fail(e.line, "integer overflow in " + op);
          return Value::integer(out);
        }
        const double a = l.num(), b = r.num();
        return Value::number(op == "+" ? a + b : op == "-" ? a - b : a * b);
      }
      if (op == "/") return Value::number(l.num() / r.num());
      if (op == "//" || op == "%") {
        if (!fl) {
          if (r.i == 0) fail(e.line, "division by zero");
          if (op == "//") return Value::integer(static_cast<int64_t>(std::floor(static_cast<double>(l.i) / r.i)));
          return Value::integer(l.i % r.i);  // JavaScript's %: the sign of the dividend
        }
        return Value::number(op == "//" ? std::floor(l.num() / r.num()) : std::fmod(l.num(), r.num()));
      }
      if (op == "<") return Value::boolean(l.num() < r.num());
      if (op == ">") return Value::boolean(l.num() > r.num());
      if (op == "<=") return Value::boolean(l.num() <= r.num());
      if (op == ">=") return Value::boolean(l.num() >= r.num());
      if (op == "**") {
        const double p = std::pow(l.num(), r.num());
        if (!std::isfinite(p)) fail(e.line, "** gives a number that is not finite");
        if (fl || r.num() < 0) return Value::number(p);
        return Value::integer(static_cast<int64_t>(p));
      }
    }
    if (l.kind == Kind::Undefined || r.kind == Kind::Undefined) {
      if (r.kind == Kind::Undefined && (op == "in" || op == "not in")) return Value::boolean(op == "not in");
      if (op == "~" && l.kind != Kind::None && r.kind != Kind::None) return Value::string(to_text(l) + to_text(r));
      fail(e.line, "'" + op + "' on an undefined value (a variable or key the context does not have)");
    }
    if (l.kind == Kind::None || r.kind == Kind::None) fail(e.line, "'" + op + "' on none");
    if (op == "~") return Value::string(to_text(l) + to_text(r));
    if (l.kind == Kind::Array && r.kind == Kind::Array && op == "+") {
      Value v = Value::array(*l.a);
      v.a->insert(v.a->end(), r.a->begin(), r.a->end());
      return v;
    }
    if (r.kind == Kind::Array && (op == "in" || op == "not in")) {
      bool found = false;
      for (const Value& x : *r.a) found = found || strictly_same(x, l);
      return Value::boolean(op == "in" ? found : !found);
    }
    if ((l.kind == Kind::String || r.kind == Kind::String) && op == "+") {
      if (l.kind == Kind::String && r.kind == Kind::String) return Value::string(l.s + r.s);
      return Value::string(to_text(l) + to_text(r));
    }
    if (l.kind == Kind::String && r.kind == Kind::String && (op == "in" || op == "not in")) {
      const bool found = r.s.find(l.s) != std::string::npos;
      return Value::boolean(op == "in" ? found : !found);
    }
    if (l.kind == Kind::String && r.attributes() && (op == "in" || op == "not in")) {
      const bool found = r.o->find(l.s) != nullptr;
      return Value::boolean(op == "in" ? found : !found);
    }
    fail(e.line, "'" + op + "' between a " + kind_name(l.kind) + " and a " + kind_name(r.kind) + " is not defined");
  }

  Value member(const Value& obj, const Value& key, int line, bool dot) {
    if (obj.attributes()) {
      if (key.kind != Kind::String) fail(line, "a dict is indexed by strings, not by a " + std::string(kind_name(key.kind)));
      const Value* v = obj.o->find(key.s);
      return v ? *v : Value();
    }
    if (obj.kind == Kind::Array || obj.kind == Kind::String) {
      if (key.kind == Kind::Int || (dot && key.kind == Kind::String && !key.s.empty() && std::isdigit(static_cast<unsigned char>(key.s[0])))) {
        int64_t k0 = key.i;
        if (key.kind != Kind::Int) {  // x.0: the lexer's digits, maybe too many for 64 bits
          auto r = std::from_chars(key.s.data(), key.s.data() + key.s.size(), k0);
          if (r.ec != std::errc()) return Value();
        }
        if (obj.kind == Kind::Array) {
          const int64_t n = static_cast<int64_t>(obj.a->size());
          const int64_t k = k0 < 0 ? n + k0 : k0;
          return k >= 0 && k < n ? (*obj.a)[k] : Value();
        }
        const std::vector<uint32_t> c = utf8_code_points(obj.s);
        const int64_t n = static_cast<int64_t>(c.size());
        const int64_t k = k0 < 0 ? n + k0 : k0;
        return k >= 0 && k < n ? Value::string(encode(c, k, k + 1)) : Value();
      }
      if (key.kind == Kind::String && key.s == "length")
        return Value::integer(obj.kind == Kind::Array ? static_cast<int64_t>(obj.a->size())
                                                      : static_cast<int64_t>(utf8_code_points(obj.s).size()));
      if (key.kind == Kind::String) return Value();  // a method's name: only callable (see call)
      fail(line, std::string("a ") + kind_name(obj.kind) + " is indexed by integers");
    }
    return Value();  // as @huggingface/jinja: an attribute of undefined or none is undefined
  }

  Value slice(const Expr& e, Scope& scope) {
    const Value obj = eval(*e.a[0], scope);
    auto part = [&](int k) -> std::optional<int64_t> {
      if (!e.a[k]) return std::nullopt;
      const Value v = eval(*e.a[k], scope);
      if (v.kind == Kind::Undefined) return std::nullopt;
      if (v.kind != Kind::Int) fail(e.line, "a slice's bounds must be integers");
      return v.i;
    };
    const auto start = part(1), stop = part(2), stp = part(3);
    const int64_t st = stp.value_or(1);
    if (st == 0) fail(e.line, "a slice's step cannot be 0");
    auto take = [&](int64_t n, const std::function<void(int64_t)>& add) {
      auto norm = [&](std::optional<int64_t> v, int64_t dflt) {
        if (!v) return dflt;
        int64_t x = *v < 0 ? n + *v : *v;
        return st > 0 ? std::clamp<int64_t>(x, 0, n) : std::clamp<int64_t>(x, -1, n - 1);
      };
      const int64_t b = norm(start, st > 0 ? 0 : n - 1), en = norm(stop, st > 0 ? n : -1);
      if (st > 0)
        for (int64_t k = b; k < en; k += st) add(k);
      else
        for (int64_t k = b; k > en; k += st) add(k);
    };
    if (obj.kind == Kind::Array) {
      Value v = Value::array();
      take(static_cast<int64_t>(obj.a->size()), [&](int64_t k) { v.a->push_back((*obj.a)[k]); });
      return v;
    }
    if (obj.kind == Kind::String) {
      const std::vector<uint32_t> c = utf8_code_points(obj.s);
      std::string s;
      take(static_cast<int64_t>(c.size()), [&](int64_t k) { append_utf8(c[k], s); });
      return Value::string(s);
    }
    fail(e.line, std::string("only lists and strings can be sliced, not a ") + kind_name(obj.kind));
  }

  struct Args {
    std::vector<Value> pos;
    std::vector<std::pair<std::string, Value>> kw;
    const Value* get(size_t k, const char* key) const {
      if (k < pos.size()) return &pos[k];
      for (const auto& [n, v] : kw)
        if (n == key) return &v;
      return nullptr;
    }
  };
  Args arguments(const Expr& e, size_t from, Scope& scope) {
    Args a;
    for (size_t k = from; k < e.a.size(); ++k) {
      if (e.a[k]->kind == E::Kwarg) a.kw.emplace_back(e.a[k]->name, eval(*e.a[k]->a[0], scope));
      else a.pos.push_back(eval(*e.a[k], scope));
    }
    return a;
  }

  Value call(const Expr& e, Scope& scope) {
    step(e.line);
    const Expr& callee = *e.a[0];
    if (callee.kind == E::Attr) {
      const Value obj = eval(*callee.a[0], scope);
      // A dict's own key that holds a function (a namespace's macro) wins over a method.
      if (obj.attributes())
        if (const Value* f = obj.o->find(callee.name); f && f->kind == Kind::Function)
          return invoke(*f, arguments(e, 1, scope), e.line, scope);
      return method(obj, callee.name, arguments(e, 1, scope), e.line);
    }
    const Value f = eval(callee, scope);
    if (f.kind != Kind::Function)
      fail(e.line, "'" + (callee.kind == E::Name ? callee.name : std::string("this")) + "' is not a function (it is " +
                       (f.kind == Kind::Undefined ? "undefined" : std::string("a ") + kind_name(f.kind)) + ")");
    return invoke(f, arguments(e, 1, scope), e.line, scope);
  }

  Value invoke(const Value& f, const Args& a, int line, Scope& scope) {
    const Callable& c = *f.fn;
    if (c.macro) {
      Deeper d(*this, line);
      Scope inner;
      inner.parent = &root(scope);
      const auto& params = c.macro->params;
      if (a.pos.size() > params.size())
        fail(line, "the macro '" + c.name + "' takes " + std::to_string(params.size()) + " arguments, not " +
                       std::to_string(a.pos.size()));
      for (size_t k = 0; k < params.size(); ++k) {
        const std::string& pname = params[k]->name;
        if (k < a.pos.size()) {
          inner.set(pname, a.pos[k]);
          continue;
        }
        const Value* kv = nullptr;
        for (const auto& [n, v] : a.kw)
          if (n == pname) kv = &v;
        if (kv) inner.set(pname, *kv);
        else if (params[k]->kind == E::Kwarg) inner.set(pname, eval(*params[k]->a[0], inner));
        else inner.set(pname, Value());
      }
      std::string out;
      for (const auto& s : c.macro->body) run(*s, inner, out);
      return Value::string(std::move(out));
    }
    if (c.name == "raise_exception") {
      TS_ERROR(what_, ": line ", line, ": the template raised: ", a.pos.empty() ? std::string() : to_text(a.pos[0]));
    }
    if (c.name == "namespace" || c.name == "dict") {
      Value ns = Value::object(c.name == "namespace" ? Kind::Namespace : Kind::Object);
      for (const Value& p : a.pos) {
        if (!p.attributes()) fail(line, c.name + "() takes a dict or keyword arguments");
        for (const auto& [k, v] : p.o->items) ns.o->set(k, v);
      }
      for (const auto& [k, v] : a.kw) ns.o->set(k, v);
      return ns;
    }
    if (c.name == "range") {
      for (const Value& p : a.pos)
        if (p.kind != Kind::Int) fail(line, "range() takes integers");
      if (a.pos.empty() || a.pos.size() > 3) fail(line, "range() takes 1 to 3 integers");
      int64_t start = 0, stop = a.pos[0].i, stp = 1;
      if (a.pos.size() >= 2) start = a.pos[0].i, stop = a.pos[1].i;
      if (a.pos.size() == 3) stp = a.pos[2].i;
      if (stp == 0) fail(line, "range() step must not be zero");
      Value v = Value::array();
      for (int64_t k = start; stp > 0 ? k < stop : k > stop; k += stp) {
        step(line);
        v.a->push_back(Value::integer(k));
      }
      return v;
    }
    if (c.name == "strftime_now") {
      if (a.pos.empty() || a.pos[0].kind != Kind::String) fail(line, "strftime_now() takes a format string");
      const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
      std::tm tm{};
      localtime_r(&now, &tm);
      char buf[256];
      const size_t n = std::strftime(buf, sizeof buf, a.pos[0].s.c_str(), &tm);
      return Value::string(std::string(buf, n));
    }
    fail(line, "'" + c.name + "' is not a function of Tessera's Jinja subset");
  }

  static Scope& root(Scope& s) {
    Scope* r = &s;
    while (r->parent) r = r->parent;
    return *r;
  }

  Value method(const Value& obj, const std::string& m, const Args& a, int line) {
    auto str_arg = [&](size_t k, const char* key) -> const std::string* {
      const Value* v = a.get(k, key);
      if (!v) return nullptr;
      if (v->kind != Kind::String) fail(line, "'" + m + "()' takes a string argument, not a " + kind_name(v->kind));
      return &v->s;
    };
    if (obj.kind == Kind::String) {
      const std::string& s = obj.s;
      if (m == "upper") return Value::string(map_case(s, 1));
      if (m == "lower") return Value::string(map_case(s, 0));
      if (m == "title") return Value::string(title(s));
      if (m == "capitalize") return Value::string(capitalize(s));
      if (m == "strip" || m == "lstrip" || m == "rstrip") {
        const std::string* chars = str_arg(0, "chars");
        const bool left = m != "rstrip", right = m != "lstrip";
        if (!chars) return Value::string(trim(s, left, right));
        const std::vector<uint32_t> c = utf8_code_points(s), set = utf8_code_points(*chars);
        auto in = [&](uint32_t x) { return std::find(set.begin(), set.end(), x) != set.end(); };
        size_t b = 0, en = c.size();
        if (left)
          while (b < en && in(c[b])) ++b;
        if (right)
          while (en > b && in(c[en - 1])) --en;
        return Value::string(encode(c, b, en));
      }
      if (m == "startswith" || m == "endswith") {
        const Value* p = a.get(0, "prefix");
        if (!p) fail(line, m + "() needs an argument");
        auto test1 = [&](const std::string& x) {
          return m == "startswith" ? s.compare(0, x.size(), x) == 0
                                   : s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
        };
        if (p->kind == Kind::String) return Value::boolean(test1(p->s));
        if (p->kind == Kind::Array) {
          for (const Value& x : *p->a) {
            if (x.kind != Kind::String) fail(line, m + "() takes strings");
            if (test1(x.s)) return Value::boolean(true);
          }
          return Value::boolean(false);
        }
        fail(line, m + "() takes a string or a tuple of strings");
      }
      if (m == "split") {
        const Value* sep = a.get(0, "sep");
        const Value* maxv = a.get(1, "maxsplit");
        const int64_t maxsplit = maxv && maxv->kind == Kind::Int ? maxv->i : -1;
        Value out = Value::array();
        if (!sep || sep->kind == Kind::None) {
          const std::vector<uint32_t> c = utf8_code_points(s);
          size_t k = 0;
          while (k < c.size() && js_space(c[k])) ++k;
          while (k < c.size()) {
            if (maxsplit >= 0 && static_cast<int64_t>(out.a->size()) >= maxsplit) {
              out.a->push_back(Value::string(encode(c, k, c.size())));
              break;
            }
            size_t e = k;
            while (e < c.size() && !js_space(c[e])) ++e;
            out.a->push_back(Value::string(encode(c, k, e)));
            k = e;
            while (k < c.size() && js_space(c[k])) ++k;
          }
          return out;
        }
        if (sep->kind != Kind::String) fail(line, "split() takes a string separator");
        if (sep->s.empty()) fail(line, "split(): empty separator");
        size_t pos = 0;
        for (size_t f; (maxsplit < 0 || static_cast<int64_t>(out.a->size()) < maxsplit) &&
                       (f = s.find(sep->s, pos)) != std::string::npos;
             pos = f + sep->s.size())
          out.a->push_back(Value::string(s.substr(pos, f - pos)));
        out.a->push_back(Value::string(s.substr(pos)));
        return out;
      }
      if (m == "replace") {
        const std::string* from = str_arg(0, "old");
        const std::string* to = str_arg(1, "new");
        if (!from || !to) fail(line, "replace() needs two strings");
        const Value* count = a.get(2, "count");
        std::string r = s;
        replace_all(r, *from, *to, count && count->kind == Kind::Int ? count->i : -1);
        return Value::string(r);
      }
      if (m == "count") {
        const std::string* x = str_arg(0, "sub");
        if (!x) fail(line, "count() needs a string");
        int64_t n = 0;
        if (x->empty()) return Value::integer(static_cast<int64_t>(utf8_code_points(s).size()) + 1);
        for (size_t p = s.find(*x); p != std::string::npos; p = s.find(*x, p + x->size())) ++n;
        return Value::integer(n);
      }
      if (m == "find") {
        const std::string* x = str_arg(0, "sub");
        if (!x) fail(line, "find() needs a string");
        const size_t p = s.find(*x);
        return Value::integer(p == std::string::npos ? -1 : static_cast<int64_t>(utf8_code_points(s.substr(0, p)).size()));
      }
      if (m == "join") {
        const Value* items = a.get(0, "iterable");
        if (!items || items->kind != Kind::Array) fail(line, "join() takes a list");
        std::string r;
        for (size_t k = 0; k < items->a->size(); ++k) r += (k ? s : "") + to_text((*items->a)[k]);
        return Value::string(r);
      }
    }
    if (obj.kind == Kind::Object) {
      if (m == "items" || m == "keys" || m == "values") {
        Value out = Value::array();
        for (const auto& [k, v] : obj.o->items) {
          if (m == "items") out.a->push_back(Value::array({Value::string(k), v}));
          else if (m == "keys") out.a->push_back(Value::string(k));
          else out.a->push_back(v);
        }
        return out;
      }
      if (m == "get") {
        const Value* key = a.get(0, "key");
        if (!key || key->kind != Kind::String) fail(line, "get() takes a string key");
        const Value* v = obj.o->find(key->s);
        if (v) return *v;
        const Value* dflt = a.get(1, "default");
        return dflt ? *dflt : Value::none();
      }
    }
    if (obj.kind == Kind::Array && m == "append") {
      if (a.pos.size() != 1) fail(line, "append() takes one value");
      obj.a->push_back(a.pos[0]);
      return Value::none();
    }
    fail(line, "a " + std::string(kind_name(obj.kind)) + " has no method '" + m + "()'");
  }

  bool test(const Expr& e, Scope& scope) {
    const Value v = eval(*e.a[0], scope);
    const std::string& t = e.name;
    const Value arg = e.a.size() > 1 ? eval(*e.a[1], scope) : Value();
    if (t == "defined") return v.kind != Kind::Undefined;
    if (t == "undefined") return v.kind == Kind::Undefined;
    if (t == "none") return v.kind == Kind::None;
    if (t == "boolean") return v.kind == Kind::Bool;
    if (t == "true") return v.kind == Kind::Bool && v.b;
    if (t == "false") return v.kind == Kind::Bool && !v.b;
    if (t == "string") return v.kind == Kind::String;
    if (t == "number") return v.is_number();
    if (t == "integer") return v.kind == Kind::Int;
    if (t == "float") return v.kind == Kind::Float;
    if (t == "iterable") return v.kind == Kind::Array || v.kind == Kind::String;
    if (t == "mapping") return v.kind == Kind::Object;
    if (t == "sequence") return v.kind == Kind::Array || v.kind == Kind::Object || v.kind == Kind::String;
    if (t == "callable") return v.kind == Kind::Function;
    if (t == "lower") return v.kind == Kind::String && v.s == map_case(v.s, 0);
    if (t == "upper") return v.kind == Kind::String && v.s == map_case(v.s, 1);
    if (t == "odd" || t == "even") {
      if (v.kind != Kind::Int) fail(e.line, "'" + t + "' tests an integer, not a " + kind_name(v.kind));
      return (v.i % 2 != 0) == (t == "odd");
    }
    if (t == "divisibleby") {
      if (v.kind != Kind::Int || arg.kind != Kind::Int || arg.i == 0) fail(e.line, "'divisibleby' tests integers");
      return v.i % arg.i == 0;
    }
    if (t == "equalto" || t == "eq" || t == "==") return strictly_same(v, arg);
    if (t == "ne" || t == "!=") return !strictly_same(v, arg);
    if (t == "in") {
      if (arg.kind == Kind::Array) {
        for (const Value& x : *arg.a)
          if (strictly_same(x, v)) return true;
        return false;
      }
      if (arg.kind == Kind::String && v.kind == Kind::String) return arg.s.find(v.s) != std::string::npos;
      if (arg.attributes() && v.kind == Kind::String) return arg.o->find(v.s) != nullptr;
      return false;
    }
    if (v.is_number() && arg.is_number()) {
      if (t == "gt" || t == "greaterthan") return v.num() > arg.num();
      if (t == "ge") return v.num() >= arg.num();
      if (t == "lt" || t == "lessthan") return v.num() < arg.num();
      if (t == "le") return v.num() <= arg.num();
    }
    fail(e.line, "the test '" + t + "' does not apply to a " + kind_name(v.kind));
  }

  // A filter's test by name, for select/reject/selectattr/rejectattr.
  bool named_test(const std::string& t, const Value& v, const Value* arg, int line, Scope& scope) {
    if (!known_tests().count(t)) fail(line, "unknown test '" + t + "'");
    Expr e;
    e.kind = E::Test;
    e.name = t;
    e.line = line;
    auto lit = [](const Value& x) {
      auto p = std::make_unique<Expr>();
      p->kind = E::Literal;
      p->literal = x;
      return p;
    };
    e.a.push_back(lit(v));
    if (arg) e.a.push_back(lit(*arg));
    return test(e, scope);
  }

  Value filter(const Expr& e, Scope& scope) {
    step(e.line);
    const Value v = eval(*e.a[0], scope);
    const Args a = arguments(e, 1, scope);
    const std::string& f = e.name;
    auto bad = [&]() -> Value {
      fail(e.line, "the filter '" + f + "' does not apply to a " + kind_name(v.kind));
    };
    if (f == "safe") return v;
    if (f == "tojson") {
      JsonStyle st;
      if (const Value* ind = a.get(0, "indent"); ind && ind->kind != Kind::None) {
        if (ind->kind != Kind::Int) fail(e.line, "tojson's indent must be an integer");
        st.indent = static_cast<int>(std::clamp<int64_t>(ind->i, 0, 64));
        if (st.indent > 0) st.item_sep = ",";
      }
      if (const Value* x = a.get(99, "ensure_ascii")) st.ensure_ascii = truthy(*x);
      if (const Value* x = a.get(99, "sort_keys")) st.sort_keys = truthy(*x);
      if (const Value* x = a.get(99, "separators"); x && x->kind == Kind::Array) {
        if (x->a->size() != 2 || (*x->a)[0].kind != Kind::String || (*x->a)[1].kind != Kind::String)
          fail(e.line, "tojson's separators must be two strings");
        st.item_sep = (*x->a)[0].s;
        st.key_sep = (*x->a)[1].s;
      }
      std::string out;
      to_json(v, st, 0, out);
      return Value::string(out);
    }
    if (f == "default" || f == "d") {
      const Value* dflt = a.get(0, "default_value");
      const Value* boolean = a.get(1, "boolean");
      if (v.kind == Kind::Undefined || (boolean && truthy(*boolean) && !truthy(v)))
        return dflt ? *dflt : Value::string("");
      return v;
    }
    if (f == "string") return v.kind == Kind::String ? v : Value::string(to_text(v));
    if (f == "length" || f == "count") {
      if (v.kind == Kind::Array) return Value::integer(static_cast<int64_t>(v.a->size()));
      if (v.kind == Kind::String) return Value::integer(static_cast<int64_t>(utf8_code_points(v.s).size()));
      if (v.kind == Kind::Object) return Value::integer(static_cast<int64_t>(v.o->items.size()));
      return bad();
    }
    if (f == "int" || f == "float") {
      const Value* dflt = a.get(0, "default");
      if (v.kind == Kind::String) {
        const std::string t = trim(v.s, true, false);
        char* end = nullptr;
        if (f == "int") {
          const long long x = std::strtoll(t.c_str(), &end, 10);
          if (end == t.c_str()) return dflt ? *dflt : Value::integer(0);
          return Value::integer(x);
        }
        const double x = std::strtod(t.c_str(), &end);
        if (end == t.c_str()) return dflt ? *dflt : Value::number(0);
        return Value::number(x);
      }
      if (v.is_number()) return f == "int" ? Value::integer(static_cast<int64_t>(std::trunc(v.num()))) : Value::number(v.num());
      if (v.kind == Kind::Bool) return f == "int" ? Value::integer(v.b) : Value::number(v.b);
      return bad();
    }
    if (f == "bool") return Value::boolean(truthy(v));
    if (f == "abs") {
      if (v.kind == Kind::Int) return Value::integer(v.i < 0 ? -v.i : v.i);
      if (v.kind == Kind::Float) return Value::number(std::abs(v.f));
      return bad();
    }
    if (f == "round") {
      if (!v.is_number()) return bad();
      const Value* prec = a.get(0, "precision");
      const double p = std::pow(10.0, prec && prec->kind == Kind::Int ? static_cast<double>(prec->i) : 0.0);
      return Value::number(std::round(v.num() * p) / p);
    }
    if (v.kind == Kind::String) {
      if (f == "upper") return Value::string(map_case(v.s, 1));
      if (f == "lower") return Value::string(map_case(v.s, 0));
      if (f == "title") return Value::string(title(v.s));
      if (f == "capitalize") return Value::string(capitalize(v.s));
      if (f == "trim") return Value::string(trim(v.s, true, true));
      if (f == "list" || f == "join" || f == "first" || f == "last" || f == "reverse") {
        Value chars = Value::array();
        for (uint32_t c : utf8_code_points(v.s)) {
          std::string ch;
          append_utf8(c, ch);
          chars.a->push_back(Value::string(ch));
        }
        if (f == "list") return chars;
        if (f == "first") return chars.a->empty() ? Value() : chars.a->front();
        if (f == "last") return chars.a->empty() ? Value() : chars.a->back();
        if (f == "reverse") {
          std::string r;
          for (auto it = chars.a->rbegin(); it != chars.a->rend(); ++it) r += it->s;
          return Value::string(r);
        }
        const Value* d = a.get(0, "d");
        const std::string* sep = d && d->kind == Kind::String ? &d->s : nullptr;
        std::string r;
        for (size_t k = 0; k < chars.a->size(); ++k) r += (k && sep ? *sep : "") + (*chars.a)[k].s;
        return Value::string(r);
      }
      if (f == "indent") {
        const Value* w = a.get(0, "width");
        const Value* first = a.get(1, "first");
        const Value* blank = a.get(2, "blank");
        std::string pad = w && w->kind == Kind::String ? w->s
                          : std::string(static_cast<size_t>(std::clamp<int64_t>(w && w->kind == Kind::Int ? w->i : 4, 0, 1024)), ' ');
        std::string out;
        size_t start = 0;
        for (int k = 0;; ++k) {
          const size_t nl = v.s.find('\n', start);
          const std::string ln = v.s.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
          const bool skip = (k == 0 && !(first && truthy(*first))) || (ln.empty() && !(blank && truthy(*blank)));
          out += (skip ? "" : pad) + ln;
          if (nl == std::string::npos) break;
          out += '\n';
          start = nl + 1;
        }
        return Value::string(out);
      }
      if (f == "replace") return method(v, "replace", a, e.line);
      if (f == "wordcount") return Value::integer(static_cast<int64_t>(method(v, "split", {}, e.line).a->size()));
      if (f == "center") {
        const Value* w = a.get(0, "width");
        const int64_t width = w && w->kind == Kind::Int ? std::min<int64_t>(w->i, 1 << 20) : 80;
        const int64_t n = static_cast<int64_t>(utf8_code_points(v.s).size());
        if (n >= width) return v;
        const int64_t left = (width - n) / 2;
        return Value::string(std::string(left, ' ') + v.s + std::string(width - n - left, ' '));
      }
      return bad();
    }
    if (v.kind == Kind::Array) {
      const Array& items = *v.a;
      if (f == "list") return Value::array(items);
      if (f == "first") return items.empty() ? Value() : items.front();
      if (f == "last") return items.empty() ? Value() : items.back();
      if (f == "reverse") return Value::array(Array(items.rbegin(), items.rend()));
      if (f == "join") {
        const Value* sep = a.get(0, "d");
        if (sep && sep->kind != Kind::String) fail(e.line, "join's separator must be a string");
        const Value* attr = a.get(1, "attribute");
        std::string out;
        for (size_t k = 0; k < items.size(); ++k) {
          if (k && sep) out += sep->s;
          out += to_text(attr ? member(items[k], *attr, e.line, false) : items[k]);
        }
        return Value::string(out);
      }
      if (f == "unique") {
        Array out;
        for (const Value& x : items) {
          bool seen = false;
          for (const Value& y : out) seen = seen || strictly_same(x, y);
          if (!seen) out.push_back(x);
        }
        return Value::array(std::move(out));
      }
      if (f == "sort" || f == "min" || f == "max") {
        const Value* rev = a.get(0, "reverse");
        const Value* cs = a.get(1, "case_sensitive");
        const Value* attr = a.get(2, "attribute");
        if (f != "sort") {
          cs = a.get(0, "case_sensitive");
          attr = a.get(1, "attribute");
          rev = nullptr;
        }
        const bool case_sensitive = cs && truthy(*cs);
        auto key = [&](const Value& x) { return attr ? member(x, *attr, e.line, false) : x; };
        auto less = [&](const Value& x, const Value& y) {
          const Value kx = key(x), ky = key(y);
          if (kx.is_number() && ky.is_number()) return kx.num() < ky.num();
          if (kx.kind == Kind::String && ky.kind == Kind::String)
            return case_sensitive ? kx.s < ky.s : map_case(kx.s, 0) < map_case(ky.s, 0);
          if (kx.kind == Kind::Bool && ky.kind == Kind::Bool) return kx.b < ky.b;
          fail(e.line, std::string("cannot compare a ") + kind_name(kx.kind) + " with a " + kind_name(ky.kind));
        };
        Array out = items;
        std::stable_sort(out.begin(), out.end(), less);
        if (f == "min") return out.empty() ? Value() : out.front();
        if (f == "max") return out.empty() ? Value() : out.back();
        if (rev && truthy(*rev)) std::reverse(out.begin(), out.end());
        return Value::array(std::move(out));
      }
      if (f == "sum") {
        double s = 0;
        bool fl = false;
        int64_t si = 0;
        for (const Value& x : items) {
          if (!x.is_number()) fail(e.line, "sum of a list that holds a " + std::string(kind_name(x.kind)));
          fl = fl || x.kind == Kind::Float;
          s += x.num();
          si += x.kind == Kind::Int ? x.i : 0;
        }
        return fl ? Value::number(s) : Value::integer(si);
      }
      if (f == "selectattr" || f == "rejectattr") {
        if (a.pos.empty() || a.pos[0].kind != Kind::String) fail(e.line, f + " needs an attribute name");
        const bool select = f == "selectattr";
        Array out;
        for (const Value& x : items) {
          if (!x.attributes()) fail(e.line, "'" + f + "' applies to a list of dicts");
          const Value* at = x.o->find(a.pos[0].s);
          bool r;
          if (a.pos.size() >= 2) {
            if (a.pos[1].kind != Kind::String) fail(e.line, f + "'s test must be named by a string");
            // @huggingface/jinja skips a missing or falsy attribute before testing it.
            r = at && truthy(*at) ? named_test(a.pos[1].s, *at, a.pos.size() >= 3 ? &a.pos[2] : nullptr, e.line, scope)
                                  : false;
          } else {
            r = at && truthy(*at);
          }
          if (r == select) out.push_back(x);
        }
        return Value::array(std::move(out));
      }
      if (f == "select" || f == "reject") {
        const bool select = f == "select";
        Array out;
        for (const Value& x : items) {
          if (!a.pos.empty() && a.pos[0].kind != Kind::String) fail(e.line, f + "'s test must be named by a string");
          const bool r = a.pos.empty() ? truthy(x)
                                       : named_test(a.pos[0].s, x, a.pos.size() >= 2 ? &a.pos[1] : nullptr, e.line, scope);
          if (r == select) out.push_back(x);
        }
        return Value::array(std::move(out));
      }
      if (f == "map") {
        const Value* attr = a.get(99, "attribute");
        if (!attr) {
          if (a.pos.empty() || a.pos[0].kind != Kind::String) fail(e.line, "map needs attribute= or a filter name");
          Array out;
          for (const Value& x : items) {
            Expr call;
            call.kind = E::Filter;
            call.name = a.pos[0].s;
            call.line = e.line;
            if (!known_filters().count(call.name)) fail(e.line, "unknown filter '" + call.name + "' in map");
            auto lit = std::make_unique<Expr>();
            lit->kind = E::Literal;
            lit->literal = x;
            call.a.push_back(std::move(lit));
            out.push_back(filter(call, scope));
          }
          return Value::array(std::move(out));
        }
        const Value* dflt = a.get(99, "default");
        Array out;
        for (const Value& x : items) {
          if (!x.attributes()) fail(e.line, "map(attribute=...) applies to a list of dicts");
          Value r = member(x, *attr, e.line, false);
          out.push_back(r.kind == Kind::Undefined && dflt ? *dflt : r);
        }
        return Value::array(std::move(out));
      }
      return bad();
    }
    if (v.kind == Kind::Object) {
      if (f == "items" || f == "list") {
        Value out = Value::array();
        for (const auto& [k, x] : v.o->items)
          out.a->push_back(f == "items" ? Value::array({Value::string(k), x}) : Value::string(k));
        return out;
      }
      if (f == "dictsort") {
        Value out = Value::array();
        std::vector<std::pair<std::string, Value>> kv = v.o->items;
        std::stable_sort(kv.begin(), kv.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
        for (auto& [k, x] : kv) out.a->push_back(Value::array({Value::string(k), x}));
        return out;
      }
      return bad();
    }
    return bad();
  }

  const ChatTemplateLimits& lim_;
  const std::string& what_;
  int64_t steps_ = 0;
  int depth_ = 0;
};

}  // namespace

struct ChatTemplate::Impl {
  std::string what, source;
  ChatTemplateLimits limits;
  Body program;
  std::set<std::string, std::less<>> names;  // every name the code uses: variables, attributes, filters
};

ChatTemplate::ChatTemplate(const std::string& source, const std::string& what, ChatTemplateLimits limits)
    : impl_(std::make_unique<Impl>()) {
  impl_->what = what;
  impl_->limits = limits;
  TS_CHECK(static_cast<int64_t>(source.size()) <= limits.max_source, what, ": ", source.size(),
           " bytes of template, more than the ", limits.max_source, " allowed");
  impl_->source = source;
  std::vector<Token> tokens = lex(source, what);
  for (const Token& t : tokens)
    if (t.type == Tok::Name) impl_->names.insert(t.text);
  Parser p(std::move(tokens), impl_->what, limits.max_depth);
  impl_->program = p.program();
  for (const auto& [n, line] : p.calls)
    TS_CHECK(known_functions().count(n) || p.macros.count(n), what, ": line ", line, ": the function '", n,
             "()' is not in Tessera's Jinja subset (it has raise_exception, namespace, range, strftime_now, dict and "
             "the template's own macros)");
}

ChatTemplate::~ChatTemplate() = default;
bool ChatTemplate::uses(std::string_view name) const { return impl_->names.count(name) > 0; }
const std::string& ChatTemplate::source() const { return impl_->source; }
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::render(const nlohmann::ordered_json& context) const {
  TS_CHECK(context.is_object(), impl_->what, ": the context must be a JSON object");
  Scope globals;
  for (auto it = context.begin(); it != context.end(); ++it) globals.set(it.key(), from_json(it.value()));
  Renderer r(impl_->limits, impl_->what);
  std::string out;
  try {
    r.render(impl_->program, globals, out);
  } catch (const LoopControl&) {
    TS_ERROR(impl_->what, ": 'break' or 'continue' outside a for loop");
  }
  return out;
}

nlohmann::ordered_json chat_context(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                    const Tokenizer& tokenizer, const nlohmann::ordered_json& tools) {
  nlohmann::ordered_json c;
  c["messages"] = messages;
  if (tools.is_array() && !tools.empty()) c["tools"] = tools;
  c["add_generation_prompt"] = add_generation_prompt;
  c["bos_token"] = tokenizer.bos() >= 0 ? tokenizer.text(tokenizer.bos()) : "";
  c["eos_token"] = tokenizer.eos() >= 0 ? tokenizer.text(tokenizer.eos()) : "";
  return c;
}

}  // namespace tessera::llm

namespace tessera::llm {

RenderedChat render_chat(const ChatTemplate& t, const nlohmann::ordered_json& messages, bool add_generation_prompt,
                         const Tokenizer& tokenizer, const nlohmann::ordered_json& tools) {
  static const std::string open = "\xee\x80\x80", close = "\xee\x80\x81";  // U+E000, U+E001
  nlohmann::ordered_json marked = messages;
  for (auto& m : marked) {
    if (!m.is_object() || !m.contains("content") || !m["content"].is_string()) continue;
    const std::string c = m["content"].get<std::string>();
    TS_CHECK(c.find(open) == std::string::npos && c.find(close) == std::string::npos,
             "chat: a message holds U+E000 or U+E001, which Tessera reserves to mark message text");
    if (!c.empty()) m["content"] = open + c + close;
  }
  const std::string raw = t.render(chat_context(marked, add_generation_prompt, tokenizer, tools));
  RenderedChat out;
  out.text.reserve(raw.size());
  size_t begin = std::string::npos;
  for (size_t k = 0; k < raw.size();) {
    if (raw.compare(k, open.size(), open) == 0) {
      TS_CHECK(begin == std::string::npos, "chat: the template cuts a message's text (it should write each content "
               "whole)");
      begin = out.text.size();
      k += open.size();
    } else if (raw.compare(k, close.size(), close) == 0) {
      TS_CHECK(begin != std::string::npos, "chat: the template cuts a message's text (it should write each content "
               "whole)");
      out.content_spans.emplace_back(begin, out.text.size());
      begin = std::string::npos;
      k += close.size();
    } else {
      out.text += raw[k++];
    }
  }
  TS_CHECK(begin == std::string::npos, "chat: the template cuts a message's text (it should write each content whole)");
  return out;
}

const char* const kPlainChatTemplate =
    "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}";
const char* const kPlainChatStop = "\nuser:";

}  // namespace tessera::llm
