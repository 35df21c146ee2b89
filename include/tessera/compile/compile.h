#pragma once
// compile(): a function or a module as an optimized graph, traced on first
// call and re-traced when the inputs' signature changes.
//
//   auto f = compile::compile(model, {.dynamic = {{0, 0, "B"}}});
//   Tensor y = f(x);            // traces, optimizes, runs the graph
//   Tensor z = f(x2);           // another batch size: same graph
//
// The guard of a cached graph: each input's dtype, rank and static sizes (a
// dynamic size only as "0", "1" or "2 or more"), grad mode, autocast state,
// the module's train/eval mode and the identity of its parameter tensors.
// The cache holds `cache_size` graphs; the oldest is dropped beyond that.
#include <memory>
#include <mutex>

#include "tessera/compile/capture.h"
#include "tessera/compile/executor.h"
#include "tessera/compile/passes.h"

namespace tessera::nn {
class Module;
}
namespace tessera::optim {
class Optimizer;
}

namespace tessera::compile {

class TrainStep;

struct CompileOptions {
  std::vector<DynamicDim> dynamic;
  PassOptions passes;
  size_t cache_size = 8;
  bool check_constants = true;
};

class CompiledFunction {
 public:
  TensorList operator()(const TensorList& inputs);
  Tensor operator()(const Tensor& x);

  // How many times the function was traced (one per new signature).
  int traces() const;
  int cache_entries() const;
  // The graph that ran last (optimized); null before the first call.
  std::shared_ptr<const Executable> last() const;

 private:
  friend CompiledFunction compile(Function, CompileOptions, NamedTensors);
  friend CompiledFunction compile(std::shared_ptr<nn::Module>, CompileOptions);
  friend class TrainStep;
  friend TrainStep compile_train_step(std::shared_ptr<nn::Module>, std::function<Tensor(const TensorList&)>,
                                      optim::Optimizer*, CompileOptions);
  struct State;
  std::shared_ptr<State> state_;
};

// `params`: tensors `fn` reads that stay live references (see capture()).
CompiledFunction compile(Function fn, CompileOptions opts = {}, NamedTensors params = {});
// The module's forward (one tensor in, one out) with its parameters and buffers.
CompiledFunction compile(std::shared_ptr<nn::Module> module, CompileOptions opts = {});

// A module's forward (one tensor in, one out) traced into a graph whose
// parameters are the module's parameters and buffers (live references).
Graph capture_module(nn::Module& module, const Tensor& example, const CaptureOptions& opts = {});

// A training step as one graph: the forward, the loss and the backward to
// every parameter are captured together (a joint graph, like AOTAutograd) and
// optimized as a whole — elementwise chains of the backward fuse like those of
// the forward, and one memory plan covers both.
//
//   auto step = compile::compile_train_step(model, [&](const TensorList& b) {
//     return ops::cross_entropy((*model)(b[0]), b[1]);
//   }, opt.get(), {.dynamic = {{0, 0, "B"}, {1, 0, "B"}}});
//   for (auto& [x, y] : batches) Tensor loss = step({x, y});
//
// Each call runs the graph, accumulates the gradients into the parameters'
// .grad as backward() would (parameters the loss does not reach get none),
// then, if an optimizer was given, runs optimizer->step() and zero_grad().
// Without an optimizer the caller steps it: gradient accumulation over
// several calls works as with backward(). The optimizer's update runs as its
// own fused kernels after the graph, not as graph nodes.
//
// The graph is retraced on the same guards as compile(module) (input
// signature, autocast, train/eval mode, parameter identity). Ops whose
// gradient is a fused kernel record that kernel as an op of its own
// (softmax_backward, layer_norm_backward, ...; docs/ops.md).
class TrainStep {
 public:
  // Runs one step on `inputs` (what the loss function takes); returns the loss.
  Tensor operator()(const TensorList& inputs);
  int traces() const;
  std::shared_ptr<const Executable> last() const;

 private:
  friend TrainStep compile_train_step(std::shared_ptr<nn::Module>, std::function<Tensor(const TensorList&)>,
                                      optim::Optimizer*, CompileOptions);
  struct Grads;
  CompiledFunction graph_;
  std::shared_ptr<nn::Module> module_;
  optim::Optimizer* optimizer_ = nullptr;
  std::shared_ptr<Grads> grads_;
};

TrainStep compile_train_step(std::shared_ptr<nn::Module> module, std::function<Tensor(const TensorList&)> loss,
                             optim::Optimizer* optimizer = nullptr, CompileOptions opts = {});

}  // namespace tessera::compile
