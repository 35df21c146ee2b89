#pragma once
// A LoRA adapter as the engine serves it (Note [LoRA] in lora.h): read from
// llama.cpp's GGUF adapter or PEFT's adapter_model.safetensors, and added
// after each base projection of the rows whose request asked for it.
//
//   auto ad = llm::LoraAdapter::load("adapter.gguf", model->spec());
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "tessera/llm/engine.h"

namespace tessera::llm {

// An adapter for the engine, read from a GGUF adapter or from PEFT's
// adapter_model.safetensors (adapter_config.json beside it gives alpha);
// every pair is checked against the model's shapes.
class LoraAdapter final : public Adapter {
 public:
  static std::shared_ptr<const LoraAdapter> load(const std::string& path, const ModelSpec& spec);
  void add(int64_t layer, Projection p, const float* x, int64_t ldx, float* y, int64_t ldy,
           int64_t rows) const override;
  int64_t pairs() const;  // projections it changes

 private:
  struct Pair {
    int64_t rank = 0, in = 0, out = 0;
    float scale = 0;
    std::vector<float> a, b;  // [rank, in], [out, rank]
  };
  explicit LoraAdapter(const ModelSpec& spec) : spec_(spec), layers_(static_cast<size_t>(spec.n_layers)) {}
  // A pair for `p` of `layer`; hf_rope_heads > 0: B's rows are in Hugging
  // Face's RoPE order for that many heads (PEFT's files) and are reordered
  // to GGUF's, which the engine's weights use.
  void set(int64_t layer, Projection p, const Tensor& a, const Tensor& b, double alpha, const std::string& what,
           int64_t hf_rope_heads = 0);
  ModelSpec spec_;
  std::vector<std::array<Pair, 7>> layers_;
};

}  // namespace tessera::llm
