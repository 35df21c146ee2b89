// Continuous batching over one engine (include/tessera/llm/scheduler.h,
// Note [Scheduling]).
#include "tessera/llm/scheduler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <utility>

#include "tessera/core/error.h"

namespace tessera::llm {

using Clock = std::chrono::steady_clock;

struct Scheduler::Request {
  int64_t id = 0;
  RequestOptions opts;
  std::vector<int32_t> tokens;  // the prompt, then each sampled token
  int64_t prompt = 0;           // how many of tokens are the prompt
  int64_t fed = 0;              // how many of tokens the engine's cache holds
  int64_t seq = -1;             // the engine's sequence while running
  Clock::time_point arrival;
  bool done = false;  // finished or cancelled: to be dropped
  int64_t cached = -1;  // prompt tokens not computed at its first admission (-1: not admitted yet)
  std::vector<double> pooled;  // an embedding request's pooling so far
  std::vector<int32_t> feed;    // a decode with drafts: its last token, then the drafts
  int64_t draft_len = 0;        // drafts to propose next (Note [Prompt lookup]; set at admission)
  int64_t misses = 0, rest = 0;  // drafts rejected whole in a row; steps left without proposing
  // Its drafts taken so far, and its verifications that ended on a draft
  // not taken (Note [How far to speculate]).
  int64_t kept = 0, rejected = 0;
  // With a draft engine (Note [Draft model]): its sequence, how many of
  // tokens its cache holds, the drafts wanted this step and, for a sampling
  // request, the draft's distribution at each.
  int64_t dseq = -1, dfed = 0, want = 0;
  std::vector<std::vector<TokenProb>> q;
  std::optional<GrammarMatcher> matcher;  // Note [Grammars in the scheduler]
  Sampler sampler;
  TextStream text;

