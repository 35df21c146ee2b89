#pragma once
// Continuous batching: many requests over one Engine, each step carrying every
// running decode and then prefill chunks of the others up to a token budget.
//
//   llm::Engine engine(model, {.max_batch_tokens = 256, .max_sequences = 8});
//   llm::Scheduler sched(engine, tokenizer, {});  // the engine's limits
//   int64_t id = sched.submit(prompt_ids, request_options);   // any thread
//   while (sched.has_work())
//     for (const llm::RequestEvent& ev : sched.step()) ...     // one thread
//
// Note [Scheduling]
// A request is its tokens (the prompt, then each token it samples) and how
// many of them the engine's cache holds. Each step:
//   1. submissions and cancellations that arrived are taken in; a cancelled
//      request's sequence and blocks are freed now;
//   2. every running request whose prompt is in the cache feeds its last
//      token (a decode). Where the cache has no block for one, the newest
//      running request is preempted: its sequence is freed and it waits at
//      the head of the queue to be recomputed from its tokens later;
//   3. the rest of the budget goes to prompt chunks: first those of running
//      requests still in prefill, then new requests, admitted in order of
//      priority (higher first; a request that has waited longer than
//      max_wait_seconds first of all) and arrival, while fewer than the
//      engine's max_sequences run and the cache has blocks for their chunk. An admitted request
//      starts from the cached blocks its tokens begin with (prefix caching,
//      when the engine has it); one that shares another's prompt (the other
//      choices of a call) waits until that prompt is computed and forks it;
//   4. one engine step; each request whose chunk reached the end of its
//      tokens samples its next token.
//
// Note [Prompt lookup]
// A decoding request may feed draft tokens after its last one: the tokens
// that followed the latest earlier occurrence of its last 3 (or 2, or 1)
// tokens. The step returns logits for every fed token; the request samples
// at each position in turn, exactly as it would one token at a time (the
// same logits bits, the same counter-based draw), and goes on only while
// each sampled token is the draft fed after it. The first difference is the
// token it takes there, and the cache is cut back to the tokens kept. So a
// request's tokens are the ones it gets without drafts, seeded or greedy,
// and the draw is exactly speculative sampling's with a one-hot draft: a
// draft d is taken with probability p(d), and otherwise the token comes from
// p without d. Each request's draft length adapts: one more after a draft
// taken whole, one more than it kept otherwise; after a draft rejected
// whole, it proposes none for 2, 4, ... (at most 64) steps.
//
// Note [Draft model]
// With a draft engine (a smaller model of the same vocabulary), each
// decoding request's drafts are the draft model's own tokens: one draft step
// feeds every such request what its draft cache lacks (its prompt at first,
// later the tokens kept since), and one more step per further draft token,
// all requests together. A greedy request's draft is the draft model's
// greedy token and is kept while the target's greedy token is the same (as
// in Note [Prompt lookup]: its output is plain decoding's). A sampling
// request's draft d is drawn from the draft's distribution q (its sampling
// parameters applied to the draft's logits) and kept with probability
// min(1, p(d) / q(d)); the first one not kept is replaced by a token drawn
// from max(0, p - q) (Note [Speculative sampling] in llm/sampler.h), and
// after a draft kept whole one more token is drawn from p. So every token is
// distributed as p, though a seeded request's tokens are not those it draws
// without a draft. The draft cache is cut back to the tokens kept.
//
// Note [How far to speculate]
// Drafts pay off when a step is cheap next to its tokens' worth: a few
// streams on a model that reads its weights once a step. With many streams
// the step's tokens cost about as much as they bring. Before each step the
// scheduler picks the draft length cap K (0 to the most) that maximizes the
// expected tokens per second: each decoding request with acceptance rate a
// (its own kept / (kept + misses), starting from all requests': drafts
// after the first miss were never checked) brings
// (1 - a^(k+1)) / (1 - a) tokens for k drafts, and the step costs the fitted
// a + b * tokens of the target's steps of decodes alone (each step timed
// with the draws from its logit rows, a draft round with its draws: on the
// 20M fortunes model the draws cost about what the engine does; drafts included;
// steps with prompt chunks are left out of this fit: their large sizes would
// set its slope, while a step of a few tokens costs little more than one of
// a single token) plus K steps of the draft engine (its own fit; prompt
// lookup's drafts cost none).
//
// Note [Grammars in the scheduler]
// A request with a grammar keeps a matcher (llm/grammar.h) of the bytes of
// the tokens it took. Before each draw the matcher's mask (Note [Token
// masks]) sets every token it does not allow to -inf, before bias,
// penalties and the filters; after it the token's bytes go to the matcher.
// End tokens are allowed only where the text may end, and a text after
// which nothing may follow ends the request: either way with "stop", so a
// request that stops always holds a complete text of the grammar (one that
// runs out of max_tokens or the context ends with "length" and may not). A
// state that no token can continue (a vocabulary without the bytes the
// grammar wants) ends it with "length" too. Such requests do not
// speculate: a draft would need the masks of states not reached yet.
//
// Note [Prompt chunks beside decodes]
// A step's time grows with its tokens, so a long prompt taken in at the full
// token budget would stall every running stream for the length of a large
// step. The scheduler fits step time = a + b * tokens + c * pairs to the
// steps it has run (least squares, older steps weighing less), pairs being
// the query-key pairs its attention takes (a token at position p attends to
// p + 1 keys): a prompt's later chunks cost more than its first, and a fit
// on tokens alone, measured on a 2,048-token prompt, let its steps grow 2x
// from the first chunk to the last. While D requests decode, prompt chunks
// get the time that keeps the predicted step within decode_slowdown times
// the decodes' own predicted step, each chunk as many tokens as its
// position leaves room for (the first at least one block's worth, so that
// prompts always advance).
// The engine gives a token's logits the same bits whatever shares its step
// and however its tokens were chunked, and sampling draws by (seed, choice,
// position) (Note [Counter-based sampling]); so a request's tokens are the
// ones it gets alone, whatever the load, preemptions included.
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/llm/engine.h"
#include "tessera/llm/generate.h"
#include "tessera/llm/grammar.h"
#include "tessera/llm/sampler.h"
#include "tessera/llm/tokenizer.h"

