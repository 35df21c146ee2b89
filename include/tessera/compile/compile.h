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

namespace tessera::compile {

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
  struct State;
  std::shared_ptr<State> state_;
};

// `params`: tensors `fn` reads that stay live references (see capture()).
CompiledFunction compile(Function fn, CompileOptions opts = {}, NamedTensors params = {});
// The module's forward (one tensor in, one out) with its parameters and buffers.
CompiledFunction compile(std::shared_ptr<nn::Module> module, CompileOptions opts = {});

}  // namespace tessera::compile
