#pragma once
// Helpers shared by the compiler's tests.
#include <memory>
#include <string_view>

#include "tessera/autograd/grad_mode.h"
#include "tessera/compile/capture.h"
#include "tessera/compile/model.h"
#include "tessera/compile/onnx.h"
#include "tessera/compile/passes.h"
#include "tessera/nn/zoo/zoo.h"
#include "tessera/ops/ops.h"

namespace tessera::testing {

// How many nodes of `g` call `op`.
inline int count_op(const compile::Graph& g, std::string_view op) {
  int n = 0;
  for (const compile::Node* node : g.nodes()) n += node->op_name() == op;
  return n;
}

// A small GPT (eval mode, seeded) and the same model exported to ONNX by
// Tessera (batch and sequence dynamic) and imported back: how a model comes
// back from an ONNX file, for the passes that rebuild fused ops from it.
struct ExportedGpt {
  std::shared_ptr<nn::zoo::GPT> gpt;
  Model imported;
};
inline ExportedGpt exported_small_gpt(uint64_t seed) {
  manual_seed(seed);
  nn::zoo::GPTConfig gc;
  gc.vocab_size = 16, gc.block_size = 16, gc.n_layer = 2, gc.n_head = 2, gc.n_embd = 8;
  auto gpt = std::make_shared<nn::zoo::GPT>(gc);
  gpt->eval();
  NoGradGuard ng;
  compile::CaptureOptions co;
  co.dynamic = {{0, 0, "B"}, {0, 1, "T"}};
  compile::Graph g = compile::capture([&](const TensorList& in) { return TensorList{(*gpt)(in[0])}; },
                                      {ops::randint(0, 16, {2, 5})}, gpt->named_parameters(), co);
  compile::optimize(g, {.disable = compile::tessera_only_passes()});
  return {gpt, Model(compile::import_onnx_bytes(compile::onnx_bytes(g)))};
}

}  // namespace tessera::testing
