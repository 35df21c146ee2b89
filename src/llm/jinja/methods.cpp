// The string, dict and list methods templates call (`x.strip()`,
// `d.items()`, `l.append(v)`), one function each, found by name in one
// table. Substring searches run in linear time; what a method builds is
// checked against the sandbox's budget before it is built.
#include <algorithm>
#include <map>

#include "llm/jinja/builtins.h"
#include "llm/jinja/renderer.h"
#include "llm/pretokenize.h"

namespace tessera::llm::jinja {
namespace {

using Method = Value (*)(const Call&);

Value no_such(const Call& c) { c.fail("a " + std::string(kind_name(c.v.kind)) + " has no method '" + c.name + "()'"); }

const std::string* str_arg(const Call& c, size_t k, const char* key) {
  const Value* v = c.a.get(k, key);
  if (!v) return nullptr;
  if (v->kind != Kind::String) c.fail("'" + c.name + "()' takes a string argument, not a " + kind_name(v->kind));
  return &v->s;
}

Value upper(const Call& c) { return c.v.kind == Kind::String ? Value::string(map_case(c.v.s, true)) : no_such(c); }
Value lower(const Call& c) { return c.v.kind == Kind::String ? Value::string(map_case(c.v.s, false)) : no_such(c); }
Value title_(const Call& c) { return c.v.kind == Kind::String ? Value::string(title(c.v.s)) : no_such(c); }
Value capitalize_(const Call& c) { return c.v.kind == Kind::String ? Value::string(capitalize(c.v.s)) : no_such(c); }

// strip, lstrip, rstrip: white space, or the code points of `chars`.
Value strip(const Call& c) {
  if (c.v.kind != Kind::String) return no_such(c);
  const std::string* chars = str_arg(c, 0, "chars");
  const bool left = c.name != "rstrip", right = c.name != "lstrip";
  if (!chars) return Value::string(trim(c.v.s, left, right));
  const std::vector<uint32_t> s = utf8_code_points(c.v.s);
  std::vector<uint32_t> set = utf8_code_points(*chars);
  std::sort(set.begin(), set.end());
  auto in = [&](uint32_t x) { return std::binary_search(set.begin(), set.end(), x); };
  size_t b = 0, e = s.size();
  if (left)
    while (b < e && in(s[b])) ++b;
  if (right)
    while (e > b && in(s[e - 1])) --e;
  return Value::string(encode(s, b, e));
}

Value startswith(const Call& c) {
  if (c.v.kind != Kind::String) return no_such(c);
  const std::string& s = c.v.s;
  const Value* p = c.a.get(0, "prefix");
  if (!p) c.fail(c.name + "() needs an argument");
  const bool start = c.name == "startswith";
  auto test = [&](const std::string& x) {
    return s.size() >= x.size() && s.compare(start ? 0 : s.size() - x.size(), x.size(), x) == 0;
  };
  if (p->kind == Kind::String) return Value::boolean(test(p->s));
  if (p->kind != Kind::Array) c.fail(c.name + "() takes a string or a tuple of strings");
  for (const Value& x : *p->a) {
    if (x.kind != Kind::String) c.fail(c.name + "() takes strings");
    if (test(x.s)) return Value::boolean(true);
  }
  return Value::boolean(false);
}

Value split(const Call& c) {
  if (c.v.kind != Kind::String) return no_such(c);
  const std::string& s = c.v.s;
  const Value* sep = c.a.get(0, "sep");
  const Value* maxv = c.a.get(1, "maxsplit");
  const int64_t maxsplit = maxv && maxv->kind == Kind::Int ? maxv->i : -1;
  Value out = Value::array();
  auto add = [&](std::string piece) {
    c.r.box().fits(static_cast<int64_t>((out.a->size() + 1) * sizeof(Value)), c.line);
    out.a->push_back(Value::string(std::move(piece)));
  };
  if (!sep || sep->kind == Kind::None) {  // runs of white space, none at the ends
    const std::vector<uint32_t> cpts = utf8_code_points(s);
    size_t k = 0;
    while (k < cpts.size() && js_space(cpts[k])) ++k;
    while (k < cpts.size()) {
      if (maxsplit >= 0 && static_cast<int64_t>(out.a->size()) >= maxsplit) {
        add(encode(cpts, k, cpts.size()));
        break;
      }
      size_t e = k;
      while (e < cpts.size() && !js_space(cpts[e])) ++e;
      add(encode(cpts, k, e));
      k = e;
      while (k < cpts.size() && js_space(cpts[k])) ++k;
    }
    return out;
  }
  if (sep->kind != Kind::String) c.fail("split() takes a string separator");
  if (sep->s.empty()) c.fail("split(): empty separator");
  size_t pos = 0;
  for (size_t f : occurrences(s, sep->s, maxsplit)) {
    add(s.substr(pos, f - pos));
    pos = f + sep->s.size();
  }
  add(s.substr(pos));
  return out;
}

// Python's str.replace: every occurrence (or the first `count`); an empty
// `old` inserts `new` between every character and at both ends.
Value replace(const Call& c) {
  if (c.v.kind != Kind::String) return no_such(c);
  const std::string* from = str_arg(c, 0, "old");
  const std::string* to = str_arg(c, 1, "new");
  if (!from || !to) c.fail("replace() needs two strings");
  const Value* countv = c.a.get(2, "count");
  const int64_t count = countv && countv->kind == Kind::Int ? countv->i : -1;
  const std::string& s = c.v.s;
  std::string out;
  if (from->empty()) {
    const std::vector<uint32_t> cpts = utf8_code_points(s);
    const int64_t n = count < 0 ? static_cast<int64_t>(cpts.size()) + 1 : std::min<int64_t>(count, cpts.size() + 1);
    c.r.box().fits(static_cast<int64_t>(s.size()) + n * static_cast<int64_t>(to->size()), c.line);
    for (size_t k = 0; k <= cpts.size(); ++k) {
      if (static_cast<int64_t>(k) < n) out += *to;
      if (k < cpts.size()) append_utf8(cpts[k], out);
    }
    return Value::string(std::move(out));
  }
  const std::vector<size_t> at = occurrences(s, *from, count);
  c.r.box().fits(static_cast<int64_t>(s.size()) + static_cast<int64_t>(at.size()) *
                                                     (static_cast<int64_t>(to->size()) - static_cast<int64_t>(from->size())),
                 c.line);
  size_t pos = 0;
  for (size_t m : at) {
    out.append(s, pos, m - pos);
    out += *to;
    pos = m + from->size();
  }
  out.append(s, pos, std::string::npos);
  return Value::string(std::move(out));
}

Value count(const Call& c) {
  if (c.v.kind != Kind::String) return no_such(c);
  const std::string* x = str_arg(c, 0, "sub");
  if (!x) c.fail("count() needs a string");
  if (x->empty()) return Value::integer(static_cast<int64_t>(utf8_code_points(c.v.s).size()) + 1);
  return Value::integer(static_cast<int64_t>(occurrences(c.v.s, *x).size()));
}

Value find(const Call& c) {
  if (c.v.kind != Kind::String) return no_such(c);
  const std::string* x = str_arg(c, 0, "sub");
  if (!x) c.fail("find() needs a string");
  if (x->empty()) return Value::integer(0);
  const std::vector<size_t> at = occurrences(c.v.s, *x, 1);
  if (at.empty()) return Value::integer(-1);
  return Value::integer(static_cast<int64_t>(utf8_code_points(std::string_view(c.v.s).substr(0, at[0])).size()));
}

Value join(const Call& c) {
  if (c.v.kind != Kind::String) return no_such(c);
  const Value* items = c.a.get(0, "iterable");
  if (!items || items->kind != Kind::Array) c.fail("join() takes a list");
  std::string out;
  for (size_t k = 0; k < items->a->size(); ++k) {
    if (k) out += c.v.s;
    out += c.r.text((*items->a)[k], c.line);
    c.r.box().fits(static_cast<int64_t>(out.size()), c.line);
  }
  return Value::string(std::move(out));
}

// items, keys, values: a dict's, in insertion order.
Value entries(const Call& c) {
  if (c.v.kind != Kind::Object) return no_such(c);
  Value out = Value::array();
  for (const auto& [k, v] : c.v.o->items) {
    if (c.name == "items") out.a->push_back(Value::array({Value::string(k), v}));
    else if (c.name == "keys") out.a->push_back(Value::string(k));
    else out.a->push_back(v);
  }
  return out;
}

Value get(const Call& c) {
  if (c.v.kind != Kind::Object) return no_such(c);
  const Value* key = c.a.get(0, "key");
  if (!key || key->kind != Kind::String) c.fail("get() takes a string key");
  if (const Value* v = c.v.o->find(key->s)) return *v;
  const Value* dflt = c.a.get(1, "default");
  return dflt ? *dflt : Value::none();
}

Value append(const Call& c) {
  if (c.v.kind != Kind::Array) return no_such(c);
  if (c.a.pos.size() != 1) c.fail("append() takes one value");
  const Value& v = c.a.pos[0];  // its string is copied; a list or dict is shared
  c.r.box().charge(static_cast<int64_t>(sizeof(Value) + (v.kind == Kind::String ? v.s.size() : 0)), c.line);
  c.v.a->push_back(v);
  return Value::none();
}

const std::map<std::string, Method, std::less<>>& methods() {
  static const std::map<std::string, Method, std::less<>> table = {
      {"upper", upper},   {"lower", lower},     {"title", title_},    {"capitalize", capitalize_},
      {"strip", strip},   {"lstrip", strip},    {"rstrip", strip},    {"startswith", startswith},
      {"endswith", startswith}, {"split", split}, {"replace", replace}, {"count", count},
      {"find", find},     {"join", join},       {"items", entries},   {"keys", entries},
      {"values", entries}, {"get", get},        {"append", append},
  };
  return table;
}

}  // namespace

bool is_method(std::string_view name) { return methods().count(name) > 0; }

Value call_method(const Call& c) {
  const auto it = methods().find(c.name);
  return it == methods().end() ? no_such(c) : it->second(c);
}

}  // namespace tessera::llm::jinja
