// Token sampling (include/tessera/llm/sampler.h).
#include "tessera/llm/sampler.h"

#include <algorithm>
#include <cmath>

#include "backend/backend.h"
#include "backend/llm_kernels.h"
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
  dist_.reserve(static_cast<size_t>(vocab_));
  dense_.assign(static_cast<size_t>(vocab_), 0.0);
  order_.resize(static_cast<size_t>(vocab_));
  heap_.reserve(static_cast<size_t>(std::min(std::max(p_.top_k, p_.top_logprobs), vocab_)));
  top_.resize(static_cast<size_t>(p_.top_logprobs));
}

namespace {

// Streams of uniform(seed, choice, position) besides the token's own draw
// (Note [Speculative sampling]): the choice's top bits pick them.
constexpr uint64_t kAcceptStream = uint64_t{1} << 63, kResidualStream = uint64_t{1} << 62,
                   kDraftStream = uint64_t{3} << 62;

// The token at which the running sum of prob(i) first passes u (the last
// of the n when rounding leaves u beyond the sum).
template <typename Prob, typename Token>
int32_t pick(int64_t n, double u, Prob prob, Token token) {
  double cum = 0;
  for (int64_t i = 0; i < n; ++i) {
    cum += prob(i);
    if (u < cum) return token(i);
  }
  return token(n - 1);
}

// The k tokens of highest w (ties: the lower id first) into idx[0..k), most
// likely first: what partial_sort gives, in one pass that looks at most
// tokens only through a block's maximum. heap: storage, k reserved.
void top_k(const float* w, int64_t V, int64_t k, int32_t* idx, std::vector<std::pair<float, int32_t>>& heap) {
  // better(a, b): a before b. The heap's front is its worst; a later token
  // (a higher id) enters only above the worst's value.
  auto better = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  heap.clear();
  for (int64_t i = 0; i < k; ++i) heap.emplace_back(w[i], static_cast<int32_t>(i));
  std::make_heap(heap.begin(), heap.end(), better);
  constexpr int64_t kBlock = 32;
  int64_t i = k;
  auto offer = [&](int64_t j) {
    if (!(w[j] > heap.front().first)) return;
    std::pop_heap(heap.begin(), heap.end(), better);
    heap.back() = {w[j], static_cast<int32_t>(j)};
    std::push_heap(heap.begin(), heap.end(), better);
  };
  for (; i < V && i % kBlock != 0; ++i) offer(i);
  for (; i + kBlock <= V; i += kBlock) {
    float mx = w[i];
    for (int64_t j = 1; j < kBlock; ++j) mx = std::max(mx, w[i + j]);
    if (!(mx > heap.front().first)) continue;
    for (int64_t j = i; j < i + kBlock; ++j) offer(j);
  }
  for (; i < V; ++i) offer(i);
  std::sort(heap.begin(), heap.end(), better);
  for (int64_t j = 0; j < k; ++j) idx[j] = heap[static_cast<size_t>(j)].second;
}

// The first token of the highest logit, as a scan keeping the first strict
// maximum finds it (NaNs never win, nor does anything if x[0] is NaN), in
// two passes the compiler vectorizes.
int32_t argmax(const float* x, int64_t n) {
  if (x[0] != x[0]) return 0;
  float m = x[0];
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  for (int64_t i = 0; i < n; ++i)
    if (x[i] == m) return static_cast<int32_t>(i);
  return 0;
}

double prob_of(std::span<const TokenProb> d, int32_t token) {
  for (const TokenProb& t : d)
    if (t.token == token) return t.prob;
  return 0;
}

}  // namespace

int64_t Sampler::candidates(const float* logits, std::span<const int32_t> history, const uint32_t* allowed) {
  const int64_t V = vocab_;
  float* w = work_.data();
  int32_t* idx = order_.data();
  auto by_logit = [w](int32_t a, int32_t b) { return w[a] > w[b] || (w[a] == w[b] && a < b); };

  const bool penalties = p_.repeat_penalty != 1.f || p_.frequency_penalty != 0.f || p_.presence_penalty != 0.f;
  if (p_.temperature == 0.f && !allowed && p_.logit_bias.empty() && !penalties) {
    idx[0] = argmax(logits, V);  // greedy on the logits as they are: no copy
    return 1;
  }

  // The mask, bias and penalties.
  std::copy(logits, logits + V, w);
  if (allowed)
    for (int64_t i = 0; i < V; ++i)
      if (!((allowed[i >> 5] >> (i & 31)) & 1)) w[i] = -INFINITY;
  for (const auto& [t, b] : p_.logit_bias) w[t] += b;
  const size_t n_hist = penalties ? std::min<size_t>(history.size(), static_cast<size_t>(p_.repeat_last_n)) : 0;
  const std::span<const int32_t> recent = history.subspan(history.size() - n_hist);
  for (size_t i = 0; i < recent.size(); ++i) {
    const int32_t t = recent[i];
    if (t < 0 || t >= V || std::find(recent.begin(), recent.begin() + i, t) != recent.begin() + i) continue;
    const auto count = static_cast<float>(std::count(recent.begin() + i, recent.end(), t));
    if (p_.repeat_penalty != 1.f) w[t] = w[t] > 0.f ? w[t] / p_.repeat_penalty : w[t] * p_.repeat_penalty;
    w[t] -= p_.frequency_penalty * count + p_.presence_penalty;
  }

  if (p_.temperature == 0.f) {
    idx[0] = argmax(w, V);
    return 1;
  }

  // Candidates, most likely first.
  int64_t n = p_.top_k > 0 ? std::min<int64_t>(p_.top_k, V) : V;
  if (n < V) {
    top_k(w, V, n, idx, heap_);
  } else {
    for (int64_t i = 0; i < V; ++i) idx[i] = static_cast<int32_t>(i);
    std::sort(idx, idx + V, by_logit);
  }
  while (n > 1 && w[idx[n - 1]] == -INFINITY) --n;  // masked out: never a candidate
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
  return n;
}

