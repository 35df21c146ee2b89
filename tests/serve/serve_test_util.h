#pragma once
// A small classifier the serving tests serve: Linear(in, hidden) -> ReLU ->
// Linear(hidden, out), in eval mode, and its compiled graph with input "x"
// and a dynamic batch dimension "N".
#include <memory>
#include <string>

#include "tessera/compile/compile.h"
#include "tessera/compile/serialize.h"
#include "tessera/nn/nn.h"
#include "tessera/ops/ops.h"

namespace tessera::testing {

inline std::shared_ptr<nn::Sequential> serve_mlp(int64_t in, int64_t hidden, int64_t out, uint64_t seed) {
  manual_seed(seed);
  auto net = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(in, hidden), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(hidden, out)});
  net->eval();
  return net;
}

inline compile::Graph serve_graph(nn::Module& net, int64_t in) {
  compile::CaptureOptions co;
  co.dynamic.push_back({0, 0, "N"});
  co.input_names = {"x"};
  return compile::capture_module(net, ops::randn({2, in}), co);
}

}  // namespace tessera::testing
