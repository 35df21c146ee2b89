// Sampling (llm/sampler.h) and one request through the engine
// (llm/generate.h): greedy is the argmax; a seed reproduces its tokens, its
// choices differ; the filters keep what they promise; log-probs are the
// model's; stop strings end the text before them; bad parameters are errors
// that name them.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <numeric>

#include <fstream>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>
#include <set>

#include "tessera/llm/generate.h"
#include "tessera/llm/llama_gguf.h"
#include "tessera/llm/sampler.h"
#include "tessera/io/file.h"
#include "tessera/nn/zoo/zoo.h"
#include "tessera/ops/ops.h"
#include "llm_fixture.h"
#include "test_util.h"

namespace tessera {
namespace {

using llm::Sampler;
using llm::SamplingParams;

std::vector<float> logits_of(std::initializer_list<float> v) { return std::vector<float>(v); }

TEST(Sampler, CounterUniformIsUniformAndKeyedBySeedChoiceAndPosition) {
  double sum = 0;
  int below_tenth = 0;
  for (uint64_t p = 0; p < 20000; ++p) {
    const double u = llm::counter_uniform(42, 0, p);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    below_tenth += u < 0.1;
  }
  EXPECT_NEAR(sum / 20000, 0.5, 0.01);
  EXPECT_NEAR(below_tenth / 20000.0, 0.1, 0.01);
  EXPECT_EQ(llm::counter_uniform(1, 2, 3), llm::counter_uniform(1, 2, 3));
  EXPECT_NE(llm::counter_uniform(1, 2, 3), llm::counter_uniform(1, 2, 4));
  EXPECT_NE(llm::counter_uniform(1, 2, 3), llm::counter_uniform(1, 3, 3));
  EXPECT_NE(llm::counter_uniform(1, 2, 3), llm::counter_uniform(2, 2, 3));
}

TEST(Sampler, GreedyLogprobsAndTopLogprobs) {
  SamplingParams p;
  p.temperature = 0;
  p.top_logprobs = 2;
  Sampler s(4, p);
  const std::vector<float> l = logits_of({1.f, 3.f, 2.f, 3.f});
  llm::Sampled t = s.sample(l.data(), {}, 0, 0);
  EXPECT_EQ(t.token, 1);  // the first of the highest
  const double z = std::log(std::exp(1.0) + 2 * std::exp(3.0) + std::exp(2.0));
  EXPECT_NEAR(t.logprob, 3.0 - z, 1e-6);
  ASSERT_EQ(t.top.size(), 2u);
  EXPECT_EQ(t.top[0].token, 1);
  EXPECT_EQ(t.top[1].token, 3);
  EXPECT_NEAR(t.top[1].logprob, 3.0 - z, 1e-6);
}

// The candidates are the top_k by logit, ties to the lower id, in that
// order: checked against a full sort, on logits with many ties, masked
// tokens and a vocabulary that is not a multiple of the selection's blocks.
TEST(Sampler, TopKSelectionEqualsAFullSort) {
  const int64_t V = 1003;
  std::mt19937 gen(7);
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<float> l(static_cast<size_t>(V));
    for (float& x : l) x = static_cast<float>(static_cast<int>(gen() % 50)) * 0.25f;  // ties everywhere
    if (trial % 3 == 0) std::reverse(l.begin(), l.end());
    if (trial % 5 == 0) std::sort(l.begin(), l.end());  // the best at the end: every block enters
    std::vector<uint32_t> allowed(static_cast<size_t>((V + 31) / 32), ~0u);
    if (trial % 2) for (int64_t i = 0; i < V; i += 3) allowed[static_cast<size_t>(i >> 5)] &= ~(1u << (i & 31));
    for (const int64_t k : {int64_t{1}, int64_t{40}, V - 1}) {
      SamplingParams p;
      p.temperature = 1.f;
      p.top_k = k;
      p.top_p = 1.f;
      p.min_p = 0.f;
      Sampler s(V, p);
      const auto d = s.distribution(l.data(), {}, allowed.data());
      std::vector<int32_t> order;
      for (int32_t i = 0; i < V; ++i)
        if ((allowed[static_cast<size_t>(i >> 5)] >> (i & 31)) & 1) order.push_back(i);
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
      order.resize(std::min<size_t>(order.size(), static_cast<size_t>(k)));
      ASSERT_EQ(d.size(), order.size()) << "trial " << trial << " k " << k;
      for (size_t i = 0; i < order.size(); ++i) ASSERT_EQ(d[i].token, order[i]) << "trial " << trial << " k " << k;
    }
  }
}

// Greedy takes the first token of the highest logit, on the plain path
// (no mask, bias or penalty: the logits as they are) and the other alike;
// a NaN never wins.
TEST(Sampler, GreedyTakesTheFirstHighest) {
  std::mt19937 gen(3);
  for (int trial = 0; trial < 50; ++trial) {
    const int64_t V = 1 + static_cast<int64_t>(gen() % 300);
    std::vector<float> l(static_cast<size_t>(V));
    for (float& x : l) x = static_cast<float>(static_cast<int>(gen() % 9)) - 4.f;
    if (trial % 7 == 1 && V > 2) l[static_cast<size_t>(V / 2)] = NAN;
    int32_t want = 0;
    for (int32_t i = 1; i < V; ++i)
      if (l[i] > l[want]) want = i;
    SamplingParams p;
    p.temperature = 0;
    Sampler plain(V, p);
    p.repeat_penalty = 1.5f;  // no history: the same logits, through the copy
    Sampler penalized(V, p);
    EXPECT_EQ(plain.sample(l.data(), {}, 0, 0).token, want) << trial;
    EXPECT_EQ(penalized.sample(l.data(), {}, 0, 0).token, want) << trial;
  }
}

// Without logprobs the sampler skips the pass over the vocabulary that
// finds them: the token is the same, its log-probability NaN.
TEST(Sampler, LogprobsOnlyWhenAsked) {
  const std::vector<float> l = logits_of({0.f, 2.f, 1.f, 2.5f});
  SamplingParams p;
  p.seed = 3;
  Sampler with(4, p);
  p.logprobs = false;
  Sampler without(4, p);
  for (uint64_t pos = 0; pos < 50; ++pos) {
    const llm::Sampled a = with.sample(l.data(), {}, 0, pos), b = without.sample(l.data(), {}, 0, pos);
    EXPECT_EQ(a.token, b.token);
    EXPECT_TRUE(std::isfinite(a.logprob));
    EXPECT_TRUE(std::isnan(b.logprob));
  }
}

TEST(Sampler, FiltersPenaltiesAndBias) {
  const std::vector<float> l = logits_of({0.f, 5.f, 4.f, 3.f, -2.f});
  auto counts = [&](SamplingParams p, std::vector<int32_t> hist = {}) {
    Sampler s(5, p);
    std::vector<int> c(5);
    for (uint64_t i = 0; i < 4000; ++i) c[s.sample(l.data(), hist, 0, i).token]++;
    return c;
  };
  SamplingParams p;
  p.temperature = 1.f;
  p.top_p = 1.f;
  p.min_p = 0.f;
  p.top_k = 2;
  std::vector<int> c = counts(p);
  EXPECT_EQ(c[0] + c[3] + c[4], 0);
  EXPECT_NEAR(c[1] / 4000.0, 1 / (1 + std::exp(-1.0)), 0.03);
  p.top_k = 0;
  p.min_p = 0.3f;  // exp(-1) = 0.37 kept, exp(-2) = 0.14 not
  c = counts(p);
  EXPECT_EQ(c[0] + c[3] + c[4], 0);
  EXPECT_GT(c[2], 0);
  p.min_p = 0.f;
  p.top_p = 0.5f;  // token 1 alone holds 0.66
  c = counts(p);
  EXPECT_EQ(c[1], 4000);
  p.top_p = 1.f;
  p.logit_bias = {{4, 10.f}};
  c = counts(p);
  EXPECT_NEAR(c[4] / 4000.0, std::exp(8.0) / (1 + std::exp(5.0) + std::exp(4.0) + std::exp(3.0) + std::exp(8.0)), 0.02);
  p.logit_bias.clear();
  p.temperature = 0.f;
  p.repeat_penalty = 2.f;  // 5 / 2 < 4
  c = counts(p, {1, 1});
  EXPECT_EQ(c[2], 4000);
  p.repeat_penalty = 1.f;
  p.frequency_penalty = 0.6f;  // 5 - 2 * 0.6 < 4
  c = counts(p, {1, 1});
  EXPECT_EQ(c[2], 4000);
  p.frequency_penalty = 0.f;
  p.presence_penalty = 0.6f;  // 5 - 0.6 > 4
  c = counts(p, {1, 1});
  EXPECT_EQ(c[1], 4000);
}

// `seen` counts of `draws` draws against the distribution `want`: never a
// token of probability 0, and chi-square under its 99.9% point (the
// Wilson-Hilferty approximation).
void expect_draws_follow(const std::vector<double>& seen, const std::vector<double>& want, int draws) {
  double chi2 = 0;
  int df = -1;
  for (size_t t = 0; t < want.size(); ++t) {
    if (want[t] == 0) {
      EXPECT_EQ(seen[t], 0) << "token " << t << " has probability 0";
      continue;
    }
    const double e = want[t] * draws;
    chi2 += (seen[t] - e) * (seen[t] - e) / e;
    ++df;
  }
  const double a = 2.0 / (9.0 * df), crit = df * std::pow(1 - a + 3.090 * std::sqrt(a), 3);
  EXPECT_LT(chi2, crit) << "df " << df;
}

// The draws follow the distribution the transforms define, by a chi-square
// test at the 0.1% level over 40,000 positions: top-k, then top-p and min-p
// on the probabilities at temperature 1, then the temperature; with a bias
// and penalties applied first.
TEST(Sampler, DrawsFollowTheExactDistribution) {
  const std::vector<float> logits = {2.0f, 1.7f, 1.5f, 1.2f, 0.9f, 0.4f, 0.1f, -0.3f, -1.0f, -2.0f};
  struct Case {
    llm::SamplingParams p;
    std::vector<int32_t> history;
  };
  std::vector<Case> cases(4);
  cases[0].p.temperature = 1.0f, cases[0].p.top_k = 0, cases[0].p.top_p = 1.f, cases[0].p.min_p = 0.f;
  cases[1].p.temperature = 0.7f, cases[1].p.top_k = 6, cases[1].p.top_p = 0.9f, cases[1].p.min_p = 0.f;
  cases[2].p.temperature = 1.4f, cases[2].p.top_k = 0, cases[2].p.top_p = 1.f, cases[2].p.min_p = 0.2f;
  cases[3].p.temperature = 0.9f, cases[3].p.top_k = 8, cases[3].p.top_p = 0.97f, cases[3].p.min_p = 0.01f;
  cases[3].p.logit_bias = {{9, 3.5f}, {0, -0.5f}};
  cases[3].p.presence_penalty = 0.4f, cases[3].p.frequency_penalty = 0.2f, cases[3].p.repeat_penalty = 1.3f;
  cases[3].history = {1, 1, 4, 7};
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    SCOPED_TRACE("case " + std::to_string(ci));
    llm::SamplingParams p = cases[ci].p;
    p.seed = 1234 + ci;
    // The exact distribution, computed here from the documented order.
    std::vector<double> w(logits.begin(), logits.end());
    for (auto [t, b] : p.logit_bias) w[t] += b;
    std::map<int32_t, int> counts;
    for (int32_t t : cases[ci].history) ++counts[t];
    for (auto [t, c] : counts) {
      w[t] = w[t] > 0 ? w[t] / p.repeat_penalty : w[t] * p.repeat_penalty;
      w[t] -= p.frequency_penalty * c + p.presence_penalty;
    }
    std::vector<int> order(w.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return w[a] > w[b]; });
    size_t n = p.top_k > 0 ? static_cast<size_t>(p.top_k) : w.size();
    double z = 0;
    for (size_t i = 0; i < n; ++i) z += std::exp(w[order[i]] - w[order[0]]);
    double cum = 0;
    size_t keep = n;
    for (size_t i = 0; i < n; ++i) {
      const double q = std::exp(w[order[i]] - w[order[0]]) / z;
      if (i > 0 && q < p.min_p / z) {
        keep = i;
        break;
      }
      cum += q;
      if (cum >= p.top_p) {
        keep = i + 1;
        break;
      }
    }
    std::vector<double> want(w.size(), 0.0);
    double total = 0;
    for (size_t i = 0; i < keep; ++i) total += want[order[i]] = std::exp((w[order[i]] - w[order[0]]) / p.temperature);
    for (double& x : want) x /= total;
    ASSERT_GE(keep, 3u) << "the case should leave several tokens";

