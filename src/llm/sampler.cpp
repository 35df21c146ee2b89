// Token sampling (include/tessera/llm/sampler.h).
#include "tessera/llm/sampler.h"

#include <algorithm>
#include <cmath>

#include "tessera/core/error.h"

namespace tessera::llm {

double counter_uniform(uint64_t seed, uint64_t choice, uint64_t position) {
  // Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3").
  uint32_t c[4] = {static_cast<uint32_t>(position), static_cast<uint32_t>(position >> 32),
                   static_cast<uint32_t>(choice), static_cast<uint32_t>(choice >> 32)};
  uint32_t k[2] = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t{0xD2511F53} * c[0], p1 = uint64_t{0xCD9E8D57} * c[2];
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0];
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1];
    c[0] = n0;
    c[1] = static_cast<uint32_t>(p1);
    c[2] = n2;
    c[3] = static_cast<uint32_t>(p0);
    k[0] += 0x9E3779B9u;
    k[1] += 0xBB67AE85u;
  }
  const uint64_t bits = (static_cast<uint64_t>(c[0]) << 21) ^ (static_cast<uint64_t>(c[1]) >> 11);  // 53 bits
  return static_cast<double>(bits & ((uint64_t{1} << 53) - 1)) * 0x1.0p-53;
}

Sampler::Sampler(int64_t vocab, SamplingParams params) : vocab_(vocab), p_(std::move(params)) {
  TS_CHECK(vocab_ >= 1, "sampler: vocabulary of ", vocab_, " tokens");
  TS_CHECK(std::isfinite(p_.temperature) && p_.temperature >= 0.f, "sampling: temperature ", p_.temperature,
           " must be 0 (greedy) or positive");
  TS_CHECK(p_.top_k >= 0, "sampling: top_k ", p_.top_k, " must be 0 (off) or positive");
  TS_CHECK(p_.top_p > 0.f && p_.top_p <= 1.f, "sampling: top_p ", p_.top_p, " must be in (0, 1]");
  TS_CHECK(p_.min_p >= 0.f && p_.min_p <= 1.f, "sampling: min_p ", p_.min_p, " must be in [0, 1]");
  TS_CHECK(std::isfinite(p_.repeat_penalty) && p_.repeat_penalty > 0.f, "sampling: repeat_penalty ",
           p_.repeat_penalty, " must be positive (1: off)");
  TS_CHECK(p_.repeat_last_n >= 0, "sampling: repeat_last_n ", p_.repeat_last_n, " must be 0 or positive");
  TS_CHECK(std::isfinite(p_.presence_penalty) && std::isfinite(p_.frequency_penalty) &&
               std::fabs(p_.presence_penalty) <= 2.f && std::fabs(p_.frequency_penalty) <= 2.f,
           "sampling: presence and frequency penalties must be in [-2, 2], got ", p_.presence_penalty, " and ",
           p_.frequency_penalty);
  TS_CHECK(p_.top_logprobs >= 0 && p_.top_logprobs <= 20, "sampling: top_logprobs ", p_.top_logprobs,
           " must be 0 to 20");
  for (const auto& [t, b] : p_.logit_bias)
    TS_CHECK(t >= 0 && t < vocab_ && !std::isnan(b), "sampling: logit bias for token ", t, " (", b,
             "): the token must be in [0, ", vocab_, ") and the bias a number");
  work_.resize(static_cast<size_t>(vocab_));
  order_.resize(static_cast<size_t>(vocab_));
  top_.resize(static_cast<size_t>(p_.top_logprobs));
}

