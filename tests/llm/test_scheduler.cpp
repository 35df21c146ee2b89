// Continuous batching (llm/scheduler.h): under load, with prompts in chunks,
// requests coming and going and preemptions from a small cache, every
// request's tokens and text are those of its solo run; running decodes go on
// while a long prompt is taken in; cancellation frees the cache at the next
// step; admission follows priority and the age bound; what cannot fit is an
// error that says so.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "llm_fixture.h"
#include "tessera/llm/generate.h"
#include "tessera/llm/gpt_gguf.h"
#include "tessera/nn/zoo/zoo.h"
#include "tessera/llm/json_schema.h"
#include "tessera/llm/scheduler.h"
#include "test_util.h"

namespace tessera {
namespace {

using testing::Fixture;
using testing::fixture;

// A prompt of n tokens from the fixture's vocabulary, BOS first.
std::vector<int32_t> prompt_of(int64_t n, uint64_t seed) {
  std::vector<int32_t> t = {1};
  for (int64_t i = 1; i < n; ++i) t.push_back(static_cast<int32_t>(3 + (seed * 7919 + i * 104729 + i * i * 31) % 263));
  return t;
}

// A mix of requests: greedy and seeded sampling, various lengths.
llm::RequestOptions request(int i) {
  llm::RequestOptions o;
  o.max_tokens = 6 + (i * 7) % 30;
  o.ignore_eos = true;
  if (i % 2) {
    o.sampling.temperature = 1.3f;
    o.sampling.top_k = 0;
    o.sampling.min_p = 0.f;
    o.sampling.seed = 100 + i;
  } else {
    o.sampling.temperature = 0.f;
  }
  return o;
}

// A request's options for generate(), to run it alone.
llm::GenerateOptions solo_options(const llm::RequestOptions& r) {
  llm::GenerateOptions g;
  g.sampling = r.sampling;
  g.max_tokens = r.max_tokens;
  g.ignore_eos = r.ignore_eos;
  g.choice = r.choice;
  return g;
}

struct Outcome {
  std::vector<int32_t> tokens;
  std::string text, finish_reason;
  int64_t events_after_finish = 0;
};

// Steps until nothing is left, gathering each request's tokens and text;
// `each_step` runs before every step (to submit or cancel).
std::map<int64_t, Outcome> drain(llm::Scheduler& s, const std::function<void(int64_t)>& each_step = {}) {
  std::map<int64_t, Outcome> out;
  for (int64_t step = 0; step < 10000; ++step) {
    if (each_step) each_step(step);
    if (!s.has_work()) break;
    for (const llm::RequestEvent& ev : s.step()) {
      Outcome& o = out[ev.id];
      if (!o.finish_reason.empty()) ++o.events_after_finish;
      if (ev.has_token) o.tokens.push_back(ev.token);
      o.text += ev.text;
      if (ev.finished) o.finish_reason = ev.finish_reason;
    }
  }
  return out;
}

// A GPT whose vocabulary is padded past its tokenizer's (8 rows for 5
// characters, as a tensor-parallel run pads it): the scheduler and
// generate() sample the tokenizer's tokens only. Unmasked, 60 tokens drawn
// hot from 8 would all miss the padding with probability (5/8)^60 < 1e-12.
TEST(Scheduler, AVocabularyPaddedPastTheTokenizersIsNeverSampled) {
  nn::zoo::GPTConfig c;
  c.vocab_size = 8;
  c.block_size = 64;
  c.n_layer = 1;
  c.n_head = 2;
  c.n_embd = 8;
  manual_seed(3);
  nn::zoo::GPT gpt(c);
  llm::Engine engine(llm::model_from_gpt(gpt));
  const llm::Tokenizer tok = llm::Tokenizer::characters({"a", "b", "c", "d", "e"});
  llm::SamplingParams hot;
  hot.temperature = 2.0f;
  hot.top_k = 0;
  hot.top_p = 1.0f;
  hot.min_p = 0.f;
  hot.seed = 9;
  llm::Scheduler s(engine, tok);
  llm::RequestOptions o;
  o.max_tokens = 30;
  o.ignore_eos = true;
  o.sampling = hot;
  s.submit({0, 1}, o);
  int64_t drawn = 0;
  for (auto& [id, out] : drain(s)) {
    for (int32_t t : out.tokens) EXPECT_LT(t, 5);
    drawn += static_cast<int64_t>(out.tokens.size());
  }
  llm::GenerateOptions g;
  g.max_tokens = 30;
  g.ignore_eos = true;
  g.sampling = hot;
  const llm::GenerateResult r = llm::generate(engine, tok, {0, 1}, g);
  for (int32_t t : r.tokens) EXPECT_LT(t, 5);
  EXPECT_EQ(drawn + static_cast<int64_t>(r.tokens.size()), 60);
}

TEST(Scheduler, RequestsUnderLoadGiveTheirSoloTokens) {
  Fixture f = fixture();
  const int kRequests = 12;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < kRequests; ++i) prompts.push_back(prompt_of(1 + (i * 13) % 70, i));

