#pragma once
// Dense layers and shape helpers: Identity, Linear, Bilinear, Embedding,
// Flatten, Unflatten. Default initialisation follows PyTorch.
#include <optional>

#include "tessera/nn/module.h"

namespace tessera::nn {

struct Identity : Module {
  Identity() : Module("Identity") {}
  Tensor forward(const Tensor& x) override { return x; }
};

// y = x W^T + b. weight [out, in]; W and b ~ U(-1/sqrt(in), 1/sqrt(in)).
struct Linear : Module {
  int64_t in_features, out_features;
  Tensor weight, bias;  // bias undefined when bias=false
  // A weight stored quantized (quant::quantize_weights): the f32 "weight" is
  // gone and buffers "qweight", "weight_scales", "weight_mins" (those the
  // format has) take its place; forward runs ops::quantized_linear.
  struct Quantized {
    std::string format;                 // q8_0, q4_0, int8, int4
    int64_t group = 0;                  // int4 only
    std::string activations = "float";  // or "int8"
    Tensor qweight, scales, mins;
  };
  std::optional<Quantized> quantized;
  // A low-rank adapter (LoRA, llm/lora.h): y += (alpha / rank) (x A^T) B^T
  // with parameters "lora_A" [rank, in] and "lora_B" [out, rank].
  struct Lora {
    int64_t rank = 0;
    double alpha = 0;
    Tensor A, B;
    double scale() const { return alpha / static_cast<double>(rank); }
  };
  std::optional<Lora> lora;
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  // Adds a LoRA pair as PEFT initializes it (A as this layer's weight, B
  // zero: the layer computes what it did) and freezes the weight and bias.
  void add_lora(int64_t rank, double alpha);
  // Swaps the f32 weight for q (its shapes are checked by quantized_linear on
  // the first forward); the bias stays a float parameter.
  void set_quantized(Quantized q);
  void reset_parameters() override;
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
};

// y_k = x1^T W_k x2 + b_k. weight [out, in1, in2]; U(-1/sqrt(in1), 1/sqrt(in1)).
struct Bilinear : Module {
  int64_t in1_features, in2_features, out_features;
  Tensor weight, bias;
  Bilinear(int64_t in1_features, int64_t in2_features, int64_t out_features, bool bias = true);
  void reset_parameters() override;
  Tensor forward(const Tensor& x1, const Tensor& x2);
  std::string extra_repr() const override;
};

// Rows of weight [num_embeddings, embedding_dim] looked up by integer ids; N(0, 1),
// with the padding_idx row zero (and receiving no gradient).
struct Embedding : Module {
  int64_t num_embeddings, embedding_dim;
  std::optional<int64_t> padding_idx;
  Tensor weight;
  Embedding(int64_t num_embeddings, int64_t embedding_dim, std::optional<int64_t> padding_idx = {});
  void reset_parameters() override;
  Tensor forward(const Tensor& ids) override;
  std::string extra_repr() const override;
};

// y = x W^T with W an Embedding's weight [num_embeddings, embedding_dim]: an
// output layer tied to the input embedding (GPT-2, tied Llamas). The weight
// stays the embedding's (one parameter, one state-dict entry); this module
// only uses it, through its own forward, so that hooks see the use.
struct TiedLinear : Module {
  explicit TiedLinear(std::shared_ptr<Embedding> embedding);
  Tensor forward(const Tensor& x) override;
  std::vector<Tensor> shared_parameters() const override { return {embedding->weight}; }
  std::string extra_repr() const override;

  std::shared_ptr<Embedding> embedding;  // not a child: its weight is not this module's
};

struct Flatten : Module {
  int64_t start_dim, end_dim;
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1)
      : Module("Flatten"), start_dim(start_dim), end_dim(end_dim) {}
  Tensor forward(const Tensor& x) override { return x.flatten(start_dim, end_dim); }
  std::string extra_repr() const override;
};

struct Unflatten : Module {
  int64_t dim;
  Shape sizes;
  Unflatten(int64_t dim, IntArrayRef sizes) : Module("Unflatten"), dim(dim), sizes(sizes.begin(), sizes.end()) {}
  Tensor forward(const Tensor& x) override { return x.unflatten(dim, sizes); }
  std::string extra_repr() const override;
};

}  // namespace tessera::nn