    llm::Sampler s(static_cast<int64_t>(logits.size()), p);
    // distribution() is the same distribution, most likely first.
    const std::span<const llm::TokenProb> dist = s.distribution(logits.data(), cases[ci].history);
    ASSERT_EQ(dist.size(), keep);
    for (size_t i = 0; i < keep; ++i) {
      EXPECT_EQ(dist[i].token, order[i]);
      EXPECT_NEAR(dist[i].prob, want[order[i]], 1e-6);  // the penalties in float here, in double above
    }
    const int draws = 40000;
    std::vector<double> seen(w.size(), 0.0);
    for (int i = 0; i < draws; ++i) ++seen[s.sample(logits.data(), cases[ci].history, 0, static_cast<uint64_t>(i)).token];
    expect_draws_follow(seen, want, draws);
  }
}

// Note [Speculative sampling]: a draft token drawn from q, kept with
// probability min(1, p/q) and otherwise replaced by a draw from
// max(0, p - q), is distributed as p (chi-square at the 0.1% level over
// 40,000 positions), and kept at the rate sum(min(p, q)).
TEST(Sampler, SpeculativeSamplingKeepsTheTargetsDistribution) {
  const std::vector<float> target = {2.0f, 1.7f, 1.5f, 1.2f, 0.9f, 0.4f, 0.1f, -0.3f, -1.0f, -2.0f};
  const std::vector<float> draft = {1.0f, 2.2f, 1.5f, -0.5f, 1.4f, 0.9f, 0.1f, 0.8f, -1.0f, 0.5f};
  llm::SamplingParams p;
  p.temperature = 0.9f, p.top_k = 7, p.top_p = 0.98f, p.min_p = 0.02f, p.seed = 77;
  llm::Sampler s(10, p), d(10, p);
  auto copy = [](std::span<const llm::TokenProb> x) { return std::vector<llm::TokenProb>(x.begin(), x.end()); };
  const std::vector<llm::TokenProb> pd = copy(s.distribution(target.data(), {}));
  const std::vector<llm::TokenProb> qd = copy(d.distribution(draft.data(), {}));
  std::vector<double> want(10, 0.0), q(10, 0.0);
  for (const auto& t : pd) want[t.token] = t.prob;
  for (const auto& t : qd) q[t.token] = t.prob;
  double overlap = 0;
  for (int t = 0; t < 10; ++t) overlap += std::min(want[t], q[t]);
  ASSERT_LT(overlap, 0.9) << "the draft should differ from the target";
  ASSERT_GT(overlap, 0.3);
  const int draws = 40000;
  std::vector<double> seen(10, 0.0);
  int kept = 0;
  for (int i = 0; i < draws; ++i) {
    const auto pos = static_cast<uint64_t>(i);
    const int32_t x = d.draw_draft(qd, 0, pos);
    const std::span<const llm::TokenProb> pp = s.distribution(target.data(), {});
    if (s.accept(pp, qd, x, 0, pos)) {
      ++seen[x];
      ++kept;
    } else {
      ++seen[s.residual(pp, qd, 0, pos)];
    }
  }
  expect_draws_follow(seen, want, draws);
  // The acceptance rate, within 4 standard deviations of its binomial count.
  EXPECT_NEAR(kept, overlap * draws, 4 * std::sqrt(draws * overlap * (1 - overlap)));
}

