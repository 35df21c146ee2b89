#pragma once
// LoRA: low-rank adapters for a Llama, trained by `tessera train` (a `lora:`
// section) and served by `tessera serve-llm --lora NAME=PATH`.
//
// Note [LoRA]
// A projection W [out, in] gets a pair A [rank, in], B [out, rank]:
// y = W x + (alpha / rank) B (A x). Training starts with B = 0 (the model
// computes what it did) and moves only A and B: the base weights, norms and
// embeddings are frozen. The adapter is saved in the two formats others
// read: PEFT's (adapter_model.safetensors with
// base_model.model.<module>.lora_A.weight names, and adapter_config.json)
// and llama.cpp's GGUF adapter (general.type "adapter", adapter.type "lora",
// adapter.lora.alpha; blk.N.attn_q.weight.lora_a / .lora_b). Query and key
// rows are in GGUF's RoPE order in the GGUF file (B's rows reordered as the
// weight's are, llm/llama_gguf.h) and in Hugging Face's in PEFT's.
//
// Serving: an adapter is an llm::LoraAdapter (lora_adapter.h), an
// llm::Adapter (engine.h): after each base
// projection of a chunk the engine adds the chunk's adapter's product, so
// requests for different adapters (or none) share one batch, each row
// getting its own request's adapter.
#include <string>
#include <vector>

#include "tessera/nn/zoo/zoo.h"

namespace tessera::llm {

struct LoraConfig {
  int64_t rank = 8;
  double alpha = 16;
  // Hugging Face's module names: q_proj, k_proj, v_proj, o_proj, gate_proj,
  // up_proj, down_proj.
  std::vector<std::string> targets = {"q_proj", "k_proj", "v_proj", "o_proj"};
};

// Freezes every parameter of `model` and adds a LoRA pair to each targeted
// projection of every layer (an error names an unknown target).
void add_lora(nn::zoo::Llama& model, const LoraConfig& c);
bool has_lora(const nn::zoo::Llama& model);
// PEFT's files in `dir`: adapter_model.safetensors and adapter_config.json.
void save_lora_peft(const nn::zoo::Llama& model, const std::string& dir);
// llama.cpp's GGUF adapter.
void save_lora_gguf(const nn::zoo::Llama& model, const std::string& path);
// W += (alpha / rank) B A in every projection with a pair, and the pairs
// dropped: the model a served adapter must equal.
void merge_lora(nn::zoo::Llama& model);

}  // namespace tessera::llm
