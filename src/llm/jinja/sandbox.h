#pragma once
// The limits one render runs under: steps, nesting, time, and the bytes it
// builds (Note [What a template may build]).
#include <chrono>
#include <cstdint>
#include <string>

#include "tessera/llm/chat_template.h"

namespace tessera::llm::jinja {

// Note [What a template may build]
// A template's source is bounded, but what it computes is not: `s ~ s` forty
// times, a list added to itself, `replace` or `indent` inside one another,
// or `tojson` of a list that holds one list many times over each take a few
// hundred bytes of source and grow without end. So every string and list a
// render makes, and every byte it writes, is charged against one budget:
// max_built bytes, plus built_per_context_byte for each byte of the context
// (a template transforms its messages a bounded number of times; it cannot
// grow from nothing). Charges are never refunded. Work whose size is known
// before it is done (a join, a replace, an indent, a split) is checked
// before it allocates; the rest is charged as it is made, so a render holds
// at most a small multiple of the budget. Steps and wall time bound the
// rest: a render past max_seconds stops at its next step.
class Sandbox {
 public:
  Sandbox(const ChatTemplateLimits& lim, const std::string& what, int64_t context_bytes);

  [[noreturn]] void fail(int line, const std::string& msg) const;
  // One statement, loop iteration, call, filter or element of a filter's
  // pass; also where the clock is read.
  void step(int line);
  // `bytes` were built.
  void charge(int64_t bytes, int line);
  // A string of `bytes` is being built: fails when it could not be charged.
  void fits(int64_t bytes, int line) const;
  // Nesting of blocks, expressions and macro calls while rendering.
  void enter(int line);
  void leave() { --depth_; }

  const std::string& what() const { return what_; }
  const ChatTemplateLimits& limits() const { return lim_; }

 private:
  [[noreturn]] void over_budget(int line) const;

  const ChatTemplateLimits& lim_;
  const std::string& what_;
  int64_t budget_, left_;
  int64_t steps_ = 0;
  int depth_ = 0;
  std::chrono::steady_clock::time_point deadline_;
};

// Enters one level of nesting for its lifetime.
struct Deeper {
  Sandbox& box;
  Deeper(Sandbox& b, int line) : box(b) { box.enter(line); }
  ~Deeper() { box.leave(); }
  Deeper(const Deeper&) = delete;
  Deeper& operator=(const Deeper&) = delete;
};

}  // namespace tessera::llm::jinja
