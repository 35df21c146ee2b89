// Pruning masks (Note [Pruning masks] in tessera/quant/prune.h).
#include "tessera/quant/prune.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <numeric>
#include <sstream>
#include <tuple>
#include <unordered_map>

#include "tessera/core/numbers.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/nn/conv.h"
#include "tessera/nn/linear.h"
#include "quant/layers.h"
#include "tessera/ops/ops.h"

namespace tessera::quant {
namespace {

using detail::bias_member;
using detail::own;
using detail::skipped;
using detail::weight_member;

// The forward pre-hooks of each pruned module (weight, and bias when pruned
// structurally), to remove them when the masks are folded in (Module hooks are
// removed by handle).
std::mutex g_hooks_mu;
std::unordered_map<const nn::Module*, std::vector<size_t>> g_hooks;

struct Target {
  std::string name;
  nn::Module* module;
  Tensor orig, mask;            // after ensure_pruned
  Tensor bias_orig, bias_mask;  // after ensure_bias_pruned (structured pruning of a layer with a bias)
};

// Re-registers the module's parameter `name` ("weight" or "bias") as
// name_orig + name_mask with a forward pre-hook setting the member to their
// product, once; returns {orig, mask} (undefined when it has no such parameter).
std::pair<Tensor, Tensor> masked(nn::Module& m, const std::string& name, Tensor* (*member)(nn::Module&)) {
  if (Tensor o = own(m.named_parameters(false), name + "_orig"); o.defined())
    return {o, own(m.named_buffers(false), name + "_mask")};
  if (!own(m.named_parameters(false), name).defined()) return {};
  Tensor p = m.unregister(name);
  Tensor orig = m.register_parameter(name + "_orig", p, p.requires_grad());
  Tensor mask = m.register_buffer(name + "_mask", ones_like(p.detach()));
  size_t h = m.register_forward_pre_hook(
      [orig, mask, member](nn::Module& mod, Tensor&) { *member(mod) = ops::mul(orig, mask); });
  std::lock_guard<std::mutex> lock(g_hooks_mu);
  // The weight is masked first: what the registry holds for this address
  // before that belongs to a module that lived here earlier.
  if (name == "weight") g_hooks[&m].clear();
  g_hooks[&m].push_back(h);
  return {orig, mask};
}

void ensure_pruned(Target& t) { std::tie(t.orig, t.mask) = masked(*t.module, "weight", weight_member); }

// Structured pruning removes whole filters: the bias of a pruned row is
// masked too (bias_orig + bias_mask), so the row's output is exactly 0 and
// the compiler can take it out of the layer (compile::remove_pruned_channels).
void ensure_bias_pruned(Target& t) { std::tie(t.bias_orig, t.bias_mask) = masked(*t.module, "bias", bias_member); }

// Scores of the entries (or rows) of one layer: |w| (or the row's L2 norm) of
// the masked weight; already pruned entries score -1 so they stay pruned.
std::vector<double> scores(const Target& t, bool rows) {
  NoGradGuard ng;
  Tensor w = ops::mul(t.orig, t.mask).to(DType::F64).contiguous();
  Tensor mk = t.mask.to(DType::F64).contiguous();
  const double* p = w.data_ptr<double>();
  const double* q = mk.data_ptr<double>();
  const int64_t n = w.numel();
  if (!rows) {
    std::vector<double> s(n);
    for (int64_t i = 0; i < n; ++i) s[i] = q[i] == 0 ? -1.0 : std::fabs(p[i]);
    return s;
  }
  const int64_t r = w.size(0), per = n / std::max<int64_t>(r, 1);
  std::vector<double> s(r, 0.0);
  for (int64_t i = 0; i < r; ++i) {
    bool any = false;
    for (int64_t j = 0; j < per; ++j) {
      s[i] += p[i * per + j] * p[i * per + j];
      any = any || q[i * per + j] != 0;
    }
    s[i] = any ? std::sqrt(s[i]) : -1.0;
  }
  return s;
}

// Indices of the k smallest scores (ties broken by position, so the count is exact).
std::vector<int64_t> smallest(const std::vector<double>& s, int64_t k) {
  std::vector<int64_t> idx(s.size());
  std::iota(idx.begin(), idx.end(), 0);
  k = std::clamp<int64_t>(k, 0, static_cast<int64_t>(s.size()));
  std::nth_element(idx.begin(), idx.begin() + k, idx.end(),
                   [&](int64_t a, int64_t b) { return s[a] < s[b] || (s[a] == s[b] && a < b); });
  idx.resize(k);
  return idx;
}

// Zeroes mask entries (or whole rows) at `which`.
void apply(Target& t, const std::vector<int64_t>& which, bool rows) {
  NoGradGuard ng;
  Tensor mk = t.mask.to(DType::F64).contiguous();
  double* q = mk.data_ptr<double>();
  const int64_t per = rows ? t.mask.numel() / t.mask.size(0) : 1;
  for (int64_t i : which)
    for (int64_t j = 0; j < per; ++j) q[i * per + j] = 0.0;
  t.mask.copy_(mk.to(t.mask.dtype()));
  *weight_member(*t.module) = ops::mul(t.orig, t.mask);
  if (rows && t.bias_mask.defined()) {
    Tensor bm = t.bias_mask.to(DType::F64).contiguous();
    for (int64_t i : which) bm.data_ptr<double>()[i] = 0.0;
    t.bias_mask.copy_(bm.to(t.bias_mask.dtype()));
    *bias_member(*t.module) = ops::mul(t.bias_orig, t.bias_mask);
  }
}

int64_t count_zeros(const Tensor& mask) {
  NoGradGuard ng;
  return mask.numel() - ops::sum(ops::ne(mask, 0.0)).item<int64_t>();
}

}  // namespace

PruneReport prune(nn::Module& model, const PruneConfig& cfg) {
  TS_CHECK(std::isfinite(cfg.sparsity) && cfg.sparsity >= 0 && cfg.sparsity < 1, "prune: sparsity must be in [0, 1), "
           "got ", cfg.sparsity);
  TS_CHECK(cfg.method == "magnitude" || cfg.method == "structured", "prune: method must be 'magnitude' or "
           "'structured', got '", cfg.method, "'");
  TS_CHECK(!(cfg.global && cfg.method == "structured"), "prune: global applies to magnitude pruning only (structured "
           "pruning ranks the rows of each layer)");
  for (const auto& s : cfg.skip) {
    bool found = false;
    for (auto& [path, m] : model.named_modules()) found = found || path == s;
    TS_CHECK(found, "prune: skip entry '", s, "' names no module of the model");
  }
  std::vector<Target> targets;
  for (auto& [path, m] : model.named_modules())
    if (weight_member(*m) && !skipped(path, cfg.skip)) targets.push_back({path.empty() ? "(root)" : path, m, {}, {}, {}, {}});
  TS_CHECK(!targets.empty(), "prune: the model has no Linear or Conv layer to prune (quantized layers cannot be)");
  const bool rows = cfg.method == "structured";
  // The sparsity may only grow: the masks keep what they pruned.
  for (Target& t : targets) {
    const Tensor mk = own(t.module->named_buffers(false), "weight_mask");
    if (!mk.defined()) continue;
    double now = static_cast<double>(count_zeros(mk)) / static_cast<double>(mk.numel());
    if (!rows)
      TS_CHECK(cfg.global || cfg.sparsity + 1e-9 >= now, "prune: '", t.name, "' is already ", now, " sparse; pruning to ",
               cfg.sparsity, " would revive weights (masks only grow)");
  }
  for (Target& t : targets) {
    ensure_pruned(t);
    if (rows) ensure_bias_pruned(t);
  }
  if (cfg.global && !rows) {
    std::vector<double> all;
    std::vector<size_t> start;
    for (const Target& t : targets) {
      start.push_back(all.size());
      auto s = scores(t, false);
      all.insert(all.end(), s.begin(), s.end());
    }
    auto pick = smallest(all, std::llround(cfg.sparsity * static_cast<double>(all.size())));
    std::sort(pick.begin(), pick.end());
    for (size_t l = 0; l < targets.size(); ++l) {
      const int64_t lo = static_cast<int64_t>(start[l]);
      const int64_t hi = l + 1 < targets.size() ? static_cast<int64_t>(start[l + 1]) : static_cast<int64_t>(all.size());
      std::vector<int64_t> mine;
      for (int64_t i : pick)
        if (i >= lo && i < hi) mine.push_back(i - lo);
      apply(targets[l], mine, false);
    }
  } else {
    for (Target& t : targets) {
      auto s = scores(t, rows);
      apply(t, smallest(s, std::llround(cfg.sparsity * static_cast<double>(s.size()))), rows);
    }
  }
  return sparsity_report(model);
}

PruneReport sparsity_report(nn::Module& model) {
  PruneReport r;
  for (auto& [path, m] : model.named_modules()) {
    Tensor* w = weight_member(*m);
    if (!w || !w->defined()) continue;
    PruneReport::Layer l;
    l.name = path.empty() ? "(root)" : path;
    l.total = w->numel();
    const Tensor mk = own(m->named_buffers(false), "weight_mask");
    l.zeros = mk.defined() ? count_zeros(mk) : 0;
    r.total += l.total;
    r.zeros += l.zeros;
    r.layers.push_back(l);
  }
  return r;
}

void make_pruning_permanent(nn::Module& model) {
  NoGradGuard ng;
  for (auto& [path, m] : model.named_modules()) {
    if (!own(m->named_parameters(false), "weight_orig").defined()) continue;
    Tensor orig = m->unregister("weight_orig");
    Tensor mask = m->unregister("weight_mask");
    Tensor w = ops::mul(orig, mask).detach();
    w.requires_grad_(orig.requires_grad());
    *weight_member(*m) = m->register_parameter("weight", w, orig.requires_grad());
    if (own(m->named_parameters(false), "bias_orig").defined()) {
      Tensor borig = m->unregister("bias_orig");
      Tensor b = ops::mul(borig, m->unregister("bias_mask")).detach();
      *bias_member(*m) = m->register_parameter("bias", b, borig.requires_grad());
    }
    std::lock_guard<std::mutex> lock(g_hooks_mu);
    auto it = g_hooks.find(m);
    if (it != g_hooks.end()) {
      for (size_t h : it->second) m->remove_hook(h);
      g_hooks.erase(it);
    }
  }
}

double polynomial_sparsity(int64_t step, int64_t begin_step, int64_t end_step, double initial, double final_sparsity) {
  TS_CHECK(end_step > begin_step, "polynomial_sparsity: end_step ", end_step, " must be after begin_step ", begin_step);
  if (step <= begin_step) return initial;
  if (step >= end_step) return final_sparsity;
  double p = static_cast<double>(step - begin_step) / static_cast<double>(end_step - begin_step);
  return final_sparsity + (initial - final_sparsity) * std::pow(1.0 - p, 3.0);
}

std::string PruneReport::str() const {
  ClassicLocale c_locale;  // printf below writes "0.5" whatever the process locale
  std::ostringstream os;
  char buf[160];
  std::snprintf(buf, sizeof buf, "%-40s %12s %12s %9s\n", "layer", "weights", "zeros", "sparsity");
  os << buf;
  for (const auto& l : layers) {
    std::snprintf(buf, sizeof buf, "%-40s %12lld %12lld %8.2f%%\n", l.name.c_str(), static_cast<long long>(l.total),
                  static_cast<long long>(l.zeros), 100.0 * static_cast<double>(l.zeros) / static_cast<double>(l.total));
    os << buf;
  }
  std::snprintf(buf, sizeof buf, "%-40s %12lld %12lld %8.2f%%\n", "total", static_cast<long long>(total),
                static_cast<long long>(zeros), total ? 100.0 * static_cast<double>(zeros) / static_cast<double>(total) : 0.0);
  os << buf;
  return os.str();
}

}  // namespace tessera::quant
