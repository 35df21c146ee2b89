#pragma once
// The shape of a language model (ModelSpec), read from a GGUF file's
// metadata and checked against its tensors, and how its positions become
// RoPE angles. No weights are read here: llm::Model (model.h) maps them.
//
//   llm::ModelSpec s = llm::read_model_spec(llm::GgufFile::open("model.gguf"));
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/core/shape.h"
#include "tessera/llm/gguf.h"

namespace tessera::llm {

// How positions become RoPE angles: llama.cpp's scaling options, read from
// {arch}.rope.scaling.* and the rope_freqs.weight tensor.
struct RopeScaling {
  enum class Type : uint8_t { None, Linear, Yarn };
  Type type = Type::None;
  double factor = 1.0;            // the context extension: angles at position / factor (YaRN mixes per dimension)
  int64_t original_context = 0;   // YaRN: the context before extension (0: the model's)
  double attn_factor = 1.0;       // {arch}.rope.scaling.attn_factor: scales cos and sin
  double beta_fast = 32.0, beta_slow = 1.0;  // YaRN's correction range
  double ext_factor = -1.0;       // YaRN's extrapolation mix (< 0: 1 for YaRN, 0 otherwise)
  std::vector<float> freq_factors;  // divides each pair's frequency (Llama 3.1); empty: none
};

// The shape of a model the engine runs: "llama" (RMSNorm, RoPE on adjacent
// pairs, SwiGLU, grouped-query attention) or "gpt2" (LayerNorm with biases,
// learned positions, biases on every product, GELU).
struct ModelSpec {
  std::string arch = "llama";
  bool gelu_erf = false;  // gpt2: the exact GELU (Tessera's GPT) instead of the tanh form
  int64_t vocab = 0, dim = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, hidden = 0;
  int64_t context = 0;  // positions the model was trained for
  float norm_eps = 1e-5f;
  double rope_theta = 10000.0;
  RopeScaling rope;
  bool tied_output = false;  // no output.weight: the token embedding gives the logits
  bool biases = false;       // gpt2: every norm and product has a bias
};

// cos and sin of each dimension pair's RoPE angle at `position`, interleaved
// (head_dim floats), computed as ggml's rope cache does: float arithmetic,
// the frequency stepped by repeated products, YaRN's ramp and magnitude.
void rope_cos_sin(const ModelSpec& s, int64_t position, float* out);
// The scaling a "llama" GGUF asks for (an error naming an unknown type).
RopeScaling rope_scaling_from_gguf(const GgufFile& f, int64_t head_dim);

// The spec a "llama" or "gpt2" GGUF describes, read from its metadata (an
// error names a missing, out-of-range or inconsistent key). The claimed
// layer count is checked against the tensors present before anything
// proportional to it is built, and every tensor of gguf_tensors(spec) must
// be in the file in its shape, with no other. The engine's own limits
// (head size, weight types) are Model's to check; the bridges to training
// (llama_gguf.h, gpt_gguf.h) build their configurations on this.
ModelSpec read_model_spec(const GgufFile& f);

// One tensor of a model's GGUF file: its name and row-major shape.
struct GgufTensorSpec {
  std::string name;
  Shape shape;
};
// Every tensor a model of this spec has in a GGUF file, in the order
// llama.cpp writes them (rope_freqs.weight last, where the RoPE scaling has
// per-dimension factors).
std::vector<GgufTensorSpec> gguf_tensors(const ModelSpec& s);

}  // namespace tessera::llm
