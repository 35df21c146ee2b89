#pragma once
// The projections a LoRA adapter changes, by Hugging Face module name and
// GGUF tensor name: one table for the engine's adapter (lora_adapter.cpp)
// and the training bridge (bridges/lora.cpp).
#include <cstdint>
#include <string>

#include "tessera/llm/engine.h"

namespace tessera::llm::detail {

// Each projection by its Hugging Face module name and its GGUF tensor name.
struct LoraTarget {
  const char* hf;
  const char* gguf;
  Projection p;
};
inline constexpr LoraTarget kLoraTargets[] = {
    {"q_proj", "attn_q", Projection::Q},        {"k_proj", "attn_k", Projection::K},
    {"v_proj", "attn_v", Projection::V},        {"o_proj", "attn_output", Projection::O},
    {"gate_proj", "ffn_gate", Projection::Gate}, {"up_proj", "ffn_up", Projection::Up},
    {"down_proj", "ffn_down", Projection::Down},
};

inline std::string lora_target_list() {
  std::string s;
  for (const LoraTarget& t : kLoraTargets) s += (s.empty() ? "" : ", ") + std::string(t.hf);
  return s;
}

inline std::string lora_hf_module(int64_t layer, const LoraTarget& t) {
  const bool attn = t.p == Projection::Q || t.p == Projection::K || t.p == Projection::V || t.p == Projection::O;
  return "model.layers." + std::to_string(layer) + (attn ? ".self_attn." : ".mlp.") + t.hf;
}

// Query and key outputs are rows in RoPE's pairing order: B's rows follow
// the weight's (Hugging Face's in PEFT files, GGUF's in GGUF ones).
inline int64_t lora_rope_heads(int64_t n_heads, int64_t n_kv_heads, Projection p) {
  return p == Projection::Q ? n_heads : p == Projection::K ? n_kv_heads : 0;
}

}  // namespace tessera::llm::detail
