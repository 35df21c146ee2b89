// The engine's LoRA adapter, read from a GGUF adapter or PEFT's files
// (include/tessera/llm/lora_adapter.h, Note [LoRA] in lora.h).
#include "tessera/llm/lora_adapter.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>

#include <nlohmann/json.hpp>

#include "llm/lora_names.h"
#include "tessera/core/error.h"
#include "tessera/core/numbers.h"
#include "tessera/io/file.h"
#include "tessera/io/safetensors.h"
#include "tessera/llm/gguf.h"

namespace tessera::llm {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;
using detail::kLoraTargets;
using detail::LoraTarget;
}  // namespace

void LoraAdapter::set(int64_t layer, Projection p, const Tensor& a, const Tensor& b, double alpha,
                      const std::string& what, int64_t hf_rope_heads) {
  const ModelSpec& s = spec_;
  const int64_t q = s.n_heads * s.head_dim, kv = s.n_kv_heads * s.head_dim;
  int64_t in = s.dim, out = s.dim;
  switch (p) {
    case Projection::Q: out = q; break;
    case Projection::K: out = kv; break;
    case Projection::V: out = kv; break;
    case Projection::O: in = q; break;
    case Projection::Gate:
    case Projection::Up: out = s.hidden; break;
    case Projection::Down: in = s.hidden; break;
  }
  TS_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == in && b.size(0) == out && a.size(0) == b.size(1) &&
               a.size(0) >= 1,
           what, ": the pair's shapes A ", shape_str(a.shape()), " and B ", shape_str(b.shape()), " do not fit the ",
           "model's projection [", out, ", ", in, "] (A must be [rank, ", in, "] and B [", out, ", rank])");
  Pair& pr = layers_[static_cast<size_t>(layer)][static_cast<size_t>(p)];
  TS_CHECK(pr.rank == 0, what, ": a second pair for the same projection");
  pr.rank = a.size(0);
  pr.in = in;
  pr.out = out;
  pr.scale = static_cast<float>(alpha > 0 ? alpha / static_cast<double>(pr.rank) : 1.0);  // llama.cpp: no alpha, scale 1
  const Tensor af = a.to(DType::F32).contiguous(), bf = b.to(DType::F32).contiguous();
  pr.a.assign(af.data_ptr<float>(), af.data_ptr<float>() + af.numel());
  pr.b.assign(bf.data_ptr<float>(), bf.data_ptr<float>() + bf.numel());
  if (hf_rope_heads > 0) {
    // Hugging Face's rows of each head, [half, half], to GGUF's interleaved
    // pairs: GGUF row (h, i, j) is Hugging Face's row (h, j, i).
    const int64_t half = out / hf_rope_heads / 2, rank = pr.rank;
    std::vector<float> hf = std::move(pr.b);
    pr.b.assign(hf.size(), 0.f);
    for (int64_t h = 0; h < hf_rope_heads; ++h)
      for (int64_t i = 0; i < half; ++i)
        for (int64_t j = 0; j < 2; ++j) {
          const float* src = hf.data() + (h * 2 * half + j * half + i) * rank;
          std::copy(src, src + rank, pr.b.data() + (h * 2 * half + i * 2 + j) * rank);
        }
  }
  for (float v : pr.a) TS_CHECK(std::isfinite(v), what, ": lora_a holds a value that is not finite");
  for (float v : pr.b) TS_CHECK(std::isfinite(v), what, ": lora_b holds a value that is not finite");
}