namespace tessera::llm {

// An embedding request's pooling of its tokens' final hidden states: their
// mean, the last token's, or the first's (CLS). None: a generation request.
enum class Pooling : uint8_t { None, Mean, Last, Cls };
const char* pooling_name(Pooling p);
// "mean", "last", "cls" (an error naming them otherwise).
Pooling pooling_from_name(const std::string& name);

// A prompt (or input) longer than the context or the whole KV cache holds:
// the server answers it as OpenAI does (code context_length_exceeded).
class ContextLengthError : public Error {
 public:
  using Error::Error;
};

struct RequestOptions {
  SamplingParams sampling;
  int64_t max_tokens = 256;          // tokens to generate at most
  std::vector<std::string> stop;     // the text ends before the first of these
  std::vector<int32_t> stop_tokens;  // besides the tokenizer's end-of-generation tokens
  bool ignore_eos = false;
  uint64_t choice = 0;               // which of a request's choices (Note [Counter-based sampling])
  int priority = 0;                  // higher is admitted first
  const Adapter* adapter = nullptr;  // must outlive the request
  // Prefix caching: blocks are shared only between requests of equal salt
  // bytes (and adapter); a client's cache_salt keeps its prompts to itself.
  std::string cache_salt;
  // An earlier request with the same prompt (another choice of the same
  // call): this one waits until that prompt is computed and forks it.
  int64_t share_prompt_of = 0;
  bool speculate = true;  // speculative decoding where the scheduler does it (lookup_tokens, draft_tokens)
  // An embedding request: the prompt is computed (up to the whole context)
  // and its pooled hidden state returned in the finishing event, scaled to
  // unit length when `normalize`; nothing is generated.
  Pooling pooling = Pooling::None;
  bool normalize = true;
  // Structured output (Note [Grammars in the scheduler]): each token is drawn
  // from those the grammar allows next; the request stops when its text is
  // complete and nothing may follow, or at an end token where it may end.
  std::shared_ptr<const Grammar> grammar;
  // Control tokens write their text into the reply (tool-call markers such
  // as [TOOL_CALLS] and <|python_tag|>, for llm/tool_calls.h to find).
  bool special_text = false;
};

// How the scheduler admits, chunks and speculates. Its limits are the
// engine's (EngineOptions): max_sequences requests run at once, and one step
// carries max_batch_tokens tokens, decodes and prompt chunks together.
struct SchedulerOptions {
  double max_wait_seconds = 0;       // a request waiting longer goes first whatever its priority (0: no bound)
  // While requests decode, a step's prompt chunks are cut so that the step
  // takes at most this many times a step of the decodes alone (Note [Prompt
  // chunks beside decodes]); 0 (the default): the engine's max_batch_tokens alone bounds them.
  double decode_slowdown = 0;
  // Speculative decoding by prompt lookup (Note [Prompt lookup]): at most
  // this many draft tokens per step for each decoding request (0: off). The
  // engine must return as many more logit rows: max_sequences * (1 + this),
  // or max_batch_tokens where that is fewer.
  int64_t lookup_tokens = 0;
  // Speculative decoding with a draft engine (Note [Draft model]): at most
  // this many draft tokens per step for each decoding request (0: off; with
  // a draft engine, set it). The engine must return as many logit rows as
  // with lookup_tokens; the draft engine must allow max_sequences sequences.
  int64_t draft_tokens = 0;
  // Each step's drafts are capped where the fitted step costs say more would
  // not pay (Note [How far to speculate]); false: as far as each request's
  // own draft length goes.
  bool speculate_by_cost = true;
};

// What one step did for one request.
struct RequestEvent {
  int64_t id = 0;
  std::string text;              // text that became final this step (maybe empty)
  bool has_token = false;        // a token was sampled (false for a finish without one)
  int32_t token = 0;
  float logprob = 0.f;
  std::vector<TokenLogprob> top;  // the request's top_logprobs most likely tokens
  bool finished = false;
  // "stop" (an end-of-generation or stop token, a stop string), "length"
  // (max_tokens, the context, or a cache too small for it alone), "cancelled".
  std::string finish_reason;
  int64_t prompt_tokens = 0, completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens taken from the cache or another choice, not computed
  std::vector<float> embedding;  // an embedding request's, in its finishing event
};

struct SchedulerStats {
  int64_t running = 0, waiting = 0;
  int64_t preemptions = 0;          // since the scheduler was made
  int64_t prompt_tokens = 0;        // prompt tokens computed (recomputations included)
  int64_t generated_tokens = 0;
  int64_t steps = 0;
  // Prefix caching, in tokens (vLLM's meaning): looked up at each admission, and found.
  int64_t prefix_queries = 0, prefix_hits = 0;
  // Speculative decoding: draft tokens proposed and accepted, and accepted by
  // position in the draft (accepted_by_position[i]: drafts whose i-th token was taken).
  int64_t draft_tokens = 0, accepted_tokens = 0;
  std::vector<int64_t> accepted_by_position;
};

// Note [Prompt chunks beside decodes]: step time = a + b * tokens + c *
// pairs, fitted by least squares to the steps seen, older steps weighing less.
class StepCost {
 public:
  void observe(int64_t tokens, double pairs, double seconds);
  // The fit on tokens alone: a step of t tokens takes a + b * t seconds;
  // false until steps of two different sizes have been seen.
  bool fit(double& a, double& b) const;
  // The fit on tokens and attention pairs (c = 0 where the steps seen do
  // not tell the two apart); false where fit(a, b) is.
  bool fit(double& a, double& b, double& c) const;

