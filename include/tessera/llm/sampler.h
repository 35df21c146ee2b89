#pragma once
// Choosing the next token from a row of logits.
//
// The transforms run in llama.cpp's order: logit bias, penalties (repeat,
// presence, frequency, over the last repeat_last_n tokens), top-k, top-p and
// min-p (on the probabilities at temperature 1), temperature, then a draw.
// temperature 0 is greedy: the first token of highest logit after bias and
// penalties.
//
// Note [Counter-based sampling]
// The draw for a request is uniform(seed, choice, position): Philox-4x32-10
// keyed by the request's seed, its counter the choice index and the token's
// position. No generator state is carried from token to token, so a seeded
// request gives the same text however it is batched or resumed, and its n
// choices (choice 0..n-1) differ from each other.
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace tessera::llm {

struct SamplingParams {
  float temperature = 0.8f;     // 0: greedy
  int64_t top_k = 40;           // 0: every token
  float top_p = 0.95f;          // 1: off
  float min_p = 0.05f;          // 0: off
  float repeat_penalty = 1.0f;  // 1: off; > 1 makes recent tokens less likely
  int64_t repeat_last_n = 64;   // tokens the penalties look back over (0: none)
  float presence_penalty = 0.f, frequency_penalty = 0.f;
  std::vector<std::pair<int32_t, float>> logit_bias;  // added to the token's logit
  uint64_t seed = 0;
  int64_t top_logprobs = 0;  // how many of the most likely tokens to report (0 to 20)
  // Whether a sampled token's log-probability is computed: a pass of exp
  // over the whole vocabulary per token, which on a fast model costs as
  // much as the rest of sampling (off, Sampled::logprob is NaN).
  bool logprobs = true;
};

// Philox-4x32-10: a uniform double in [0, 1) for (seed, choice, position).
double counter_uniform(uint64_t seed, uint64_t choice, uint64_t position);

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.f;
};

// One token of a sampling distribution and its probability.
struct TokenProb {
  int32_t token = 0;
  double prob = 0;
};

struct Sampled {
  int32_t token = 0;
  // log-softmax of the raw logits (before bias, penalties and temperature):
  // the model's own probability of the token; NaN unless params.logprobs.
  float logprob = 0.f;
  std::span<const TokenLogprob> top;  // the top_logprobs most likely tokens, most likely first
};

class Sampler {
 public:
  // Checks the parameters (an error names the bad one and its range).
  Sampler(int64_t vocab, SamplingParams params);

  // The token at `position` of choice `choice`; `history` holds the tokens
  // before it (for the penalties). `allowed`: a bit per token (a grammar's
  // mask, llm/grammar.h); the others are never drawn, as if their logits
  // were -inf before everything else. Allocates nothing; `top` stays valid
  // until the next call.
  Sampled sample(const float* logits, std::span<const int32_t> history, uint64_t choice, uint64_t position,
                 const uint32_t* allowed = nullptr);

  // The distribution `sample` draws from at these logits: its candidates,
  // most likely first, with probabilities summing to 1 (at temperature 0,
  // the greedy token alone). Valid until the next call.
  std::span<const TokenProb> distribution(const float* logits, std::span<const int32_t> history,
                                         const uint32_t* allowed = nullptr);
  // `token` as `sample` reports it: its log-probability and the top tokens.
  Sampled describe(const float* logits, int32_t token);

  // Note [Speculative sampling]: whether a draft token d, drawn from the
  // draft's distribution q, is kept where the target's is p: with
  // probability min(1, p(d) / q(d)), by uniform(seed, choice, position) on
  // its own stream. Where it is not, `residual` draws the token instead
  // from max(0, p - q), normalized.
  bool accept(std::span<const TokenProb> p, std::span<const TokenProb> q, int32_t d, uint64_t choice,
              uint64_t position) const;
  int32_t residual(std::span<const TokenProb> p, std::span<const TokenProb> q, uint64_t choice, uint64_t position);
  // A draft model's token from its distribution q, on the draft's own stream.
  int32_t draw_draft(std::span<const TokenProb> q, uint64_t choice, uint64_t position) const;

  const SamplingParams& params() const { return p_; }

 private:
  int64_t vocab_;
  SamplingParams p_;
  std::vector<float> work_;
  std::vector<int32_t> order_;
  std::vector<std::pair<float, int32_t>> heap_;  // top-k selection
  std::vector<TokenLogprob> top_;
  std::vector<TokenProb> dist_;
  std::vector<double> dense_;  // zeros, but for residual's scatter of q
  // The candidates after bias, penalties, top-k, top-p and min-p: their
  // count, in order_ (most likely first), with their logits in work_.
  int64_t candidates(const float* logits, std::span<const int32_t> history, const uint32_t* allowed);
};

}  // namespace tessera::llm