std::shared_ptr<const LoraAdapter> LoraAdapter::load(const std::string& path, const ModelSpec& spec) {
  TS_CHECK(spec.arch == "llama", path, ": LoRA adapters are for llama models; the model is ", spec.arch);
  std::shared_ptr<LoraAdapter> ad(new LoraAdapter(spec));
  auto layer_of = [&](const std::string& digits, const std::string& name) {
    const std::optional<int64_t> l = parse_int64(digits);
    TS_CHECK(l && *l >= 0 && *l < spec.n_layers, path, ": tensor '", name,
             "' names a layer the model does not have (it has ", spec.n_layers, ")");
    return *l;
  };
  const bool gguf = path.ends_with(".gguf");
  if (gguf) {
    const GgufFile f = GgufFile::open(path);
    auto str = [&](const char* key) { return f.find(key) ? f.find(key)->as_string(key) : std::string(); };
    TS_CHECK(str("general.type") == "adapter" && str("adapter.type") == "lora", path,
             ": not a LoRA adapter (general.type must be \"adapter\" and adapter.type \"lora\")");
    TS_CHECK(str("general.architecture") == "llama", path, ": the adapter is for '", str("general.architecture"),
             "', the model is llama");
    const double alpha = f.find("adapter.lora.alpha") ? f.find("adapter.lora.alpha")->as_float("adapter.lora.alpha") : 0;
    TS_CHECK(std::isfinite(alpha) && alpha >= 0, path, ": adapter.lora.alpha ", alpha, " is not a non-negative number");
    std::map<std::string, const GgufTensorInfo*> by_name;
    for (const GgufTensorInfo& t : f.tensors()) by_name[t.name] = &t;
    for (const auto& [name, info] : by_name) {
      const std::string suffix = ".weight.lora_a";
      if (name.size() > suffix.size() && name.ends_with(suffix)) {
        const std::string base = name.substr(0, name.size() - suffix.size());  // blk.N.attn_q
        const size_t dot = base.find('.', 4);
        TS_CHECK(base.rfind("blk.", 0) == 0 && dot != std::string::npos, path, ": tensor '", name,
                 "' is not blk.N.<projection>.weight.lora_a");
        const int64_t l = layer_of(base.substr(4, dot - 4), name);
        const std::string proj = base.substr(dot + 1);
        const LoraTarget* t = nullptr;
        for (const LoraTarget& k : kLoraTargets)
          if (proj == k.gguf) t = &k;
        TS_CHECK(t, path, ": tensor '", name, "' adapts '", proj, "', which is not a projection Tessera adapts");
        auto b = by_name.find(base + ".weight.lora_b");
        TS_CHECK(b != by_name.end(), path, ": '", name, "' has no lora_b beside it");
        // dequantize_gguf_tensor gives [rows, ne[0]]: A [rank, in] and B [out, rank] as they are stored.
        ad->set(l, t->p, dequantize_gguf_tensor(f, *info), dequantize_gguf_tensor(f, *b->second), alpha,
                path + ": " + base);
      } else {
        const std::string sb = ".weight.lora_b";
        TS_CHECK(name.size() > sb.size() && name.ends_with(sb), path,
                 ": tensor '", name, "' is not a LoRA pair's (…weight.lora_a or …weight.lora_b)");
        TS_CHECK(by_name.count(name.substr(0, name.size() - 1) + "a"), path, ": '", name,
                 "' has no lora_a beside it");
      }
    }
  } else {
    // PEFT: adapter_model.safetensors, alpha and rank in adapter_config.json.
    const fs::path dir = fs::path(path).parent_path();
    const std::string cfg_path = (dir / "adapter_config.json").string();
    TS_CHECK(fs::exists(cfg_path), path, ": a PEFT adapter needs adapter_config.json beside it (for lora_alpha)");
    const std::vector<char> text = io::read_file(cfg_path, size_t{1} << 20);
    json cfg;
    try {
      cfg = json::parse(text.begin(), text.end());
    } catch (const json::exception& e) {
      TS_ERROR(cfg_path, ": not valid JSON: ", e.what());
    }
    TS_CHECK(cfg.is_object() && cfg.value("peft_type", "LORA") == "LORA" && cfg.contains("lora_alpha") &&
                 cfg["lora_alpha"].is_number(),
             cfg_path, ": needs \"peft_type\": \"LORA\" and a number \"lora_alpha\"");
    TS_CHECK(!cfg.value("use_dora", false) && !cfg.value("use_rslora", false), cfg_path,
             ": DoRA and rsLoRA adapters are not supported (plain LoRA is)");
    TS_CHECK(!cfg.contains("alpha_pattern") || cfg["alpha_pattern"].empty(), cfg_path,
             ": per-module alphas (alpha_pattern) are not supported; one lora_alpha for every pair is");
    const double alpha = cfg["lora_alpha"].get<double>();
    const io::SafetensorsFile f = io::SafetensorsFile::open(path);
    for (const std::string& name : f.names()) {
      const std::string suffix = ".lora_A.weight";
      if (name.size() > suffix.size() && name.ends_with(suffix)) {
        const std::string module = name.substr(0, name.size() - suffix.size());
        const std::string prefix = "base_model.model.model.layers.";
        TS_CHECK(module.rfind(prefix, 0) == 0, path, ": tensor '", name, "' is not base_model.model.model.layers.N...");
        const size_t dot = module.find('.', prefix.size());
        TS_CHECK(dot != std::string::npos, path, ": tensor '", name, "' names no layer");
        const int64_t l = layer_of(module.substr(prefix.size(), dot - prefix.size()), name);
        const LoraTarget* t = nullptr;
        for (const LoraTarget& k : kLoraTargets)
          if (module == "base_model.model." + detail::lora_hf_module(l, k)) t = &k;
        TS_CHECK(t, path, ": tensor '", name, "' adapts a module Tessera does not (", detail::lora_target_list(), ")");
        const std::string bname = module + ".lora_B.weight";
        TS_CHECK(f.contains(bname), path, ": '", name, "' has no ", bname, " beside it");
        ad->set(l, t->p, f.get(name), f.get(bname), alpha, path + ": " + module,
                detail::lora_rope_heads(spec.n_heads, spec.n_kv_heads, t->p));
      } else {
        const std::string sb = ".lora_B.weight";
        TS_CHECK(name.size() > sb.size() && name.ends_with(sb), path,
                 ": tensor '", name, "' is not a LoRA pair's (….lora_A.weight or ….lora_B.weight)");
        TS_CHECK(f.contains(name.substr(0, name.size() - sb.size()) + ".lora_A.weight"), path, ": '", name,
                 "' has no lora_A beside it");
      }
    }
  }
  TS_CHECK(ad->pairs() > 0, path, ": the adapter holds no LoRA pairs");
  return ad;
}

