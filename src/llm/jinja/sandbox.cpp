#include "llm/jinja/sandbox.h"

#include <limits>

#include "tessera/core/error.h"

namespace tessera::llm::jinja {

Sandbox::Sandbox(const ChatTemplateLimits& lim, const std::string& what, int64_t context_bytes)
    : lim_(lim), what_(what) {
  int64_t extra = 0;
  if (__builtin_mul_overflow(context_bytes, lim.built_per_context_byte, &extra) ||
      __builtin_add_overflow(lim.max_built, extra, &budget_))
    budget_ = std::numeric_limits<int64_t>::max();
  left_ = budget_;
  deadline_ = std::chrono::steady_clock::now() +
              std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(lim.max_seconds));
}

void Sandbox::fail(int line, const std::string& msg) const { TS_ERROR(what_, ": line ", line, ": ", msg); }

void Sandbox::step(int line) {
  if (++steps_ > lim_.max_steps)
    fail(line, "the template ran more than " + std::to_string(lim_.max_steps) + " steps (a limit of the sandbox)");
  if (std::chrono::steady_clock::now() > deadline_)
    fail(line, "the template ran longer than " + std::to_string(lim_.max_seconds) + " s (a limit of the sandbox)");
}

void Sandbox::over_budget(int line) const {
  fail(line, "the template built more than " + std::to_string(budget_) +
                 " bytes of strings, lists and output (a limit of the sandbox: " + std::to_string(lim_.max_built) +
                 " plus " + std::to_string(lim_.built_per_context_byte) + " for each byte of its input)");
}

void Sandbox::charge(int64_t bytes, int line) {
  if (bytes > left_) {
    left_ = -1;
    over_budget(line);
  }
  left_ -= bytes;
}

void Sandbox::fits(int64_t bytes, int line) const {
  if (bytes > left_) over_budget(line);
}

void Sandbox::enter(int line) {
  if (++depth_ > lim_.max_depth)
    fail(line, "the template nests deeper than " + std::to_string(lim_.max_depth) + " levels when it runs");
}

}  // namespace tessera::llm::jinja