  // Alone: one request at a time through generate().
  std::vector<llm::GenerateResult> solo;
  {
    llm::Engine e(f.model, {});
    for (int i = 0; i < kRequests; ++i) {
      const llm::RequestOptions r = request(i);
      solo.push_back(llm::generate(e, f.tok, prompts[i], solo_options(r)));
    }
  }
  // Together: a cache of 12 blocks of 16 tokens for up to 4 running
  // requests, 24 tokens a step, arrivals spread over the steps.
  struct Setup {
    int64_t budget;
    bool caching;
    int64_t lookup;
  };
  for (auto [budget, caching, lookup] : {Setup{24, false, 0}, Setup{7, false, 0}, Setup{24, true, 0},
                                         Setup{7, true, 0}, Setup{24, true, 4}, Setup{12, false, 3}}) {
    SCOPED_TRACE("budget " + std::to_string(budget) + (caching ? ", prefix caching" : "") +
                 (lookup ? ", prompt lookup " + std::to_string(lookup) : ""));
    llm::EngineOptions eo;
    eo.prefix_caching = caching;
    eo.max_logit_rows = std::min<int64_t>(4 * (1 + lookup), budget);
    eo.max_sequences = 4;
    eo.max_batch_tokens = budget;
    eo.kv_memory = 1;  // raised below to 12 blocks
    llm::Engine probe(f.model, {});
    eo.kv_memory = 12 * eo.block_tokens * probe.kv_bytes_per_token();
    llm::Engine e(f.model, eo);
    ASSERT_EQ(e.total_blocks(), 12);
    llm::Scheduler s(e, f.tok, {.lookup_tokens = lookup, .speculate_by_cost = false});
    std::vector<int64_t> ids;
    const auto out = drain(s, [&](int64_t step) {
      if (ids.size() < prompts.size() && (step < 2 || step % 3 == 0)) {
        ids.push_back(s.submit(prompts[ids.size()], request(static_cast<int>(ids.size()))));
      }
    });
    ASSERT_EQ(ids.size(), prompts.size());
    for (int i = 0; i < kRequests; ++i) {
      const Outcome& o = out.at(ids[i]);
      EXPECT_EQ(o.tokens, solo[i].tokens) << "request " << i;
      EXPECT_EQ(o.text, solo[i].text) << "request " << i;
      EXPECT_EQ(o.finish_reason, "length") << "request " << i;
      EXPECT_EQ(o.events_after_finish, 0) << "request " << i;
    }
    const llm::SchedulerStats st = s.stats();
    EXPECT_GT(st.preemptions, 0);  // the cache holds 192 tokens; the requests want far more at once
    EXPECT_EQ(st.running, 0);
    EXPECT_EQ(st.waiting, 0);
    EXPECT_EQ(e.free_blocks(), e.total_blocks());
    // Preempted requests find their own blocks again when recomputed.
    if (caching) EXPECT_GT(st.prefix_hits, 0);
    else EXPECT_EQ(st.prefix_hits, 0);
    if (lookup) EXPECT_GT(st.draft_tokens, 0);
  }
}

// A system prompt shared by every user is computed once; each request's
// tokens are still those of its solo run.
TEST(Scheduler, ASharedPromptIsComputedOnce) {
  Fixture f = fixture();
  const std::vector<int32_t> system = prompt_of(48, 99);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 5; ++i) {
    std::vector<int32_t> p = system;
    const std::vector<int32_t> q = prompt_of(9, 200 + i);
    p.insert(p.end(), q.begin() + 1, q.end());  // 8 tokens of its own
    prompts.push_back(p);
  }
  llm::Engine solo_engine(f.model, {});
  llm::EngineOptions eo;
  eo.max_sequences = 8;
  eo.max_batch_tokens = 64;
  eo.prefix_caching = true;
  llm::Engine e(f.model, eo);
  llm::Scheduler s(e, f.tok, {});
  std::vector<int64_t> ids;
  std::map<int64_t, int64_t> cached;
  std::map<int64_t, Outcome> out;
  // The first user, then the others once its prompt is in.
  ids.push_back(s.submit(prompts[0], request(0)));
  for (int64_t step = 0; s.has_work() && step < 1000; ++step) {
    if (step == 1)
      for (int i = 1; i < 5; ++i) ids.push_back(s.submit(prompts[i], request(i)));
    for (const llm::RequestEvent& ev : s.step()) {
      if (ev.has_token) out[ev.id].tokens.push_back(ev.token);
      cached[ev.id] = ev.cached_tokens;
    }
  }
  const llm::SchedulerStats st = s.stats();
  EXPECT_EQ(st.prefix_hits, 4 * 48);
  EXPECT_EQ(st.prompt_tokens, 56 + 4 * 8);
  EXPECT_EQ(cached[ids[0]], 0);
  for (int i = 0; i < 5; ++i) {
    if (i > 0) EXPECT_EQ(cached[ids[i]], 48) << i;
    const llm::RequestOptions r = request(i);
    EXPECT_EQ(out[ids[i]].tokens, llm::generate(solo_engine, f.tok, prompts[i], solo_options(r)).tokens) << i;
  }
  EXPECT_EQ(e.free_blocks(), e.total_blocks());
}

