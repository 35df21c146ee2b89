#pragma once
// Tessera's GPT (nn::zoo::GPT, nanoGPT's names) as a GGUF "gpt2" file with
// llama.cpp's tensor names and metadata, and back. GPT-2's files use the
// tanh form of GELU; Tessera's GPT uses the exact one, so its files carry
// tessera.gelu = "erf", which the engine honours (llama.cpp, which does not
// read the key, computes the tanh form: a difference of at most 2e-4 per
// activation).
#include <memory>
#include <string>

#include "tessera/llm/llama_gguf.h"

namespace tessera::llm {

GgufWriter gpt_to_gguf(const nn::zoo::GPT& model, const GgufExportOptions& opts = {});
void save_gpt_gguf(const nn::zoo::GPT& model, const std::string& path, const GgufExportOptions& opts = {});

// The configuration a "gpt2" GGUF describes, every tensor checked present in
// its shape (errors name a missing or inconsistent key or tensor).
nn::zoo::GPTConfig gpt_config_from_gguf(const GgufFile& f);
// A model with the file's weights, dequantized to f32.
std::shared_ptr<nn::zoo::GPT> load_gpt_gguf(const GgufFile& f);
// The engine's model of Tessera's GPT, its weights converted to `type`.
std::shared_ptr<Model> model_from_gpt(const nn::zoo::GPT& model, GgmlType type = GgmlType::F32);

}  // namespace tessera::llm