Sampled Sampler::sample(const float* logits, std::span<const int32_t> history, uint64_t choice, uint64_t position) {
  const int64_t V = vocab_;
  float* w = work_.data();
  int32_t* idx = order_.data();
  // The model's log-probabilities, for reporting.
  float mx = -INFINITY;
  for (int64_t i = 0; i < V; ++i) mx = std::max(mx, logits[i]);
  double z = 0;
  for (int64_t i = 0; i < V; ++i) z += std::exp(static_cast<double>(logits[i]) - mx);
  const double lse = mx + std::log(z);
  auto logprob = [&](int32_t t) { return static_cast<float>(logits[t] - lse); };
  auto by_logit = [&](const float* v) {
    return [v](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); };
  };
  Sampled out;
  if (p_.top_logprobs > 0) {
    const int64_t n = std::min<int64_t>(p_.top_logprobs, V);
    for (int64_t i = 0; i < V; ++i) idx[i] = static_cast<int32_t>(i);
    std::partial_sort(idx, idx + n, idx + V, by_logit(logits));
    for (int64_t i = 0; i < n; ++i) top_[i] = {idx[i], logprob(idx[i])};
    out.top = {top_.data(), static_cast<size_t>(n)};
  }

  // Bias and penalties.
  std::copy(logits, logits + V, w);
  for (const auto& [t, b] : p_.logit_bias) w[t] += b;
  const size_t n_hist = std::min<size_t>(history.size(), static_cast<size_t>(p_.repeat_last_n));
  const std::span<const int32_t> recent = history.subspan(history.size() - n_hist);
  for (size_t i = 0; i < recent.size(); ++i) {
    const int32_t t = recent[i];
    if (t < 0 || t >= V || std::find(recent.begin(), recent.begin() + i, t) != recent.begin() + i) continue;
    const auto count = static_cast<float>(std::count(recent.begin() + i, recent.end(), t));
    if (p_.repeat_penalty != 1.f) w[t] = w[t] > 0.f ? w[t] / p_.repeat_penalty : w[t] * p_.repeat_penalty;
    w[t] -= p_.frequency_penalty * count + p_.presence_penalty;
  }

  if (p_.temperature == 0.f) {
    int32_t best = 0;
    for (int64_t i = 1; i < V; ++i)
      if (w[i] > w[best]) best = static_cast<int32_t>(i);
    out.token = best;
    out.logprob = logprob(best);
    return out;
  }

  // Candidates, most likely first.
  int64_t n = p_.top_k > 0 ? std::min<int64_t>(p_.top_k, V) : V;
  for (int64_t i = 0; i < V; ++i) idx[i] = static_cast<int32_t>(i);
  std::partial_sort(idx, idx + n, idx + V, by_logit(w));
  // top-p and min-p on the probabilities at temperature 1.
  if (p_.top_p < 1.f || p_.min_p > 0.f) {
    const float top = w[idx[0]];
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(w[idx[i]]) - top);
    double cum = 0;
    int64_t keep = n;
    for (int64_t i = 0; i < n; ++i) {
      const double p = std::exp(static_cast<double>(w[idx[i]]) - top) / sum;
      if (p_.min_p > 0.f && i > 0 && p < p_.min_p * (1.0 / sum)) {  // p_max = 1 / sum
        keep = i;
        break;
      }
      cum += p;
      if (cum >= p_.top_p) {
        keep = i + 1;
        break;
      }
    }
    n = std::max<int64_t>(1, keep);
  }
  // Temperature, then the draw.
  const double top = w[idx[0]] / static_cast<double>(p_.temperature);
  double total = 0;
  for (int64_t i = 0; i < n; ++i) total += std::exp(w[idx[i]] / static_cast<double>(p_.temperature) - top);
  const double u = counter_uniform(p_.seed, choice, position) * total;
  double cum = 0;
  int32_t pick = idx[n - 1];
  for (int64_t i = 0; i < n; ++i) {
    cum += std::exp(w[idx[i]] / static_cast<double>(p_.temperature) - top);
    if (u < cum) {
      pick = idx[i];
      break;
    }
  }
  out.token = pick;
  out.logprob = logprob(pick);
  return out;
}

}  // namespace tessera::llm
