// The OpenAI-compatible LLM service (serve/llm_service.h).
#include "tessera/serve/llm_service.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <deque>

#include "tessera/core/error.h"
#include "tessera/llm/tool_calls.h"
#include "tessera/serve/protocol.h"
#include "completion_writer.h"

namespace tessera::serve {
namespace {

using ojson = nlohmann::ordered_json;
using openai::ApiError;
using openai::dump;

// vLLM's buckets, so dashboards made for it read these the same way.
const std::vector<double> kTtftBuckets{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                                       1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kItlBuckets{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
                                      0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
const std::vector<double> kE2eBuckets{0.3,  0.5,  0.8,  1.0,  1.5,  2.0,   2.5,   5.0,   10.0,  15.0, 20.0,
                                      30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
const std::vector<double> kTokenBuckets{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000};

HttpResponse json_response(int status, const ojson& j) {
  HttpResponse r;
  r.status = status;
  r.body = dump(j);
  return r;
}

HttpResponse error_response(const ApiError& e) {
  HttpResponse r;
  r.status = e.status();
  r.body = openai::error_body(e);
  if (e.status() == 503) r.headers.push_back({"Retry-After", "1"});
  if (e.status() == 401) r.headers.push_back({"WWW-Authenticate", "Bearer"});
  return r;
}

uint64_t random_seed() { return random_u64(); }

int64_t unix_time() { return static_cast<int64_t>(std::time(nullptr)); }

// Refuses text in `v` (tools, or the calls in a conversation) that holds a
// control token's text: written outside a message, it would be that token.
void check_no_control_text(const ojson& v, const std::string& param, const llm::Tokenizer& tok) {
  if (v.is_string()) {
    const int32_t id = tok.control_token_in(v.get_ref<const std::string&>());
    if (id >= 0)
      throw ApiError(400, "'" + param + "' holds the text of the model's control token " + dump(ojson(tok.text(id))) +
                              ", which only the chat template may write", param);
  } else if (v.is_structured()) {
    for (const auto& [key, x] : v.items()) {
      check_no_control_text(ojson(key), param, tok);
      check_no_control_text(x, param, tok);
    }
  }
}

}  // namespace

struct LlmService::Loaded {
  LlmModel m;
  llm::ChatTemplate tmpl;
  bool plain_template;
  llm::Engine engine;
  std::unique_ptr<llm::Engine> draft;
  llm::Scheduler scheduler;
  int64_t context;
  std::optional<llm::ToolFormat> tool_format;  // how the template writes calls (Note [Tool call formats])
  std::string no_tools;                        // or why requests with tools are refused

  explicit Loaded(LlmModel mm)
      : m(std::move(mm)),
        tmpl(m.chat_template.empty() ? std::string(llm::kPlainChatTemplate) : m.chat_template,
             m.chat_template.empty() ? std::string("the plain template") : m.chat_template_name),
        plain_template(m.chat_template.empty()),
        engine(m.model, m.engine),
        draft(m.draft ? std::make_unique<llm::Engine>(m.draft, m.draft_engine) : nullptr),
        scheduler(engine, m.tokenizer, m.scheduler, draft.get()),
        context(m.engine.context ? m.engine.context : std::min<int64_t>(m.model->spec().context, int64_t{1} << 18)) {
    try {
      tool_format = llm::tool_format(tmpl);
    } catch (const Error& e) {
      no_tools = e.what();
    }
  }
};

// One HTTP request's choices: the events the engine thread hands over.
struct LlmService::Channel {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<llm::RequestEvent> events;
  std::string failure;  // set when the engine failed or the service stopped
};

LlmService::LlmService(LlmServiceOptions options) : options_(std::move(options)) {
  TS_CHECK(!options_.model_name.empty(), "serve-llm: the model's name is empty");
  TS_CHECK(options_.max_waiting >= 1, "serve-llm: max_waiting must be at least 1, got ", options_.max_waiting);
}

LlmService::~LlmService() { stop(); }

void LlmService::load(LlmModel m) {
  TS_CHECK(!loaded_, "serve-llm: the model is loaded already");
  loaded_ = std::make_unique<Loaded>(std::move(m));
  free_blocks_ = loaded_->engine.free_blocks();
  engine_thread_ = std::thread([this] { engine_loop(); });
  ready_ = true;
}

void LlmService::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    // Whoever waits on a request is told now; the scheduler's own state goes with it.
    for (auto& [id, ch] : channels_) {
      std::lock_guard<std::mutex> l(ch->mu);
      ch->failure = "the server is stopping";
      ch->cv.notify_all();
    }
    channels_.clear();
  }
  wake_.notify_all();
  if (engine_thread_.joinable()) engine_thread_.join();
}

llm::SchedulerStats LlmService::stats() const {
  return ready_ ? loaded_->scheduler.stats() : llm::SchedulerStats{};
}

int64_t LlmService::total_blocks() const { return ready_ ? loaded_->engine.total_blocks() : 0; }

// Note [The engine thread]
// One thread owns the engine: it steps the scheduler while there is work
// and hands each event to the channel of the HTTP request it belongs to.
// Submissions and cancellations reach the scheduler from the HTTP threads
// (it only queues them) and wake this thread through wake_.
std::shared_ptr<const llm::Grammar> LlmService::grammar(const std::string& gbnf, const std::string& param) {
  {
    std::lock_guard<std::mutex> lock(grammars_mu_);
    for (size_t i = 0; i < grammars_.size(); ++i)
      if (grammars_[i].first == gbnf) {
        std::rotate(grammars_.begin() + static_cast<std::ptrdiff_t>(i), grammars_.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                    grammars_.end());
        return grammars_.back().second;
      }
  }
  std::shared_ptr<const llm::Grammar> g;
  try {
    g = llm::Grammar::parse(gbnf, "root", 100000);
  } catch (const Error& e) {
    throw ApiError(400, "'" + param + "': " + e.what(), param);
  }
  std::lock_guard<std::mutex> lock(grammars_mu_);
  if (grammars_.size() >= 32) grammars_.erase(grammars_.begin());
  grammars_.emplace_back(gbnf, g);
  return g;
}

void LlmService::engine_loop() {
  llm::Scheduler& sched = loaded_->scheduler;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stopping_ || sched.has_work(); });
      if (stopping_) return;
    }
    std::vector<llm::RequestEvent> events;
    try {
      events = sched.step();
    } catch (const std::exception& e) {
      // An engine failure is the server's fault, never a request's: every
      // request in flight is told, and the scheduler drops them all.
      std::fprintf(stderr, "serve-llm: a step failed: %s\n", e.what());
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [id, ch] : channels_) {
        sched.cancel(id);
        std::lock_guard<std::mutex> l(ch->mu);
        ch->failure = "an internal error (the server's log has the details)";
        ch->cv.notify_all();
      }
      channels_.clear();
      continue;
    }
    free_blocks_ = loaded_->engine.free_blocks();
    // A request's events of the step (several with kept drafts) reach its
    // channel together, with one wake-up: woken at the first, the HTTP
    // thread would stream them a chunk at a time (Note [One chunk per step]).
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < events.size();) {
      size_t end = i + 1;
      while (end < events.size() && events[end].id == events[i].id) ++end;
      auto it = channels_.find(events[i].id);
      if (it != channels_.end()) {  // else its HTTP request gave up
        const std::shared_ptr<Channel> ch = it->second;
        if (events[end - 1].finished) channels_.erase(it);
        std::lock_guard<std::mutex> l(ch->mu);
        for (size_t j = i; j < end; ++j) ch->events.push_back(std::move(events[j]));
        ch->cv.notify_all();
      }
      i = end;
    }
  }
}