// The choices of one call share its prompt: the first computes it, the
// others fork it and compute only its last token.
TEST(Scheduler, ChoicesForkTheFirstOnesPrompt) {
  Fixture f = fixture();
  const std::vector<int32_t> prompt = prompt_of(41, 5);
  for (bool caching : {false, true}) {
    SCOPED_TRACE(caching ? "prefix caching" : "no prefix caching");
    llm::EngineOptions eo;
    eo.max_sequences = 4;
    eo.max_batch_tokens = 32;
    eo.prefix_caching = caching;
    llm::Engine e(f.model, eo);
    llm::Scheduler s(e, f.tok, {});
    llm::RequestOptions o = request(1);  // seeded sampling
    std::vector<int64_t> ids;
    for (uint64_t i = 0; i < 3; ++i) {
      o.choice = i;
      o.share_prompt_of = i ? ids[0] : 0;
      ids.push_back(s.submit(prompt, o));
    }
    std::map<int64_t, std::vector<int32_t>> tokens;
    std::map<int64_t, int64_t> cached;
    while (s.has_work())
      for (const llm::RequestEvent& ev : s.step()) {
        if (ev.has_token) tokens[ev.id].push_back(ev.token);
        cached[ev.id] = ev.cached_tokens;
      }
    EXPECT_EQ(s.stats().prompt_tokens, 41 + 2);
    llm::Engine solo_engine(f.model, {});
    for (uint64_t i = 0; i < 3; ++i) {
      EXPECT_EQ(cached[ids[i]], i ? 40 : 0);
      llm::RequestOptions alone = o;
      alone.choice = i;
      EXPECT_EQ(tokens[ids[i]], llm::generate(solo_engine, f.tok, prompt, solo_options(alone)).tokens) << "choice " << i;
    }
    EXPECT_NE(tokens[ids[0]], tokens[ids[1]]);
    EXPECT_EQ(e.free_blocks(), e.total_blocks());
  }
}

// Embedding requests: the pooled final hidden states of the whole input,
// the same bits in chunks among other requests as in one step alone.
TEST(Scheduler, EmbeddingsPoolTheInputsHiddenStates) {
  Fixture f = fixture();
  const std::vector<int32_t> input = prompt_of(40, 8);
  const int64_t dim = f.model->spec().dim;
  // Directly: the whole input in one step.
  std::vector<float> rows(static_cast<size_t>(40 * dim));
  {
    llm::Engine e(f.model, {});
    const int64_t s = e.add_sequence();
    llm::Chunk c{s, input, 0};
    e.step({&c, 1});
    e.hidden_states(0, 40, rows.data());
  }
  auto want = [&](llm::Pooling p) {
    std::vector<double> v(static_cast<size_t>(dim), 0.0);
    const int64_t from = p == llm::Pooling::Last ? 39 : 0, n = p == llm::Pooling::Mean ? 40 : 1;
    for (int64_t i = from; i < from + n; ++i)
      for (int64_t c = 0; c < dim; ++c) v[static_cast<size_t>(c)] += rows[static_cast<size_t>(i * dim + c)];
    double norm = 0;
    for (double& x : v) norm += (x / static_cast<double>(n)) * (x / static_cast<double>(n));
    std::vector<float> out;
    for (double x : v) out.push_back(static_cast<float>(x / static_cast<double>(n) / std::sqrt(norm)));
    return out;
  };
  llm::EngineOptions eo;
  eo.max_sequences = 4;
  eo.max_batch_tokens = 7;
  eo.prefix_caching = true;
  llm::Engine e(f.model, eo);
  llm::Scheduler s(e, f.tok, {});
  std::map<int64_t, llm::Pooling> ids;
  s.submit(prompt_of(30, 1), request(0));  // a generation request beside them
  for (llm::Pooling p : {llm::Pooling::Mean, llm::Pooling::Last, llm::Pooling::Cls}) {
    llm::RequestOptions o;
    o.pooling = p;
    ids[s.submit(input, o)] = p;
  }
  int found = 0;
  while (s.has_work())
    for (const llm::RequestEvent& ev : s.step()) {
      if (!ids.count(ev.id)) continue;
      EXPECT_TRUE(ev.finished);
      EXPECT_EQ(ev.finish_reason, "stop");
      EXPECT_FALSE(ev.has_token);
      EXPECT_EQ(ev.embedding, want(ids[ev.id])) << llm::pooling_name(ids[ev.id]);
      ++found;
    }
  EXPECT_EQ(found, 3);
  EXPECT_EQ(e.free_blocks(), e.total_blocks());
  // A whole context's worth is an input (there is nothing to generate).
  llm::RequestOptions o;
  o.pooling = llm::Pooling::Mean;
  EXPECT_NO_THROW(s.submit(prompt_of(128, 3), o));
  EXPECT_NE(testing::error_of([&] { s.submit(prompt_of(129, 3), o); }).find("context_length_exceeded: the input has 129"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] { llm::pooling_from_name("max"); }).find("pooling 'max' is not one of mean, last, cls"),
            std::string::npos);
}

