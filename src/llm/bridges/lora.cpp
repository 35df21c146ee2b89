// LoRA for training: pairs added to Tessera's Llama, saved as PEFT's files
// and llama.cpp's GGUF adapter, and merged (include/tessera/llm/lora.h).
#include "tessera/llm/lora.h"

#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "llm/lora_names.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/core/error.h"
#include "tessera/io/file.h"
#include "tessera/io/safetensors.h"
#include "tessera/llm/gguf.h"
#include "tessera/llm/lora_adapter.h"
#include "tessera/llm/llama_gguf.h"
#include "tessera/ops/ops.h"

namespace tessera::llm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using detail::kLoraTargets;
using detail::LoraTarget;

nn::Linear& projection(nn::zoo::Llama& m, int64_t layer, Projection p) {
  nn::zoo::LlamaLayer& l = m.model->layers->at<nn::zoo::LlamaLayer>(static_cast<size_t>(layer));
  switch (p) {
    case Projection::Q: return *l.self_attn->q_proj;
    case Projection::K: return *l.self_attn->k_proj;
    case Projection::V: return *l.self_attn->v_proj;
    case Projection::O: return *l.self_attn->o_proj;
    case Projection::Gate: return *l.mlp->gate_proj;
    case Projection::Up: return *l.mlp->up_proj;
    case Projection::Down: return *l.mlp->down_proj;
  }
  TS_ERROR("lora: unknown projection");
}
const nn::Linear& projection(const nn::zoo::Llama& m, int64_t layer, Projection p) {
  return projection(const_cast<nn::zoo::Llama&>(m), layer, p);
}

// The pairs of `model`, with their scale (one alpha and rank for all).
struct Pairs {
  double alpha = 0;
  int64_t rank = 0;
  std::vector<std::string> targets;
};
Pairs pairs_of(const nn::zoo::Llama& m) {
  Pairs out;
  for (int64_t l = 0; l < m.config.n_layers; ++l)
    for (const LoraTarget& t : kLoraTargets) {
      const nn::Linear& lin = projection(m, l, t.p);
      if (!lin.lora) continue;
      TS_CHECK(out.rank == 0 || (out.rank == lin.lora->rank && out.alpha == lin.lora->alpha),
               "lora: the pairs have different ranks or alphas; a file holds one of each");
      out.rank = lin.lora->rank;
      out.alpha = lin.lora->alpha;
      if (l == 0) out.targets.push_back(t.hf);
    }
  TS_CHECK(out.rank > 0, "lora: the model has no LoRA pairs (add_lora, or a `lora:` section in the recipe)");
  return out;
}

}  // namespace

void add_lora(nn::zoo::Llama& model, const LoraConfig& c) {
  TS_CHECK(!c.targets.empty(), "lora: no target modules (from ", detail::lora_target_list(), ")");
  std::vector<Projection> ps;
  for (const std::string& name : c.targets) {
    const LoraTarget* t = nullptr;
    for (const LoraTarget& k : kLoraTargets)
      if (name == k.hf) t = &k;
    TS_CHECK(t, "lora: unknown target module '", name, "' (the targets are ", detail::lora_target_list(), ")");
    ps.push_back(t->p);
  }
  for (auto& [name, p] : model.named_parameters()) p.requires_grad_(false);
  for (int64_t l = 0; l < model.config.n_layers; ++l)
    for (Projection p : ps) projection(model, l, p).add_lora(c.rank, c.alpha);
}

bool has_lora(const nn::zoo::Llama& model) {
  for (int64_t l = 0; l < model.config.n_layers; ++l)
    for (const LoraTarget& t : kLoraTargets)
      if (projection(model, l, t.p).lora) return true;
  return false;
}

void save_lora_peft(const nn::zoo::Llama& model, const std::string& dir) {
  const Pairs pairs = pairs_of(model);
  io::NamedTensors tensors;
  for (int64_t l = 0; l < model.config.n_layers; ++l)
    for (const LoraTarget& t : kLoraTargets) {
      const nn::Linear& lin = projection(model, l, t.p);
      if (!lin.lora) continue;
      const std::string base = "base_model.model." + detail::lora_hf_module(l, t);
      tensors.emplace_back(base + ".lora_A.weight", lin.lora->A.detach().contiguous());
      tensors.emplace_back(base + ".lora_B.weight", lin.lora->B.detach().contiguous());
    }
  fs::create_directories(dir);
  io::save_safetensors(dir + "/adapter_model.safetensors", tensors, {{"format", "pt"}});
  const json config = {{"peft_type", "LORA"},        {"task_type", "CAUSAL_LM"},
                       {"r", pairs.rank},            {"lora_alpha", pairs.alpha},
                       {"lora_dropout", 0.0},        {"bias", "none"},
                       {"target_modules", pairs.targets}, {"fan_in_fan_out", false},
                       {"inference_mode", true}};
  const std::string text = config.dump(2) + "\n";
  io::write_file_atomic(dir + "/adapter_config.json", [&](io::Writer& w) { w.write(text.data(), text.size()); });
}

void save_lora_gguf(const nn::zoo::Llama& model, const std::string& path) {
  const Pairs pairs = pairs_of(model);
  GgufWriter w;
  w.set("general.architecture", GgufValue::string("llama"));
  w.set("general.type", GgufValue::string("adapter"));
  w.set("general.name", GgufValue::string("tessera-lora"));
  w.set("adapter.type", GgufValue::string("lora"));
  w.set("adapter.lora.alpha", GgufValue::floating(GgufType::F32, pairs.alpha));
  for (int64_t l = 0; l < model.config.n_layers; ++l)
    for (const LoraTarget& t : kLoraTargets) {
      const nn::Linear& lin = projection(model, l, t.p);
      if (!lin.lora) continue;
      Tensor b = lin.lora->B.detach().contiguous();
      if (const int64_t heads = detail::lora_rope_heads(model.config.n_heads, model.config.n_kv_heads, t.p))
        b = rope_rows_to_gguf(b, heads);
      const std::string name = "blk." + std::to_string(l) + "." + t.gguf + ".weight";
      w.add_tensor(name + ".lora_a", lin.lora->A.detach().contiguous());
      w.add_tensor(name + ".lora_b", b);
    }
  w.save(path);
}

void merge_lora(nn::zoo::Llama& model) {
  NoGradGuard no_grad;
  for (int64_t l = 0; l < model.config.n_layers; ++l)
    for (const LoraTarget& t : kLoraTargets) {
      nn::Linear& lin = projection(model, l, t.p);
      if (!lin.lora) continue;
      const Tensor delta = ops::mul(ops::matmul(lin.lora->B, lin.lora->A), lin.lora->scale());
      lin.weight.copy_(ops::add(lin.weight, delta));
      lin.unregister("lora_A");
      lin.unregister("lora_B");
      lin.lora.reset();
    }
}

}  // namespace tessera::llm