  Request(int64_t id_, std::vector<int32_t> t, const RequestOptions& o, int64_t vocab, const Tokenizer& tok)
      : id(id_), opts(o), tokens(std::move(t)), prompt(static_cast<int64_t>(tokens.size())),
        arrival(Clock::now()), sampler(vocab, o.sampling), text(tok, o.stop, o.special_text) {
    if (o.grammar) matcher.emplace(o.grammar);
  }
  int64_t generated() const { return static_cast<int64_t>(tokens.size()) - prompt; }
  int64_t remaining() const { return static_cast<int64_t>(tokens.size()) - fed; }
  // Running with its prompt in the cache: each step feeds its last token.
  bool decoding() const { return seq >= 0 && fed > 0 && remaining() == 1 && generated() > 0; }
  bool embedding() const { return opts.pooling != Pooling::None; }
};

const char* pooling_name(Pooling p) {
  switch (p) {
    case Pooling::Mean: return "mean";
    case Pooling::Last: return "last";
    case Pooling::Cls: return "cls";
    default: return "none";
  }
}

Pooling pooling_from_name(const std::string& name) {
  for (Pooling p : {Pooling::Mean, Pooling::Last, Pooling::Cls})
    if (name == pooling_name(p)) return p;
  TS_ERROR("pooling '", name, "' is not one of mean, last, cls");
}

Scheduler::Scheduler(Engine& engine, const Tokenizer& tokenizer, SchedulerOptions opts, Engine* draft)
    : engine_(engine), tokenizer_(tokenizer), opts_(opts), draft_(draft) {
  const EngineOptions& e = engine_.options();
  // The limits are the engine's (Note [Scheduling]): every running request
  // decodes each step, so a step must carry one token for each.
  TS_CHECK(e.max_batch_tokens >= e.max_sequences, "scheduler: the engine's max_batch_tokens (", e.max_batch_tokens,
           ") must be at least its max_sequences (", e.max_sequences, "): every running request decodes each step");
  TS_CHECK(opts_.lookup_tokens >= 0 && opts_.lookup_tokens <= 32, "scheduler: lookup_tokens ", opts_.lookup_tokens,
           " must be 0 to 32");
  TS_CHECK(opts_.draft_tokens >= 0 && opts_.draft_tokens <= 32, "scheduler: draft_tokens ", opts_.draft_tokens,
           " must be 0 to 32");
  TS_CHECK(opts_.lookup_tokens == 0 || opts_.draft_tokens == 0,
           "scheduler: speculative decoding by prompt lookup (lookup_tokens) or by a draft model (draft_tokens), "
           "not both");
  TS_CHECK((draft_ != nullptr) == (opts_.draft_tokens > 0),
           draft_ ? "scheduler: a draft engine needs draft_tokens of 1 or more"
                  : "scheduler: draft_tokens needs a draft engine");
  max_drafts_ = std::max(opts_.lookup_tokens, opts_.draft_tokens);
  // Every logit row is a token of the step, so a step never needs more than
  // max_batch_tokens of them.
  const int64_t rows = std::min(e.max_sequences * (1 + max_drafts_), e.max_batch_tokens);
  TS_CHECK(rows <= e.max_logit_rows, "scheduler: ", e.max_sequences, " requests (EngineOptions::max_sequences) with up "
           "to ", max_drafts_, " draft tokens each need ", rows, " logit rows a step; the engine returns at most ",
           e.max_logit_rows, " (EngineOptions::max_logit_rows)");
  if (draft_) {
    const EngineOptions& d = draft_->options();
    TS_CHECK(draft_->model().spec().vocab == engine_.model().spec().vocab, "scheduler: the draft model has ",
             draft_->model().spec().vocab, " tokens, the model ", engine_.model().spec().vocab,
             "; a draft must share the model's vocabulary");
    TS_CHECK(d.max_sequences >= e.max_sequences && d.max_logit_rows >= e.max_sequences, "scheduler: the draft "
             "engine must allow the engine's max_sequences (", e.max_sequences, ") sequences and logit rows; it allows ",
             d.max_sequences, " and ", d.max_logit_rows);
    draft_context_ = d.context ? d.context : std::min<int64_t>(draft_->model().spec().context, int64_t{1} << 18);
    TS_CHECK(d.max_batch_tokens >= e.max_sequences, "scheduler: the draft engine's max_batch_tokens (",
             d.max_batch_tokens, ") must be at least the engine's max_sequences (", e.max_sequences, ")");
  }
  stats_.accepted_by_position.assign(static_cast<size_t>(max_drafts_), 0);
  TS_CHECK(opts_.decode_slowdown == 0 || opts_.decode_slowdown >= 1, "scheduler: decode_slowdown ",
           opts_.decode_slowdown, " must be 0 (off) or at least 1");
  TS_CHECK(opts_.max_wait_seconds >= 0, "scheduler: max_wait_seconds ", opts_.max_wait_seconds, " must be 0 or more");
  // A vocabulary padded past the tokenizer's (to divide by a tensor-parallel
  // size) is allowed: requests sample the tokenizer's tokens only.
  TS_CHECK(tokenizer_.size() <= engine_.model().spec().vocab, "scheduler: the tokenizer has ", tokenizer_.size(),
           " tokens, the model only ", engine_.model().spec().vocab);
  context_ = e.context ? e.context : std::min<int64_t>(engine_.model().spec().context, int64_t{1} << 18);
}

Scheduler::~Scheduler() {
  for (auto& r : running_) drop(*r);
}

// r's sequences (and their cache blocks) freed.
void Scheduler::drop(Request& r) {
  if (r.seq >= 0) engine_.remove_sequence(r.seq);
  if (r.dseq >= 0) draft_->remove_sequence(r.dseq);
  r.seq = r.dseq = -1;
  r.dfed = 0;
}

int64_t Scheduler::submit(std::vector<int32_t> prompt, const RequestOptions& opts) {
  const int64_t n = static_cast<int64_t>(prompt.size()), vocab = engine_.model().spec().vocab;
  TS_CHECK(n > 0, "the prompt has no tokens");
  for (int32_t t : prompt) TS_CHECK(t >= 0 && t < vocab, "prompt token ", t, " is outside the vocabulary [0, ", vocab, ")");
  auto too_long = [](const auto&... parts) { throw ContextLengthError(detail::str("context_length_exceeded: ", parts...)); };
  if (opts.pooling != Pooling::None && n > context_)
    too_long("the input has ", n, " tokens and the context holds ", context_);
  if (opts.pooling == Pooling::None && n >= context_)
    too_long("the prompt has ", n, " tokens and the context holds ", context_,
             " (the prompt must leave room for at least one generated token)");
  const int64_t capacity = engine_.total_blocks() * engine_.options().block_tokens;
  if (n >= capacity) too_long("the prompt has ", n, " tokens and the whole KV cache holds ", capacity, "; raise --kv-memory");
  TS_CHECK(opts.max_tokens >= 1, "max_tokens ", opts.max_tokens, " must be 1 or more");
  for (int32_t t : opts.stop_tokens)
    TS_CHECK(t >= 0 && t < vocab, "stop token ", t, " is outside the vocabulary [0, ", vocab, ")");
  auto r = std::make_unique<Request>(0, std::move(prompt), opts, tokenizer_.size(), tokenizer_);  // checks sampling and stops
  std::lock_guard<std::mutex> lock(mu_);
  r->id = next_id_++;
  incoming_.push_back(std::move(r));
  ++shared_.waiting;
  return incoming_.back()->id;
}

void Scheduler::cancel(int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  cancels_.push_back(id);
}

bool Scheduler::has_work() const {
  std::lock_guard<std::mutex> lock(mu_);
  return shared_.running + shared_.waiting > 0;
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return shared_;
}

namespace {

// What decides a request's cache contents besides its tokens (prefix
// caching's salt): the adapter computing it and the client's salt, as bytes.
std::string prefix_salt(const RequestOptions& o) {
  if (!o.adapter && o.cache_salt.empty()) return {};
  std::string salt(sizeof o.adapter, '\0');
  std::memcpy(salt.data(), &o.adapter, sizeof o.adapter);
  return salt + o.cache_salt;
}

}  // namespace

// Blocks the engine needs to take for r's next n tokens.
int64_t Scheduler::new_blocks(const Request& r, int64_t n) const {
  const int64_t bt = engine_.options().block_tokens;
  return (r.fed + n + bt - 1) / bt - (r.fed + bt - 1) / bt;
}

// Ends r: its sequence freed, and `ev` (r's event of this step, or a new one)
// marked finished.
void Scheduler::finish(Request& r, const std::string& reason, std::vector<RequestEvent>& events, RequestEvent* ev) {
  drop(r);
  r.done = true;
  if (!ev) {
    events.emplace_back();
    ev = &events.back();
    ev->id = r.id;
  }
  // Text held back as a possible stop string's start is final now (empty
  // after a stop string, which ended the text itself).
  if (reason != "cancelled") ev->text += r.text.finish();
  ev->finished = true;
  ev->finish_reason = reason;
  ev->prompt_tokens = r.prompt;
  ev->completion_tokens = r.generated();
  ev->cached_tokens = std::max<int64_t>(r.cached, 0);
}

// r's drafts for this step (at most `cap`, `room` tokens, and the cache
// blocks `blocks` allow), after its last token in r.feed; how many. By
// prompt lookup (Note [Prompt lookup]) they are there now; with a draft
// engine r.want says how many `draft` is to add.
int64_t Scheduler::propose(Request& r, int64_t cap, int64_t room, int64_t blocks) {
  r.feed.clear();
  r.want = 0;
  if (cap == 0 || !r.opts.speculate || r.matcher) return 0;
  if (r.rest > 0) {
    --r.rest;
    return 0;
  }
  const std::vector<int32_t>& t = r.tokens;
  const int64_t size = static_cast<int64_t>(t.size());
  // Drafts never pass max_tokens (the token sampled after them counts too) or the context.
  int64_t most = std::min({r.draft_len, cap, room, r.opts.max_tokens - r.generated() - 1, context_ - size});
  while (most > 0 && new_blocks(r, 1 + most) > blocks) --most;
  if (most <= 0) return 0;
  if (draft_) {
    r.feed.push_back(t.back());
    r.want = most;
    return most;
  }
  for (int64_t n = std::min<int64_t>(3, size - 1); n >= 1; --n) {
    // The latest earlier occurrence of the last n tokens, with a token after it.
    for (int64_t p = size - n - 1; p >= 0; --p) {
      if (!std::equal(t.begin() + p, t.begin() + p + n, t.end() - n)) continue;
      const int64_t k = std::min(most, size - (p + n));
      r.feed.push_back(t.back());
      r.feed.insert(r.feed.end(), t.begin() + p + n, t.begin() + p + n + k);
      return k;
    }
  }
  return 0;
}

// Note [How far to speculate]: the cap on this step's drafts per request.
int64_t Scheduler::draft_cap() const {
  double a = 0, b = 0, da = 0, db = 0;
  if (max_drafts_ == 0 || !opts_.speculate_by_cost || !decode_cost_.fit(a, b)) return max_drafts_;
  if (draft_ && !draft_cost_.fit(da, db)) da = db = 0;
  // Acceptance rates per draft token checked: drafts after the first one not
  // taken were never checked (a draft of 8 rejected at its first token is
  // one miss, not 8), so a rate is kept / (kept + verifications ending on a
  // miss), the geometric model's own estimate.
  const double all = (static_cast<double>(stats_.accepted_tokens) + 1) /
                     (static_cast<double>(stats_.accepted_tokens + rejections_) + 2);
  std::vector<std::pair<double, int64_t>> spec;  // (acceptance rate, draft length) of each that may draft
  int64_t decodes = 0;
  for (const auto& r : running_) {
    if (!r->decoding()) continue;
    ++decodes;
    if (r->opts.speculate && r->rest == 0)
      spec.emplace_back(std::min(0.999, (static_cast<double>(r->kept) + 2 * all) / (static_cast<double>(r->kept + r->rejected) + 2)),
                        r->draft_len);
  }
  if (spec.empty()) return max_drafts_;
  auto rate = [&](int64_t cap) {
    double tokens = static_cast<double>(decodes - static_cast<int64_t>(spec.size())), fed = static_cast<double>(decodes);
    std::vector<int64_t> rounds(static_cast<size_t>(cap), 0);  // requests drafting at each draft step
    for (const auto& [acc, len] : spec) {
      const int64_t k = std::min(cap, len);
      tokens += (1 - std::pow(acc, static_cast<double>(k + 1))) / (1 - acc);
      fed += static_cast<double>(k);
      for (int64_t i = 0; i < k; ++i) ++rounds[static_cast<size_t>(i)];
    }
    double seconds = std::max(a + b * fed, 1e-9);
    for (int64_t n : rounds)
      if (n > 0) seconds += std::max(da + db * static_cast<double>(n), 0.0);
    return tokens / seconds;
  };
  int64_t best = 0;
  double best_rate = rate(0);
  for (int64_t cap = 1; cap <= max_drafts_; ++cap)
    if (const double r = rate(cap); r > best_rate) {
      best = cap;
      best_rate = r;
    }
  return best;
}

// Note [Draft model]: the drafts the decodes in `plan` want, from the draft
// engine, all requests' together; each entry's n cut to its drafts.
void Scheduler::draft(std::vector<Planned>& plan) {
  std::vector<Request*> rs;
  std::vector<Chunk> behind_only;  // catch-ups too long for the first draft step: a part of each, no drafts
  int64_t room = draft_->options().max_batch_tokens, reserved = 0;
  const int64_t bt = draft_->options().block_tokens;
  auto blocks_for = [bt](int64_t fed, int64_t n) { return (fed + n + bt - 1) / bt - (fed + bt - 1) / bt; };
  for (Planned& p : plan) {
    Request& r = *p.r;
    if (r.want == 0) continue;
    if (r.dseq < 0) {
      r.dseq = draft_->add_sequence();
      r.dfed = draft_->reuse_prefix(r.dseq, r.tokens, prefix_salt(r.opts));
    }
    // Its cache catches up on its tokens in the first draft step, then takes want - 1 drafts.
    const int64_t behind = static_cast<int64_t>(r.tokens.size()) - r.dfed;
    const int64_t blocks = blocks_for(r.dfed, behind + r.want - 1);
    const bool beyond = static_cast<int64_t>(r.tokens.size()) + r.want - 1 > draft_context_;
    if (behind > room || blocks > draft_->free_blocks() - reserved || beyond) {
      r.want = 0;  // no drafts this step
      r.feed.clear();
      // A long catch-up (a long prompt) goes on in parts, a step at a time.
      const int64_t part = std::min(behind - 1, room);
      if (!beyond && part > 0 && blocks_for(r.dfed, part) <= draft_->free_blocks() - reserved) {
        behind_only.push_back({r.dseq, std::span<const int32_t>(r.tokens.data() + r.dfed, static_cast<size_t>(part)), 0});
        r.dfed += part;
        room -= part;
        reserved += blocks_for(r.dfed - part, part);
      }
      continue;
    }
    room -= behind;
    reserved += blocks;
    rs.push_back(&r);
  }
  const int64_t vocab = draft_->model().spec().vocab;
  std::vector<size_t> sizes;
  for (const Request* r : rs) sizes.push_back(r->tokens.size());
  std::vector<Chunk> chunks;
  std::vector<Request*> in;
  for (int64_t round = 0;; ++round) {
    chunks.clear();
    in.clear();
    for (Request* r : rs) {
      if (r->want <= round) continue;
      // The drafts so far sit at the end of r->tokens for the draft step (taken off below).
      const auto from = static_cast<size_t>(r->dfed);
      chunks.push_back({r->dseq, std::span<const int32_t>(r->tokens.data() + from, r->tokens.size() - from), 1});
      in.push_back(r);
    }
    if (round == 0) chunks.insert(chunks.end(), behind_only.begin(), behind_only.end());  // no logit rows: last
    if (chunks.empty()) break;
    const Clock::time_point t0 = Clock::now();
    const std::span<const float> logits = draft_->step(chunks);
    int64_t tokens = 0;
    for (const Chunk& c : chunks) tokens += static_cast<int64_t>(c.tokens.size());
    for (size_t i = 0; i < in.size(); ++i) {
      Request& r = *in[i];
      r.dfed = static_cast<int64_t>(r.tokens.size());
      const std::span<const TokenProb> q = r.sampler.distribution(logits.data() + static_cast<int64_t>(i) * vocab, r.tokens);
      int32_t d = q[0].token;
      if (r.sampler.params().temperature > 0.f) {
        r.q.emplace_back(q.begin(), q.end());
        d = r.sampler.draw_draft(q, r.opts.choice, r.tokens.size());
      }
      r.feed.push_back(d);
      r.tokens.push_back(d);
    }
    // The round's cost: the draft engine's step and the draws from its rows
    // (as much as the step itself for a draft model of a few million weights).
    draft_cost_.observe(tokens, 0, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  for (size_t i = 0; i < rs.size(); ++i) rs[i]->tokens.resize(sizes[i]);
  for (Planned& p : plan) {
    if (p.r->feed.size() <= 1) p.r->feed.clear();
    p.n = std::max<int64_t>(1, static_cast<int64_t>(p.r->feed.size()));
  }
}

// An embedding request's chunk of n rows at row0 of the step: pooled, and
// the request finished with its embedding once its last token is in.
void Scheduler::pool(Request& r, int64_t row0, int64_t n, std::vector<RequestEvent>& events) {
  const int64_t dim = engine_.model().spec().dim;
  const Pooling how = r.opts.pooling;
  if (r.pooled.empty()) r.pooled.assign(static_cast<size_t>(dim), 0.0);
  const bool first = r.fed == 0, last = r.fed + n == static_cast<int64_t>(r.tokens.size());
  r.fed += n;
  if (how == Pooling::Mean || (how == Pooling::Cls && first) || (how == Pooling::Last && last)) {
    const int64_t from = how == Pooling::Mean ? 0 : how == Pooling::Cls ? 0 : n - 1;
    const int64_t count = how == Pooling::Mean ? n : 1;
    std::vector<float> h(static_cast<size_t>(count * dim));
    engine_.hidden_states(row0 + from, count, h.data());
    for (int64_t i = 0; i < count; ++i)
      for (int64_t c = 0; c < dim; ++c) r.pooled[static_cast<size_t>(c)] += h[static_cast<size_t>(i * dim + c)];
  }
  if (!last) return;
  events.emplace_back();
  RequestEvent& ev = events.back();
  ev.id = r.id;
  const double scale = how == Pooling::Mean ? 1.0 / static_cast<double>(r.tokens.size()) : 1.0;
  double norm = 0;
  for (double v : r.pooled) norm += v * scale * v * scale;
  const double unit = r.opts.normalize && norm > 0 ? 1.0 / std::sqrt(norm) : 1.0;
  ev.embedding.resize(r.pooled.size());
  for (size_t c = 0; c < r.pooled.size(); ++c) ev.embedding[c] = static_cast<float>(r.pooled[c] * scale * unit);
  finish(r, "stop", events, &ev);
}

void StepCost::observe(int64_t tokens, double pairs, double seconds) {
  const double decay = 0.95, t = static_cast<double>(tokens), p = pairs * 1e-6;
  const double add[9] = {1, t, p, t * t, t * p, p * p, seconds, t * seconds, p * seconds};
  for (int i = 0; i < 9; ++i) sum_[i] = sum_[i] * decay + add[i];
}

bool StepCost::fit(double& a, double& b) const {
  const double n = sum_[0], st = sum_[1], stt = sum_[3], sy = sum_[6], sty = sum_[7];
  const double det = n * stt - st * st;
  if (n < 2 || det <= 1e-9 * n * stt) return false;  // steps of one size only: nothing to fit yet
  b = (n * sty - st * sy) / det;
  a = (sy - b * st) / n;
  return true;
}

bool StepCost::fit(double& a, double& b, double& c) const {
  if (!fit(a, b)) return false;
  c = 0;
  // The normal equations of (1, t, p), by Cramer's rule; kept only where
  // the steps' pairs vary apart from their tokens, and with c >= 0.
  const double m[3][3] = {{sum_[0], sum_[1], sum_[2]}, {sum_[1], sum_[3], sum_[4]}, {sum_[2], sum_[4], sum_[5]}};
  const double y[3] = {sum_[6], sum_[7], sum_[8]};
  auto det3 = [](const double (&x)[3][3]) {
    return x[0][0] * (x[1][1] * x[2][2] - x[1][2] * x[2][1]) - x[0][1] * (x[1][0] * x[2][2] - x[1][2] * x[2][0]) +
           x[0][2] * (x[1][0] * x[2][1] - x[1][1] * x[2][0]);
  };
  const double d = det3(m);
  if (!(d > 1e-9 * m[0][0] * m[1][1] * m[2][2])) return true;
  double x[3];
  for (int k = 0; k < 3; ++k) {
    double mk[3][3];
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) mk[i][j] = j == k ? y[i] : m[i][j];
    x[k] = det3(mk) / d;
  }
  if (x[2] < 0) return true;
  a = x[0];
  b = x[1];
  c = x[2];
  return true;
}

// Query-key pairs of n tokens after `start` cached ones: token i attends to start + i + 1 keys.
static double attention_pairs(int64_t start, int64_t n) {
  return static_cast<double>(n) * static_cast<double>(start) + static_cast<double>(n) * static_cast<double>(n + 1) / 2;
}

int64_t ChunkBudget::tokens(int64_t start) const {
  constexpr int64_t kAll = int64_t{1} << 40;
  if (!bounded) return kAll;
  if (!(seconds > 0)) return 0;
  const double cp = c * 1e-6, lin = b + cp * (static_cast<double>(start) + 0.5);
  double n = 0;
  if (cp > 0) n = (-lin + std::sqrt(lin * lin + 2 * cp * seconds)) / cp;  // (cp / 2) n^2 + lin n = seconds
  else if (b > 0) n = seconds / b;
  else return kAll;
  return static_cast<int64_t>(std::min(n, static_cast<double>(kAll)));
}

void ChunkBudget::take(int64_t start, int64_t n) {
  if (bounded) seconds -= b * static_cast<double>(n) + c * 1e-6 * attention_pairs(start, n);
}

const Scheduler::Request* Scheduler::find(int64_t id) const {
  for (const auto& r : running_)
    if (r->id == id) return r.get();
  for (const auto& r : waiting_)
    if (r->id == id) return r.get();
  return nullptr;
}

// The newest running request back to the head of the queue, its cache freed.
void Scheduler::preempt_newest() {
  Request& r = *running_.back();
  drop(r);
  r.fed = 0;
  r.pooled.clear();
  r.feed.clear();
  ++stats_.preemptions;
  waiting_.push_front(std::move(running_.back()));
  running_.pop_back();
}

void Scheduler::take_in(std::vector<RequestEvent>& events) {
  std::vector<int64_t> cancels;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& r : incoming_) waiting_.push_back(std::move(r));
    incoming_.clear();
    cancels.swap(cancels_);
  }
  if (cancels.empty()) return;
  auto cancelled = [&](const auto& r) { return std::find(cancels.begin(), cancels.end(), r->id) != cancels.end(); };
  for (auto& r : running_)
    if (cancelled(r)) finish(*r, "cancelled", events);
  for (auto& r : waiting_)
    if (cancelled(r)) finish(*r, "cancelled", events);
  std::erase_if(running_, [](const auto& r) { return r->done; });
  std::erase_if(waiting_, [](const auto& r) { return r->done; });
}