// Note [Prompt lookup]: on text that repeats itself drafts are taken, and
// every request's tokens are still its solo run's, greedy or seeded.
TEST(Scheduler, PromptLookupDraftsKeepEachRequestsTokens) {
  Fixture f = fixture();
  // A prompt that repeats a passage: the model's own continuation tends to
  // repeat it too, and the drafts come from it.
  std::vector<int32_t> prompt = prompt_of(20, 4);
  const std::vector<int32_t> passage(prompt.begin() + 1, prompt.end());
  for (int i = 0; i < 3; ++i) prompt.insert(prompt.end(), passage.begin(), passage.end());
  llm::EngineOptions eo;
  eo.max_sequences = 4;
  eo.max_batch_tokens = 64;
  eo.max_logit_rows = 4 * 9;
  eo.prefix_caching = true;
  llm::Engine e(f.model, eo);
  llm::Scheduler s(e, f.tok, {.lookup_tokens = 8, .speculate_by_cost = false});
  std::vector<llm::RequestOptions> opts;
  for (int i = 0; i < 4; ++i) {
    llm::RequestOptions o = request(i);  // greedy and seeded in turn
    o.max_tokens = 40;
    opts.push_back(o);
  }
  std::vector<int64_t> ids;
  for (const auto& o : opts) ids.push_back(s.submit(prompt, o));
  const auto out = drain(s);
  llm::Engine solo_engine(f.model, {});
  for (size_t i = 0; i < ids.size(); ++i) {
    const llm::GenerateResult want = llm::generate(solo_engine, f.tok, prompt, solo_options(opts[i]));
    EXPECT_EQ(out.at(ids[i]).tokens, want.tokens) << "request " << i;
    EXPECT_EQ(out.at(ids[i]).text, want.text) << "request " << i;
  }
  const llm::SchedulerStats st = s.stats();
  EXPECT_GT(st.draft_tokens, 0);
  EXPECT_GT(st.accepted_tokens, 0);
  EXPECT_LE(st.accepted_tokens, st.draft_tokens);
  EXPECT_EQ(st.accepted_by_position.size(), 8u);
  EXPECT_EQ(st.accepted_by_position[0] >= st.accepted_by_position[1], true);
  EXPECT_EQ(e.free_blocks(), e.total_blocks());
  llm::EngineOptions few;
  EXPECT_NE(testing::error_of([&] {
              llm::Engine small(f.model, few);
              llm::Scheduler bad(small, f.tok, {.lookup_tokens = 4});
            }).find("need 80 logit rows a step"),
            std::string::npos);
}

