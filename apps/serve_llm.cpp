// `tessera serve-llm` (apps/serve_llm.h): the OpenAI-compatible server.
#include "serve_llm.h"

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tessera/core/allocator.h"
#include "tessera/core/error.h"
#include "tessera/core/parallel.h"
#include "tessera/distributed/llm_group.h"
#include "tessera/io/file.h"
#include "tessera/llm/lora_adapter.h"
#include "tessera/serve/http_server.h"
#include "tessera/serve/llm_service.h"

namespace tessera::cli {

void add_serve_llm_command(CLI::App& app, ServeLlmFlags& f) {
  CLI::App* c = app.add_subcommand("serve-llm", "serve a language model (a llama or gpt2 GGUF file, or a run of "
                                   "`tessera train`) over HTTP with OpenAI's API: completions and chat completions, "
                                   "streamed or not, many users batched together");
  f.cmd = c;
  c->add_option("model", f.model, "a GGUF file, or a run or checkpoint of tessera train")->required();
  c->add_option("--name", f.name, "the model's name in the API (default: the file's name without .gguf)");
  c->add_option("--host", f.host, "address to bind (default 127.0.0.1: this machine only)");
  c->add_option("--port", f.port, "port (0: any free port)")->check(CLI::Range(0, 65535));
  c->add_option("--api-key-file", f.api_key_file, "a file holding the API key every route but /health needs");
  c->add_option("--ctx", f.context, "positions per sequence (0: the model's)")->check(CLI::Range(0, 1 << 18));
  c->add_option("--kv-memory", f.kv_memory, "bytes of KV cache shared by all requests, e.g. 1G (default: --max-seqs "
                "sequences of the context, at most 4096 tokens each)");
  c->add_option("--kv-block", f.kv_block, "tokens per KV cache block (the unit of paging and prefix sharing): a "
                "multiple of 16 up to 1024")->check(CLI::Range(16, 1024));
  c->add_option("--kv-type", f.kv_type, "KV cache type for keys and values: f16 or q8_0")
      ->check(CLI::IsMember({"f16", "q8_0"}));
  c->add_option("--max-seqs", f.max_seqs, "requests running at once")->check(CLI::Range(1, 1024));
  c->add_option("--max-batched-tokens", f.max_batched_tokens, "tokens one step carries: every running decode, then "
                "prompt chunks")->check(CLI::Range(1, 65536));
  c->add_option("--max-waiting", f.max_waiting, "requests queued beyond this are refused with 503 and Retry-After")
      ->check(CLI::Range(1, 1 << 20));
  c->add_option("--decode-slowdown", f.decode_slowdown, "while requests decode, a step's prompt chunks are cut so "
                "that it takes at most this many times a step of the decodes alone (default 0: only --max-batched-tokens)")
      ->check(CLI::Range(0.0, 1000.0));
  c->add_option("--prompt-lookup", f.prompt_lookup, "speculative decoding by prompt lookup: up to this many draft "
                "tokens a step for each request, from where its last tokens occurred before (0: off); the output "
                "does not change")->check(CLI::Range(0, 32));
  c->add_option("--draft", f.draft, "speculative decoding with this draft model (a GGUF file or a run, smaller than "
                "MODEL and of the same vocabulary): its tokens are checked by MODEL, several a step; greedy output "
                "does not change, sampled output keeps its distribution");
  c->add_option("--draft-tokens", f.draft_tokens, "with --draft: up to this many draft tokens a step for each "
                "request (fewer where they do not pay)")->check(CLI::Range(1, 32));
  c->add_option("--draft-threads", f.draft_threads, "with --draft: compute threads for the draft model's steps "
                "(default 1: a small model's step is shorter than a parallel region's start and end)")
      ->check(CLI::Range(1, 1024));
  c->add_option("--lora", f.lora, "serve a LoRA adapter (a GGUF adapter, or PEFT's adapter_model.safetensors) as "
                "the model NAME: requests naming it get MODEL with the adapter, in the same batches as the rest; "
                "repeatable")->type_name("NAME=PATH");
  c->add_flag("--no-prefix-caching", f.no_prefix_caching, "compute every prompt in full (by default full blocks of "
              "16 tokens a prompt shares with an earlier one are reused)");
  c->add_option("-t,--threads", f.threads, "compute threads (0: OMP_NUM_THREADS or all cores)")
      ->check(CLI::Range(0, 1024));
  c->add_option("--connections", f.connections, "HTTP requests answered at once (a worker thread each; slow "
                "clients hold none)")->check(CLI::Range(1, 4096));
  c->add_option("--max-client-connections", f.max_client_connections, "connections one client address may hold; "
                "one more is refused with 429")->check(CLI::Range(1, 1 << 20));
  c->add_option("--chat-template", f.chat_template, "a Jinja chat template file to use instead of the model's");
  c->add_option("--pooling", f.pooling, "/v1/embeddings' pooling of the tokens' final hidden states: mean, last or "
                "cls (default: the GGUF's {arch}.pooling_type, else last)")->check(CLI::IsMember({"mean", "last", "cls"}));
  c->add_option("--tensor-parallel", f.tensor_parallel, "split the model's attention heads, feed-forward width and "
                "KV cache over this many processes, started as `tessera launch -n T -- tessera serve-llm ...`: rank "
                "0 serves HTTP, and every rank holds 1/T of the layers' weights")->check(CLI::Range(1, 4096));
  c->add_option("--weights", f.weights, "a training run's weights in the engine: F32, F16, BF16, Q8_0 or Q4_0")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0", "F32", "F16", "BF16", "Q8_0", "Q4_0"}));
}

std::string read_api_key(const std::string& path, const char* verb) {
  std::ifstream in(path);
  TS_CHECK(in, verb, ": cannot read the API key file '", path, "'");
  std::string key;
  std::getline(in, key);
  while (!key.empty() && std::isspace(static_cast<unsigned char>(key.back()))) key.pop_back();
  TS_CHECK(key.size() >= 16, verb, ": the API key in '", path, "' is shorter than 16 characters");
  return key;
}

sigset_t block_stop_signals() {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGINT);
  sigaddset(&s, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &s, nullptr);
  return s;
}

