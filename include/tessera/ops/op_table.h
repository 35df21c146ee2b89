#pragma once
// The operator list (src/ops/ops.def) as data: names, families and backward
// support, for the docs check, the profiler and the compiler.
#include <cstdint>
#include <string_view>

namespace tessera::ops {

enum class GradSupport : uint8_t { kGradGrad, kFused, kFirstOnly, kNone };

struct OpEntry {
  std::string_view name;
  std::string_view family;
  GradSupport grad;
};

// Every op, in ops.def order.
const OpEntry* op_table();
int op_count();

}  // namespace tessera::ops