// Note [Draft model]: under load (a small cache, preemptions, prompts in
// chunks, prefix hits) with a draft model, greedy requests give their solo
// tokens and sampling ones run to their length; a draft that is the model
// itself has every draft taken; both caches are whole again after.
TEST(Scheduler, DraftModelKeepsGreedyRequestsTokens) {
  Fixture f = fixture();
  Fixture other = fixture(nullptr, 1, 32);  // another random model of the same vocabulary
  const int kRequests = 10;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < kRequests; ++i) prompts.push_back(prompt_of(1 + (i * 17) % 60, i));
  std::vector<llm::GenerateResult> solo;
  {
    llm::Engine e(f.model, {});
    for (int i = 0; i < kRequests; ++i) solo.push_back(llm::generate(e, f.tok, prompts[i], solo_options(request(i))));
  }
  struct Setup {
    bool same;  // the draft is the model itself
    int64_t budget;
    bool caching;
    int64_t draft_batch;  // tokens a draft step carries: prompts longer catch up over several steps
  };
  for (auto [same, budget, caching, draft_batch] :
       {Setup{true, 24, false, 64}, Setup{false, 24, true, 64}, Setup{false, 11, false, 16}}) {
    SCOPED_TRACE(std::string(same ? "the model as its own draft" : "another model as draft") + ", budget " +
                 std::to_string(budget) + (caching ? ", prefix caching" : "") + ", draft steps of " +
                 std::to_string(draft_batch));
    llm::EngineOptions eo;
    eo.prefix_caching = caching;
    eo.max_logit_rows = std::min<int64_t>(4 * (1 + 4), budget);
    eo.max_sequences = 4;
    eo.max_batch_tokens = budget;
    eo.kv_memory = 8 * eo.block_tokens * llm::Engine(f.model, {}).kv_bytes_per_token();
    llm::Engine e(f.model, eo);
    llm::EngineOptions dopt;
    dopt.prefix_caching = caching;
    dopt.max_sequences = 4;
    dopt.max_batch_tokens = draft_batch;
    dopt.max_logit_rows = 4;
    dopt.threads = 1;  // as serve-llm runs a draft model
    llm::Engine draft(same ? f.model : other.model, dopt);
    llm::Scheduler s(e, f.tok, {.draft_tokens = 4, .speculate_by_cost = false}, &draft);
    std::vector<int64_t> ids;
    const auto out = drain(s, [&](int64_t step) {
      if (ids.size() < prompts.size() && (step < 2 || step % 3 == 0))
        ids.push_back(s.submit(prompts[ids.size()], request(static_cast<int>(ids.size()))));
    });
    ASSERT_EQ(ids.size(), prompts.size());
    for (int i = 0; i < kRequests; ++i) {
      const Outcome& o = out.at(ids[i]);
      const llm::RequestOptions r = request(i);
      EXPECT_EQ(o.finish_reason, "length") << "request " << i;
      EXPECT_EQ(static_cast<int64_t>(o.tokens.size()), r.max_tokens) << "request " << i;
      EXPECT_EQ(o.events_after_finish, 0) << "request " << i;
      if (r.sampling.temperature == 0.f) {
        EXPECT_EQ(o.tokens, solo[i].tokens) << "request " << i;
        EXPECT_EQ(o.text, solo[i].text) << "request " << i;
      }
    }
    const llm::SchedulerStats st = s.stats();
    EXPECT_GT(st.preemptions, 0);
    EXPECT_GT(st.draft_tokens, 0);
    if (same) EXPECT_EQ(st.accepted_tokens, st.draft_tokens);  // the same logits: p = q everywhere
    else EXPECT_LT(st.accepted_tokens, st.draft_tokens);
    int64_t by_position = 0;
    for (int64_t n : st.accepted_by_position) by_position += n;
    EXPECT_EQ(by_position, st.accepted_tokens);
    EXPECT_EQ(e.free_blocks(), e.total_blocks());
    EXPECT_EQ(draft.free_blocks(), draft.total_blocks());
  }
  // A draft engine needs draft_tokens, and its vocabulary must be the model's.
  llm::EngineOptions eo;
  eo.max_logit_rows = 16 * 5;
  llm::Engine e(f.model, eo);
  llm::Engine d(other.model, {});
  EXPECT_NE(testing::error_of([&] { llm::Scheduler bad(e, f.tok, {}, &d); }).find("needs draft_tokens"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { llm::Scheduler bad(e, f.tok, {.lookup_tokens = 2, .draft_tokens = 2}, &d); })
                .find("not both"),
            std::string::npos);
  const llm::Tokenizer changed = testing::with_token(f.tok, 100, "zz");
  EXPECT_NE(testing::error_of([&] { llm::check_same_vocabulary(f.tok, changed); }).find("token 100 of the draft model ('zz')"),
            std::string::npos);
  EXPECT_EQ(testing::error_of([&] { llm::check_same_vocabulary(f.tok, f.tok); }), "");
}

// Note [Grammars in the scheduler]: requests with a JSON schema's grammar,
// greedy and sampled, beside others and with prompt lookup on (which they
// must not use), stop with a text that parses and validates.
TEST(Scheduler, GrammarRequestsStopWithACompleteText) {
  Fixture f = fixture();
  const nlohmann::ordered_json schema = nlohmann::ordered_json::parse(
      R"({"type": "object", "properties": {"ok": {"type": "boolean"}, "pick": {"enum": ["x", "yz", 3]},
          "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 2}},
          "required": ["ok", "pick", "tags"], "additionalProperties": false})");
  const auto grammar = llm::Grammar::parse(llm::json_schema_to_gbnf(schema));
  llm::EngineOptions eo;
  eo.max_sequences = 4;
  eo.max_batch_tokens = 64;
  eo.max_logit_rows = 4 * 5;
  llm::Engine e(f.model, eo);
  llm::Scheduler s(e, f.tok, {.lookup_tokens = 4, .speculate_by_cost = false});
  std::vector<int64_t> ids;
  for (int i = 0; i < 8; ++i) {
    llm::RequestOptions o = request(i);
    o.max_tokens = 400;
    o.ignore_eos = false;
    if (i < 6) o.grammar = grammar;  // two without, beside them
    ids.push_back(s.submit(prompt_of(5 + i, i), o));
  }
  const auto out = drain(s);
  for (int i = 0; i < 6; ++i) {
    const Outcome& o = out.at(ids[i]);
    ASSERT_EQ(o.finish_reason, "stop") << "request " << i << ": " << o.text;
    nlohmann::json v;
    ASSERT_NO_THROW(v = nlohmann::json::parse(o.text)) << o.text;
    ASSERT_TRUE(v.is_object()) << o.text;
    EXPECT_TRUE(v["ok"].is_boolean()) << o.text;
    EXPECT_TRUE(v["pick"] == "x" || v["pick"] == "yz" || v["pick"] == 3) << o.text;
    ASSERT_TRUE(v["tags"].is_array()) << o.text;
    EXPECT_LE(v["tags"].size(), 2u) << o.text;
    EXPECT_EQ(v.size(), 3u) << o.text;
  }
  EXPECT_EQ(e.free_blocks(), e.total_blocks());
}