std::vector<Scheduler::Planned> Scheduler::plan(std::vector<RequestEvent>& events) {
  StepPlan s;
  s.budget = engine_.options().max_batch_tokens;
  plan_decodes(s, events);
  s.time = chunk_time(s.chunks);
  plan_prompts(s);
  return std::move(s.chunks);
}

// Decodes, oldest first; newer requests give way where the cache is full.
// Each keeps one token of the budget for the decodes after it; drafts get the rest.
void Scheduler::plan_decodes(StepPlan& s, std::vector<RequestEvent>& events) {
  auto avail = [&] { return engine_.free_blocks() - s.reserved; };
  int64_t decoders = 0;
  for (const auto& p : running_) decoders += p->decoding();
  const int64_t cap = draft_cap();
  for (size_t i = 0; i < running_.size(); ++i) {
    Request& r = *running_[i];
    if (!r.decoding()) continue;
    --decoders;
    while (new_blocks(r, 1) > avail() && running_.size() > i + 1) preempt_newest();
    if (new_blocks(r, 1) > avail()) {
      if (i > 0) {  // r is the newest: it gives way to the older ones
        preempt_newest();
        break;
      }
      finish(r, "length", events);  // alone, and the whole cache is too small for it
      continue;
    }
    const int64_t n = 1 + propose(r, cap, s.budget - 1 - decoders, avail());
    s.reserved += new_blocks(r, n);
    s.budget -= n;
    s.chunks.push_back({&r, n});
  }
  std::erase_if(running_, [](const auto& r) { return r->done; });
  if (draft_ && cap > 0) {  // the drafts wanted, from the draft engine: some may come shorter
    draft(s.chunks);
    s.reserved = 0;
    s.budget = engine_.options().max_batch_tokens;
    for (const Planned& p : s.chunks) {
      s.reserved += new_blocks(*p.r, p.n);
      s.budget -= p.n;
    }
  }
}

