// The functions a template may call by name: raise_exception, namespace,
// dict, range and strftime_now (and its own macros, in the renderer).
#include <chrono>
#include <ctime>
#include <map>

#include "llm/jinja/builtins.h"
#include "llm/jinja/renderer.h"
#include "tessera/core/error.h"

namespace tessera::llm::jinja {
namespace {

using Function = Value (*)(const Call&);

Value raise_exception(const Call& c) {
  TS_ERROR(c.r.box().what(), ": line ", c.line, ": the template raised: ",
           c.a.pos.empty() ? std::string() : c.r.text(c.a.pos[0], c.line));
}

// namespace() and dict(): from dicts and keyword arguments.
Value namespace_(const Call& c) {
  Value ns = Value::object(c.name == "namespace" ? Kind::Namespace : Kind::Object);
  for (const Value& p : c.a.pos) {
    if (!p.attributes()) c.fail(c.name + "() takes a dict or keyword arguments");
    for (const auto& [k, v] : p.o->items) ns.o->set(k, v);
  }
  for (const auto& [k, v] : c.a.kw) ns.o->set(k, v);
  return ns;
}

Value range(const Call& c) {
  for (const Value& p : c.a.pos)
    if (p.kind != Kind::Int) c.fail("range() takes integers");
  if (c.a.pos.empty() || c.a.pos.size() > 3) c.fail("range() takes 1 to 3 integers");
  int64_t start = 0, stop = c.a.pos[0].i, step = 1;
  if (c.a.pos.size() >= 2) start = c.a.pos[0].i, stop = c.a.pos[1].i;
  if (c.a.pos.size() == 3) step = c.a.pos[2].i;
  if (step == 0) c.fail("range() step must not be zero");
  Value v = Value::array();
  for (int64_t k = start; step > 0 ? k < stop : k > stop;) {
    c.r.box().step(c.line);
    c.r.box().fits(static_cast<int64_t>((v.a->size() + 1) * sizeof(Value)), c.line);
    v.a->push_back(Value::integer(k));
    if (__builtin_add_overflow(k, step, &k)) break;  // past the end of 64 bits: past stop too
  }
  return v;
}

Value strftime_now(const Call& c) {
  if (c.a.pos.empty() || c.a.pos[0].kind != Kind::String) c.fail("strftime_now() takes a format string");
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[256];
  const size_t n = std::strftime(buf, sizeof buf, c.a.pos[0].s.c_str(), &tm);
  return Value::string(std::string(buf, n));
}

const std::map<std::string, Function, std::less<>>& functions() {
  static const std::map<std::string, Function, std::less<>> table = {
      {"raise_exception", raise_exception}, {"namespace", namespace_}, {"dict", namespace_},
      {"range", range},                     {"strftime_now", strftime_now},
  };
  return table;
}

}  // namespace

bool is_function(std::string_view name) { return functions().count(name) > 0; }

const char* function_names() { return "raise_exception, namespace, range, strftime_now, dict"; }

Value call_function(const Call& c) {
  const auto it = functions().find(c.name);
  if (it == functions().end()) c.fail("'" + c.name + "' is not a function of Tessera's Jinja subset");
  return it->second(c);
}

}  // namespace tessera::llm::jinja