// Note [Prompt chunks beside decodes]: step time fitted on tokens and
// attention pairs, and the chunk each position leaves room for.
TEST(Scheduler, PromptChunksBesideDecodesKeepStepsShort) {
  llm::StepCost c;
  double a = 0, b = 0, k = 0;
  EXPECT_FALSE(c.fit(a, b, k));  // nothing seen yet
  // 20 ms, 1 ms a token, 4 ms a million pairs: decodes, and chunks at several positions.
  auto cost = [](double t, double p) { return 0.02 + 0.001 * t + 0.004 * p * 1e-6; };
  c.observe(8, 800, cost(8, 800));
  c.observe(8, 800, cost(8, 800));
  EXPECT_FALSE(c.fit(a, b, k));  // one size of step: nothing to fit
  for (auto [t, p] : std::vector<std::pair<int64_t, double>>{
           {8, 2400}, {520, 512 * 1024 / 2}, {40, 32 * 2000 + 8 * 300}, {8, 4000}, {300, 300 * 1500}, {16, 16 * 100}})
    c.observe(t, p, cost(static_cast<double>(t), p));
  ASSERT_TRUE(c.fit(a, b, k));
  EXPECT_NEAR(a, 0.02, 1e-6);
  EXPECT_NEAR(b, 0.001, 1e-8);
  EXPECT_NEAR(k, 0.004, 1e-6);

  // Pairs in step with tokens alone: no telling them apart, so c = 0 and the fit on tokens.
  llm::StepCost lin;
  for (int64_t t : {520, 8, 300, 16, 400}) lin.observe(t, 100.0 * static_cast<double>(t), 0.02 + 0.001 * static_cast<double>(t));
  ASSERT_TRUE(lin.fit(a, b, k));
  EXPECT_NEAR(b, 0.001, 1e-8);
  EXPECT_EQ(k, 0);

  // 30 ms for prompt chunks at 0.5 ms a token and 0.4 s a million pairs:
  // 58 tokens from the start, 22 where each attends to about 2,000 keys.
  llm::ChunkBudget time{true, 0.030, 0.0005, 0.4};
  auto chunk_cost = [](int64_t s, int64_t n) { return 0.0005 * n + 0.4e-6 * (n * s + n * (n + 1) / 2.0); };
  for (int64_t start : {0, 500, 2000}) {
    const int64_t n = time.tokens(start);
    EXPECT_LE(chunk_cost(start, n), 0.030 + 1e-12) << start;
    EXPECT_GT(chunk_cost(start, n + 1), 0.030) << start;
  }
  EXPECT_EQ(time.tokens(0), 58);
  EXPECT_EQ(time.tokens(2000), 22);
  time.take(2000, 12);  // about half of it
  EXPECT_EQ(time.tokens(2012), 10);
  time.take(2012, 11);  // past it
  EXPECT_EQ(time.tokens(0), 0);
  EXPECT_EQ(llm::ChunkBudget{}.tokens(5000), int64_t{1} << 40);  // unbounded
}

// Stop strings and stop tokens end a request as they end generate()'s.
TEST(Scheduler, StopsAsGenerateDoes) {
  Fixture f = fixture();
  llm::Engine e(f.model, {.max_batch_tokens = 64, .max_sequences = 4});
  llm::RequestOptions o = request(0);
  o.max_tokens = 40;
  llm::GenerateOptions g;
  g.sampling = o.sampling;
  g.max_tokens = 40;
  g.ignore_eos = true;
  const std::vector<int32_t> prompt = prompt_of(6, 4);
  const llm::GenerateResult all = llm::generate(e, f.tok, prompt, g);
  ASSERT_GE(all.text.size(), 8u);
  llm::Scheduler s(e, f.tok, {});
  std::vector<std::pair<int64_t, llm::GenerateResult>> cases;
  for (int c = 0; c < 3; ++c) {
    llm::RequestOptions r = o;
    if (c == 0) r.stop = {all.text.substr(4, 3)};
    if (c == 1) r.stop_tokens = {all.tokens[5]};
    if (c == 2) r.stop = {all.text.substr(2, 1) + "\x01"}, r.stop_tokens = {all.tokens[6]};
    g.stop = r.stop;
    g.stop_tokens = r.stop_tokens;
    cases.push_back({s.submit(prompt, r), llm::generate(e, f.tok, prompt, g)});
  }
  const auto out = drain(s);
  for (const auto& [id, want] : cases) {
    EXPECT_EQ(out.at(id).text, want.text) << id;
    EXPECT_EQ(out.at(id).tokens, want.tokens) << id;
    EXPECT_EQ(out.at(id).finish_reason, want.finish_reason) << id;
  }
}

