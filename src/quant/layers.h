#pragma once
// What the model transforms of quant/ (pruning, quantization-aware training,
// weight quantization) share about the layers they change.
#include <string>
#include <vector>

#include "tessera/nn/conv.h"
#include "tessera/nn/linear.h"
#include "tessera/nn/module.h"

namespace tessera::quant::detail {

// The `weight` member a layer's forward reads: Linear (unless its weights are
// quantized), Conv2d, Conv1d; null for other modules.
inline Tensor* weight_member(nn::Module& m) {
  if (auto* l = dynamic_cast<nn::Linear*>(&m)) return l->quantized ? nullptr : &l->weight;
  if (auto* c = dynamic_cast<nn::Conv2d*>(&m)) return &c->weight;
  if (auto* c = dynamic_cast<nn::Conv1d*>(&m)) return &c->weight;
  return nullptr;
}

// The same layers' `bias` member (an undefined tensor when they have none).
inline Tensor* bias_member(nn::Module& m) {
  if (auto* l = dynamic_cast<nn::Linear*>(&m)) return &l->bias;
  if (auto* c = dynamic_cast<nn::Conv2d*>(&m)) return &c->bias;
  if (auto* c = dynamic_cast<nn::Conv1d*>(&m)) return &c->bias;
  return nullptr;
}

// The module's own tensor `name` (undefined when it has none). By value: the
// lists named_parameters/named_buffers return are temporaries.
inline Tensor own(const nn::NamedTensors& ts, const std::string& name) {
  for (const auto& [n, t] : ts)
    if (n == name) return t;
  return Tensor();
}

// Whether module path `path` is one of `skip` or inside one of them.
inline bool skipped(const std::string& path, const std::vector<std::string>& skip) {
  for (const auto& s : skip)
    if (path == s || path.starts_with(s + ".")) return true;
  return false;
}

}  // namespace tessera::quant::detail