TEST(Sampler, BadParametersNameThemselves) {
  auto err = [](auto set) {
    SamplingParams p;
    set(p);
    return testing::error_of([&] { Sampler(10, p); });
  };
  EXPECT_NE(err([](SamplingParams& p) { p.temperature = -1; }).find("temperature -1"), std::string::npos);
  EXPECT_NE(err([](SamplingParams& p) { p.top_p = 0; }).find("top_p 0 must be in (0, 1]"), std::string::npos);
  EXPECT_NE(err([](SamplingParams& p) { p.min_p = 2; }).find("min_p 2"), std::string::npos);
  EXPECT_NE(err([](SamplingParams& p) { p.top_logprobs = 21; }).find("top_logprobs 21"), std::string::npos);
  EXPECT_NE(err([](SamplingParams& p) { p.logit_bias = {{10, 1.f}}; }).find("logit bias for token 10"),
            std::string::npos);
  EXPECT_NE(err([](SamplingParams& p) { p.repeat_penalty = 0; }).find("repeat_penalty 0"), std::string::npos);
}

using testing::Fixture;
using testing::fixture;

TEST(Generate, SeededRequestsReproduceAndChoicesDiffer) {
  Fixture f = fixture();
  llm::EngineOptions eo;
  eo.max_sequences = 2;
  llm::Engine e(f.model, eo);
  llm::GenerateOptions go;
  go.sampling.temperature = 1.5f;
  go.sampling.top_k = 0;
  go.sampling.min_p = 0.f;
  go.sampling.seed = 7;
  go.max_tokens = 24;
  go.ignore_eos = true;
  const std::vector<int32_t> prompt = f.tok.encode("ab c");
  const llm::GenerateResult a = llm::generate(e, f.tok, prompt, go);
  const llm::GenerateResult b = llm::generate(e, f.tok, prompt, go);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.tokens.size(), 24u);
  EXPECT_EQ(a.finish_reason, "length");
  go.choice = 1;
  EXPECT_NE(llm::generate(e, f.tok, prompt, go).tokens, a.tokens);
  // The streamed pieces make up the text.
  go.choice = 0;
  std::string streamed;
  llm::generate(e, f.tok, prompt, go, [&](std::string_view t, const llm::Sampled&) { streamed += t; });
  EXPECT_EQ(a.text, streamed);
  EXPECT_EQ(e.free_blocks(), e.total_blocks());
}