void LlmService::handle(HttpRequest request, HttpExchange& exchange) {
  try {
    if (!options_.api_key.empty() && request.path != "/health") {
      auto h = request.headers.find("authorization");
      if (h == request.headers.end() || !same_secret(h->second, "Bearer " + options_.api_key))
        throw ApiError(401, "missing or wrong API key (send the header Authorization: Bearer <key>)", "", "invalid_api_key");
    }
    if (request.body.size() > options_.max_body_bytes)
      throw ApiError(413, "the request body has " + std::to_string(request.body.size()) +
                              " bytes; the server takes at most " + std::to_string(options_.max_body_bytes));
    route(request, exchange);
  } catch (const ApiError& e) {
    exchange.send(error_response(e));
  } catch (const std::exception& e) {
    // An Error that describes the client's input (a template that rejects
    // the conversation) is theirs to read; an internal one is not.
    exchange.send(error_response(ApiError(is_internal(e) ? 500 : 400, client_message(e))));
  }
}

void LlmService::route(HttpRequest& req, HttpExchange& exchange) {
  const std::string& path = req.path;
  auto method = [&](const char* m) {
    if (req.method != m) throw ApiError(405, path + " takes " + m + ", not " + req.method);
  };
  if (path == "/health") {
    method("GET");
    HttpResponse r = json_response(ready_ ? 200 : 503, ojson{{"status", ready_ ? "ok" : "loading"}});
    if (!ready_) r.headers.push_back({"Retry-After", "1"});
    exchange.send(std::move(r));
    return;
  }
  if (path == "/metrics") {
    method("GET");
    HttpResponse r;
    r.content_type = "text/plain; version=0.0.4";
    r.body = render_metrics();
    exchange.send(std::move(r));
    return;
  }
  const bool known = path == "/v1/models" || path == "/v1/completions" || path == "/v1/chat/completions" ||
                     path == "/v1/embeddings" || path == "/tokenize" || path == "/detokenize";
  if (!known) throw ApiError(404, "no route " + path.substr(0, 200) + " (see /v1/models, /v1/completions, "
                                   "/v1/chat/completions, /v1/embeddings, /tokenize, /detokenize, /health, /metrics)");
  if (!ready_) throw ApiError(503, "the model is still loading");
  const Loaded& L = *loaded_;
  const int64_t vocab = L.m.model->spec().vocab;
  if (path == "/v1/models") {
    method("GET");
    ojson models = ojson::array({{{"id", options_.model_name}, {"object", "model"}, {"created", unix_time()},
                                  {"owned_by", "tessera"}, {"root", options_.model_name}, {"parent", nullptr},
                                  {"max_model_len", L.context}}});
    for (const auto& [name, _] : L.m.adapters)  // as vLLM lists LoRA adapters
      models.push_back({{"id", name}, {"object", "model"}, {"created", unix_time()}, {"owned_by", "tessera"},
                        {"root", name}, {"parent", options_.model_name}, {"max_model_len", L.context}});
    exchange.send(json_response(200, ojson{{"object", "list"}, {"data", models}}));
    return;
  }
  method("POST");
  if (path == "/v1/completions" || path == "/v1/chat/completions") {
    const openai::GenerationRequest g = path == "/v1/completions"
                                            ? openai::parse_completion_request(req.body, vocab, options_.limits)
                                            : openai::parse_chat_request(req.body, vocab, options_.limits);
    generate(g, adapter_for(g.model), exchange);
    return;
  }
  if (path == "/v1/embeddings") {
    const openai::EmbeddingRequest e = openai::parse_embedding_request(req.body, vocab, options_.limits);
    if (adapter_for(e.model))
      throw ApiError(400, "embeddings come from the base model '" + options_.model_name + "', not an adapter",
                     "model");
    embed(e, exchange);
    return;
  }
  const ojson body = openai::parse_body(req.body, options_.limits.max_json_depth);
  if (path == "/tokenize") {
    std::vector<int32_t> ids;
    const bool add_special = body.value("add_special_tokens", true);
    if (body.contains("prompt") && body["prompt"].is_string()) {
      ids = L.m.tokenizer.encode(body["prompt"].get<std::string>(), add_special, false);
    } else if (body.contains("messages")) {
      // The chat request's own checks, then the template, as a chat completion renders it.
      ojson chat = {{"messages", body["messages"]}};
      const openai::GenerationRequest g = openai::parse_chat_request(dump(chat), vocab, options_.limits);
      const llm::RenderedChat rc =
          llm::render_chat(L.tmpl, g.messages, body.value("add_generation_prompt", true), L.m.tokenizer);
      ids = L.m.tokenizer.encode(rc.text, true, true, rc.content_spans);
    } else {
      throw ApiError(400, "/tokenize takes {\"prompt\": text} or {\"messages\": [...]}", "prompt");
    }
    exchange.send(json_response(200, ojson{{"count", ids.size()}, {"max_model_len", L.context}, {"tokens", ids}}));
    return;
  }
  // /detokenize
  if (!body.contains("tokens") || !body["tokens"].is_array())
    throw ApiError(400, "/detokenize takes {\"tokens\": [ids]}", "tokens");
  std::vector<int32_t> ids;
  for (const ojson& t : body["tokens"]) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab)
      throw ApiError(400, "token " + dump(t).substr(0, 40) + " is not a token id in [0, " + std::to_string(vocab) + ")",
                     "tokens");
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  exchange.send(json_response(200, ojson{{"prompt", L.m.tokenizer.decode(ids)}}));
}

