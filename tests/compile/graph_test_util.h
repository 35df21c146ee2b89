#pragma once
// Helpers shared by the compiler's tests.
#include <string_view>

#include "tessera/compile/graph.h"

namespace tessera::testing {

// How many nodes of `g` call `op`.
inline int count_op(const compile::Graph& g, std::string_view op) {
  int n = 0;
  for (const compile::Node* node : g.nodes()) n += node->op_name() == op;
  return n;
}

}  // namespace tessera::testing