TEST(Generate, StopStringsEndTheTextBeforeThem) {
  Fixture f = fixture();
  llm::Engine e(f.model, {});
  llm::GenerateOptions go;
  go.sampling.temperature = 0;
  go.max_tokens = 40;
  go.ignore_eos = true;
  const std::vector<int32_t> prompt = f.tok.encode("ab");
  const llm::GenerateResult all = llm::generate(e, f.tok, prompt, go);
  ASSERT_GE(all.text.size(), 6u);
  // A stop string taken from the middle of the greedy text.
  const std::string stop = all.text.substr(3, 3);
  go.stop = {stop};
  std::string streamed;
  const llm::GenerateResult r =
      llm::generate(e, f.tok, prompt, go, [&](std::string_view t, const llm::Sampled&) { streamed += t; });
  EXPECT_EQ(r.finish_reason, "stop");
  EXPECT_EQ(r.text, all.text.substr(0, all.text.find(stop)));
  EXPECT_EQ(streamed, r.text);
  go.stop = {""};
  EXPECT_NE(testing::error_of([&] { llm::generate(e, f.tok, prompt, go); }).find("an empty stop string"),
            std::string::npos);

  // A stop token ends the text with everything before it, the bytes held
  // back as the start of a stop string that never came included.
  size_t k = 1;
  while (k < all.tokens.size() &&
         std::find(all.tokens.begin(), all.tokens.begin() + k, all.tokens[k]) != all.tokens.begin() + k)
    ++k;
  ASSERT_LT(k, all.tokens.size());
  go.stop.clear();
  go.max_tokens = static_cast<int64_t>(k);
  const std::string before = llm::generate(e, f.tok, prompt, go).text;
  ASSERT_FALSE(before.empty());
  go.max_tokens = 40;
  go.stop_tokens = {all.tokens[k]};
  go.stop = {before.substr(before.size() - 1) + "\x01"};
  streamed.clear();
  const llm::GenerateResult held =
      llm::generate(e, f.tok, prompt, go, [&](std::string_view t, const llm::Sampled&) { streamed += t; });
  EXPECT_EQ(held.finish_reason, "stop");
  EXPECT_EQ(held.text, before);
  EXPECT_EQ(streamed, before);
}

