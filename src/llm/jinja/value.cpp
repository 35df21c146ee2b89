#include "llm/jinja/value.h"

#include <unicode/uchar.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <utility>

#include "llm/jinja/sandbox.h"
#include "llm/pretokenize.h"
#include "tessera/core/error.h"

namespace tessera::llm::jinja {

const Value* Object::find(std::string_view k) const {
  for (const auto& [key, v] : items)
    if (key == k) return &v;
  return nullptr;
}

Value* Object::find(std::string_view k) { return const_cast<Value*>(std::as_const(*this).find(k)); }

void Object::set(const std::string& k, Value v) {
  for (auto& [key, old] : items)
    if (key == k) {
      old = std::move(v);
      return;
    }
  items.emplace_back(k, std::move(v));
}

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
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return Value::number(static_cast<double>(u));
      return Value::integer(static_cast<int64_t>(u));
    }
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


namespace {

void write_json(const Value& v, const JsonStyle& st, int depth, const Sandbox& box, int line, std::string& out) {
  box.fits(static_cast<int64_t>(out.size()), line);
  switch (v.kind) {
    case Kind::None: out += "null"; return;
    case Kind::Undefined: out += st.undefined_as_null ? "null" : "undefined"; return;
    case Kind::Bool: out += v.b ? "true" : "false"; return;
    case Kind::Int: out += std::to_string(v.i); return;
    case Kind::Float: out += js_number(v.f); return;
    case Kind::String: json_quote(v.s, st.ensure_ascii, out); return;
    case Kind::Function: box.fail(line, "a function cannot be written as JSON");
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
      write_json((*v.a)[k], st, depth + 1, box, line, out);
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
    write_json(items[k]->second, st, depth + 1, box, line, out);
  }
  if (st.indent > 0) out += base;
  out += '}';
}

}  // namespace

void to_json(const Value& v, const JsonStyle& st, const Sandbox& box, int line, std::string& out) {
  write_json(v, st, 0, box, line, out);
  box.fits(static_cast<int64_t>(out.size()), line);
}

std::string to_text(const Value& v, const Sandbox& box, int line) {
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
      to_json(v, st, box, line, out);
      return out;
    }
  }
}

bool same(const Value& x, const Value& y) {
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

bool strictly_same(const Value& x, const Value& y) {
  if (x.is_number() && y.is_number()) return x.num() == y.num();
  return x.kind == y.kind && same(x, y);
}

int64_t footprint(const Value& v) {
  if (v.kind == Kind::String) return static_cast<int64_t>(v.s.size());
  if (v.kind != Kind::Array) return 0;
  int64_t n = static_cast<int64_t>(v.a->size() * sizeof(Value));
  for (const Value& x : *v.a) n += static_cast<int64_t>(x.s.size());
  return n;
}

// ---- text helpers -----------------------------------------------------------

bool js_space(uint32_t c) {
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

std::string map_case(const std::string& s, bool upper) {
  std::string out;
  for (uint32_t c : utf8_code_points(s))
    append_utf8(static_cast<uint32_t>(upper ? u_toupper(static_cast<UChar32>(c)) : u_tolower(static_cast<UChar32>(c))), out);
  return out;
}

std::string capitalize(const std::string& s) {
  const std::vector<uint32_t> c = utf8_code_points(s);
  if (c.empty()) return "";
  std::string out;
  append_utf8(static_cast<uint32_t>(u_toupper(static_cast<UChar32>(c[0]))), out);
  return out + map_case(encode(c, 1, c.size()), false);
}

std::string title(const std::string& s) {
  std::string out;
  bool start = true;
  for (uint32_t c : utf8_code_points(s)) {
    append_utf8(static_cast<uint32_t>(start ? u_toupper(static_cast<UChar32>(c)) : u_tolower(static_cast<UChar32>(c))), out);
    start = js_space(c);
  }
  return out;
}

Array characters(const std::string& s, const Sandbox& box, int line) {
  const std::vector<uint32_t> cpts = utf8_code_points(s);
  box.fits(static_cast<int64_t>(cpts.size() * sizeof(Value)), line);
  Array out;
  out.reserve(cpts.size());
  for (uint32_t c : cpts) {
    std::string ch;
    append_utf8(c, ch);
    out.push_back(Value::string(std::move(ch)));
  }
  return out;
}

std::vector<size_t> occurrences(std::string_view s, std::string_view needle, int64_t count) {
  // Boyer-Moore, not std::string::find: a needle that almost matches
  // everywhere ('aaa...ab' in 'aaa...a') makes find quadratic.
  TS_INTERNAL_ASSERT(!needle.empty());
  std::vector<size_t> out;
  if (needle.size() > s.size()) return out;
  const std::boyer_moore_searcher search(needle.begin(), needle.end());
  for (auto it = s.begin(); count < 0 || static_cast<int64_t>(out.size()) < count;) {
    const auto found = search(it, s.end()).first;
    if (found == s.end()) break;
    out.push_back(static_cast<size_t>(found - s.begin()));
    it = found + static_cast<std::ptrdiff_t>(needle.size());
  }
  return out;
}

}  // namespace tessera::llm::jinja