// The adapter a request's "model" names (null: the base model); a name
// that is neither is a 404.
const llm::Adapter* LlmService::adapter_for(const std::string& model) const {
  if (model.empty() || model == options_.model_name) return nullptr;
  std::string names = "'" + options_.model_name + "'";
  for (const auto& [name, a] : loaded_->m.adapters) {
    if (name == model) return a.get();
    names += ", '" + name + "'";
  }
  throw ApiError(404, "the model '" + model.substr(0, 200) + "' does not exist (this server serves " + names + ")",
                 "model", "model_not_found");
}

// A generation request's prompts as token ids, and what its template and
// tools add to it.
struct LlmService::Prompts {
  std::vector<std::vector<int32_t>> ids;
  std::vector<std::string> echoes;  // completions with echo: each prompt's text
  std::vector<std::string> stop;    // the request's, and the plain template's
  bool find_calls = false;          // a chat with tools: the reply is parsed for calls
  bool forced_call = false;         // tool_choice required or a function: a grammar writes the call
  int64_t tokens() const {
    int64_t n = 0;
    for (const auto& p : ids) n += static_cast<int64_t>(p.size());
    return n;
  }
};

LlmService::Prompts LlmService::prompts_of(const openai::GenerationRequest& g) const {
  const Loaded& L = *loaded_;
  const llm::Tokenizer& tok = L.m.tokenizer;
  const bool chat = g.kind == openai::GenerationRequest::Kind::Chat;
  using ToolChoice = openai::GenerationRequest::ToolChoice;
  Prompts p;
  p.stop = g.stop;
  const bool with_tools = chat && !g.tools.empty();
  if (with_tools && !L.tool_format) throw ApiError(400, "'tools': " + L.no_tools, "tools");
  p.find_calls = with_tools && g.tool_choice != ToolChoice::None;
  p.forced_call = with_tools && (g.tool_choice == ToolChoice::Required || g.tool_choice == ToolChoice::Function);
  if (chat) {
    // The template writes tools and calls outside the marked message texts:
    // none may hold the model's control tokens' text.
    check_no_control_text(g.tools, "tools", tok);
    for (const ojson& m : g.messages)
      if (m.contains("tool_calls")) check_no_control_text(m["tool_calls"], "messages", tok);
    const llm::RenderedChat rc = llm::render_chat(L.tmpl, g.messages, true, tok, with_tools ? g.tools : ojson());
    p.ids.push_back(tok.encode(rc.text, true, true, rc.content_spans, L.context));
    if (L.plain_template) p.stop.push_back(llm::kPlainChatStop);
  } else {
    for (const openai::Prompt& prompt : g.prompts) {
      p.ids.push_back(prompt.is_ids ? prompt.ids : tok.encode(prompt.text, true, false, {}, L.context));
      if (g.echo) p.echoes.push_back(prompt.is_ids ? tok.decode(prompt.ids) : prompt.text);
    }
  }
  for (const auto& ids : p.ids) {
    const auto n = static_cast<int64_t>(ids.size());
    if (n >= L.context)  // tokenized no further than past the context
      throw ApiError(400, "This model's maximum context length is " + std::to_string(L.context) +
                              " tokens; the prompt has " +
                              (n > L.context ? "more than " + std::to_string(L.context) : std::to_string(n)) +
                              " (it must leave room for at least one generated token)",
                     chat ? "messages" : "prompt", "context_length_exceeded");
  }
  return p;
}

