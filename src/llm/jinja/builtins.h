#pragma once
// The filters, tests, methods and functions of Tessera's Jinja subset, each
// a table row (filters.cpp, tests.cpp, methods.cpp, functions.cpp): the
// parser asks whether a name is one, the renderer calls it.
#include <string_view>

#include "llm/jinja/value.h"

namespace tessera::llm::jinja {

class Renderer;
struct Scope;

// A call's arguments after evaluation: positional, then key=value.
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  // The k-th positional argument, or the keyword `key`.
  const Value* get(size_t k, const char* key) const;
};

// What a filter, method, test or function sees of its call.
struct Call {
  Renderer& r;
  const std::string& name;
  const Value& v;  // the operand (filters, tests), the object (methods); none for functions
  const Args& a;
  int line;
  Scope& scope;
  [[noreturn]] void fail(const std::string& msg) const;
  // "the filter 'x' does not apply to a list"
  [[noreturn]] Value not_for() const;
};

bool is_filter(std::string_view name);
bool is_test(std::string_view name);
bool is_method(std::string_view name);
bool is_function(std::string_view name);
// A comma-separated list of the functions, for errors.
const char* function_names();

Value call_filter(const Call& c);
bool call_test(const Call& c);  // `c.a` holds the test's argument, if any, at position 0
Value call_method(const Call& c);
Value call_function(const Call& c);

}  // namespace tessera::llm::jinja