namespace {

// The engine's options from the flags: the one place its limits are set
// (the scheduler reads them from the engine), the same on every rank of a
// tensor-parallel job.
llm::EngineOptions engine_options(const ServeLlmFlags& f) {
  llm::EngineOptions o;
  o.context = f.context;
  o.max_sequences = f.max_seqs;
  o.max_batch_tokens = f.max_batched_tokens;
  o.k_type = o.v_type = llm::kv_type_from_name(f.kv_type);
  o.block_tokens = f.kv_block;
  o.prefix_caching = !f.no_prefix_caching;
  if (!f.kv_memory.empty()) o.kv_memory = byte_count(f.kv_memory);
  const int64_t drafts = f.draft.empty() ? f.prompt_lookup : f.draft_tokens;
  // Each request decodes 1 + drafts rows a step, within the step's tokens.
  o.max_logit_rows = std::min(o.max_sequences * (1 + drafts), o.max_batch_tokens);
  return o;
}

// What serve-llm serves from the loaded model `lm` and the flags: the
// engine's limits (the one place they are set: the scheduler reads them
// from the engine), the scheduler's options, a draft model, LoRA adapters.
// `draft_what` says what the draft is.
serve::LlmModel llm_model_of(const ServeLlmFlags& f, LanguageModel& lm, const std::string& name,
                             const std::string& tmpl_override, const LanguageModelLoader& load,
                             std::shared_ptr<llm::Communicator> group, std::string& draft_what) {
  serve::LlmModel m;
  m.model = lm.model;
  m.tokenizer = std::move(lm.tokenizer);
  m.chat_template = tmpl_override.empty() ? lm.chat_template : tmpl_override;
  m.chat_template_name = tmpl_override.empty() ? "tokenizer.chat_template" : f.chat_template;
  m.engine = engine_options(f);
  m.pooling = llm::Pooling::Last;
  if (!f.pooling.empty()) {
    m.pooling = llm::pooling_from_name(f.pooling);
  } else if (const llm::GgufValue* p = lm.model->file().find(lm.model->spec().arch + ".pooling_type")) {
    // llama.cpp's enum: 1 mean, 2 CLS, 3 last (0: none, -1: unspecified).
    const int64_t t = p->as_int(lm.model->spec().arch + ".pooling_type");
    if (t == 1) m.pooling = llm::Pooling::Mean;
    else if (t == 2) m.pooling = llm::Pooling::Cls;
  }
  TS_CHECK(f.decode_slowdown == 0 || f.decode_slowdown >= 1, "serve-llm: --decode-slowdown ", f.decode_slowdown,
           " must be 0 (off) or at least 1");
  m.scheduler.decode_slowdown = f.decode_slowdown;
  m.scheduler.lookup_tokens = f.prompt_lookup;
  TS_CHECK(f.draft.empty() || f.prompt_lookup == 0, "serve-llm: --draft and --prompt-lookup are two ways of "
           "speculative decoding; choose one");
  if (!f.draft.empty()) {
    LanguageModel d = load(f.draft, {});  // whole, on rank 0
    try {
      llm::check_same_vocabulary(m.tokenizer, d.tokenizer);
    } catch (const Error& e) {
      TS_ERROR("serve-llm: --draft ", f.draft, " cannot draft for ", f.model, ": ", e.what());
    }
    m.draft = d.model;
    m.draft_engine = engine_options(f);
    m.draft_engine.max_logit_rows = m.engine.max_sequences;
    m.draft_engine.kv_memory = 0;  // the draft's own KV for every sequence: small next to the model's
    m.draft_engine.threads = f.draft_threads;
    m.scheduler.draft_tokens = f.draft_tokens;
    draft_what = d.what;
  }
  for (const std::string& spec : f.lora) {
    const size_t eq = spec.find('=');
    TS_CHECK(eq != std::string::npos && eq > 0 && eq + 1 < spec.size(), "serve-llm: --lora takes NAME=PATH, got '",
             spec, "'");
    const std::string lname = spec.substr(0, eq);
    TS_CHECK(lname != name, "serve-llm: --lora ", lname, ": the adapter's name is the model's own");
    for (const auto& [other, _] : m.adapters)
      TS_CHECK(other != lname, "serve-llm: --lora ", lname, " is given twice");
    m.adapters.emplace_back(lname, llm::LoraAdapter::load(spec.substr(eq + 1), lm.model->spec()));
  }
  m.engine.group = std::move(group);
  return m;
}

// Loads `load()` on a thread of its own (Note [One OpenMP team] below).
template <typename F>
void load_apart(F&& load) {
  std::exception_ptr failed;
  std::thread loader([&] {
    try {
      load();
    } catch (...) {
      failed = std::current_exception();
    }
  });
  loader.join();
  if (failed) std::rethrow_exception(failed);
}

// A rank but 0 of a tensor-parallel job: its part of the model, run as rank
// 0's engine asks until that engine ends (Note [An engine across ranks]).
int follow_rank_0(const ServeLlmFlags& f, const LanguageModelLoader& load, const distributed::ProcessGroupPtr& world) {
  // Stopping is rank 0's to decide (the stop signals stay blocked here): it
  // ends this rank's engine when it stops.
  LanguageModel lm;
  load_apart([&] { lm = load(f.model, {world->rank(), world->size()}); });
  llm::EngineOptions o = engine_options(f);
  o.group = distributed::llm_communicator(world);
  llm::Engine engine(lm.model, o);
  engine.follow();
  return 0;
}

}  // namespace

