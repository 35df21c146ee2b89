// Language models from Python: a GGUF file loaded into the engine, its
// tokenizer and chat template; generation streamed as a Python iterator; the
// OpenAI-compatible server started from Python.
//
// Note [Batching from Python]
// tessera.llm.Scheduler is the scheduler the OpenAI server runs (continuous
// batching, paged KV cache, prefix sharing), driven by the caller: submit()
// queues a request, step() runs one batched engine step with the GIL released
// and returns what every request made in it. Each step holds the LLM's lock,
// so generate() and a scheduler take turns on the engine between steps, each
// on sequences of its own.
//
// Note [Streaming into Python]
// A Stream runs llm::generate on a thread of its own and hands each piece of
// text over through a queue; next() waits for one with the GIL released. The
// engine is one request at a time (tessera.llm.LLM holds a lock per
// generation; many requests batched together are the server's job). Dropping
// or closing the iterator cancels the generation at its next token.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "bindings.h"
#include "tessera/core/error.h"
#include "tessera/llm/chat_template.h"
#include "tessera/llm/engine.h"
#include "tessera/llm/generate.h"
#include "tessera/llm/model.h"
#include "tessera/llm/scheduler.h"
#include "tessera/train/run.h"
#include "tessera/llm/tokenizer.h"
#include "tessera/serve/http_server.h"
#include "tessera/serve/llm_service.h"

namespace tessera::python {

namespace {

struct LLM {
  std::shared_ptr<llm::Model> model;
  llm::Tokenizer tokenizer;
  std::string chat_template;  // the GGUF's, or empty
  std::unique_ptr<llm::Engine> engine;
  llm::EngineOptions engine_options;
  std::mutex busy;  // one generation at a time on the engine
  std::string path;
};

struct Cancelled {};

class Stream {
 public:
  Stream(std::shared_ptr<LLM> lm, std::vector<int32_t> prompt, llm::GenerateOptions opts) : lm_(std::move(lm)) {
    thread_ = std::thread([this, prompt = std::move(prompt), opts = std::move(opts)] {
      std::exception_ptr err;
      llm::GenerateResult r;
      try {
        std::lock_guard<std::mutex> busy(lm_->busy);
        r = llm::generate(*lm_->engine, lm_->tokenizer, prompt, opts, [this](std::string_view text, const llm::Sampled&) {
          if (cancel_) throw Cancelled{};
          if (text.empty()) return;
          std::lock_guard<std::mutex> lock(mu_);
          queue_.emplace_back(text);
          cv_.notify_one();
        });
      } catch (const Cancelled&) {
      } catch (...) {
        err = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mu_);
      result_ = std::move(r);
      error_ = err;
      done_ = true;
      cv_.notify_one();
    });
  }
  ~Stream() { close(); }

  // The next piece of text, or nullopt at the end (errors are rethrown).
  // Waits at most `timeout` for it: `ready` says whether it came.
  std::optional<std::string> next(std::chrono::milliseconds timeout, bool& ready) {
    std::unique_lock<std::mutex> lock(mu_);
    ready = cv_.wait_for(lock, timeout, [this] { return !queue_.empty() || done_; });
    if (!ready) return std::nullopt;
    if (!queue_.empty()) {
      std::string s = std::move(queue_.front());
      queue_.pop_front();
      return s;
    }
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
    return std::nullopt;
  }
  void close() {
    cancel_ = true;
    if (thread_.joinable()) thread_.join();
  }
  py::dict result() {
    std::lock_guard<std::mutex> lock(mu_);
    py::dict d;
    d["finish_reason"] = done_ ? result_.finish_reason : "";
    d["tokens"] = result_.tokens;
    d["prompt_tokens"] = result_.prompt_tokens;
    d["prefill_seconds"] = result_.prefill_seconds;
    d["decode_seconds"] = result_.decode_seconds;
    return d;
  }