// Note [Prompt chunks beside decodes]: the time prompt chunks may take.
ChunkBudget Scheduler::chunk_time(const std::vector<Planned>& decodes) const {
  double a, b, c;
  if (decodes.empty() || opts_.decode_slowdown <= 0 || !cost_.fit(a, b, c) || (b <= 0 && c <= 0)) return {};
  double tokens = 0, pairs = 0;
  for (const Planned& p : decodes) {
    tokens += static_cast<double>(p.n);
    pairs += attention_pairs(p.r->fed, p.n);
  }
  return {true, (opts_.decode_slowdown - 1) * std::max(a + b * tokens + c * 1e-6 * pairs, 0.0), b, c};
}

// As much of r's prompt as the budget, the time and the cache allow (the
// step's first chunk takes at least a block's worth, whatever the time).
int64_t Scheduler::chunk_for(const StepPlan& s, const Request& r) const {
  const int64_t bt = engine_.options().block_tokens;
  const int64_t slack = (bt - r.fed % bt) % bt;  // room left in its last block
  const int64_t timed = std::max(s.time.tokens(r.fed), s.chunked ? int64_t{0} : bt);
  const int64_t avail = engine_.free_blocks() - s.reserved;
  return std::max<int64_t>(0, std::min({r.remaining(), s.budget, timed, slack + avail * bt}));
}

