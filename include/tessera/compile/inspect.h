#pragma once
// What a graph holds, for `tessera inspect` and the docs: inputs and outputs,
// an op histogram, parameter count and bytes, and a FLOPs estimate.
#include <map>
#include <string>

#include "tessera/compile/graph.h"

namespace tessera::compile {

struct GraphSummary {
  std::map<std::string, int> op_counts;
  int64_t parameters = 0;  // elements in parameters
  int64_t parameter_bytes = 0;
  int64_t constant_bytes = 0;
  // Floating-point operations of one run with every dynamic dimension set to
  // `symbol_value`: 2 per multiply-add in matmul/linear/conv/attention, one
  // per output element elsewhere (a rough count for pointwise work).
  int64_t flops = 0;
  int64_t symbol_value = 1;
};

GraphSummary summarize(const Graph& g, int64_t symbol_value = 1);
// The text `tessera inspect` prints.
std::string summary_text(const Graph& g, int64_t symbol_value = 1);

}  // namespace tessera::compile
