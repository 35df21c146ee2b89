#pragma once
// The OpenAI-compatible LLM service behind `tessera serve-llm`: one model,
// many users, continuous batching (llm::Scheduler) on an engine thread of
// its own, every answer whole or streamed as server-sent events.
//
//   GET  /health                     200 when the model is loaded, 503 while it loads
//   GET  /metrics                    Prometheus text (vLLM's metric names, under tessera:)
//   GET  /v1/models                  the served model
//   POST /v1/completions             text completion (stream or not)
//   POST /v1/chat/completions        chat completion through the model's chat template
//   POST /v1/embeddings              pooled final hidden states (mean, last or CLS), unit length
//   POST /tokenize, /detokenize      the model's tokenizer
//
// With an API key set, every route but /health needs "Authorization: Bearer
// KEY". Errors are OpenAI's {"error": {"message", "type", "param", "code"}}:
// 400 for a bad request (the parameter named), 401, 404, 503 with
// Retry-After when the queue is full or the model is not loaded.
//
// The HTTP threads never wait on a step: they parse, tokenize and queue,
// then wait for their own requests' events, while /health and /metrics are
// answered at once. A client that disconnects (streaming or not) is seen
// within 100 ms and its requests are cancelled: their cache blocks return
// at the next step.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tessera/llm/chat_template.h"
#include "tessera/llm/engine.h"
#include "tessera/llm/scheduler.h"
#include "tessera/llm/tokenizer.h"
#include "tessera/monitor/metrics.h"
#include "tessera/serve/http.h"
#include "tessera/serve/openai.h"

namespace tessera::serve {

class CompletionWriter;  // src/serve/completion_writer.h
struct Choice;

struct LlmServiceOptions {
  std::string model_name = "model";  // what /v1/models lists and requests name
  std::string api_key;               // empty: no authentication
  size_t max_body_bytes = size_t{8} << 20;
  int64_t max_waiting = 256;         // requests queued beyond this get 503 with Retry-After
  openai::Limits limits;
};

// What the service runs, made once the model is loaded.
struct LlmModel {
  std::shared_ptr<const llm::Model> model;
  llm::Tokenizer tokenizer;
  llm::EngineOptions engine;
  llm::SchedulerOptions scheduler;
  // The chat template's source ("" for none: each message on a line after
  // its role, and the model stopped where it starts the user's next line).
  std::string chat_template, chat_template_name = "tokenizer.chat_template";
  llm::Pooling pooling = llm::Pooling::Last;  // /v1/embeddings, unless a request names another
  // Speculative decoding with a draft model (scheduler.draft_tokens drafts
  // a step; Note [Draft model]): its vocabulary must be the tokenizer's.
  std::shared_ptr<const llm::Model> draft;
  llm::EngineOptions draft_engine;
  // LoRA adapters by the model name requests give for them (llm/lora.h):
  // each request runs with its own, in the same batches.
  std::vector<std::pair<std::string, std::shared_ptr<const llm::Adapter>>> adapters;
};

class LlmService {
 public:
  explicit LlmService(LlmServiceOptions options = {});
  ~LlmService();  // stop()
  LlmService(const LlmService&) = delete;
  LlmService& operator=(const LlmService&) = delete;

  // Makes the engine and starts serving: until then every route but /health
  // and /metrics is 503. An error (a template outside the subset, options
  // the engine refuses) leaves the service unloaded.
  void load(LlmModel m);
  // Answers one request (the transport's HttpHandler).
  void handle(HttpRequest request, HttpExchange& exchange);
  // Cancels what runs, ends the engine thread; requests waiting get 503.
  void stop();

  size_t max_body_bytes() const { return options_.max_body_bytes; }
  const monitor::Registry& metrics() const { return metrics_; }
  // The scheduler's counters and the cache's free blocks (for tests and the CLI).
  llm::SchedulerStats stats() const;
  int64_t free_blocks() const { return free_blocks_.load(); }
  int64_t total_blocks() const;

 private:
  struct Loaded;
  struct Channel;
  struct Prompts;
  using Clock = std::chrono::steady_clock;
  void route(HttpRequest& request, HttpExchange& exchange);
  // A completion or chat completion, in the stages below.
  void generate(const openai::GenerationRequest& g, const llm::Adapter* adapter, HttpExchange& exchange);
  Prompts prompts_of(const openai::GenerationRequest& g) const;
  llm::RequestOptions request_options(const openai::GenerationRequest& g, const Prompts& p,
                                      const llm::Adapter* adapter, const std::string& served);
  void submit(const openai::GenerationRequest& g, const Prompts& p, llm::RequestOptions ro, CompletionWriter& w,
              const std::shared_ptr<Channel>& ch, Clock::time_point arrival);
  bool relay(const openai::GenerationRequest& g, CompletionWriter& w, Channel& ch, Clock::time_point arrival,
             HttpExchange& exchange);
  void observe(Choice& c, const llm::RequestEvent& ev, Clock::time_point now, Clock::time_point arrival);
  void cancel_unfinished(const CompletionWriter& w);
  const llm::Adapter* adapter_for(const std::string& model) const;
  void embed(const openai::EmbeddingRequest& e, HttpExchange& exchange);
  void engine_loop();
  std::string render_metrics();
  std::shared_ptr<const llm::Grammar> grammar(const std::string& gbnf, const std::string& param);

  LlmServiceOptions options_;
  std::unique_ptr<Loaded> loaded_;  // set once by load(); read after ready_
  std::atomic<bool> ready_{false};
  std::atomic<int64_t> free_blocks_{0};

  // The engine thread and what it dispatches to.
  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::map<int64_t, std::shared_ptr<Channel>> channels_;  // scheduler request id -> its HTTP request
  std::thread engine_thread_;

  monitor::Registry metrics_;
  std::atomic<int64_t> next_id_{1};

  // Compiled grammars by their GBNF text, the most recently used last: a
  // schema sent again finds its grammar and the masks found for it.
  std::mutex grammars_mu_;
  std::vector<std::pair<std::string, std::shared_ptr<const llm::Grammar>>> grammars_;
};

}  // namespace tessera::serve
