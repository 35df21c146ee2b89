#include "ops/autocast_policy.h"

#include <array>
#include <unordered_map>

namespace tessera::autocast {
namespace {

using ops::OpId;
using enum Policy;

// Note [Autocast op lists]
// The one table of what autocast does to each op, in the spirit of PyTorch's
// CPU autocast lists: products and convolutions gain from 16-bit inputs (half
// the bytes; native bf16 dot products where the CPU has them) and accumulate
// in f32 inside the kernels; ops whose result is sensitive to rounding or
// range (exp/log, softmax, normalizations, losses, reductions) run in f32;
// ops that combine several inputs promote to the widest. Every op listed here
// calls TS_AUTOCAST (tests/ops/test_autocast.cpp checks it), and docs/amp.md
// shows this table.
constexpr std::pair<OpId, Policy> kTable[] = {
    // lower precision
    {OpId::matmul, kLower}, {OpId::mm, kLower}, {OpId::bmm, kLower}, {OpId::linear, kLower},
    {OpId::addmm, kLower}, {OpId::conv1d, kLower}, {OpId::conv2d, kLower}, {OpId::conv_transpose2d, kLower},
    {OpId::scaled_dot_product_attention, kLower},
    // f32
    {OpId::exp, kF32}, {OpId::exp2, kF32}, {OpId::log, kF32}, {OpId::log2, kF32}, {OpId::log1p, kF32},
    {OpId::expm1, kF32}, {OpId::pow, kF32}, {OpId::reciprocal, kF32}, {OpId::rsqrt, kF32},
    {OpId::softmax, kF32}, {OpId::log_softmax, kF32}, {OpId::layer_norm, kF32}, {OpId::rms_norm, kF32},
    {OpId::group_norm, kF32}, {OpId::batch_norm, kF32},
    {OpId::sum, kF32}, {OpId::mean, kF32}, {OpId::prod, kF32}, {OpId::var, kF32}, {OpId::std, kF32},
    {OpId::logsumexp, kF32}, {OpId::norm, kF32}, {OpId::cumsum, kF32}, {OpId::cumprod, kF32},
    {OpId::cross_entropy, kF32}, {OpId::nll_loss, kF32}, {OpId::mse_loss, kF32}, {OpId::l1_loss, kF32},
    {OpId::smooth_l1_loss, kF32}, {OpId::binary_cross_entropy, kF32},
    {OpId::binary_cross_entropy_with_logits, kF32}, {OpId::kl_div, kF32},
    // widest input (elementwise ops with several inputs promote by themselves)
    {OpId::cat, kPromote}, {OpId::stack, kPromote},
};

constexpr auto make_policies() {
  std::array<Policy, static_cast<size_t>(OpId::kCount)> p{};
  for (auto [op, pol] : kTable) p[static_cast<size_t>(op)] = pol;
  return p;
}
constexpr auto kPolicies = make_policies();

struct CastCache {
  struct Entry {
    Tensor source;  // held so its address is not reused while cached
    uint32_t version;
    DType dtype;
    Tensor cast;
  };
  std::unordered_map<const TensorImpl*, Entry> entries;
  int depth = 0;   // open Guards that enable autocast
  int bypass = 0;  // open NoCacheGuards
  int64_t casts = 0;
};
thread_local CastCache t_cache;

bool eligible(const Tensor& t) { return t.defined() && is_floating(t.dtype()) && !t.impl()->wrapped_number; }

}  // namespace

namespace detail {
thread_local State t_state;

Tensor cast(const Tensor& t, Policy p, DType target) {
  if (p == kF32) target = DType::F32;
  if (p == kNone || !eligible(t) || t.dtype() == target) return t;
  if (p == kLower && t.dtype() != DType::F32) return t;  // f64 stays f64, like PyTorch
  if (p == kF32 && t.dtype() != DType::F16 && t.dtype() != DType::BF16) return t;
  // Weights (leaves that require grad) are cast once per autocast scope.
  bool cacheable = t_cache.depth > 0 && t_cache.bypass == 0 && t.requires_grad() && !t.grad_fn();
  if (cacheable) {
    auto it = t_cache.entries.find(t.impl());
    if (it != t_cache.entries.end() && it->second.version == t.version() && it->second.dtype == target)
      return it->second.cast;
  }
  Tensor r = t.to(target);
  if (cacheable) {
    t_cache.entries[t.impl()] = {t, t.version(), target, r};
    t_cache.casts++;
  }
  return r;
}

DType widest(const TensorList& ts) {
  DType w = DType::F16;
  bool any = false;
  for (const Tensor& t : ts)
    if (eligible(t)) {
      w = any ? promote_types(w, t.dtype()) : t.dtype();
      any = true;
    }
  return any ? w : DType::F32;
}
}  // namespace detail

Policy policy(OpId op) { return kPolicies[static_cast<size_t>(op)]; }

Guard::Guard(DType dtype, bool enable) : prev_(detail::t_state), counted_(enable) {
  TS_CHECK(dtype == DType::BF16 || dtype == DType::F16, "autocast: dtype must be bf16 or f16, got ",
           dtype_name(dtype), " (f32 training needs no autocast; use precision: f32)");
  detail::t_state = {enable, dtype};
  if (enable) t_cache.depth++;
}

Guard::~Guard() {
  if (counted_ && --t_cache.depth == 0) {
    // The weights may change before the next scope (optimizer step): drop
    // the copies.
    t_cache.entries.clear();
  }
  detail::t_state = prev_;
}

NoCacheGuard::NoCacheGuard() { t_cache.bypass++; }
NoCacheGuard::~NoCacheGuard() { t_cache.bypass--; }

bool enabled() { return detail::t_state.enabled; }
DType dtype() { return detail::t_state.dtype; }
State state() { return detail::t_state; }
int64_t cast_count() { return t_cache.casts; }

}  // namespace tessera::autocast