 private:
  std::shared_ptr<LLM> lm_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;
  bool done_ = false;
  std::exception_ptr error_;
  llm::GenerateResult result_;
  std::atomic<bool> cancel_{false};
};

llm::GenerateOptions options_of(const py::kwargs& kw) {
  llm::GenerateOptions o;
  for (auto [k, v] : kw) {
    std::string key = py::str(k);
    if (key == "max_tokens") o.max_tokens = v.cast<int64_t>();
    else if (key == "temperature") o.sampling.temperature = v.cast<float>();
    else if (key == "top_k") o.sampling.top_k = v.cast<int64_t>();
    else if (key == "top_p") o.sampling.top_p = v.cast<float>();
    else if (key == "min_p") o.sampling.min_p = v.cast<float>();
    else if (key == "repeat_penalty") o.sampling.repeat_penalty = v.cast<float>();
    else if (key == "presence_penalty") o.sampling.presence_penalty = v.cast<float>();
    else if (key == "frequency_penalty") o.sampling.frequency_penalty = v.cast<float>();
    else if (key == "seed") o.sampling.seed = v.cast<uint64_t>();
    else if (key == "stop") o.stop = py::isinstance<py::str>(v) ? std::vector<std::string>{v.cast<std::string>()}
                                                                 : v.cast<std::vector<std::string>>();
    else if (key == "ignore_eos") o.ignore_eos = v.cast<bool>();
    else throw py::type_error("generate() got an unexpected keyword argument '" + key +
                              "' (max_tokens, temperature, top_k, top_p, min_p, repeat_penalty, presence_penalty, "
                              "frequency_penalty, seed, stop, ignore_eos)");
  }
  TS_CHECK(o.max_tokens >= 0, "generate: max_tokens ", o.max_tokens, " must be 0 or more");
  TS_CHECK(o.sampling.temperature >= 0, "generate: temperature ", o.sampling.temperature, " must be 0 (greedy) or more");
  return o;
}

std::shared_ptr<Stream> start(const std::shared_ptr<LLM>& lm, std::vector<int32_t> prompt, const py::kwargs& kw) {
  llm::GenerateOptions o = options_of(kw);
  const int64_t context = lm->engine->options().context ? lm->engine->options().context : lm->model->spec().context;
  TS_CHECK(static_cast<int64_t>(prompt.size()) < context, "generate: the prompt is ", prompt.size(),
           " tokens; the context holds ", context);
  return std::make_shared<Stream>(lm, std::move(prompt), std::move(o));
}

nlohmann::ordered_json json_of(py::handle obj) {
  std::string text = py::module_::import("json").attr("dumps")(obj).cast<std::string>();
  return nlohmann::ordered_json::parse(text);
}

llm::RequestOptions request_options_of(const py::kwargs& kw) {
  py::kwargs sampling;
  llm::RequestOptions r;
  for (auto [k, v] : kw) {
    std::string key = py::str(k);
    if (key == "priority") r.priority = v.cast<int>();
    else sampling[k] = v;
  }
  llm::GenerateOptions g = options_of(sampling);
  r.sampling = g.sampling;
  r.max_tokens = g.max_tokens;
  r.stop = g.stop;
  r.ignore_eos = g.ignore_eos;
  return r;
}

struct PyScheduler {
  std::shared_ptr<LLM> lm;
  std::unique_ptr<llm::Scheduler> sched;
  ~PyScheduler() {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> busy(lm->busy);  // it frees its sequences on the engine
    sched.reset();
  }
};

py::dict event_object(const llm::RequestEvent& e) {
  py::dict d;
  d["id"] = e.id;
  d["text"] = e.text;
  d["token"] = e.has_token ? py::object(py::int_(e.token)) : py::object(py::none());
  d["finished"] = e.finished;
  d["finish_reason"] = e.finish_reason;
  d["prompt_tokens"] = e.prompt_tokens;
  d["completion_tokens"] = e.completion_tokens;
  d["cached_tokens"] = e.cached_tokens;
  return d;
}

struct OpenAiServer {
  std::unique_ptr<serve::LlmService> service;
  std::unique_ptr<serve::HttpServer> http;
};

}  // namespace

void bind_llm(py::module_& m) {
  py::module_ l = m.def_submodule("_llm", "Language models: GGUF files, generation, the OpenAI server");
  py::class_<Stream, std::shared_ptr<Stream>>(l, "Stream")
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__", [](Stream& s) -> std::string {
        // Waits in slices, checking for Ctrl-C between them: a KeyboardInterrupt
        // cancels the generation instead of waiting for its end.
        for (;;) {
          std::optional<std::string> piece;
          bool ready = false;
          {
            py::gil_scoped_release nogil;
            piece = s.next(std::chrono::milliseconds(100), ready);
          }
          if (ready) {
            if (!piece) throw py::stop_iteration();
            return *piece;
          }
          if (PyErr_CheckSignals() != 0) {
            {
              py::gil_scoped_release nogil;
              s.close();
            }
            throw py::error_already_set();
          }
        }
      })
      .def("close", [](Stream& s) { py::gil_scoped_release nogil; s.close(); })
      .def_property_readonly("result", &Stream::result, "finish_reason, tokens, prompt_tokens and timings, at the end");

  py::class_<PyScheduler>(l, "Scheduler", "Many requests batched on one LLM's engine (Note [Batching from Python])")
      .def(py::init([](std::shared_ptr<LLM> lm, double max_wait_seconds, int64_t lookup_tokens) {
             llm::SchedulerOptions o;
             o.max_wait_seconds = max_wait_seconds;
             o.lookup_tokens = lookup_tokens;
             TS_CHECK(max_wait_seconds >= 0 && lookup_tokens >= 0,
                      "Scheduler: max_wait_seconds and lookup_tokens must be 0 or more");
             auto p = std::make_unique<PyScheduler>();
             p->lm = lm;
             p->sched = std::make_unique<llm::Scheduler>(*lm->engine, lm->tokenizer, o);
             return p;
           }),
           py::arg("llm"), py::kw_only(), py::arg("max_wait_seconds") = 0.0, py::arg("lookup_tokens") = 0)
      .def("submit", [](PyScheduler& s, py::handle prompt, const py::kwargs& kw) {
        std::vector<int32_t> ids = py::isinstance<py::str>(prompt)
                                       ? s.lm->tokenizer.encode(prompt.cast<std::string>(), true, false)
                                       : prompt.cast<std::vector<int32_t>>();
        llm::RequestOptions o = request_options_of(kw);
        py::gil_scoped_release nogil;
        std::lock_guard<std::mutex> busy(s.lm->busy);
        return s.sched->submit(std::move(ids), o);
      }, py::arg("prompt"), "Queues a request (a prompt's text or token ids, and generate()'s options plus priority); "
                            "returns its id.")
      .def("cancel", [](PyScheduler& s, int64_t id) {
        py::gil_scoped_release nogil;
        std::lock_guard<std::mutex> busy(s.lm->busy);
        s.sched->cancel(id);
      }, py::arg("id"))
      .def("step", [](PyScheduler& s) {
        std::vector<llm::RequestEvent> events;
        {
          py::gil_scoped_release nogil;
          std::lock_guard<std::mutex> busy(s.lm->busy);
          events = s.sched->step();
        }
        py::list out;
        for (const auto& e : events) out.append(event_object(e));
        return out;
      }, "One batched step: a dict per request that made something (id, text, token, finished, finish_reason, "
         "prompt_tokens, completion_tokens, cached_tokens).")
      .def("has_work", [](const PyScheduler& s) {
        py::gil_scoped_release nogil;
        std::lock_guard<std::mutex> busy(s.lm->busy);
        return s.sched->has_work();
      })
      .def("stats", [](const PyScheduler& s) {
        llm::SchedulerStats st;
        {
          py::gil_scoped_release nogil;
          std::lock_guard<std::mutex> busy(s.lm->busy);
          st = s.sched->stats();
        }
        py::dict d;
        d["running"] = st.running;
        d["waiting"] = st.waiting;
        d["preemptions"] = st.preemptions;
        d["prompt_tokens"] = st.prompt_tokens;
        d["generated_tokens"] = st.generated_tokens;
        d["steps"] = st.steps;
        d["prefix_hits"] = st.prefix_hits;
        d["draft_tokens"] = st.draft_tokens;
        d["accepted_tokens"] = st.accepted_tokens;
        return d;
      });

  py::class_<LLM, std::shared_ptr<LLM>>(l, "LLM")
      .def(py::init([](const std::string& path, int64_t context, int64_t kv_memory, int64_t max_sequences, int threads,
                       const std::string& weights) {
             auto lm = std::make_shared<LLM>();
             const auto type = llm::ggml_type_from_name(weights);
             TS_CHECK(type, "load: weights '", weights, "' is not F32, F16, BF16, Q8_0 or Q4_0");
             py::gil_scoped_release nogil;
             train::LanguageModel loaded = train::load_language_model(path, *type, "load");
             lm->model = std::move(loaded.model);
             lm->tokenizer = std::move(loaded.tokenizer);
             lm->chat_template = std::move(loaded.chat_template);
             lm->engine_options.context = context;
             lm->engine_options.kv_memory = kv_memory;
             lm->engine_options.max_sequences = max_sequences;
             lm->engine_options.threads = threads;
             lm->engine = std::make_unique<llm::Engine>(lm->model, lm->engine_options);
             lm->path = path;
             return lm;
           }),
           py::arg("path"), py::arg("context") = 0, py::arg("kv_memory") = 0, py::arg("max_sequences") = 4,
           py::arg("threads") = 0, py::arg("weights") = "F32")
      .def_property_readonly("architecture", [](const LLM& lm) { return lm.model->spec().arch; })
      .def_property_readonly("vocab_size", [](const LLM& lm) { return lm.tokenizer.size(); })
      .def_property_readonly("context", [](const LLM& lm) { return lm.model->spec().context; })
      .def_property_readonly("chat_template", [](const LLM& lm) { return lm.chat_template; })
      .def("tokenize", [](const LLM& lm, const std::string& text, bool add_special, bool parse_special) {
        return lm.tokenizer.encode(text, add_special, parse_special);
      }, py::arg("text"), py::arg("add_special") = true, py::arg("parse_special") = false)
      .def("detokenize", [](const LLM& lm, const std::vector<int32_t>& ids, bool remove_special) {
        for (int32_t id : ids)
          TS_CHECK(id >= 0 && id < lm.tokenizer.size(), "detokenize: token ", id, " is outside the vocabulary [0, ",
                   lm.tokenizer.size(), ")");
        return py::bytes(lm.tokenizer.decode(ids, remove_special));
      }, py::arg("ids"), py::arg("remove_special") = true)
      .def("stream", [](const std::shared_ptr<LLM>& lm, const std::string& prompt, const py::kwargs& kw) {
        std::vector<int32_t> ids = lm->tokenizer.encode(prompt, true, false);
        return start(lm, std::move(ids), kw);
      }, py::arg("prompt"), "Generation from `prompt` as an iterator of text pieces (sampling as keywords).")
      .def("stream_chat", [](const std::shared_ptr<LLM>& lm, py::handle messages, const std::string& template_source,
                             const py::kwargs& kw) {
        std::string source = template_source.empty() ? lm->chat_template : template_source;
        py::kwargs opts = kw;
        if (source.empty()) {
          source = llm::kPlainChatTemplate;
          py::list stop;
          if (opts.contains("stop")) {
            py::object s = opts["stop"];
            if (py::isinstance<py::str>(s)) stop.append(s);
            else for (py::handle h : s) stop.append(h);
          }
          stop.append(py::str(llm::kPlainChatStop));
          opts["stop"] = stop;
        }
        const llm::ChatTemplate tmpl(source);
        const llm::RenderedChat chat = llm::render_chat(tmpl, json_of(messages), true, lm->tokenizer);
        std::vector<int32_t> ids = lm->tokenizer.encode(chat.text, true, true, chat.content_spans);
        return start(lm, std::move(ids), opts);
      }, py::arg("messages"), py::arg("chat_template") = "");

  py::class_<OpenAiServer>(l, "OpenAIServer")
      .def(py::init([](const std::string& path, const std::string& name, const std::string& host, int port,
                       const std::string& api_key, int64_t max_sequences, int64_t context) {
             auto srv = std::make_unique<OpenAiServer>();
             serve::LlmServiceOptions so;
             so.model_name = name;
             so.api_key = api_key;
             srv->service = std::make_unique<serve::LlmService>(so);
             serve::LlmModel lm;
             {
               py::gil_scoped_release nogil;
               train::LanguageModel loaded = train::load_language_model(path, llm::GgmlType::F32, "OpenAIServer");
               lm.model = std::move(loaded.model);
               lm.tokenizer = std::move(loaded.tokenizer);
               lm.chat_template = std::move(loaded.chat_template);
             }
             lm.engine.max_sequences = max_sequences;
             lm.engine.context = context;
             srv->service->load(std::move(lm));
             serve::HttpServerOptions h;
             h.host = host;
             h.port = port;
             serve::LlmService* svc = srv->service.get();
             srv->http = std::make_unique<serve::HttpServer>(
                 [svc](serve::HttpRequest r, serve::HttpExchange& x) { svc->handle(std::move(r), x); },
                 svc->max_body_bytes(), h);
             return srv;
           }),
           py::arg("path"), py::arg("name") = "model", py::arg("host") = "127.0.0.1", py::arg("port") = 8000,
           py::arg("api_key") = "", py::arg("max_sequences") = 16, py::arg("context") = 0)
      .def_property_readonly("port", [](const OpenAiServer& s) { return s.http ? s.http->port() : 0; })
      .def("stop", [](OpenAiServer& s) {
        py::gil_scoped_release nogil;
        if (s.http) s.http->stop();
        if (s.service) s.service->stop();
        s.http.reset();
        s.service.reset();
      });
}

}  // namespace tessera::python