void Scheduler::take_chunk(StepPlan& s, Request& r, int64_t n) {
  s.reserved += new_blocks(r, n);
  s.budget -= n;
  s.time.take(r.fed, n);
  s.chunked = true;
  s.chunks.push_back({&r, n});
}

// Prompt chunks: the running requests' first, then new requests past the age
// bound, then by priority, then in order (stable: the preempted, at the
// head, keep their places among equals).
void Scheduler::plan_prompts(StepPlan& s) {
  auto room = [&] { return s.budget > 0 && (!s.chunked || s.time.tokens(0) > 0); };
  for (auto& p : running_) {
    Request& r = *p;
    if (r.decoding() || !room()) continue;
    if (const int64_t n = chunk_for(s, r); n > 0) take_chunk(s, r, n);
  }
  const Clock::time_point now = Clock::now();
  auto overdue = [&](const Request& r) {
    return opts_.max_wait_seconds > 0 && std::chrono::duration<double>(now - r.arrival).count() > opts_.max_wait_seconds;
  };
  std::stable_sort(waiting_.begin(), waiting_.end(), [&](const auto& a, const auto& b) {
    const bool oa = overdue(*a), ob = overdue(*b);
    if (oa != ob) return oa;
    return a->opts.priority > b->opts.priority;
  });
  for (auto it = waiting_.begin(); it != waiting_.end() && room() && static_cast<int64_t>(running_.size()) < engine_.options().max_sequences;) {
    Request& r = **it;
    // Another choice of the same prompt: wait for it to compute the prompt
    // (all but its last token), then fork it.
    const Request* leader = r.generated() == 0 && r.opts.share_prompt_of ? find(r.opts.share_prompt_of) : nullptr;
    if (leader && (leader->seq < 0 || leader->fed < r.prompt - 1)) {
      ++it;
      continue;
    }
    if (!admit(s, r, leader)) break;  // no cache for it now: it keeps its place
    running_.push_back(std::move(*it));
    it = waiting_.erase(it);
  }
}

