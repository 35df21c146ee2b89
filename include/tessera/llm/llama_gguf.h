#pragma once
// Tessera's Llama (nn::zoo::Llama, Hugging Face names and rotate-half RoPE)
// as a GGUF "llama" file with llama.cpp's tensor names and metadata, and back.
//
// GGUF's RoPE rotates adjacent pairs of a head's dimensions where Hugging
// Face's rotates its two halves, so the rows of the query and key weights are
// reordered on the way (what llama.cpp's converter does): within each head,
// rows [0, d/2) and [d/2, d) are interleaved.
#include <memory>
#include <string>

#include "tessera/llm/gguf.h"
#include "tessera/llm/model.h"
#include "tessera/nn/zoo/zoo.h"

namespace tessera::llm {

class Tokenizer;

struct GgufExportOptions {
  // The type of the 2-D weights: F32, F16, BF16, Q8_0 or Q4_0 (norm weights
  // stay F32, as llama.cpp writes them).
  GgmlType type = GgmlType::F32;
  // Written as tokenizer.ggml.*; llama.cpp needs one to load the file. A
  // model vocabulary padded past its size is written without the padding.
  const Tokenizer* tokenizer = nullptr;
  std::string name = "tessera-llama";
};

GgufWriter llama_to_gguf(const nn::zoo::Llama& model, const GgufExportOptions& opts = {});
void save_llama_gguf(const nn::zoo::Llama& model, const std::string& path, const GgufExportOptions& opts = {});

// The configuration a "llama" GGUF describes (errors name a missing or
// inconsistent key). With rope_scaling, RoPE scaling keys and the
// rope_freqs.weight tensor are accepted (the LLM engine computes them;
// llm::rope_scaling_from_gguf reads them); without, they are refused, since
// the Llama module does not.
nn::zoo::LlamaConfig llama_config_from_gguf(const GgufFile& f, bool rope_scaling = false);
// A model with the file's weights, dequantized to f32.
std::shared_ptr<nn::zoo::Llama> load_llama_gguf(const GgufFile& f);
// The engine's model of Tessera's Llama, its weights converted to `type`
// (F32, F16, BF16, Q8_0, Q4_0) through a GGUF image in memory.
std::shared_ptr<Model> model_from_llama(const nn::zoo::Llama& model, GgmlType type = GgmlType::F32);

// Query/key weight rows [n_heads * head_dim, in]: Hugging Face's order to
// GGUF's, and back.
Tensor rope_rows_to_gguf(const Tensor& w, int64_t n_heads);
Tensor rope_rows_from_gguf(const Tensor& w, int64_t n_heads);

}  // namespace tessera::llm