llm::RequestOptions LlmService::request_options(const openai::GenerationRequest& g, const Prompts& p,
                                                const llm::Adapter* adapter, const std::string& served) {
  const Loaded& L = *loaded_;
  const bool chat = g.kind == openai::GenerationRequest::Kind::Chat;
  llm::RequestOptions ro;
  ro.sampling = g.sampling;
  ro.sampling.logprobs = g.logprobs;  // a pass over the vocabulary per token, only when asked
  if (!g.seeded) ro.sampling.seed = random_seed();
  ro.max_tokens = g.max_tokens > 0 ? g.max_tokens : chat ? L.context : 16;
  ro.stop = p.stop;
  ro.ignore_eos = g.ignore_eos;
  if (!g.grammar.empty()) ro.grammar = grammar(g.grammar, g.grammar_param);
  if (p.forced_call) {  // Note [Forced tool calls]
    std::string gbnf;
    try {
      gbnf = llm::forced_tool_call_gbnf(*L.tool_format, g.tools,
                                        g.tool_choice == openai::GenerationRequest::ToolChoice::Function ? g.tool_name
                                                                                                          : "",
                                        g.parallel_tool_calls);
    } catch (const Error& e) {
      throw ApiError(400, std::string("'tools': ") + e.what(), "tools");
    }
    ro.grammar = grammar(gbnf, "tools");
  }
  ro.special_text = p.find_calls;
  ro.priority = static_cast<int>(g.priority);
  ro.adapter = adapter;
  // The served name and the client's salt, so adapters and tenants never share cache.
  if (!g.cache_salt.empty() || adapter) ro.cache_salt = served + '\0' + g.cache_salt;
  return ro;
}