 private:
  // Decayed sums of 1, t, p, t^2, t p, p^2, y, t y, p y (t tokens, p pairs
  // in millions, y seconds).
  double sum_[9] = {};
};

// Note [Prompt chunks beside decodes]: a step's time left for prompt chunks,
// and the tokens of a chunk from position `start` that fit in it.
struct ChunkBudget {
  bool bounded = false;
  double seconds = 0, b = 0, c = 0;  // c per million pairs
  int64_t tokens(int64_t start) const;
  void take(int64_t start, int64_t n);
};

class Scheduler {
 public:
  // The engine and tokenizer must outlive the scheduler; the engine is the
  // scheduler's alone while it runs. `draft`: a draft engine for
  // speculative decoding (Note [Draft model]), likewise; its model's
  // vocabulary must be the tokenizer's (check_same_vocabulary).
  Scheduler(Engine& engine, const Tokenizer& tokenizer, SchedulerOptions opts = {}, Engine* draft = nullptr);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request (prompt ids, BOS included) and returns its id. Safe
  // from any thread. Bad input is an error naming it, before anything is
  // queued: an empty prompt, a token outside the vocabulary, a prompt that
  // leaves no room in the context ("context_length_exceeded: ..." with
  // both counts) or in the whole cache, bad sampling parameters.
  int64_t submit(std::vector<int32_t> prompt, const RequestOptions& opts);
  // Ends a request at the next step (its blocks freed there); an unknown or
  // finished id is ignored. Safe from any thread.
  void cancel(int64_t id);