int64_t LoraAdapter::pairs() const {
  int64_t n = 0;
  for (const auto& l : layers_)
    for (const Pair& p : l) n += p.rank > 0;
  return n;
}

void LoraAdapter::add(int64_t layer, Projection p, const float* x, int64_t ldx, float* y, int64_t ldy,
                      int64_t rows) const {
  const Pair& pr = layers_[static_cast<size_t>(layer)][static_cast<size_t>(p)];
  if (pr.rank == 0 || rows == 0) return;
  // Per row: t = A x (rank values), then y += scale B t. The engine's
  // steps allocate nothing; t is this thread's, grown once.
  thread_local std::vector<float> t;
  if (t.size() < static_cast<size_t>(pr.rank)) t.resize(static_cast<size_t>(pr.rank));
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ldx;
    for (int64_t k = 0; k < pr.rank; ++k) {
      const float* a = pr.a.data() + k * pr.in;
      float s = 0;
      for (int64_t i = 0; i < pr.in; ++i) s += a[i] * xr[i];
      t[static_cast<size_t>(k)] = s * pr.scale;
    }
    float* yr = y + r * ldy;
    for (int64_t o = 0; o < pr.out; ++o) {
      const float* b = pr.b.data() + o * pr.rank;
      float s = 0;
      for (int64_t k = 0; k < pr.rank; ++k) s += b[k] * t[static_cast<size_t>(k)];
      yr[o] += s;
    }
  }
}

}  // namespace tessera::llm