// Queues n choices of each prompt, all or none: a full queue or a request
// the scheduler refuses leaves nothing behind.
void LlmService::submit(const openai::GenerationRequest& g, const Prompts& p, llm::RequestOptions ro,
                        CompletionWriter& w, const std::shared_ptr<Channel>& ch, Clock::time_point arrival) {
  Loaded& L = *loaded_;
  const int64_t count = static_cast<int64_t>(p.ids.size()) * g.n;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) throw ApiError(503, "the server is stopping");
    const llm::SchedulerStats s = L.scheduler.stats();
    if (s.waiting + count > options_.max_waiting)
      throw ApiError(503, "the server's queue is full (" + std::to_string(s.waiting) + " requests waiting); retry later");
    try {
      for (size_t prompt = 0; prompt < p.ids.size(); ++prompt)
        for (int64_t i = 0; i < g.n; ++i) {
          ro.choice = static_cast<uint64_t>(i);
          // The other choices fork the first one's prompt once it is computed.
          ro.share_prompt_of = i == 0 ? 0 : w.choices()[w.choices().size() - static_cast<size_t>(i)].id;
          Choice c;
          c.id = L.scheduler.submit(p.ids[prompt], ro);
          c.index = static_cast<int64_t>(prompt) * g.n + i;
          c.prompt = static_cast<int64_t>(prompt);
          c.last = arrival;
          if (p.find_calls) {
            const llm::ToolFormat f = *L.tool_format;
            c.tool_parser = std::make_unique<llm::ToolCallParser>(
                f, p.forced_call, [f] { return llm::new_tool_call_id(f, random_seed()); });
          }
          channels_[w.add_choice(std::move(c)).id] = ch;
        }
    } catch (const std::exception& e) {
      for (const Choice& c : w.choices()) {
        L.scheduler.cancel(c.id);
        channels_.erase(c.id);
      }
      wake_.notify_one();
      if (dynamic_cast<const llm::ContextLengthError*>(&e))
        throw ApiError(400, e.what(), g.kind == openai::GenerationRequest::Kind::Chat ? "messages" : "prompt",
                       "context_length_exceeded");
      throw;
    }
  }
  wake_.notify_one();
}

// The client is gone: its choices end at the next step (their blocks freed there).
void LlmService::cancel_unfinished(const CompletionWriter& w) {
  int64_t aborted = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Choice& c : w.choices())
      if (!c.finished) {
        loaded_->scheduler.cancel(c.id);
        channels_.erase(c.id);
        ++aborted;
      }
  }
  wake_.notify_one();
  metrics_.add("tessera:request_success_total", "Requests finished, by why they finished.",
               static_cast<double>(aborted), {{"model_name", options_.model_name}, {"finished_reason", "abort"}});
}

// The latency and size histograms an event adds to (vLLM's names).
void LlmService::observe(Choice& c, const llm::RequestEvent& ev, Clock::time_point now, Clock::time_point arrival) {
  const monitor::Labels model{{"model_name", options_.model_name}};
  if (ev.has_token) {
    const double since = std::chrono::duration<double>(now - c.last).count();
    metrics_.observe(c.first ? "tessera:time_to_first_token_seconds" : "tessera:inter_token_latency_seconds",
                     c.first ? "Time from a request's arrival to its first token." : "Time between a request's tokens.",
                     c.first ? kTtftBuckets : kItlBuckets, since, model);
    c.first = false;
    c.last = now;
  }
  if (!ev.finished) return;
  metrics_.observe("tessera:e2e_request_latency_seconds", "Time from a request's arrival to its end.", kE2eBuckets,
                   std::chrono::duration<double>(now - arrival).count(), model);
  metrics_.observe("tessera:request_prompt_tokens", "Prompt tokens per request.", kTokenBuckets,
                   static_cast<double>(ev.prompt_tokens), model);
  metrics_.observe("tessera:request_generation_tokens", "Generated tokens per request.", kTokenBuckets,
                   static_cast<double>(ev.completion_tokens), model);
  metrics_.add("tessera:request_success_total", "Requests finished, by why they finished.", 1,
               {{"model_name", options_.model_name}, {"finished_reason", ev.finish_reason}});
}