// Running decodes get a token at every step while a long prompt comes in in
// chunks beside them.
TEST(Scheduler, DecodesGoOnWhileALongPromptIsTakenIn) {
  Fixture f = fixture();
  llm::Engine e(f.model, {.max_batch_tokens = 16, .max_sequences = 4});
  llm::Scheduler s(e, f.tok, {});
  llm::RequestOptions o = request(0);
  o.max_tokens = 60;
  const int64_t a = s.submit(prompt_of(5, 1), o), b = s.submit(prompt_of(9, 2), o);
  s.step();  // both prompts
  const int64_t long_prompt = s.submit(prompt_of(100, 3), o);
  for (int step = 0; step < 8; ++step) {  // 100 tokens at 14 a step
    int64_t tokens_a = 0, tokens_b = 0, tokens_long = 0;
    for (const llm::RequestEvent& ev : s.step()) {
      tokens_a += ev.id == a && ev.has_token;
      tokens_b += ev.id == b && ev.has_token;
      tokens_long += ev.id == long_prompt && ev.has_token;
    }
    EXPECT_EQ(tokens_a, 1) << "step " << step;
    EXPECT_EQ(tokens_b, 1) << "step " << step;
    EXPECT_EQ(tokens_long, step == 7 ? 1 : 0) << "step " << step;  // its first token when the prompt is in
  }
}

TEST(Scheduler, CancellingFreesTheCacheAtTheNextStep) {
  Fixture f = fixture();
  llm::Engine e(f.model, {.max_batch_tokens = 64, .max_sequences = 1});
  llm::Scheduler s(e, f.tok, {});
  llm::RequestOptions o = request(0);
  o.max_tokens = 50;
  const int64_t running = s.submit(prompt_of(40, 1), o), waiting = s.submit(prompt_of(10, 2), o);
  s.step();
  s.step();
  EXPECT_LT(e.free_blocks(), e.total_blocks());
  s.cancel(running);
  s.cancel(waiting);
  s.cancel(12345);  // unknown: ignored
  const std::vector<llm::RequestEvent> evs = s.step();
  ASSERT_EQ(evs.size(), 2u);
  for (const llm::RequestEvent& ev : evs) {
    EXPECT_TRUE(ev.finished);
    EXPECT_EQ(ev.finish_reason, "cancelled");
    EXPECT_FALSE(ev.has_token);
  }
  EXPECT_EQ(evs[0].id, running);
  EXPECT_EQ(evs[0].completion_tokens, 2);
  EXPECT_EQ(e.free_blocks(), e.total_blocks());
  EXPECT_FALSE(s.has_work());
}

// Admission: higher priority first, arrival order among equals, and a
// request past the age bound before any other.
TEST(Scheduler, AdmitsByPriorityAndAge) {
  Fixture f = fixture();
  llm::Engine e(f.model, {.max_batch_tokens = 64, .max_sequences = 1});
  llm::RequestOptions o = request(0);
  o.max_tokens = 2;
  llm::Scheduler s(e, f.tok, {});
  llm::RequestOptions low = o, high = o;
  high.priority = 5;
  const int64_t a = s.submit(prompt_of(4, 1), low), b = s.submit(prompt_of(4, 2), high),
                c = s.submit(prompt_of(4, 3), low);
  std::vector<int64_t> first_token;
  for (int i = 0; i < 20 && s.has_work(); ++i)
    for (const llm::RequestEvent& ev : s.step())
      if (ev.has_token && ev.completion_tokens == 1) first_token.push_back(ev.id);
  EXPECT_EQ(first_token, (std::vector<int64_t>{b, a, c}));

  llm::Scheduler aged(e, f.tok, {.max_wait_seconds = 0.02});
  const int64_t old = aged.submit(prompt_of(4, 1), low);
  std::this_thread::sleep_for(std::chrono::milliseconds(40));
  const int64_t urgent = aged.submit(prompt_of(4, 2), high);
  first_token.clear();
  for (int i = 0; i < 20 && aged.has_work(); ++i)
    for (const llm::RequestEvent& ev : aged.step())
      if (ev.has_token && ev.completion_tokens == 1) first_token.push_back(ev.id);
  EXPECT_EQ(first_token, (std::vector<int64_t>{old, urgent}));
}

