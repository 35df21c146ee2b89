// Jinja's filters (`x | name(args)`), one function each, found by name in
// one table. What each writes follows @huggingface/jinja; what each builds
// is checked against the sandbox's budget before it is built where its size
// can be known (Note [What a template may build]).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>

#include "llm/jinja/builtins.h"
#include "llm/jinja/renderer.h"
#include "llm/pretokenize.h"

namespace tessera::llm::jinja {
namespace {

using Filter = Value (*)(const Call&);

Value safe(const Call& c) { return c.v; }

Value tojson(const Call& c) {
  JsonStyle st;
  if (const Value* ind = c.a.get(0, "indent"); ind && ind->kind != Kind::None) {
    if (ind->kind != Kind::Int) c.fail("tojson's indent must be an integer");
    st.indent = static_cast<int>(std::clamp<int64_t>(ind->i, 0, 64));
    if (st.indent > 0) st.item_sep = ",";
  }
  if (const Value* x = c.a.get(99, "ensure_ascii")) st.ensure_ascii = truthy(*x);
  if (const Value* x = c.a.get(99, "sort_keys")) st.sort_keys = truthy(*x);
  if (const Value* x = c.a.get(99, "separators"); x && x->kind == Kind::Array) {
    if (x->a->size() != 2 || (*x->a)[0].kind != Kind::String || (*x->a)[1].kind != Kind::String)
      c.fail("tojson's separators must be two strings");
    st.item_sep = (*x->a)[0].s;
    st.key_sep = (*x->a)[1].s;
  }
  std::string out;
  to_json(c.v, st, c.r.box(), c.line, out);
  return Value::string(std::move(out));
}

Value default_(const Call& c) {
  const Value* dflt = c.a.get(0, "default_value");
  const Value* boolean = c.a.get(1, "boolean");
  if (c.v.kind == Kind::Undefined || (boolean && truthy(*boolean) && !truthy(c.v))) return dflt ? *dflt : Value::string("");
  return c.v;
}

Value string(const Call& c) { return c.v.kind == Kind::String ? c.v : Value::string(c.r.text(c.v, c.line)); }

Value length(const Call& c) {
  if (c.v.kind == Kind::Array) return Value::integer(static_cast<int64_t>(c.v.a->size()));
  if (c.v.kind == Kind::String) return Value::integer(static_cast<int64_t>(utf8_code_points(c.v.s).size()));
  if (c.v.kind == Kind::Object) return Value::integer(static_cast<int64_t>(c.v.o->items.size()));
  return c.not_for();
}

Value to_int(const Call& c) {
  const Value* dflt = c.a.get(0, "default");
  if (c.v.kind == Kind::String) {
    const std::string t = trim(c.v.s, true, false);
    char* end = nullptr;
    const long long x = std::strtoll(t.c_str(), &end, 10);  // saturates past 64 bits
    if (end == t.c_str()) return dflt ? *dflt : Value::integer(0);
    return Value::integer(x);
  }
  if (c.v.kind == Kind::Bool) return Value::integer(c.v.b);
  if (c.v.kind == Kind::Int) return c.v;
  if (c.v.kind == Kind::Float) {
    const double t = std::trunc(c.v.f);
    if (!(t >= -9223372036854775808.0 && t < 9223372036854775808.0))
      c.fail("int: " + js_number(c.v.f) + " does not fit in a 64-bit integer");
    return Value::integer(static_cast<int64_t>(t));
  }
  return c.not_for();
}

Value to_float(const Call& c) {
  const Value* dflt = c.a.get(0, "default");
  if (c.v.kind == Kind::String) {
    const std::string t = trim(c.v.s, true, false);
    char* end = nullptr;
    const double x = std::strtod(t.c_str(), &end);
    if (end == t.c_str()) return dflt ? *dflt : Value::number(0);
    return Value::number(x);
  }
  if (c.v.is_number()) return Value::number(c.v.num());
  if (c.v.kind == Kind::Bool) return Value::number(c.v.b);
  return c.not_for();
}

Value to_bool(const Call& c) { return Value::boolean(truthy(c.v)); }

Value abs_(const Call& c) {
  if (c.v.kind == Kind::Int) {
    if (c.v.i == std::numeric_limits<int64_t>::min()) c.fail("integer overflow in abs");
    return Value::integer(c.v.i < 0 ? -c.v.i : c.v.i);
  }
  if (c.v.kind == Kind::Float) return Value::number(std::abs(c.v.f));
  return c.not_for();
}

Value round_(const Call& c) {
  if (!c.v.is_number()) return c.not_for();
  const Value* prec = c.a.get(0, "precision");
  const double p = std::pow(10.0, prec && prec->kind == Kind::Int ? static_cast<double>(prec->i) : 0.0);
  return Value::number(std::round(c.v.num() * p) / p);
}

Value upper(const Call& c) { return c.v.kind == Kind::String ? Value::string(map_case(c.v.s, true)) : c.not_for(); }
Value lower(const Call& c) { return c.v.kind == Kind::String ? Value::string(map_case(c.v.s, false)) : c.not_for(); }
Value title_(const Call& c) { return c.v.kind == Kind::String ? Value::string(title(c.v.s)) : c.not_for(); }
Value capitalize_(const Call& c) { return c.v.kind == Kind::String ? Value::string(capitalize(c.v.s)) : c.not_for(); }
Value trim_(const Call& c) { return c.v.kind == Kind::String ? Value::string(trim(c.v.s, true, true)) : c.not_for(); }

Value list(const Call& c) {
  if (c.v.kind == Kind::String) return Value::array(characters(c.v.s, c.r.box(), c.line));
  if (c.v.kind == Kind::Array) return Value::array(*c.v.a);
  if (c.v.kind == Kind::Object) {
    Value out = Value::array();
    for (const auto& [k, x] : c.v.o->items) out.a->push_back(Value::string(k));
    return out;
  }
  return c.not_for();
}

Value first(const Call& c) {
  if (c.v.kind == Kind::String) {
    const std::vector<uint32_t> cpts = utf8_code_points(c.v.s);
    return cpts.empty() ? Value() : Value::string(encode(cpts, 0, 1));
  }
  if (c.v.kind == Kind::Array) return c.v.a->empty() ? Value() : c.v.a->front();
  return c.not_for();
}

Value last(const Call& c) {
  if (c.v.kind == Kind::String) {
    const std::vector<uint32_t> cpts = utf8_code_points(c.v.s);
    return cpts.empty() ? Value() : Value::string(encode(cpts, cpts.size() - 1, cpts.size()));
  }
  if (c.v.kind == Kind::Array) return c.v.a->empty() ? Value() : c.v.a->back();
  return c.not_for();
}

Value reverse(const Call& c) {
  if (c.v.kind == Kind::String) {
    std::vector<uint32_t> cpts = utf8_code_points(c.v.s);
    std::reverse(cpts.begin(), cpts.end());
    return Value::string(encode(cpts, 0, cpts.size()));
  }
  if (c.v.kind == Kind::Array) return Value::array(Array(c.v.a->rbegin(), c.v.a->rend()));
  return c.not_for();
}

Value join(const Call& c) {
  const Value* sep = c.a.get(0, "d");
  if (c.v.kind == Kind::String) {  // the characters, with the separator between them
    const std::string* s = sep && sep->kind == Kind::String ? &sep->s : nullptr;
    if (!s || s->empty()) return c.v;
    const std::vector<uint32_t> cpts = utf8_code_points(c.v.s);
    c.r.box().fits(static_cast<int64_t>(c.v.s.size() + cpts.size() * s->size()), c.line);
    std::string out;
    for (size_t k = 0; k < cpts.size(); ++k) {
      if (k) out += *s;
      append_utf8(cpts[k], out);
    }
    return Value::string(std::move(out));
  }
  if (c.v.kind != Kind::Array) return c.not_for();
  if (sep && sep->kind != Kind::String) c.fail("join's separator must be a string");
  const Value* attr = c.a.get(1, "attribute");
  std::string out;
  for (size_t k = 0; k < c.v.a->size(); ++k) {
    const Value& x = (*c.v.a)[k];
    if (k && sep) out += sep->s;
    out += c.r.text(attr ? c.r.member(x, *attr, c.line, false) : x, c.line);
    c.r.box().fits(static_cast<int64_t>(out.size()), c.line);
  }
  return Value::string(std::move(out));
}

Value indent(const Call& c) {
  if (c.v.kind != Kind::String) return c.not_for();
  const Value* w = c.a.get(0, "width");
  const Value* first_line = c.a.get(1, "first");
  const Value* blank = c.a.get(2, "blank");
  const std::string pad = w && w->kind == Kind::String
                              ? w->s
                              : std::string(static_cast<size_t>(std::clamp<int64_t>(w && w->kind == Kind::Int ? w->i : 4, 0, 1024)), ' ');
  const std::string& s = c.v.s;
  const int64_t lines = 1 + std::count(s.begin(), s.end(), '\n');
  c.r.box().fits(static_cast<int64_t>(s.size()) + lines * static_cast<int64_t>(pad.size()), c.line);
  std::string out;
  size_t start = 0;
  for (int k = 0;; ++k) {
    const size_t nl = s.find('\n', start);
    const std::string_view ln = std::string_view(s).substr(start, nl == std::string::npos ? std::string::npos : nl - start);
    const bool skip = (k == 0 && !(first_line && truthy(*first_line))) || (ln.empty() && !(blank && truthy(*blank)));
    if (!skip) out += pad;
    out += ln;
    if (nl == std::string::npos) break;
    out += '\n';
    start = nl + 1;
  }
  return Value::string(std::move(out));
}

Value replace(const Call& c) {
  if (c.v.kind != Kind::String) return c.not_for();
  return call_method(Call{c.r, c.name, c.v, c.a, c.line, c.scope});
}

Value wordcount(const Call& c) {
  if (c.v.kind != Kind::String) return c.not_for();
  int64_t n = 0;
  bool in_word = false;
  for (uint32_t x : utf8_code_points(c.v.s)) {
    const bool space = js_space(x);
    n += !space && !in_word;
    in_word = !space;
  }
  return Value::integer(n);
}

Value center(const Call& c) {
  if (c.v.kind != Kind::String) return c.not_for();
  const Value* w = c.a.get(0, "width");
  const int64_t width = w && w->kind == Kind::Int ? std::min<int64_t>(w->i, 1 << 20) : 80;
  const int64_t n = static_cast<int64_t>(utf8_code_points(c.v.s).size());
  if (n >= width) return c.v;
  c.r.box().fits(static_cast<int64_t>(c.v.s.size()) + width - n, c.line);
  const int64_t left = (width - n) / 2;
  return Value::string(std::string(left, ' ') + c.v.s + std::string(width - n - left, ' '));
}

Value unique(const Call& c) {
  if (c.v.kind != Kind::Array) return c.not_for();
  Array out;
  for (const Value& x : *c.v.a) {
    c.r.box().step(c.line);  // quadratic: each element a step
    bool seen = false;
    for (const Value& y : out) seen = seen || strictly_same(x, y);
    if (!seen) out.push_back(x);
  }
  return Value::array(std::move(out));
}

// sort, min and max: by value or by an attribute, strings without case
// unless asked.
Value ordered(const Call& c) {
  if (c.v.kind != Kind::Array) return c.not_for();
  const bool sort = c.name == "sort";
  const Value* rev = sort ? c.a.get(0, "reverse") : nullptr;
  const Value* cs = c.a.get(sort ? 1 : 0, "case_sensitive");
  const Value* attr = c.a.get(sort ? 2 : 1, "attribute");
  const bool case_sensitive = cs && truthy(*cs);
  auto key = [&](const Value& x) { return attr ? c.r.member(x, *attr, c.line, false) : x; };
  auto less = [&](const Value& x, const Value& y) {
    const Value kx = key(x), ky = key(y);
    if (kx.is_number() && ky.is_number()) return kx.num() < ky.num();
    if (kx.kind == Kind::String && ky.kind == Kind::String)
      return case_sensitive ? kx.s < ky.s : map_case(kx.s, false) < map_case(ky.s, false);
    if (kx.kind == Kind::Bool && ky.kind == Kind::Bool) return kx.b < ky.b;
    c.fail(std::string("cannot compare a ") + kind_name(kx.kind) + " with a " + kind_name(ky.kind));
  };
  Array out = *c.v.a;
  std::stable_sort(out.begin(), out.end(), less);
  if (c.name == "min") return out.empty() ? Value() : out.front();
  if (c.name == "max") return out.empty() ? Value() : out.back();
  if (rev && truthy(*rev)) std::reverse(out.begin(), out.end());
  return Value::array(std::move(out));
}

Value sum(const Call& c) {
  if (c.v.kind != Kind::Array) return c.not_for();
  double s = 0;
  bool fl = false;
  int64_t si = 0;
  for (const Value& x : *c.v.a) {
    if (!x.is_number()) c.fail("sum of a list that holds a " + std::string(kind_name(x.kind)));
    fl = fl || x.kind == Kind::Float;
    s += x.num();
    if (x.kind == Kind::Int && __builtin_add_overflow(si, x.i, &si) && !fl) c.fail("integer overflow in sum");
  }
  return fl ? Value::number(s) : Value::integer(si);
}

Value selectattr(const Call& c) {
  if (c.v.kind != Kind::Array) return c.not_for();
  if (c.a.pos.empty() || c.a.pos[0].kind != Kind::String) c.fail(c.name + " needs an attribute name");
  const bool select = c.name == "selectattr";
  Array out;
  for (const Value& x : *c.v.a) {
    c.r.box().step(c.line);
    if (!x.attributes()) c.fail("'" + c.name + "' applies to a list of dicts");
    const Value* at = x.o->find(c.a.pos[0].s);
    bool r;
    if (c.a.pos.size() >= 2) {
      if (c.a.pos[1].kind != Kind::String) c.fail(c.name + "'s test must be named by a string");
      // @huggingface/jinja skips a missing or falsy attribute before testing it.
      r = at && truthy(*at) &&
          c.r.test_by_name(c.a.pos[1].s, *at, c.a.pos.size() >= 3 ? &c.a.pos[2] : nullptr, c.line, c.scope);
    } else {
      r = at && truthy(*at);
    }
    if (r == select) out.push_back(x);
  }
  return Value::array(std::move(out));
}

Value select(const Call& c) {
  if (c.v.kind != Kind::Array) return c.not_for();
  if (!c.a.pos.empty() && c.a.pos[0].kind != Kind::String) c.fail(c.name + "'s test must be named by a string");
  const bool keep = c.name == "select";
  Array out;
  for (const Value& x : *c.v.a) {
    c.r.box().step(c.line);
    const bool r = c.a.pos.empty()
                       ? truthy(x)
                       : c.r.test_by_name(c.a.pos[0].s, x, c.a.pos.size() >= 2 ? &c.a.pos[1] : nullptr, c.line, c.scope);
    if (r == keep) out.push_back(x);
  }
  return Value::array(std::move(out));
}

Value map(const Call& c) {
  if (c.v.kind != Kind::Array) return c.not_for();
  Array out;
  const Value* attr = c.a.get(99, "attribute");
  if (!attr) {
    if (c.a.pos.empty() || c.a.pos[0].kind != Kind::String) c.fail("map needs attribute= or a filter name");
    for (const Value& x : *c.v.a) {
      c.r.box().step(c.line);
      out.push_back(c.r.made(c.r.filter_by_name(c.a.pos[0].s, x, {}, c.line, c.scope), c.line));
    }
    return Value::array(std::move(out));
  }
  const Value* dflt = c.a.get(99, "default");
  for (const Value& x : *c.v.a) {
    if (!x.attributes()) c.fail("map(attribute=...) applies to a list of dicts");
    Value r = c.r.member(x, *attr, c.line, false);
    out.push_back(r.kind == Kind::Undefined && dflt ? *dflt : r);
  }
  return Value::array(std::move(out));
}

Value items(const Call& c) {
  if (c.v.kind != Kind::Object) return c.not_for();
  Value out = Value::array();
  for (const auto& [k, x] : c.v.o->items) out.a->push_back(Value::array({Value::string(k), x}));
  return out;
}

Value dictsort(const Call& c) {
  if (c.v.kind != Kind::Object) return c.not_for();
  std::vector<std::pair<std::string, Value>> kv = c.v.o->items;
  std::stable_sort(kv.begin(), kv.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  Value out = Value::array();
  for (auto& [k, x] : kv) out.a->push_back(Value::array({Value::string(k), x}));
  return out;
}

const std::map<std::string, Filter, std::less<>>& filters() {
  static const std::map<std::string, Filter, std::less<>> table = {
      {"safe", safe},         {"tojson", tojson},       {"default", default_},  {"d", default_},
      {"string", string},     {"length", length},       {"count", length},      {"int", to_int},
      {"float", to_float},    {"bool", to_bool},        {"abs", abs_},          {"round", round_},
      {"upper", upper},       {"lower", lower},         {"title", title_},      {"capitalize", capitalize_},
      {"trim", trim_},        {"list", list},           {"first", first},       {"last", last},
      {"reverse", reverse},   {"join", join},           {"indent", indent},     {"replace", replace},
      {"wordcount", wordcount}, {"center", center},     {"unique", unique},     {"sort", ordered},
      {"min", ordered},       {"max", ordered},         {"sum", sum},           {"selectattr", selectattr},
      {"rejectattr", selectattr}, {"select", select},   {"reject", select},     {"map", map},
      {"items", items},       {"dictsort", dictsort},
  };
  return table;
}

}  // namespace

bool is_filter(std::string_view name) { return filters().count(name) > 0; }

Value call_filter(const Call& c) { return filters().find(c.name)->second(c); }

}  // namespace tessera::llm::jinja
