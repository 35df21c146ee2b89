#pragma once
// Graph capture: runs a function once (or a few times) on example inputs with
// a recorder installed in the ops, and returns the graph of op calls it made.
//
// What is captured is the path the example took: Python-style control flow in
// the function (if, for over a list of layers) is unrolled. Reading a value
// computed from the inputs (item(), to_vector()) — the sign of data-dependent
// control flow — is an error naming the op that produced the value.
//
// Dynamic dimensions: a dimension marked dynamic (batch, sequence length)
// becomes a symbol. The function is traced at the example size and at size+1
// of every dynamic dimension (2^k traces for k of them); every size and every
// integer attribute that differs is fitted as a multilinear polynomial in the
// symbols (B*T*C for a reshape), and one more trace at other sizes checks the
// fit. A graph whose structure, constants or float attributes change with a
// dynamic dimension is reported, naming the node.
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tessera/compile/graph.h"

namespace tessera::compile {

using Function = std::function<TensorList(const TensorList&)>;
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

struct DynamicDim {
  int input = 0;     // which input
  int dim = 0;       // which of its dimensions (negative counts from the end)
  std::string name;  // the symbol ("B", "T"); inputs sharing a name share the size
};

struct CaptureOptions {
  std::vector<DynamicDim> dynamic;
  std::vector<std::string> input_names;  // default x0, x1, ...
  // Trace once more with the inputs' elements reordered and check that every
  // constant came out the same: a tensor computed from the inputs outside the
  // ops (a kernel called directly, values copied through the host) would
  // otherwise be frozen into the graph.
  bool check_constants = true;
  // Record with gradients enabled (a training graph runs the ops with autograd).
  bool grad = false;
};

// `params`: tensors the function reads that stay live references in the
// graph (a module's parameters and buffers), by name. Any other tensor it
// reads becomes a constant.
Graph capture(const Function& fn, const TensorList& example_inputs, const NamedTensors& params = {},
              const CaptureOptions& opts = {});

}  // namespace tessera::compile
