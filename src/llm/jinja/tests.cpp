// Jinja's tests (`x is name`, `x is name(arg)`, and by name in select and
// selectattr), one function each, found by name in one table.
#include <map>

#include "llm/jinja/builtins.h"
#include "llm/jinja/renderer.h"

namespace tessera::llm::jinja {
namespace {

using Test = bool (*)(const Call&);

const Value& arg(const Call& c) {
  static const Value undefined;
  return c.a.pos.empty() ? undefined : c.a.pos[0];
}

bool defined(const Call& c) { return c.v.kind != Kind::Undefined; }
bool undefined(const Call& c) { return c.v.kind == Kind::Undefined; }
bool none(const Call& c) { return c.v.kind == Kind::None; }
bool boolean(const Call& c) { return c.v.kind == Kind::Bool; }
bool is_true(const Call& c) { return c.v.kind == Kind::Bool && c.v.b; }
bool is_false(const Call& c) { return c.v.kind == Kind::Bool && !c.v.b; }
bool string(const Call& c) { return c.v.kind == Kind::String; }
bool number(const Call& c) { return c.v.is_number(); }
bool integer(const Call& c) { return c.v.kind == Kind::Int; }
bool is_float(const Call& c) { return c.v.kind == Kind::Float; }
bool iterable(const Call& c) { return c.v.kind == Kind::Array || c.v.kind == Kind::String; }
bool mapping(const Call& c) { return c.v.kind == Kind::Object; }
bool sequence(const Call& c) { return c.v.kind == Kind::Array || c.v.kind == Kind::Object || c.v.kind == Kind::String; }
bool callable(const Call& c) { return c.v.kind == Kind::Function; }
bool lower(const Call& c) { return c.v.kind == Kind::String && c.v.s == map_case(c.v.s, false); }
bool upper(const Call& c) { return c.v.kind == Kind::String && c.v.s == map_case(c.v.s, true); }

bool odd_or_even(const Call& c) {
  if (c.v.kind != Kind::Int) c.fail("'" + c.name + "' tests an integer, not a " + kind_name(c.v.kind));
  return (c.v.i % 2 != 0) == (c.name == "odd");
}

bool divisibleby(const Call& c) {
  const Value& d = arg(c);
  if (c.v.kind != Kind::Int || d.kind != Kind::Int || d.i == 0) c.fail("'divisibleby' tests integers");
  return d.i == -1 || c.v.i % d.i == 0;  // INT64_MIN % -1 traps
}

bool equalto(const Call& c) { return strictly_same(c.v, arg(c)); }
bool ne(const Call& c) { return !strictly_same(c.v, arg(c)); }

bool in(const Call& c) {
  const Value& in = arg(c);
  if (in.kind == Kind::Array) {
    for (const Value& x : *in.a)
      if (strictly_same(x, c.v)) return true;
    return false;
  }
  if (in.kind == Kind::String && c.v.kind == Kind::String)
    return c.v.s.empty() || !occurrences(in.s, c.v.s, 1).empty();
  if (in.attributes() && c.v.kind == Kind::String) return in.o->find(c.v.s) != nullptr;
  return false;
}

// gt, ge, lt, le and their long names: numbers only.
bool compare(const Call& c) {
  const Value& y = arg(c);
  if (!c.v.is_number() || !y.is_number()) c.fail("the test '" + c.name + "' does not apply to a " + kind_name(c.v.kind));
  const double a = c.v.num(), b = y.num();
  if (c.name == "gt" || c.name == "greaterthan") return a > b;
  if (c.name == "ge") return a >= b;
  if (c.name == "lt" || c.name == "lessthan") return a < b;
  return a <= b;
}

const std::map<std::string, Test, std::less<>>& tests() {
  static const std::map<std::string, Test, std::less<>> table = {
      {"defined", defined},   {"undefined", undefined},     {"none", none},         {"boolean", boolean},
      {"true", is_true},      {"false", is_false},          {"string", string},     {"number", number},
      {"integer", integer},   {"float", is_float},          {"iterable", iterable}, {"mapping", mapping},
      {"sequence", sequence}, {"callable", callable},       {"lower", lower},       {"upper", upper},
      {"odd", odd_or_even},   {"even", odd_or_even},        {"divisibleby", divisibleby},
      {"equalto", equalto},   {"eq", equalto},              {"==", equalto},        {"ne", ne},
      {"!=", ne},             {"in", in},                   {"gt", compare},        {"ge", compare},
      {"lt", compare},        {"le", compare},              {"greaterthan", compare}, {"lessthan", compare},
  };
  return table;
}

}  // namespace

bool is_test(std::string_view name) { return tests().count(name) > 0; }

bool call_test(const Call& c) { return tests().find(c.name)->second(c); }

}  // namespace tessera::llm::jinja