// Hands the engine's events to the writer until every choice has finished.
// The client is looked at every 100 ms, events or not: one that left is not
// computed for. False when the exchange ended here (the client left, or the
// engine failed and the client was told).
bool LlmService::relay(const openai::GenerationRequest& g, CompletionWriter& w, Channel& ch,
                       Clock::time_point arrival, HttpExchange& exchange) {
  Clock::time_point looked{};  // the first events are not sent before a look
  while (!w.all_finished()) {
    std::deque<llm::RequestEvent> events;
    std::string failure;
    {
      std::unique_lock<std::mutex> lock(ch.mu);
      ch.cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return !ch.events.empty() || !ch.failure.empty(); });
      events.swap(ch.events);
      failure = ch.failure;
    }
    if (!failure.empty()) {
      const ApiError e(503, failure);
      if (g.stream) exchange.write("data: " + openai::error_body(e) + "\n\n");
      else exchange.send(error_response(e));
      return false;
    }
    const Clock::time_point now = Clock::now();
    if (events.empty() || now - looked >= std::chrono::milliseconds(100)) {
      looked = now;
      if (exchange.client_gone()) {
        cancel_unfinished(w);
        return false;
      }
      if (events.empty()) continue;
    }
    for (llm::RequestEvent& ev : events) {
      Choice& c = w.choice_of(ev.id);
      observe(c, ev, now, arrival);
      w.add(c, ev);
    }
    if (g.stream) {
      const std::string out = w.take();
      if (!out.empty() && !exchange.write(out)) {
        cancel_unfinished(w);
        return false;
      }
    }
  }
  return true;
}

// request -> prompts (template, tools) -> submission -> the events, written
// by one writer whether streamed or not.
void LlmService::generate(const openai::GenerationRequest& g, const llm::Adapter* adapter, HttpExchange& exchange) {
  const std::string served = g.model.empty() ? options_.model_name : g.model;  // the model or an adapter
  Prompts p = prompts_of(g);
  const llm::RequestOptions ro = request_options(g, p, adapter, served);
  CompletionWriter w(g, loaded_->m.tokenizer, served, std::move(p.echoes), p.tokens());
  auto ch = std::make_shared<Channel>();
  const Clock::time_point arrival = Clock::now();
  submit(g, p, ro, w, ch, arrival);
  if (g.stream) {
    if (!exchange.begin_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}}))
      return cancel_unfinished(w);
    const std::string first = w.begin();
    if (!first.empty() && !exchange.write(first)) return cancel_unfinished(w);
  } else {
    w.begin();
  }
  if (!relay(g, w, *ch, arrival, exchange)) return;
  if (g.stream) {
    exchange.write(w.end_stream());
    exchange.end_stream();
  } else {
    exchange.send(json_response(200, w.body()));
  }
}