  // One engine step (Note [Scheduling]); the events of the requests it
  // touched, in the order of their chunks. Call from one thread.
  std::vector<RequestEvent> step();
  // Whether a request is running or waiting (submissions not yet taken in
  // included).
  bool has_work() const;
  SchedulerStats stats() const;

 private:
  struct Request;
  struct Planned {
    Request* r;
    int64_t n;  // its next n tokens
  };
  // A step's plan as it is built: its chunks, and what they have taken of
  // the cache, the step's token budget and its time for prompt chunks.
  struct StepPlan {
    std::vector<Planned> chunks;
    int64_t reserved = 0;  // blocks the chunks will take
    int64_t budget = 0;    // tokens left in the step
    ChunkBudget time;
    bool chunked = false;  // a prompt chunk is in: the next get no block's worth whatever the time
  };
  void take_in(std::vector<RequestEvent>& events);
  std::vector<Planned> plan(std::vector<RequestEvent>& events);
  void plan_decodes(StepPlan& s, std::vector<RequestEvent>& events);
  ChunkBudget chunk_time(const std::vector<Planned>& decodes) const;
  void plan_prompts(StepPlan& s);
  bool admit(StepPlan& s, Request& r, const Request* leader);
  int64_t chunk_for(const StepPlan& s, const Request& r) const;
  void take_chunk(StepPlan& s, Request& r, int64_t n);
  void run(const std::vector<Planned>& plan, std::vector<RequestEvent>& events);
  void finish(Request& r, const std::string& reason, std::vector<RequestEvent>& events, RequestEvent* ev = nullptr);
  void preempt_newest();
  void pool(Request& r, int64_t row0, int64_t n, std::vector<RequestEvent>& events);
  void take(Request& r, const Sampled& s, std::vector<RequestEvent>& events);
  int64_t propose(Request& r, int64_t cap, int64_t room, int64_t blocks);
  int64_t draft_cap() const;
  void draft(std::vector<Planned>& plan);
  void verify(Request& r, const float* logits, int64_t drafts, std::vector<RequestEvent>& events);
  void drop(Request& r);
  const Request* find(int64_t id) const;
  int64_t new_blocks(const Request& r, int64_t n) const;


  Engine& engine_;
  const Tokenizer& tokenizer_;
  SchedulerOptions opts_;
  Engine* draft_ = nullptr;
  int64_t max_drafts_ = 0;  // lookup_tokens or draft_tokens
  int64_t draft_context_ = 0;  // positions the draft engine holds per sequence
  std::unique_ptr<TokenTrie> trie_;  // the vocabulary's bytes, made for the first request with a grammar
  int64_t context_ = 0;

  // The stepping thread's own.
  std::vector<std::unique_ptr<Request>> running_;  // in order of admission
  std::deque<std::unique_ptr<Request>> waiting_;   // the preempted first, then by arrival
  SchedulerStats stats_;
  StepCost cost_, decode_cost_, draft_cost_;  // every step; steps of decodes alone; draft steps
  int64_t rejections_ = 0;  // verifications that ended on a draft not taken (Note [How far to speculate])
  // The last step's cost, observed when the next step starts (Note [A step's cost]).
  struct Unobserved {
    int64_t tokens = 0;
    double pairs = 0, seconds = 0;
    bool decodes_only = false;
    std::chrono::steady_clock::time_point end;
  };
  std::optional<Unobserved> last_step_;
  void observe_last_step();

  // Shared with submit and cancel, which only queue: neither waits on a step.
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Request>> incoming_;
  std::vector<int64_t> cancels_;
  int64_t next_id_ = 1;
  SchedulerStats shared_;  // stats_ as of the last step, waiting counting submissions since
};

}  // namespace tessera::llm