// `tessera generate` on a GGUF file: the prompt and the text on stdout, the
// speeds on stderr; the same seed gives the same text; bad input is an error.
TEST(Generate, CommandLineStreamsTextAndSpeeds) {
  nn::zoo::Llama* m = nullptr;
  Fixture f = fixture(&m);
  const std::string dir = testing::scratch_dir("cli_generate"), file = dir + "/tiny.gguf";
  std::filesystem::create_directories(dir);
  llm::save_llama_gguf(*m, file, {.type = llm::GgmlType::Q8_0, .tokenizer = &f.tok});
  // The text: after the two lines about the model and the cache, before the speeds.
  auto text = [](const std::string& o) {
    const size_t a = o.find('\n', o.find("KV cache: ")) + 1;
    return o.substr(a, o.find("prefill: ") - a);
  };
  const std::string cmd = "generate " + file + " -p ab -n 12 --temp 1 --top-k 0 --seed 5 --ignore-eos";
  std::string out, again;
  ASSERT_EQ(testing::cli(cmd, &out), 0) << out;
  EXPECT_NE(out.find("Q8_0 weights"), std::string::npos) << out;
  EXPECT_EQ(text(out).rfind("ab", 0), 0u) << out;
  EXPECT_GT(text(out).size(), 3u) << out;
  EXPECT_NE(out.find("prefill: 2 tokens in"), std::string::npos) << out;
  EXPECT_NE(out.find("decode: 12 tokens in"), std::string::npos) << out;
  ASSERT_EQ(testing::cli(cmd, &again), 0);
  EXPECT_EQ(text(again), text(out));
  ASSERT_EQ(testing::cli(cmd + " --threads 2 --batch 1 --kv-type q8_0", &again), 0);
  EXPECT_NE(again.find("KV cache: q8_0"), std::string::npos) << again;
  ASSERT_EQ(testing::cli(cmd + " --kv-block 64", &again), 0) << again;  // the block size changes no bits
  EXPECT_NE(again.find("blocks of 64 tokens"), std::string::npos) << again;
  EXPECT_EQ(text(again), text(out));
  EXPECT_EQ(testing::cli("generate " + file + " -p ab --kv-block 8", &again), 2) << again;
  EXPECT_EQ(testing::cli("generate " + file + " -p ab --kv-type q4", &out), 2) << out;
  EXPECT_EQ(testing::cli("generate " + file + " -p ab --kv-memory 12X", &out), 1) << out;
  EXPECT_NE(out.find("--kv-memory '12X' is not a positive byte count"), std::string::npos) << out;
  EXPECT_EQ(testing::cli("generate /nonexistent.gguf -p ab", &out), 1) << out;
  std::filesystem::remove_all(dir);
}