TEST(Scheduler, TheContextEndsARequestWithLength) {
  Fixture f = fixture();
  llm::EngineOptions eo;
  eo.context = 32;
  eo.max_batch_tokens = 64;
  eo.max_sequences = 2;
  llm::Engine e(f.model, eo);
  llm::Scheduler s(e, f.tok, {});
  llm::RequestOptions o = request(0);
  o.max_tokens = 100;
  const int64_t id = s.submit(prompt_of(29, 1), o);
  const auto out = drain(s);
  EXPECT_EQ(out.at(id).finish_reason, "length");
  EXPECT_EQ(out.at(id).tokens.size(), 3u);  // positions 29, 30, 31
}

TEST(Scheduler, WhatCannotFitIsAnErrorThatSaysSo) {
  Fixture f = fixture();
  llm::EngineOptions eo;
  eo.context = 64;
  eo.max_sequences = 4;
  eo.max_batch_tokens = 64;
  llm::Engine e(f.model, eo);
  llm::Scheduler s(e, f.tok, {});
  const llm::RequestOptions o = request(0);
  auto err = [&](std::vector<int32_t> p, const llm::RequestOptions& r) {
    return testing::error_of([&] { s.submit(std::move(p), r); });
  };
  EXPECT_NE(err(prompt_of(64, 1), o).find("context_length_exceeded: the prompt has 64 tokens and the context holds 64"),
            std::string::npos);
  EXPECT_NE(err({}, o).find("the prompt has no tokens"), std::string::npos);
  EXPECT_NE(err({1, 9999}, o).find("prompt token 9999 is outside the vocabulary [0, 266)"), std::string::npos);
  llm::RequestOptions bad = o;
  bad.max_tokens = 0;
  EXPECT_NE(err({1, 5}, bad).find("max_tokens 0 must be 1 or more"), std::string::npos);
  bad = o;
  bad.sampling.temperature = -1;
  EXPECT_NE(err({1, 5}, bad).find("temperature"), std::string::npos);
  bad = o;
  bad.stop = {""};
  EXPECT_NE(err({1, 5}, bad).find("an empty stop string"), std::string::npos);
  EXPECT_FALSE(s.has_work());  // nothing was queued
  // Options the engine cannot carry.
  llm::Engine narrow(f.model, {.max_batch_tokens = 3, .max_sequences = 4, .max_logit_rows = 3});
  EXPECT_NE(testing::error_of([&] { llm::Scheduler(narrow, f.tok, {}); })
                .find("the engine's max_batch_tokens (3) must be at least its max_sequences (4)"),
            std::string::npos);
  // A prompt longer than the whole cache.
  llm::EngineOptions small = eo;
  small.context = 0;
  llm::Engine probe(f.model, {});
  small.kv_memory = 2 * small.block_tokens * probe.kv_bytes_per_token();
  llm::Engine tiny(f.model, small);
  llm::Scheduler t(tiny, f.tok, {});
  EXPECT_NE(testing::error_of([&] { t.submit(prompt_of(40, 1), o); })
                .find("context_length_exceeded: the prompt has 40 tokens and the whole KV cache holds 32"),
            std::string::npos);
}

// submit and cancel from other threads while one thread steps.
TEST(Scheduler, SubmitAndCancelFromOtherThreads) {
  Fixture f = fixture();
  llm::Engine e(f.model, {.max_batch_tokens = 32, .max_sequences = 8});
  llm::Scheduler s(e, f.tok, {});
  std::vector<int64_t> ids(16, 0);
  std::thread client([&] {
    for (int i = 0; i < 16; ++i) {
      ids[i] = s.submit(prompt_of(3 + i, i), request(i));
      if (i % 4 == 3) s.cancel(ids[i - 1]);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  // Steps until all 16 finish (a deadline, not a count of steps: idle steps
  // are so cheap that any count could run out before the client has
  // submitted them all).
  std::map<int64_t, std::string> reasons;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (reasons.size() < 16 && std::chrono::steady_clock::now() < deadline) {
    for (const llm::RequestEvent& ev : s.step())
      if (ev.finished) reasons[ev.id] = ev.finish_reason;
    if (!s.has_work()) std::this_thread::yield();
  }
  client.join();
  ASSERT_EQ(reasons.size(), 16u);
  for (int i = 0; i < 16; ++i)
    EXPECT_TRUE(reasons[ids[i]] == "length" || (i % 4 == 2 && reasons[ids[i]] == "cancelled")) << i;
  EXPECT_EQ(e.free_blocks(), e.total_blocks());
}

}  // namespace
}  // namespace tessera