Sampled Sampler::describe(const float* logits, int32_t token) {
  const int64_t V = vocab_;
  if (!p_.logprobs && p_.top_logprobs == 0) return {token, NAN, {}};
  // The row's log-softmax on the CPU's vector exp (a scalar exp over a
  // 32,000-token vocabulary costs more than a small model's step).
  float* lp = work_.data();
  backend::llm_kernels(DeviceType::CPU).log_softmax_row(logits, lp, V);
  Sampled out;
  out.token = token;
  out.logprob = lp[token];
  if (p_.top_logprobs > 0) {
    int32_t* idx = order_.data();
    const int64_t n = std::min<int64_t>(p_.top_logprobs, V);
    top_k(logits, V, n, idx, heap_);
    for (int64_t i = 0; i < n; ++i) top_[i] = {idx[i], lp[idx[i]]};
    out.top = {top_.data(), static_cast<size_t>(n)};
  }
  return out;
}

Sampled Sampler::sample(const float* logits, std::span<const int32_t> history, uint64_t choice, uint64_t position,
                        const uint32_t* allowed) {
  const int64_t n = candidates(logits, history, allowed);
  int32_t token = order_[0];
  if (p_.temperature > 0.f) {  // temperature, then the draw
    const float* w = work_.data();
    const int32_t* idx = order_.data();
    const double t = p_.temperature, top = w[idx[0]] / t;
    double total = 0;
    for (int64_t i = 0; i < n; ++i) total += std::exp(w[idx[i]] / t - top);
    const double u = counter_uniform(p_.seed, choice, position) * total;
    token = pick(n, u, [&](int64_t i) { return std::exp(w[idx[i]] / t - top); }, [idx](int64_t i) { return idx[i]; });
  }
  return describe(logits, token);
}

std::span<const TokenProb> Sampler::distribution(const float* logits, std::span<const int32_t> history,
                                                 const uint32_t* allowed) {
  const int64_t n = candidates(logits, history, allowed);
  const float* w = work_.data();
  const int32_t* idx = order_.data();
  dist_.resize(static_cast<size_t>(n));
  if (p_.temperature == 0.f) {
    dist_[0] = {idx[0], 1.0};
    return dist_;
  }
  const double t = p_.temperature, top = w[idx[0]] / t;
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    dist_[i] = {idx[i], std::exp(w[idx[i]] / t - top)};
    total += dist_[i].prob;
  }
  for (TokenProb& d : dist_) d.prob /= total;
  return dist_;
}

bool Sampler::accept(std::span<const TokenProb> p, std::span<const TokenProb> q, int32_t d, uint64_t choice,
                     uint64_t position) const {
  const double pd = prob_of(p, d), qd = prob_of(q, d);
  if (qd <= 0) return false;  // not the draft's to propose: never taken
  return counter_uniform(p_.seed, choice ^ kAcceptStream, position) * qd < pd;
}

int32_t Sampler::residual(std::span<const TokenProb> p, std::span<const TokenProb> q, uint64_t choice,
                          uint64_t position) {
  // max(0, p - q) is 0 outside p's candidates; q scattered over the vocabulary to look it up.
  for (const TokenProb& t : q) dense_[static_cast<size_t>(t.token)] = t.prob;
  const int64_t n = static_cast<int64_t>(p.size());
  auto rest = [&](int64_t i) { return std::max(0.0, p[i].prob - dense_[static_cast<size_t>(p[i].token)]); };
  auto token = [&](int64_t i) { return p[i].token; };
  double total = 0;
  for (int64_t i = 0; i < n; ++i) total += rest(i);
  const double u = counter_uniform(p_.seed, choice ^ kResidualStream, position);
  // p == q to rounding (a rejection then has probability ~0): draw from p itself.
  const int32_t out = total > 1e-12 ? pick(n, u * total, rest, token)
                                    : pick(n, u, [&](int64_t i) { return p[i].prob; }, token);
  for (const TokenProb& t : q) dense_[static_cast<size_t>(t.token)] = 0;
  return out;
}

int32_t Sampler::draw_draft(std::span<const TokenProb> q, uint64_t choice, uint64_t position) const {
  const double u = counter_uniform(p_.seed, choice ^ kDraftStream, position);
  return pick(static_cast<int64_t>(q.size()), u, [&](int64_t i) { return q[i].prob; },
              [&](int64_t i) { return q[i].token; });
}

}  // namespace tessera::llm