void LlmService::embed(const openai::EmbeddingRequest& e, HttpExchange& exchange) {
  Loaded& L = *loaded_;
  std::vector<std::vector<int32_t>> inputs;
  int64_t tokens = 0;
  for (const openai::Prompt& p : e.inputs) {
    inputs.push_back(p.is_ids ? p.ids : L.m.tokenizer.encode(p.text, true, false, {}, L.context));
    if (static_cast<int64_t>(inputs.back().size()) > L.context)
      throw ApiError(400, "This model's maximum context length is " + std::to_string(L.context) +
                              " tokens; an input has more than " + std::to_string(L.context),
                     "input", "context_length_exceeded");
    tokens += static_cast<int64_t>(inputs.back().size());
  }
  llm::RequestOptions ro;
  ro.pooling = e.pooling.empty() ? L.m.pooling : llm::pooling_from_name(e.pooling);
  ro.sampling.temperature = 0;
  auto ch = std::make_shared<Channel>();
  std::vector<int64_t> ids;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) throw ApiError(503, "the server is stopping");
    if (L.scheduler.stats().waiting + static_cast<int64_t>(inputs.size()) > options_.max_waiting)
      throw ApiError(503, "the server's queue is full; retry later");
    for (const auto& in : inputs) {
      ids.push_back(L.scheduler.submit(in, ro));
      channels_[ids.back()] = ch;
    }
  }
  wake_.notify_one();
  std::map<int64_t, std::vector<float>> got;
  while (got.size() < ids.size()) {
    std::deque<llm::RequestEvent> events;
    std::string failure;
    {
      std::unique_lock<std::mutex> lock(ch->mu);
      ch->cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return !ch->events.empty() || !ch->failure.empty(); });
      events.swap(ch->events);
      failure = ch->failure;
    }
    if (!failure.empty()) throw ApiError(503, failure);
    if (events.empty() && exchange.client_gone()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (int64_t id : ids)
          if (!got.count(id)) {
            L.scheduler.cancel(id);
            channels_.erase(id);
          }
      }
      wake_.notify_one();
      return;
    }
    for (llm::RequestEvent& ev : events)
      if (ev.finished) got[ev.id] = std::move(ev.embedding);
  }
  ojson data = ojson::array();
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::vector<float>& v = got[ids[i]];
    ojson emb = e.base64 ? ojson(openai::base64({reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)}))
                         : ojson(v);
    data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", std::move(emb)}});
  }
  exchange.send(json_response(200, ojson{{"object", "list"}, {"data", std::move(data)}, {"model", options_.model_name},
                                         {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}}));
}

std::string LlmService::render_metrics() {
  const monitor::Labels model{{"model_name", options_.model_name}};
  const llm::SchedulerStats s = stats();
  metrics_.set("tessera:num_requests_running", "Requests in the running batch.", static_cast<double>(s.running), model);
  metrics_.set("tessera:num_requests_waiting", "Requests waiting to be scheduled.", static_cast<double>(s.waiting), model);
  const int64_t total = total_blocks();
  metrics_.set("tessera:kv_cache_usage_perc", "Fraction of the KV cache's blocks in use (0 to 1).",
               total ? 1.0 - static_cast<double>(free_blocks_.load()) / static_cast<double>(total) : 0.0, model);
  metrics_.set("tessera:num_preemptions_total", "Requests preempted (to be recomputed) since the start.",
               static_cast<double>(s.preemptions), model, monitor::MetricType::kCounter);
  metrics_.set("tessera:prompt_tokens_total", "Prompt tokens computed (recomputations included).",
               static_cast<double>(s.prompt_tokens), model, monitor::MetricType::kCounter);
  metrics_.set("tessera:generation_tokens_total", "Tokens generated.", static_cast<double>(s.generated_tokens), model,
               monitor::MetricType::kCounter);
  metrics_.set("tessera:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
               static_cast<double>(s.prefix_queries), model, monitor::MetricType::kCounter);
  metrics_.set("tessera:prefix_cache_hits_total", "Prompt tokens found in the prefix cache (or shared by another "
               "choice of the same call).", static_cast<double>(s.prefix_hits), model, monitor::MetricType::kCounter);
  if (!s.accepted_by_position.empty()) {
    metrics_.set("tessera:spec_decode_num_draft_tokens_total", "Draft tokens proposed (by prompt lookup or the draft model).",
                 static_cast<double>(s.draft_tokens), model, monitor::MetricType::kCounter);
    metrics_.set("tessera:spec_decode_num_accepted_tokens_total", "Draft tokens accepted.",
                 static_cast<double>(s.accepted_tokens), model, monitor::MetricType::kCounter);
    for (size_t i = 0; i < s.accepted_by_position.size(); ++i)
      metrics_.set("tessera:spec_decode_num_accepted_tokens_per_pos_total", "Draft tokens accepted, by position in "
                   "the draft.", static_cast<double>(s.accepted_by_position[i]),
                   {{"model_name", options_.model_name}, {"position", std::to_string(i)}},
                   monitor::MetricType::kCounter);
  }
  metrics_.set("tessera:model_ready", "1 once the model is loaded and serving.", ready_ ? 1 : 0, model);
  return metrics_.render();
}

}  // namespace tessera::serve