// A new request's sequence (forked from its leader's, the request whose
// prompt it shares, or reusing cached prefix blocks) and its first chunk;
// false, and nothing taken, when the cache has no room for a chunk of it.
bool Scheduler::admit(StepPlan& s, Request& r, const Request* leader) {
  int64_t reused = 0;
  if (leader) {
    if (engine_.free_blocks() - s.reserved < 1) return false;
    r.seq = engine_.fork_sequence(leader->seq, r.prompt - 1);
    reused = r.prompt - 1;
  } else {
    r.seq = engine_.add_sequence();
    // Mean and CLS pooling read every token's (or the first's) hidden state: computed, not reused.
    const bool reuse = r.opts.pooling == Pooling::None || r.opts.pooling == Pooling::Last;
    reused = reuse ? engine_.reuse_prefix(r.seq, r.tokens, prefix_salt(r.opts)) : 0;
  }
  r.fed = reused;
  r.draft_len = max_drafts_;
  const int64_t n = chunk_for(s, r);
  if (n == 0) {
    engine_.remove_sequence(r.seq);
    r.seq = -1;
    r.fed = 0;
    return false;
  }
  stats_.prefix_queries += static_cast<int64_t>(r.tokens.size());
  stats_.prefix_hits += reused;
  if (r.cached < 0) r.cached = reused;
  take_chunk(s, r, n);
  return true;
}

