#pragma once
// One small, valid call of every op of ops.def through ops::invoke (the way a
// graph node runs it): its tensor inputs and attributes. The table test
// (test_op_table.cpp) checks each op's declared properties on it.
#include <vector>
#include "tessera/ops/attrs.h"
#include "tessera/core/tensor.h"
namespace tessera::testing {
struct OpSample {
  TensorList inputs;  // in the op's signature order; an undefined Tensor for an optional one left out
  ops::Attrs attrs;
};
// Indexed by OpId (ops.def order). Built on first use; samples are deterministic (fixed seeds).
const std::vector<OpSample>& op_samples();
}  // namespace tessera::testing
