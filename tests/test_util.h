#pragma once
// Helpers shared by the tests: tensor comparison and gradient checking by
// central finite differences in f64.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "tessera/autograd/engine.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/ops/ops.h"

namespace tessera::testing {

using Fn = std::function<Tensor(const TensorList&)>;

// Checks |a - b| <= atol + rtol * |b| elementwise (NaNs must match), with
// shapes equal; returns a failure describing the worst element.
::testing::AssertionResult all_close(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);

#define EXPECT_CLOSE(a, b, ...) EXPECT_TRUE(::tessera::testing::all_close((a), (b), ##__VA_ARGS__))

// A fresh, empty directory under the system temp dir, unique to this process
// and `name` (tests that write files clean it up themselves).
std::string scratch_dir(const std::string& name);

// Flips the bits of the byte 3 bytes before the end of a file (a tensor's
// data in a safetensors file): a damaged shard for the CRC32 to find.
inline void damage_file(const std::string& path) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f) << "cannot open " << path;
  f.seekg(-3, std::ios::end);
  char ch = 0;
  f.get(ch);
  f.seekp(-3, std::ios::end);
  f.put(static_cast<char>(ch ^ 0x5a));
}

// The message of the tessera::Error that `f` throws ("" if it throws none).
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// `stmt` throws a tessera::Error whose message holds `want`.
#define EXPECT_THROW_MSG(stmt, want)                                                           \
  do {                                                                                         \
    const std::string e_ = ::tessera::testing::error_of([&] { stmt; });                        \
    EXPECT_NE(e_.find(want), std::string::npos) << "wanted '" << want << "', got: " << e_;     \
  } while (0)

// Runs the tessera CLI with `args`; returns its exit status, and its stdout and
// stderr in *out.
int cli(const std::string& args, std::string* out);

// The CLI run as a child process with extra environment entries ("K=V"):
// how it ended, what it printed (stdout and stderr), and its peak RSS.
struct CliRun {
  int exit_code = -1;  // -1 when it did not exit normally
  int signal = 0;      // the signal that ended it, or 0
  std::string output;
  int64_t max_rss_kb = 0;
};
CliRun run_cli(const std::vector<std::string>& args, const std::vector<std::string>& env = {});

// The CLI running as a child process (a server), its stdout and stderr on a pipe.
struct CliProcess {
  int pid = -1, out = -1;
  std::string log;  // what it printed so far
  // Reads its output until the log holds `text`; false if the output ends first.
  bool read_until(const std::string& text);
  // The port in "listening on http://127.0.0.1:PORT/" (0 when the log has none).
  int port() const;
  // SIGTERM, then its exit status (-1 if it did not exit normally); the rest of its output goes to log.
  int stop();
};
CliProcess start_cli(const std::vector<std::string>& args);

// A reference a test compares against, named by an environment variable
// that scripts/llm_reference.sh sets (llama.cpp's vocabulary files and test
// vectors, node-llama-cpp's outputs). Without it the test skips, except
// under CI (CI set), where the test command makes it: there a missing
// reference fails the test rather than passing it unchecked, unless the
// reference script said why it could not make it on this machine
// (TESSERA_REFERENCES_INCOMPLETE), which the skip message repeats.
#define TESSERA_REFERENCE(var, name)                                                                   \
  const char* var = std::getenv(name);                                                                 \
  if (!var) {                                                                                          \
    if (const char* why = std::getenv("TESSERA_REFERENCES_INCOMPLETE")) GTEST_SKIP() << name << ": " << why; \
    if (std::getenv("CI")) GTEST_FAIL() << name << " is not set, and CI must check against it "       \
                                           "(scripts/test.sh runs scripts/llm_reference.sh first)";  \
    GTEST_SKIP() << name << " is not set (scripts/llm_reference.sh or scripts/llm_compat.sh sets it)";  \
  }

// f64 random inputs, reproducible.
Tensor rand_f64(IntArrayRef shape, double lo = -1.0, double hi = 1.0, uint64_t seed = 0);

// Gradient check of fn at inputs (each f64, requires_grad set by the caller):
// compares autograd's vector-Jacobian product with central differences.
::testing::AssertionResult gradcheck(const Fn& fn, const TensorList& inputs, double eps = 1e-6, double atol = 1e-5,
                                     double rtol = 1e-4);
// Second-order check: differentiates <grad(fn)(inputs) , u> numerically.
::testing::AssertionResult gradgradcheck(const Fn& fn, const TensorList& inputs, double eps = 1e-6,
                                         double atol = 1e-4, double rtol = 1e-3);

}  // namespace tessera::testing
