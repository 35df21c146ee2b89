#pragma once
// The inference runtime: a model loaded from disk, independent of the code
// that built it.
//
//   tessera::Model m = tessera::load("resnet18.tsr");   // or "model.onnx"
//   Tensor logits = m.run({images})[0];
//
// run() checks inputs against the model's signature (count, dtype, rank,
// sizes) and is safe to call from several threads at once.
#include <memory>
#include <string>
#include <vector>

#include "tessera/compile/executor.h"

namespace tessera {

class Model {
 public:
  // `optimize`: run the compiler's passes first (fusion, folding, ...).
  explicit Model(compile::Graph g, bool optimize = true);

  TensorList run(const TensorList& inputs) const;
  Tensor operator()(const Tensor& x) const;

  struct Port {
    std::string name;
    DType dtype;
    std::vector<std::string> shape;  // "784", or a dynamic dimension "B"
  };
  std::vector<Port> inputs() const;
  std::vector<Port> outputs() const;
  // Inputs of the model's signature with every dynamic dimension `dynamic`:
  // zeros, or with `random` standard normal floats (integer inputs stay 0).
  // For warm-up, `tessera run` without inputs, and fuzzing.
  TensorList example_inputs(int64_t dynamic = 1, bool random = false) const;
  const compile::Graph& graph() const { return exe_->graph(); }

 private:
  std::shared_ptr<const compile::Executable> exe_;
};

// A directory written by compile::save (graph.json + weights.safetensors), or
// an ONNX file (*.onnx).
Model load(const std::string& path);

}  // namespace tessera
