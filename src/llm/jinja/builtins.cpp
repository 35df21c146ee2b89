#include "llm/jinja/builtins.h"

#include "llm/jinja/renderer.h"

namespace tessera::llm::jinja {

const Value* Args::get(size_t k, const char* key) const {
  if (k < pos.size()) return &pos[k];
  for (const auto& [n, v] : kw)
    if (n == key) return &v;
  return nullptr;
}

void Call::fail(const std::string& msg) const { r.fail(line, msg); }

Value Call::not_for() const { fail("the filter '" + name + "' does not apply to a " + kind_name(v.kind)); }

}  // namespace tessera::llm::jinja