int cmd_serve_llm(const ServeLlmFlags& f, const LanguageModelLoader& load) {
  // Blocked before any thread starts (the process group's too), so that
  // sigwait below alone takes them; under tessera launch a stop request
  // reaches the ranks as SIGUSR2.
  sigset_t stop_signals = block_stop_signals();
  distributed::ProcessGroupPtr world;
  if (f.tensor_parallel > 1) {
    sigaddset(&stop_signals, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
    world = distributed::world();
    TS_CHECK(world->size() == f.tensor_parallel, "serve-llm: --tensor-parallel ", f.tensor_parallel, " runs as ",
             f.tensor_parallel, " processes (tessera launch -n ", f.tensor_parallel, " -- tessera serve-llm ...); "
             "this job has ", world->size());
    TS_CHECK(f.lora.empty(), "serve-llm: --lora is not served with --tensor-parallel (the adapters are not split)");
    if (f.threads > 0) set_num_threads(f.threads);
    if (world->rank() != 0) return follow_rank_0(f, load, world);
  }
  serve::LlmServiceOptions so;
  if (!f.api_key_file.empty()) so.api_key = read_api_key(f.api_key_file, "serve-llm");
  so.max_waiting = f.max_waiting;
  std::string name = f.name;
  if (name.empty()) {
    name = std::filesystem::path(f.model).filename().string();
    if (name.size() > 5 && name.ends_with(".gguf")) name.resize(name.size() - 5);
    if (name.empty()) name = "model";
  }
  so.model_name = name;
  TS_CHECK(f.max_batched_tokens >= f.max_seqs, "serve-llm: --max-batched-tokens (", f.max_batched_tokens,
           ") must be at least --max-seqs (", f.max_seqs, "): every running request decodes each step");
  std::string tmpl_override;
  if (!f.chat_template.empty()) {
    const std::vector<char> bytes = io::read_file(f.chat_template);
    tmpl_override.assign(bytes.begin(), bytes.end());
  }
  if (f.threads > 0) set_num_threads(f.threads);

  serve::LlmService service(so);
  serve::HttpServer server([&service](serve::HttpRequest r, serve::HttpExchange& x) { service.handle(std::move(r), x); },
                           service.max_body_bytes(), {.host = f.host, .port = f.port, .threads = f.connections,
                            .max_connections_per_client = f.max_client_connections});
  std::printf("listening on http://%s:%d/v1 (loading %s; /health answers 503 until it is served)\n", f.host.c_str(),
              server.port(), f.model.c_str());
  std::fflush(stdout);

  // Note [One OpenMP team]: loading packs the weights in parallel regions.
  // Run here, it would leave this thread's OpenMP team beside the engine
  // thread's, and libgomp, finding more of its threads than cores, cuts
  // every team's spin-wait to almost nothing: each of a step's many small
  // parallel regions then waits for a futex wake-up (one stream of the 20M
  // fortunes model on 2 cores: 480 tokens/s against 1,390 with one team).
  // A thread that ends takes its team with it, so the loading runs on one.
  const auto t0 = std::chrono::steady_clock::now();
  LanguageModel lm;
  std::string draft_what;
  load_apart([&] {
    lm = load(f.model, world ? llm::TensorSplit{0, world->size()} : llm::TensorSplit{});
    service.load(llm_model_of(f, lm, name, tmpl_override, load,
                              world ? distributed::llm_communicator(world) : nullptr, draft_what));
  });
  const llm::ModelSpec& s = lm.model->spec();
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("serving '%s': %s (%s), %lld layers, width %lld, vocabulary %lld, %s weights; loaded in %.2f s\n",
              name.c_str(), lm.what.c_str(), s.arch.c_str(), static_cast<long long>(s.n_layers),
              static_cast<long long>(s.dim), static_cast<long long>(s.vocab),
              llm::ggml_type_name(lm.model->weight_type()), load_s);
  for (const std::string& spec : f.lora) std::printf("LoRA adapter '%s'\n", spec.c_str());
  if (!draft_what.empty())
    std::printf("draft model: %s, up to %lld tokens a step for each request\n", draft_what.c_str(),
                static_cast<long long>(f.draft_tokens));
  if (world)
    std::printf("tensor parallel: %d ranks, each with %lld of the %lld attention heads per layer\n", world->size(),
                static_cast<long long>(s.n_heads), static_cast<long long>(s.n_heads * world->size()));
  std::printf("KV cache: %lld blocks of %lld tokens shared by up to %lld requests; %d threads%s\n",
              static_cast<long long>(service.total_blocks()), static_cast<long long>(f.kv_block),
              static_cast<long long>(f.max_seqs), get_num_threads(),
              so.api_key.empty() ? "" : "; API key required");
  std::fflush(stdout);

  int sig = 0;
  sigwait(&stop_signals, &sig);
  std::printf("%s: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
  service.stop();  // first: requests in flight are answered 503 and their connections freed
  server.stop();
  std::printf("stopped\n");
  return 0;
}

}  // namespace tessera::cli