std::vector<RequestEvent> Scheduler::step() {
  observe_last_step();
  std::vector<RequestEvent> events;
  take_in(events);
  std::vector<Planned> plan = this->plan(events);
  // Running requests all part-way through their prompts, none able to go
  // on: the newest gives way until one can (the oldest alone always fits).
  while (plan.empty() && running_.size() > 1) {
    preempt_newest();
    plan = this->plan(events);
  }
  if (!plan.empty()) run(plan, events);
  std::lock_guard<std::mutex> lock(mu_);
  stats_.running = static_cast<int64_t>(running_.size());
  stats_.waiting = static_cast<int64_t>(waiting_.size() + incoming_.size());
  shared_ = stats_;
  return events;
}

// One engine step over the plan, then a token for each request whose chunk
// reached the end of its tokens.
void Scheduler::run(const std::vector<Planned>& plan, std::vector<RequestEvent>& events) {
  std::vector<Chunk> chunks;
  chunks.reserve(plan.size());
  for (const Planned& p : plan) {
    const Request& r = *p.r;
    if (!r.feed.empty()) {  // a decode with drafts: logits at every token
      chunks.push_back({r.seq, r.feed, p.n, r.opts.adapter});
      continue;
    }
    const bool last = r.fed + p.n == static_cast<int64_t>(r.tokens.size()) && !r.embedding();
    chunks.push_back({r.seq, std::span<const int32_t>(r.tokens.data() + r.fed, static_cast<size_t>(p.n)),
                      last ? 1 : 0, r.opts.adapter});
  }
  const Clock::time_point t0 = Clock::now();
  const std::span<const float> logits = engine_.step(chunks);
  int64_t tokens = 0;
  double pairs = 0;
  bool decodes_only = true;
  for (const Planned& p : plan) {
    tokens += p.n;
    pairs += attention_pairs(p.r->fed, p.n);
    decodes_only = decodes_only && p.r->decoding();
  }
  ++stats_.steps;
  const int64_t vocab = engine_.model().spec().vocab;
  int64_t row = 0, first_row = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    Request& r = *plan[i].r;
    const int64_t row0 = first_row;  // this chunk's first row in the step
    first_row += plan[i].n;
    if (!r.decoding()) stats_.prompt_tokens += plan[i].n;
    if (r.embedding()) {
      pool(r, row0, plan[i].n, events);
      continue;
    }
    const int64_t drafts = r.feed.empty() ? 0 : plan[i].n - 1;
    r.fed += r.feed.empty() ? plan[i].n : 1;  // drafts count once taken
    if (!chunks[i].logits) continue;
    verify(r, logits.data() + row * vocab, drafts, events);
    row += chunks[i].logits;
  }
  // The step's cost as its requests see it: the engine's step and the draws
  // from its logit rows (a draft's rows are drawn from too, which on a fast
  // model costs as much as the engine's share of them).
  const Clock::time_point end = Clock::now();
  last_step_ = Unobserved{tokens, pairs, std::chrono::duration<double>(end - t0).count(), decodes_only, end};
  std::erase_if(running_, [](const auto& r) { return r->done; });
  if (running_.empty()) observe_last_step();  // no next step right after it
}

// Note [A step's cost]: what a step costs its requests runs from its engine
// step to the start of the next: the draws, the hand-over of the tokens to
// the HTTP threads, whose work then competes with the next step for the
// cores, once per step however many tokens it carries. On a small model
// that is as much as the engine's step (the 2M fortunes model: ~0.05 ms
// each), and a cost fitted to the engine's step alone would make drafts
// look as dear per token as decoding. A gap longer than the step itself
// (a caller that waited, or an idle loop) is not the step's: then only the
// step is counted.
void Scheduler::observe_last_step() {
  if (!last_step_) return;
  const Unobserved& s = *last_step_;
  const double gap = std::chrono::duration<double>(Clock::now() - s.end).count();
  const double seconds = gap <= s.seconds ? s.seconds + gap : s.seconds;
  cost_.observe(s.tokens, s.pairs, seconds);
  if (s.decodes_only) decode_cost_.observe(s.tokens, s.pairs, seconds);
  last_step_.reset();
}