// `tessera chat`: each line of stdin is a turn; the prompt is the template's
// rendering of the whole conversation; control tokens typed by the user stay
// characters.
void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

TEST(Generate, ChatCommandTakesTurnsThroughTheTemplate) {
  nn::zoo::Llama* m = nullptr;
  Fixture f = fixture(&m);
  const std::string dir = testing::scratch_dir("cli_chat"), file = dir + "/tiny.gguf";
  std::filesystem::create_directories(dir);
  llm::save_llama_gguf(*m, file, {.type = llm::GgmlType::F16, .tokenizer = &f.tok});
  const std::string tmpl = dir + "/t.jinja", in = dir + "/in.txt";
  write_text(tmpl, std::string("{% for m in messages %}<s>{{ m.role }}: {{ m.content }}</s>{% endfor %}"
                                   "{% if add_generation_prompt %}<s>assistant:{% endif %}"));
  write_text(in, std::string("ab\nc </s> a\n"));
  std::string out;
  ASSERT_EQ(testing::cli("chat " + file + " --chat-template " + tmpl + " --system be -n 3 --ignore-eos --temp 0 < " + in,
                         &out),
            0)
      << out;
  EXPECT_NE(out.find("chat template: " + tmpl), std::string::npos) << out;
  // Turn 1: BOS system turn, user turn, assistant prompt; turn 2 adds the reply and the next line.
  const size_t first = out.find("prefill: "), second = out.find("prefill: ", first + 1);
  ASSERT_NE(second, std::string::npos) << out;
  EXPECT_LT(std::stoll(out.substr(first + 9)), std::stoll(out.substr(second + 9))) << out;
  // No template of its own and none given: the plain one.
  ASSERT_EQ(testing::cli("chat " + file + " -n 2 --ignore-eos < " + in, &out), 0) << out;
  EXPECT_NE(out.find("chat template: the plain template"), std::string::npos) << out;
  write_text(tmpl, std::string("{{ messages | shuffle }}"));
  EXPECT_EQ(testing::cli("chat " + file + " --chat-template " + tmpl + " < " + in, &out), 1) << out;
  EXPECT_NE(out.find("the filter 'shuffle' is not in Tessera's Jinja subset"), std::string::npos) << out;
  std::filesystem::remove_all(dir);

  // The tokenizer side: "</s>" inside a message's text is characters.
  const std::string text = "<s>a</s>b";
  const std::vector<int32_t> parsed = f.tok.encode(text, true, true);
  const std::vector<int32_t> guarded = f.tok.encode(text, true, true, {{3, 8}});
  EXPECT_NE(std::find(parsed.begin(), parsed.end(), 2), parsed.end());
  EXPECT_EQ(std::find(guarded.begin(), guarded.end(), 2), guarded.end());
  EXPECT_EQ(guarded.front(), 1);  // the template's own <s> is still BOS
}

}  // namespace
}  // namespace tessera
