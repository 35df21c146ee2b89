#pragma once
// tessera::Error and the checks that raise it. Every message names the op, the
// argument and the values involved, and says what would be legal.
#include <locale>
#include <sstream>
#include <stdexcept>
#include <string>

namespace tessera {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An allocation over the memory limit (set_memory_limit) or beyond what the
// system gives; the message says what was asked and where memory stands.
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

// A broken internal invariant (TS_INTERNAL_ASSERT): Tessera's bug, not the
// caller's input. A server answers it with 500 and logs it.
class InternalError : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <typename... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  os.imbue(std::locale::classic());  // numbers in messages read the same in every locale
  (os << ... << args);
  return os.str();
}
[[noreturn]] void throw_error(std::string msg);
[[noreturn]] void throw_internal_error(std::string msg);
}  // namespace detail

}  // namespace tessera

// TS_CHECK(cond, parts...): throws tessera::Error with the parts streamed together.
#define TS_CHECK(cond, ...)                                          \
  do {                                                               \
    if (!(cond)) [[unlikely]]                                        \
      ::tessera::detail::throw_error(::tessera::detail::str(__VA_ARGS__)); \
  } while (0)

#define TS_ERROR(...) ::tessera::detail::throw_error(::tessera::detail::str(__VA_ARGS__))

// Internal invariants (not user input): kept in release builds, cheap.
#define TS_INTERNAL_ASSERT(cond)                                                   \
  do {                                                                             \
    if (!(cond)) [[unlikely]]                                                      \
      ::tessera::detail::throw_internal_error(::tessera::detail::str(              \
          "internal error: ", #cond, " failed at ", __FILE__, ":", __LINE__,       \
          " (please report this as a Tessera bug)"));                              \
  } while (0)