// r's tokens from the logits of its step's rows: one, or with drafts one at
// each row while they hold (Notes [Prompt lookup], [Draft model]).
void Scheduler::verify(Request& r, const float* logits, int64_t drafts, std::vector<RequestEvent>& events) {
  const int64_t vocab = engine_.model().spec().vocab;
  const bool sampled_drafts = !r.q.empty();  // drawn from a draft model's q: speculative sampling
  int64_t taken = 0;
  bool rejected = false;  // a draft was checked and not taken
  for (int64_t j = 0; j <= drafts && !r.done; ++j) {
    const float* row = logits + j * vocab;
    const uint64_t position = r.tokens.size();
    if (j < drafts && sampled_drafts) {
      const std::span<const TokenProb> p = r.sampler.distribution(row, r.tokens);
      const int32_t d = r.feed[static_cast<size_t>(j + 1)];
      const std::span<const TokenProb> q = r.q[static_cast<size_t>(j)];
      if (!r.sampler.accept(p, q, d, r.opts.choice, position)) {
        take(r, r.sampler.describe(row, r.sampler.residual(p, q, r.opts.choice, position)), events);
        rejected = true;
        break;
      }
      take(r, r.sampler.describe(row, d), events);
    } else {
      std::shared_ptr<const TokenMask> mask;
      if (r.matcher) {  // Note [Grammars in the scheduler]
        if (!trie_) trie_ = std::make_unique<TokenTrie>(tokenizer_);
        mask = r.matcher->allowed(*trie_);
        if (std::all_of(mask->begin(), mask->end(), [](uint32_t w) { return w == 0; })) {
          finish(r, "length", events);
          break;
        }
      }
      const Sampled s = r.sampler.sample(row, r.tokens, r.opts.choice, position, mask ? mask->data() : nullptr);
      take(r, s, events);
      if (j == drafts) break;
      if (s.token != r.feed[static_cast<size_t>(j + 1)]) {
        rejected = true;
        break;
      }
    }
    if (r.done) break;
    ++taken;  // the draft fed after this token is the token: its row is valid
    ++r.fed;
  }
  r.q.clear();
  if (drafts == 0) return;
  stats_.draft_tokens += drafts;
  stats_.accepted_tokens += taken;
  rejections_ += rejected;
  r.kept += taken;
  r.rejected += rejected;
  for (int64_t j = 0; j < taken; ++j) ++stats_.accepted_by_position[static_cast<size_t>(j)];
  // The next length: one more than it kept, or than this one after a draft
  // kept whole. By prompt lookup a draft kept whole doubles it, and one
  // rejected whole leaves it (the request rests below): such a miss says
  // the match was wrong, not its length (an echo's first draft, from the
  // separator's last occurrence, is wrong, and the copy's drafts after it
  // should not start again from one token). A draft model's miss says the
  // models part here: its drafts shrink.
  if (draft_) r.draft_len = std::min(max_drafts_, taken == drafts ? drafts + 1 : taken + 1);
  else if (taken == drafts) r.draft_len = std::min(max_drafts_, 2 * drafts);
  else if (taken > 0) r.draft_len = taken + 1;
  // Drafts rejected whole cost a step's extra tokens for nothing: after
  // each such miss in a row, twice as many steps without proposing.
  r.misses = taken == 0 ? r.misses + 1 : 0;
  r.rest = taken == 0 ? std::min<int64_t>(int64_t{1} << std::min<int64_t>(r.misses, 6), 64) : 0;
  if (!r.done) {  // the caches keep the tokens kept
    engine_.truncate_sequence(r.seq, r.fed);
    if (r.dseq >= 0 && r.dfed > r.fed) {
      r.dfed = r.fed;
      draft_->truncate_sequence(r.dseq, r.dfed);
    }
  }
  r.feed.clear();
}

// r's sampled token: the end of r, or one more token and its event.
void Scheduler::take(Request& r, const Sampled& s, std::vector<RequestEvent>& events) {
  const bool eos = !r.opts.ignore_eos && tokenizer_.is_end_of_generation(s.token);
  if (eos || std::find(r.opts.stop_tokens.begin(), r.opts.stop_tokens.end(), s.token) != r.opts.stop_tokens.end()) {
    finish(r, "stop", events);
    return;
  }
  r.tokens.push_back(s.token);
  ++stats_.generated_tokens;
  const bool complete = r.matcher && r.matcher->accept(tokenizer_.piece(s.token)) && r.matcher->must_end();
  events.emplace_back();
  RequestEvent& ev = events.back();
  ev.id = r.id;
  ev.text = r.text.push(s.token);
  ev.has_token = true;
  ev.token = s.token;
  ev.logprob = s.logprob;
  ev.top.assign(s.top.begin(), s.top.end());
  ev.prompt_tokens = r.prompt;
  ev.completion_tokens = r.generated();
  ev.cached_tokens = r.cached;
  if (r.text.stopped() || complete) finish(r, "stop", events, &ev);
  else if (r.generated() >= r.opts.max_tokens || static_cast<int64_t>(r.tokens.size()) >= context_)
    finish(r, "length", events, &ev);
}

}  // namespace tessera::llm
