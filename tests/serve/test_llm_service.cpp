// The OpenAI-compatible LLM service: every route through a fake exchange
// (no sockets), its answers checked against llm::generate run alone, and
// over real HTTP for the chunked event stream.
#include <gtest/gtest.h>

#include <httplib.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "../llm/llm_fixture.h"
#include "tessera/llm/generate.h"
#include "tessera/llm/llama_gguf.h"
#include "tessera/llm/lora.h"
#include "tessera/llm/lora_adapter.h"
#include "tessera/nn/init.h"
#include "tessera/autograd/grad_mode.h"
#include "test_util.h"
#include "tessera/serve/http_server.h"
#include "tessera/serve/llm_service.h"
#include "slow_clients.h"

using namespace tessera;
using namespace tessera::serve;
using json = nlohmann::json;

namespace {

// Records the answer; the client "disconnects" after `gone_after` writes
// (or at once when 0; never when negative).
struct FakeExchange : HttpExchange {
  int status = 0;
  std::string content_type, body;
  HttpHeaders headers;
  bool streamed = false, ended = false;
  int writes = 0, gone_after = -1;

  bool send(HttpResponse r) override {
    status = r.status;
    content_type = r.content_type;
    headers = r.headers;
    body = r.body;
    return true;
  }
  bool begin_stream(int s, const std::string& ct, const HttpHeaders& h) override {
    status = s;
    content_type = ct;
    headers = h;
    streamed = true;
    return true;
  }
  bool write(std::string_view d) override {
    body += d;
    ++writes;
    return !client_gone();
  }
  bool end_stream() override {
    ended = true;
    return true;
  }
  bool client_gone() override { return gone_after >= 0 && writes >= gone_after; }
  json json_body() const { return json::parse(body); }
  std::string header(const std::string& k) const {
    for (const auto& [a, b] : headers)
      if (a == k) return b;
    return "";
  }
};

// The data lines of an event stream, in order ("[DONE]" included).
std::vector<std::string> events(const std::string& body) {
  std::vector<std::string> out;
  size_t at = 0;
  for (size_t end; (end = body.find("\n\n", at)) != std::string::npos; at = end + 2) {
    const std::string e = body.substr(at, end - at);
    EXPECT_EQ(e.rfind("data: ", 0), 0u) << e;
    out.push_back(e.substr(6));
  }
  EXPECT_EQ(at, body.size()) << "the stream ends inside an event";
  return out;
}

FakeExchange call(LlmService& s, const std::string& method, const std::string& path, const std::string& body = "",
                  std::map<std::string, std::string> headers = {}, int gone_after = -1) {
  HttpRequest r;
  r.method = method;
  r.path = path;
  r.body = body;
  r.headers = std::move(headers);
  FakeExchange x;
  x.gone_after = gone_after;
  s.handle(std::move(r), x);
  return x;
}
FakeExchange post(LlmService& s, const std::string& path, const json& body, int gone_after = -1) {
  return call(s, "POST", path, body.dump(), {}, gone_after);
}

LlmModel fixture_model(int64_t kv_blocks = 0, int64_t layers = 1, int64_t dim = 64, int64_t context = 128) {
  tessera::testing::Fixture f = tessera::testing::fixture(nullptr, layers, dim, context);
  LlmModel m;
  m.model = f.model;
  m.tokenizer = f.tok;
  m.engine.max_sequences = 4;
  m.engine.max_batch_tokens = 64;
  m.engine.prefix_caching = true;  // as serve-llm runs by default
  if (kv_blocks) m.engine.kv_memory = kv_blocks * 16 * 2 * 2 * dim * layers;  // blocks of 16 tokens, K and V in f16
  return m;
}

// The same request run alone through llm::generate.
llm::GenerateResult solo(const LlmModel& m, const std::vector<int32_t>& prompt, llm::SamplingParams p,
                         int64_t max_tokens, uint64_t choice = 0) {
  llm::Engine e(m.model, {.max_sequences = 1});
  llm::GenerateOptions o;
  o.sampling = p;
  o.max_tokens = max_tokens;
  o.choice = choice;
  o.ignore_eos = true;
  llm::GenerateResult r = llm::generate(e, m.tokenizer, prompt, o);
  // As JSON carries it: each byte that is not UTF-8 becomes U+FFFD.
  r.text = json::parse(json(r.text).dump(-1, ' ', false, json::error_handler_t::replace)).get<std::string>();
  return r;
}

llm::SamplingParams openai_defaults(float temperature, uint64_t seed) {
  llm::SamplingParams p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = 1;
  p.min_p = 0;
  p.seed = seed;
  return p;
}

// Waits (up to 2 s) until every cache block is free and nothing runs.
bool drains(LlmService& s) {
  for (int i = 0; i < 200; ++i) {
    const llm::SchedulerStats st = s.stats();
    if (st.running == 0 && st.waiting == 0 && s.free_blocks() == s.total_blocks()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// `tessera serve-llm --draft`: a draft model of the same vocabulary speeds
// decoding without changing greedy text; one of another vocabulary is an
// error that names the first token that differs.
TEST(LlmServiceCli, ADraftModelKeepsGreedyText) {
  const std::string root = tessera::testing::scratch_dir("serve_llm_draft");
  std::filesystem::create_directories(root);
  nn::zoo::Llama* llama = nullptr;
  tessera::testing::Fixture f = tessera::testing::fixture(&llama);
  llm::save_llama_gguf(*llama, root + "/tiny.gguf", {.type = llm::GgmlType::F32, .tokenizer = &f.tok});
  tessera::testing::Fixture d = tessera::testing::fixture(&llama, 1, 32);  // another model, the same vocabulary
  llm::save_llama_gguf(*llama, root + "/draft.gguf", {.type = llm::GgmlType::F32, .tokenizer = &d.tok});
  const llm::Tokenizer other = tessera::testing::with_token(d.tok, 200, "zz");
  llm::save_llama_gguf(*llama, root + "/other.gguf", {.type = llm::GgmlType::F32, .tokenizer = &other});

  // The same greedy completion from a server with the draft and one without.
  std::vector<std::string> texts;
  for (bool draft : {true, false}) {
    std::vector<std::string> args = {"serve-llm", root + "/tiny.gguf", "--port", "0", "--threads", "1",
                                     "--max-seqs", "4", "--max-batched-tokens", "64"};
    if (draft) args.insert(args.end(), {"--draft", root + "/draft.gguf", "--draft-tokens", "4"});
    tessera::testing::CliProcess server = tessera::testing::start_cli(args);
    ASSERT_TRUE(server.read_until("KV cache:")) << server.log;
    if (draft)
      EXPECT_NE(server.log.find("draft model: " + root + "/draft.gguf, up to 4 tokens"), std::string::npos) << server.log;
    httplib::Client c("127.0.0.1", server.port());
    const json req = {{"prompt", "abcab cabca abcab"}, {"max_tokens", 40}, {"temperature", 0}, {"ignore_eos", true}};
    auto res = c.Post("/v1/completions", req.dump(), "application/json");
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    texts.push_back(json::parse(res->body)["choices"][0]["text"]);
    auto metrics = c.Get("/metrics");
    ASSERT_TRUE(metrics);
    EXPECT_EQ(metrics->body.find("tessera:spec_decode_num_draft_tokens_total{model_name=\"tiny\"} ") != std::string::npos,
              draft) << metrics->body;
    EXPECT_EQ(server.stop(), 0) << server.log;
  }
  EXPECT_EQ(texts[0], texts[1]);

  const tessera::testing::CliRun bad =
      tessera::testing::run_cli({"serve-llm", root + "/tiny.gguf", "--port", "0", "--draft", root + "/other.gguf"});
  EXPECT_NE(bad.exit_code, 0) << bad.output;
  EXPECT_NE(bad.output.find("cannot draft for " + root + "/tiny.gguf: token 200 of the draft model ('zz')"),
            std::string::npos) << bad.output;
  std::filesystem::remove_all(root);
}

}  // namespace

TEST(LlmService, HealthIsUnavailableUntilTheModelLoads) {
  LlmService s;
  FakeExchange h = call(s, "GET", "/health");
  EXPECT_EQ(h.status, 503);
  EXPECT_EQ(h.header("Retry-After"), "1");
  EXPECT_EQ(call(s, "GET", "/metrics").status, 200);
  FakeExchange m = call(s, "GET", "/v1/models");
  EXPECT_EQ(m.status, 503);
  EXPECT_EQ(m.json_body()["error"]["type"], "server_error");
  s.load(fixture_model());
  EXPECT_EQ(call(s, "GET", "/health").status, 200);
  const json models = call(s, "GET", "/v1/models").json_body();
  EXPECT_EQ(models["data"][0]["id"], "model");
  EXPECT_EQ(models["data"][0]["max_model_len"], 128);
}

// serve-llm's server under a thousand slow clients: /health answers within
// a second (Note [Slow clients]).
TEST(LlmService, SlowClientsCostNoThreadAndAnAddressPastItsCapIsRefused) {
  LlmService s;
  s.load(fixture_model());
  HttpServer server([&s](HttpRequest r, HttpExchange& x) { s.handle(std::move(r), x); }, s.max_body_bytes(),
                    {.port = 0, .threads = 4, .header_timeout_s = 3, .body_timeout_s = 3,
                     .max_connections_per_client = 8});
  tessera::testing::expect_slow_clients_cost_no_thread(server.port(), "/health");
  server.stop();
}

TEST(LlmService, GreedyCompletionEqualsItsSoloRun) {
  LlmService s;
  LlmModel m = fixture_model();
  const LlmModel ref = m;
  s.load(std::move(m));
  const FakeExchange x = post(s, "/v1/completions", {{"model", "model"}, {"prompt", "abc ab"}, {"max_tokens", 20},
                                                     {"temperature", 0}, {"ignore_eos", true}});
  ASSERT_EQ(x.status, 200) << x.body;
  const json j = x.json_body();
  const std::vector<int32_t> prompt = ref.tokenizer.encode("abc ab", true, false);
  const llm::GenerateResult r = solo(ref, prompt, openai_defaults(0, 0), 20);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["text"], r.text);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["prompt_tokens"], prompt.size());
  EXPECT_EQ(j["usage"]["completion_tokens"], 20);
  EXPECT_EQ(j["usage"]["total_tokens"], prompt.size() + 20);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_TRUE(drains(s));
}

TEST(LlmService, StreamCarriesTheSameTextAsOneAnswer) {
  LlmService s;
  s.load(fixture_model());
  json req = {{"prompt", "ab"}, {"max_tokens", 24}, {"seed", 7}, {"ignore_eos", true}, {"stop", "ca"}};
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    SCOPED_TRACE(path);
    const bool chat = std::string(path) == "/v1/chat/completions";
    if (chat) {
      req.erase("prompt");
      req["messages"] = {{{"role", "system"}, {"content", "be brief"}}, {{"role", "user"}, {"content", "abc"}}};
    }
    const json whole = post(s, path, req).json_body();
    req["stream"] = true;
    req["stream_options"] = {{"include_usage", true}};
    const FakeExchange x = post(s, path, req);
    req.erase("stream");
    req.erase("stream_options");
    ASSERT_TRUE(x.streamed);
    EXPECT_TRUE(x.ended);
    EXPECT_EQ(x.content_type, "text/event-stream");
    const std::vector<std::string> ev = events(x.body);
    ASSERT_GE(ev.size(), 3u);
    EXPECT_EQ(ev.back(), "[DONE]");
    std::string text, finish;
    json usage;
    for (size_t i = 0; i + 1 < ev.size(); ++i) {
      const json c = json::parse(ev[i]);
      EXPECT_EQ(c["id"], json::parse(ev[0])["id"]) << "one id for every chunk";
      EXPECT_EQ(c["object"], chat ? "chat.completion.chunk" : "text_completion");
      if (!c["usage"].is_null()) {
        EXPECT_TRUE(c["choices"].empty());
        EXPECT_EQ(i, ev.size() - 2) << "the usage chunk comes last";
        usage = c["usage"];
        continue;
      }
      const json& ch = c["choices"][0];
      if (chat && i == 0) EXPECT_EQ(ch["delta"]["role"], "assistant") << "the role chunk first";
      if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
      else if (chat && ch["delta"].contains("content")) text += ch["delta"]["content"].get<std::string>();
      else if (!chat) text += ch["text"].get<std::string>();
    }
    const json& w = whole["choices"][0];
    EXPECT_EQ(text, chat ? w["message"]["content"] : w["text"]);
    EXPECT_EQ(finish, w["finish_reason"]);
    // The same prompt again: now from the prefix cache.
    EXPECT_EQ(usage["prompt_tokens_details"]["cached_tokens"].get<int64_t>() % 16, 0);
    usage.erase("prompt_tokens_details");
    json whole_usage = whole["usage"];
    whole_usage.erase("prompt_tokens_details");
    EXPECT_EQ(usage, whole_usage);
    EXPECT_EQ(text.find("ca"), std::string::npos) << "the stop string never shows";
  }
  EXPECT_TRUE(drains(s));
}

TEST(LlmService, ChoicesAreTheirSoloRuns) {
  LlmService s;
  LlmModel m = fixture_model();
  const LlmModel ref = m;
  s.load(std::move(m));
  const json j = post(s, "/v1/completions", {{"prompt", {"a", "b c"}}, {"n", 3}, {"max_tokens", 12}, {"seed", 11},
                                             {"ignore_eos", true}, {"logprobs", 2}})
                     .json_body();
  ASSERT_EQ(j["choices"].size(), 6u);
  for (int p = 0; p < 2; ++p)
    for (int i = 0; i < 3; ++i) {
      const json& c = j["choices"][p * 3 + i];
      EXPECT_EQ(c["index"], p * 3 + i);
      const llm::GenerateResult r = solo(ref, ref.tokenizer.encode(p ? "b c" : "a", true, false),
                                         openai_defaults(1, 11), 12, static_cast<uint64_t>(i));
      EXPECT_EQ(c["text"], r.text) << "prompt " << p << " choice " << i;
      ASSERT_EQ(c["logprobs"]["token_logprobs"].size(), r.logprobs.size());
      for (size_t t = 0; t < r.logprobs.size(); ++t) {
        EXPECT_FLOAT_EQ(c["logprobs"]["token_logprobs"][t].get<float>(), r.logprobs[t]);
        // Keyed by the token's text: tokens of the same text (a byte and a
        // piece, or two bytes JSON writes as U+FFFD) share one entry.
        const json& top = c["logprobs"]["top_logprobs"][t];
        EXPECT_TRUE(top.size() == 1u || top.size() == 2u) << top;
      }
    }
  EXPECT_NE(j["choices"][0]["text"], j["choices"][1]["text"]);
  EXPECT_EQ(j["usage"]["completion_tokens"], 6 * 12);
}

TEST(LlmService, ASharedSystemPromptIsReusedAndReported) {
  LlmService s;
  LlmModel m = fixture_model();
  const LlmModel ref = m;
  s.load(std::move(m));
  // "system: " and 70 letters, "\nuser: ", then the question: the first 80
  // tokens (five full blocks) are the same for every question.
  const std::string system(70, 'a');
  auto ask = [&](const std::string& question, const std::string& salt = "") {
    json req = {{"messages", {{{"role", "system"}, {"content", system}}, {{"role", "user"}, {"content", question}}}},
                {"max_tokens", 6}, {"temperature", 0}, {"ignore_eos", true}};
    if (!salt.empty()) req["cache_salt"] = salt;
    return post(s, "/v1/chat/completions", req).json_body();
  };
  const json first = ask("abc");
  EXPECT_EQ(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  const json second = ask("cab");
  EXPECT_EQ(second["usage"]["prompt_tokens_details"]["cached_tokens"], 80);
  EXPECT_EQ(ask("abc")["choices"][0]["message"]["content"], first["choices"][0]["message"]["content"]);
  EXPECT_EQ(ask("abc", "tenant-2")["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  // n > 1: the other choices fork the first one's prompt.
  const json three = post(s, "/v1/completions", {{"prompt", std::string(40, 'b')}, {"n", 3}, {"max_tokens", 4},
                                                 {"seed", 3}}).json_body();
  EXPECT_EQ(three["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  const std::string metrics = call(s, "GET", "/metrics").body;
  EXPECT_NE(metrics.find("tessera:prefix_cache_hits_total{model_name=\"model\"} "), std::string::npos) << metrics;
  EXPECT_GE(s.stats().prefix_hits, 2 * 80 + 2 * 40);
  EXPECT_TRUE(drains(s));
}

TEST(LlmService, EmbeddingsAsFloatsOrBase64) {
  LlmService s;
  s.load(fixture_model());
  const json req = {{"input", {"abc", "cab ab"}}, {"model", "model"}};
  const FakeExchange x = post(s, "/v1/embeddings", req);
  ASSERT_EQ(x.status, 200) << x.body;
  const json f = x.json_body();
  EXPECT_EQ(f["object"], "list");
  ASSERT_EQ(f["data"].size(), 2u);
  json b64 = req;
  b64["encoding_format"] = "base64";
  const json b = post(s, "/v1/embeddings", b64).json_body();
  for (int i = 0; i < 2; ++i) {
    const std::vector<float> v = f["data"][i]["embedding"];
    EXPECT_EQ(v.size(), 64u);
    double norm = 0;
    for (float y : v) norm += static_cast<double>(y) * y;
    EXPECT_NEAR(norm, 1.0, 1e-5);
    // The same floats, little-endian, base64-encoded.
    const std::string text = b["data"][i]["embedding"];
    EXPECT_EQ(text, openai::base64({reinterpret_cast<const char*>(v.data()), v.size() * 4}));
  }
  EXPECT_NE(f["data"][0]["embedding"], f["data"][1]["embedding"]);
  EXPECT_GT(f["usage"]["prompt_tokens"].get<int64_t>(), 4);
  // Pooling by request; errors by name.
  json mean = req;
  mean["pooling"] = "mean";
  EXPECT_NE(post(s, "/v1/embeddings", mean).json_body()["data"][0]["embedding"], f["data"][0]["embedding"]);
  EXPECT_EQ(post(s, "/v1/embeddings", {{"input", "a"}, {"dimensions", 8}}).json_body()["error"]["param"], "dimensions");
  EXPECT_EQ(post(s, "/v1/embeddings", {{"input", std::string(200, 'a')}}).json_body()["error"]["code"],
            "context_length_exceeded");
  EXPECT_EQ(post(s, "/v1/embeddings", {{"input", ""}}).status, 400);
  EXPECT_EQ(openai::base64("Ma"), "TWE=");
  EXPECT_EQ(openai::base64("Man"), "TWFu");
  EXPECT_EQ(openai::base64("M"), "TQ==");
  EXPECT_TRUE(drains(s));
}

TEST(LlmService, PromptLookupKeepsTheText) {
  LlmService s;
  LlmModel m = fixture_model();
  const LlmModel ref = m;
  m.scheduler.lookup_tokens = 4;
  m.scheduler.speculate_by_cost = false;  // drafts on the tiny model too, where they would not pay
  m.engine.max_logit_rows = 4 * 5;
  s.load(std::move(m));
  const std::string text = "abcab cabca abcab cabca abcab";
  for (const json& sampling : {json{{"temperature", 0}}, json{{"temperature", 1}, {"seed", 5}}}) {
    json req = {{"prompt", text}, {"max_tokens", 30}, {"ignore_eos", true}};
    req.update(sampling);
    const json j = post(s, "/v1/completions", req).json_body();
    const llm::GenerateResult want =
        solo(ref, ref.tokenizer.encode(text, true, false),
             openai_defaults(sampling["temperature"].get<float>(), sampling.value("seed", 0)), 30);
    EXPECT_EQ(j["choices"][0]["text"], want.text) << sampling;
  }
  // Streamed, a step's kept drafts come as one chunk (Note [One chunk per
  // step]): its logprobs carry each of their tokens, the text is the same.
  const json greedy = {{"prompt", text}, {"max_tokens", 30}, {"ignore_eos", true}, {"temperature", 0}, {"logprobs", 0}};
  const json whole = post(s, "/v1/completions", greedy).json_body();
  json streamed = greedy;
  streamed["stream"] = true;
  const std::vector<std::string> ev = events(post(s, "/v1/completions", streamed).body);
  std::string got;
  size_t tokens = 0, most = 0;
  for (size_t i = 0; i + 1 < ev.size(); ++i) {
    const json ch = json::parse(ev[i])["choices"][0];
    got += ch["text"].get<std::string>();
    if (ch["logprobs"].is_null()) continue;
    const size_t n = ch["logprobs"]["tokens"].size();
    ASSERT_EQ(ch["logprobs"]["token_logprobs"].size(), n);
    ASSERT_EQ(ch["logprobs"]["text_offset"].size(), n);
    tokens += n;
    most = std::max(most, n);
  }
  EXPECT_EQ(got, whole["choices"][0]["text"]);
  EXPECT_EQ(static_cast<int64_t>(tokens), whole["usage"]["completion_tokens"].get<int64_t>());
  ASSERT_GT(s.stats().accepted_tokens, 0);
  EXPECT_GT(most, 1u) << "kept drafts arrive together";
  const std::string metrics = call(s, "GET", "/metrics").body;
  EXPECT_NE(metrics.find("tessera:spec_decode_num_draft_tokens_total{model_name=\"model\"} "), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("tessera:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"model\",position=\"3\"} "),
            std::string::npos) << metrics;
  EXPECT_GT(s.stats().draft_tokens, 0);
  EXPECT_TRUE(drains(s));
}

// Structured output: response_format json_schema and json_object, and a
// GBNF grammar, give text that parses (and validates) whenever it stops;
// what cannot be enforced is a 400 naming it.
TEST(LlmService, StructuredOutputAlwaysParses) {
  LlmService s;
  s.load(fixture_model());
  const json schema = {{"type", "object"},
                       {"properties", {{"ok", {{"type", "boolean"}}}, {"n", {{"type", "integer"}}}}},
                       {"required", {"ok", "n"}},
                       {"additionalProperties", false}};
  const json messages = {{{"role", "user"}, {"content", "abc"}}};
  for (const json& sampling : {json{{"temperature", 0}}, json{{"temperature", 1}, {"seed", 3}}}) {
    json req = {{"messages", messages}, {"max_tokens", 300}, {"n", 2},
                {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "r"}, {"schema", schema}}}}}};
    req.update(sampling);
    const json j = post(s, "/v1/chat/completions", req).json_body();
    ASSERT_TRUE(j.contains("choices")) << j;
    for (const json& c : j["choices"]) {
      ASSERT_EQ(c["finish_reason"], "stop") << c;
      const json v = json::parse(c["message"]["content"].get<std::string>());
      EXPECT_TRUE(v["ok"].is_boolean() && v["n"].is_number_integer() && v.size() == 2) << v;
    }
    req["response_format"] = {{"type", "json_object"}};
    const json o = post(s, "/v1/chat/completions", req).json_body();
    for (const json& c : o["choices"])
      if (c["finish_reason"] == "stop") EXPECT_TRUE(json::parse(c["message"]["content"].get<std::string>()).is_object());
  }
  // response_format on the completions route too (as vLLM takes it).
  const json c = post(s, "/v1/completions", {{"prompt", "ab"}, {"max_tokens", 300}, {"temperature", 0},
                                             {"response_format", {{"type", "json_schema"},
                                              {"json_schema", {{"name", "r"}, {"schema", schema}}}}}}).json_body();
  ASSERT_EQ(c["choices"][0]["finish_reason"], "stop") << c;
  EXPECT_TRUE(json::parse(c["choices"][0]["text"].get<std::string>()).contains("ok")) << c;
  // A GBNF grammar on the completions route.
  const json g = post(s, "/v1/completions", {{"prompt", "ab"}, {"max_tokens", 20}, {"temperature", 0},
                                             {"grammar", "root ::= (\"yes\" | \"no\") \".\""}}).json_body();
  EXPECT_TRUE(g["choices"][0]["text"] == "yes." || g["choices"][0]["text"] == "no.") << g;
  EXPECT_EQ(g["choices"][0]["finish_reason"], "stop");
  // What cannot be enforced, named.
  auto error = [&](const json& body, const std::string& path) {
    const FakeExchange x = post(s, path, body);
    EXPECT_EQ(x.status, 400) << x.body;
    return json::parse(x.body)["error"];
  };
  json e = error({{"messages", messages}, {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "r"},
                 {"schema", {{"type", "string"}, {"pattern", "^a$"}}}}}}}}, "/v1/chat/completions");
  EXPECT_NE(e["message"].get<std::string>().find("the keyword 'pattern' is not supported"), std::string::npos) << e;
  EXPECT_EQ(e["param"], "response_format");
  e = error({{"prompt", "a"}, {"grammar", "root ::= root \"a\""}}, "/v1/completions");
  EXPECT_NE(e["message"].get<std::string>().find("left-recursive"), std::string::npos) << e;
  EXPECT_EQ(e["param"], "grammar");
  e = error({{"messages", messages}, {"grammar", "root ::= \"a\""}, {"response_format", {{"type", "json_object"}}}},
            "/v1/chat/completions");
  EXPECT_NE(e["message"].get<std::string>().find("give one"), std::string::npos) << e;
  e = error({{"messages", messages}, {"response_format", {{"type", "yaml"}}}}, "/v1/chat/completions");
  EXPECT_NE(e["message"].get<std::string>().find("is not one of"), std::string::npos) << e;
  EXPECT_TRUE(drains(s));
}

// A Hermes-style template (Note [Tool call formats]), written for these tests.
const char* kToolTemplate =
    "{%- if tools %}system: <tools>{% for t in tools %}{{ t.function | tojson }}{% endfor %}</tools>\n{% endif %}"
    "{% for m in messages %}{{ m.role }}: {% if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>\n"
    "{{ c.function | tojson }}\n</tool_call>{% endfor %}{% else %}{{ m.content }}{% endif %}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}";

const json kWeatherTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "The weather now.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8},
      "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"],
      "additionalProperties": false}}},
  {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}}
])");

// The tool calls of a streamed chat answer, its deltas joined by index.
json streamed_tool_calls(const FakeExchange& x, std::string* finish_reason) {
  json calls = json::array();
  for (const std::string& e : events(x.body)) {
    if (e == "[DONE]") break;
    const json c = json::parse(e);
    if (c["choices"].empty()) continue;
    const json& choice = c["choices"][0];
    if (!choice["finish_reason"].is_null()) *finish_reason = choice["finish_reason"];
    if (!choice["delta"].contains("tool_calls")) continue;
    for (const json& d : choice["delta"]["tool_calls"]) {
      const size_t i = d["index"];
      if (d.contains("id")) {
        EXPECT_EQ(i, calls.size());
        calls.push_back({{"id", d["id"]}, {"type", d["type"]}, {"function", {{"name", d["function"]["name"]},
                                                                            {"arguments", ""}}}});
      }
      calls[i]["function"]["arguments"] =
          calls[i]["function"]["arguments"].get<std::string>() + d["function"]["arguments"].get<std::string>();
    }
  }
  return calls;
}

// tools with tool_choice "required" or a named function: every answer is a
// call of the tools asked for (forced by the grammar), arguments valid by
// their schema, the same streamed or not; "auto" finds calls in free text;
// history with calls and results renders; what cannot work is a 400.
TEST(LlmService, ToolCallsAreForcedParsedAndStreamed) {
  LlmModel m = fixture_model(0, 1, 64, 1024);
  m.chat_template = kToolTemplate;
  LlmService s;
  s.load(std::move(m));
  const json messages = {{{"role", "user"}, {"content", "Weather in Paris?"}}};
  auto request = [&](const json& choice, bool parallel) {
    return json{{"messages", messages}, {"tools", kWeatherTools}, {"tool_choice", choice}, {"max_tokens", 400},
                {"temperature", 1}, {"seed", 9}, {"parallel_tool_calls", parallel}};
  };
  const json named = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  for (const json& choice : {json("required"), named})
    for (bool parallel : {false, true}) {
      SCOPED_TRACE(choice.dump() + (parallel ? " parallel" : ""));
      json req = request(choice, parallel);
      req["n"] = 3;
      const json j = post(s, "/v1/chat/completions", req).json_body();
      ASSERT_TRUE(j.contains("choices")) << j;
      for (const json& c : j["choices"]) {
        // A random model may go on calling until max_tokens; its last call is then cut short.
        const bool cut = parallel && c["finish_reason"] == "length";
        if (!cut) ASSERT_EQ(c["finish_reason"], "tool_calls") << c;
        EXPECT_TRUE(c["message"]["content"].is_null()) << c;
        json calls = c["message"]["tool_calls"];
        ASSERT_GE(calls.size(), 1u + cut);
        if (cut) calls.erase(calls.size() - 1);
        if (!parallel) EXPECT_EQ(calls.size(), 1u);
        for (const json& call : calls) {
          EXPECT_EQ(call["id"].get<std::string>().rfind("call_", 0), 0u);
          EXPECT_EQ(call["type"], "function");
          const std::string name = call["function"]["name"];
          if (choice.is_object()) EXPECT_EQ(name, "get_weather");
          const json args = json::parse(call["function"]["arguments"].get<std::string>());
          if (name == "get_weather") {
            ASSERT_TRUE(args["city"].is_string()) << args;
            const std::string city = args["city"];
            EXPECT_LE(std::count_if(city.begin(), city.end(), [](char b) { return (b & 0xC0) != 0x80; }), 8) << args;
            EXPECT_TRUE(!args.contains("unit") || args["unit"] == "celsius" || args["unit"] == "fahrenheit") << args;
          } else {
            EXPECT_EQ(name, "now");
            EXPECT_EQ(args, json::object());
          }
        }
      }
      // The same request streamed: the deltas joined are the same calls.
      req["n"] = 1;
      const json one = post(s, "/v1/chat/completions", req).json_body();
      req["stream"] = true;
      std::string finish;
      const json streamed = streamed_tool_calls(post(s, "/v1/chat/completions", req), &finish);
      EXPECT_EQ(finish, one["choices"][0]["finish_reason"]);
      const json& calls = one["choices"][0]["message"]["tool_calls"];
      ASSERT_EQ(streamed.size(), calls.size());
      for (size_t i = 0; i < calls.size(); ++i) EXPECT_EQ(streamed[i]["function"], calls[i]["function"]);
    }
  // "auto": calls found in what the model writes (here a grammar makes it write one after some text).
  json req = request("auto", true);
  req["grammar"] = R"(root ::= "On it. <tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>")";
  json j = post(s, "/v1/chat/completions", req).json_body();
  EXPECT_EQ(j["choices"][0]["message"]["content"], "On it. ") << j;
  EXPECT_EQ(j["choices"][0]["message"]["tool_calls"][0]["function"], json({{"name", "now"}, {"arguments", "{}"}}));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
  // "none" and plain text: no calls.
  req["tool_choice"] = "none";
  j = post(s, "/v1/chat/completions", req).json_body();
  EXPECT_FALSE(j["choices"][0]["message"].contains("tool_calls")) << j;
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  // A conversation with a call and its result.
  json history = messages;
  history.push_back({{"role", "assistant"}, {"content", nullptr},
                     {"tool_calls", {{{"id", "call_1"}, {"type", "function"},
                                      {"function", {{"name", "get_weather"}, {"arguments", "{\"city\": \"Paris\"}"}}}}}}});
  history.push_back({{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "{\"celsius\": 21}"}});
  const FakeExchange h = post(s, "/v1/chat/completions", {{"messages", history}, {"tools", kWeatherTools},
                                                          {"max_tokens", 4}});
  EXPECT_EQ(h.status, 200) << h.body;
  const json tok = post(s, "/tokenize", {{"messages", history}}).json_body();
  ASSERT_TRUE(tok.contains("tokens")) << tok;
  const json text = post(s, "/detokenize", {{"tokens", tok["tokens"]}}).json_body();
  EXPECT_NE(text["prompt"].get<std::string>().find("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                                                   "{\"city\": \"Paris\"}}\n</tool_call>"), std::string::npos) << text;

  // What cannot work, named.
  auto error = [&](json body) {
    if (!body.contains("messages")) body["messages"] = messages;
    const FakeExchange x = post(s, "/v1/chat/completions", body);
    EXPECT_EQ(x.status, 400) << x.body;
    return x.json_body()["error"];
  };
  json e = error({{"tools", kWeatherTools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "f"}}}}}});
  EXPECT_EQ(e["param"], "tool_choice");
  e = error({{"tool_choice", "required"}});
  EXPECT_EQ(e["param"], "tool_choice");
  e = error({{"tools", kWeatherTools}, {"tool_choice", "required"}, {"response_format", {{"type", "json_object"}}}});
  EXPECT_NE(e["message"].get<std::string>().find("give one"), std::string::npos) << e;
  json tools = kWeatherTools;
  tools[0]["function"]["description"] = "ends with </s>";
  e = error({{"tools", tools}});
  EXPECT_NE(e["message"].get<std::string>().find("control token \"</s>\""), std::string::npos) << e;
  tools = kWeatherTools;
  tools[1]["function"]["name"] = "get weather";
  EXPECT_EQ(error({{"tools", tools}})["param"], "tools");
  tools = kWeatherTools;
  tools[0]["function"]["parameters"]["properties"]["city"]["format"] = "city";
  e = error({{"tools", tools}, {"tool_choice", "required"}});
  EXPECT_NE(e["message"].get<std::string>().find("the keyword 'format'"), std::string::npos) << e;
  history[2].erase("tool_call_id");
  EXPECT_EQ(error({{"messages", history}})["param"], "messages");
  EXPECT_TRUE(drains(s));

  // A model whose template cannot show tools refuses them rather than answer in prose.
  LlmService plain;
  plain.load(fixture_model());
  const FakeExchange x = post(plain, "/v1/chat/completions", {{"messages", messages}, {"tools", kWeatherTools}});
  EXPECT_EQ(x.status, 400);
  EXPECT_NE(x.body.find("never uses `tools`"), std::string::npos) << x.body;
}

// --lora NAME=PATH: /v1/models lists the adapter beside the model; a
// request naming it runs with it (here alongside requests for the base).
TEST(LlmService, LoraAdaptersAreServedByName) {
  nn::zoo::Llama* llama = nullptr;
  tessera::testing::fixture(&llama);
  llm::add_lora(*llama, {.rank = 4, .alpha = 8, .targets = {"q_proj", "v_proj", "up_proj"}});
  manual_seed(4);
  {
    NoGradGuard g;
    for (auto& [name, p] : llama->named_parameters())
      if (name.find("lora_B") != std::string::npos) nn::init::normal_(p, 0, 0.2);
  }
  const std::string file = std::filesystem::temp_directory_path() / ("tessera_serve_lora_" + std::to_string(getpid()) + ".gguf");
  llm::save_lora_gguf(*llama, file);
  LlmModel m = fixture_model();
  m.adapters.emplace_back("tuned", llm::LoraAdapter::load(file, m.model->spec()));
  std::filesystem::remove(file);
  LlmService s;
  s.load(std::move(m));
  const json models = call(s, "GET", "/v1/models").json_body();
  ASSERT_EQ(models["data"].size(), 2u) << models;
  EXPECT_EQ(models["data"][1]["id"], "tuned");
  EXPECT_EQ(models["data"][1]["parent"], "model");
  auto complete = [&](const std::string& model) {
    return post(s, "/v1/completions", {{"model", model}, {"prompt", "abc"}, {"max_tokens", 12}, {"temperature", 0},
                                       {"ignore_eos", true}}).json_body();
  };
  const json base = complete("model"), tuned = complete("tuned");
  EXPECT_EQ(tuned["model"], "tuned");
  EXPECT_NE(tuned["choices"][0]["text"], base["choices"][0]["text"]);
  // Under load, mixed with base requests, each answer is its solo text.
  std::vector<std::thread> clients;
  std::vector<json> answers(6);
  for (int i = 0; i < 6; ++i) clients.emplace_back([&, i] { answers[i] = complete(i % 2 ? "tuned" : "model"); });
  for (auto& t : clients) t.join();
  for (int i = 0; i < 6; ++i)
    EXPECT_EQ(answers[i]["choices"][0]["text"], (i % 2 ? tuned : base)["choices"][0]["text"]) << i;
  const FakeExchange x = post(s, "/v1/completions", {{"model", "other"}, {"prompt", "a"}});
  EXPECT_EQ(x.status, 404);
  EXPECT_NE(x.body.find("'tuned'"), std::string::npos) << x.body;
  EXPECT_EQ(post(s, "/v1/embeddings", {{"model", "tuned"}, {"input", "a"}}).status, 400);
  EXPECT_TRUE(drains(s));
}

TEST(LlmService, ChatLogprobsNameEachToken) {
  LlmService s;
  s.load(fixture_model());
  const json j = post(s, "/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "abc"}}}},
                                                  {"max_tokens", 6}, {"temperature", 0}, {"ignore_eos", true},
                                                  {"logprobs", true}, {"top_logprobs", 3}})
                     .json_body();
  const json& content = j["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 6u);
  std::string joined;
  for (const json& t : content) {
    ASSERT_EQ(t["top_logprobs"].size(), 3u);
    // Greedy: the chosen token is the most likely one.
    EXPECT_EQ(t["token"], t["top_logprobs"][0]["token"]);
    EXPECT_FLOAT_EQ(t["logprob"].get<float>(), t["top_logprobs"][0]["logprob"].get<float>());
    EXPECT_LE(t["logprob"].get<float>(), 0.f);
    std::string bytes;
    for (int b : t["bytes"]) bytes += static_cast<char>(b);
    joined += bytes;
  }
  EXPECT_EQ(json::parse(json(joined).dump(-1, ' ', false, json::error_handler_t::replace)),
            j["choices"][0]["message"]["content"]);
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["object"], "chat.completion");
}

TEST(LlmService, BadRequestsNameTheParameter) {
  LlmServiceOptions o;
  o.max_waiting = 1;
  LlmService s(o);
  s.load(fixture_model());
  struct Case {
    std::string path, body;
    int status;
    std::string param, code;
  };
  const std::string long_prompt(300, 'a');
  const std::vector<Case> cases = {
      {"/v1/completions", "{", 400, "", ""},
      {"/v1/completions", "[1]", 400, "", ""},
      {"/v1/completions", std::string(100, '[') + std::string(100, ']'), 400, "", ""},
      {"/v1/completions", R"({"prompt": "a", "temperature": 3})", 400, "temperature", ""},
      {"/v1/completions", R"({"prompt": "a", "n": 9})", 400, "n", ""},
      {"/v1/completions", R"({"prompt": "a", "max_tokens": 0})", 400, "max_tokens", ""},
      {"/v1/completions", R"({"prompt": "a", "stop": ["1", "2", "3", "4", "5"]})", 400, "stop", ""},
      {"/v1/completions", R"({"prompt": "a", "logit_bias": {"99999": 1}})", 400, "logit_bias", ""},
      {"/v1/completions", R"({"prompt": "a", "logit_bias": {"3": 101}})", 400, "logit_bias", ""},
      {"/v1/completions", R"({"prompt": [1, 2, 99999]})", 400, "prompt", ""},
      {"/v1/completions", R"({"prompt": "a", "best_of": 3})", 400, "best_of", ""},
      {"/v1/completions", R"({"prompt": "a", "frobnicate": 1})", 400, "frobnicate", ""},
      {"/v1/completions", R"({"max_tokens": 3})", 400, "prompt", ""},
      {"/v1/completions", R"({"prompt": "a", "model": "gpt-4"})", 404, "model", "model_not_found"},
      {"/v1/completions", "{\"prompt\": \"" + long_prompt + "\"}", 400, "prompt", "context_length_exceeded"},
      {"/v1/completions", R"({"prompt": ["a", "b"]})", 503, "", ""},  // 2 requests, 1 may wait
      {"/v1/chat/completions", R"({"messages": []})", 400, "messages", ""},
      {"/v1/chat/completions", R"({"messages": [{"role": "wizard", "content": "x"}]})", 400, "messages", ""},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", 400,
       "messages", ""},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", 400,
       "top_logprobs", ""},
      {"/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema"}})", 400,
       "response_format", ""},
      {"/v1/completions", R"({"prompt": "a", "grammar": "root ::= [a-"})", 400, "grammar", ""},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "stream_options": {}})", 400,
       "stream_options", ""},
      {"/v1/nothing", "{}", 404, "", ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.path + " " + c.body.substr(0, 80));
    const FakeExchange x = call(s, "POST", c.path, c.body);
    EXPECT_EQ(x.status, c.status) << x.body;
    const json e = x.json_body()["error"];
    EXPECT_FALSE(e["message"].get<std::string>().empty());
    EXPECT_EQ(e["type"], c.status == 503 ? "server_error" : c.status == 404 ? "not_found_error" : "invalid_request_error");
    EXPECT_EQ(e["param"], c.param.empty() ? json(nullptr) : json(c.param));
    EXPECT_EQ(e["code"], c.code.empty() ? json(nullptr) : json(c.code));
    if (c.status == 503) EXPECT_EQ(x.header("Retry-After"), "1");
  }
  EXPECT_EQ(call(s, "GET", "/v1/completions").status, 405);
  EXPECT_TRUE(drains(s));
}

TEST(LlmService, ApiKeyGuardsEveryRouteButHealth) {
  LlmServiceOptions o;
  o.api_key = "0123456789abcdef";
  LlmService s(o);
  s.load(fixture_model());
  EXPECT_EQ(call(s, "GET", "/health").status, 200);
  const FakeExchange no = call(s, "GET", "/v1/models");
  EXPECT_EQ(no.status, 401);
  EXPECT_EQ(no.header("WWW-Authenticate"), "Bearer");
  EXPECT_EQ(call(s, "GET", "/metrics", "", {{"authorization", "Bearer wrong"}}).status, 401);
  EXPECT_EQ(call(s, "GET", "/v1/models", "", {{"authorization", "Bearer 0123456789abcdef"}}).status, 200);
}

TEST(LlmService, TokenizeAndDetokenize) {
  LlmService s;
  LlmModel m = fixture_model();
  const llm::Tokenizer tok = m.tokenizer;
  s.load(std::move(m));
  const json t = post(s, "/tokenize", {{"prompt", "ab c\xc3\xa9"}}).json_body();
  EXPECT_EQ(t["tokens"].get<std::vector<int32_t>>(), tok.encode("ab c\xc3\xa9", true, false));
  EXPECT_EQ(t["count"], t["tokens"].size());
  // As llama.cpp detokenizes: after a BOS the SentencePiece space prefix stays.
  EXPECT_EQ(post(s, "/detokenize", {{"tokens", t["tokens"]}}).json_body()["prompt"],
            tok.decode(t["tokens"].get<std::vector<int32_t>>()));
  const json chat = post(s, "/tokenize", {{"messages", {{{"role", "user"}, {"content", "hi"}}}}}).json_body();
  EXPECT_EQ(chat["tokens"].get<std::vector<int32_t>>(), tok.encode("user: hi\nassistant:", true, true));
  EXPECT_EQ(post(s, "/detokenize", {{"tokens", {1, 100000}}}).status, 400);
}

TEST(LlmService, ADisconnectedClientsBlocksReturnAtOnce) {
  LlmService s;
  s.load(fixture_model(0, 4, 256));  // slow enough that 100 tokens outlast the client
  const json long_request = {{"prompt", "ab"}, {"max_tokens", 100}, {"ignore_eos", true}, {"temperature", 0}};
  // Streaming: the client goes away after its second chunk.
  json streamed = long_request;
  streamed["stream"] = true;
  const FakeExchange a = post(s, "/v1/completions", streamed, 2);
  EXPECT_LE(a.writes, 3);
  EXPECT_TRUE(drains(s));
  // Not streaming: gone before any answer; the wait notices within 100 ms.
  const auto t0 = std::chrono::steady_clock::now();
  const FakeExchange b = post(s, "/v1/completions", long_request, 0);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  EXPECT_TRUE(drains(s));
  const std::string metrics = call(s, "GET", "/metrics").body;
  EXPECT_NE(metrics.find("tessera:request_success_total{model_name=\"model\",finished_reason=\"abort\"} 2"),
            std::string::npos) << metrics;
}

TEST(LlmService, MetricsUseVllmNames) {
  LlmService s;
  s.load(fixture_model());
  ASSERT_EQ(post(s, "/v1/completions", {{"prompt", "a"}, {"max_tokens", 5}, {"ignore_eos", true}}).status, 200);
  const std::string m = call(s, "GET", "/metrics").body;
  for (const char* name :
       {"tessera:time_to_first_token_seconds_count{model_name=\"model\"} 1",
        "tessera:inter_token_latency_seconds_count{model_name=\"model\"} 4",
        "tessera:e2e_request_latency_seconds_count{model_name=\"model\"} 1", "tessera:num_requests_running{",
        "tessera:num_requests_waiting{", "tessera:kv_cache_usage_perc{",
        "tessera:generation_tokens_total{model_name=\"model\"} 5", "tessera:prompt_tokens_total{model_name=\"model\"} ",
        "tessera:request_success_total{model_name=\"model\",finished_reason=\"length\"} 1",
        "tessera:num_preemptions_total{", "# TYPE tessera:generation_tokens_total counter"})
    EXPECT_NE(m.find(name), std::string::npos) << name << "\n" << m;
}

TEST(LlmService, ManyClientsOverHttpEachGetTheirSoloText) {
  LlmService s;
  LlmModel m = fixture_model(8);  // a small cache: requests are preempted and recomputed
  const LlmModel ref = m;
  s.load(std::move(m));
  HttpServer server([&s](HttpRequest r, HttpExchange& x) { s.handle(std::move(r), x); }, s.max_body_bytes(),
                    {.port = 0, .threads = 16});
  const std::vector<std::string> prompts = {"a", "ab c", "cab", "b", "abc abc", "c a"};
  std::vector<std::string> got(prompts.size() * 2);
  std::vector<std::thread> clients;
  for (size_t i = 0; i < got.size(); ++i)
    clients.emplace_back([&, i] {
      httplib::Client c("127.0.0.1", server.port());
      c.set_read_timeout(60);
      const bool stream = i % 2 == 1;
      json req = {{"prompt", prompts[i / 2]}, {"max_tokens", 40}, {"temperature", 0}, {"ignore_eos", true}};
      if (stream) req["stream"] = true;
      std::string body;
      auto res = c.Post("/v1/completions", httplib::Headers{}, req.dump(), "application/json");
      if (!res || res->status != 200) return;
      if (!stream) {
        got[i] = json::parse(res->body)["choices"][0]["text"];
        return;
      }
      std::string text;
      for (const std::string& e : events(res->body))
        if (e != "[DONE]") text += json::parse(e)["choices"][0]["text"].get<std::string>();
      got[i] = text;
    });
  // /health answers while the requests run.
  httplib::Client h("127.0.0.1", server.port());
  auto health = h.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  for (auto& t : clients) t.join();
  for (size_t i = 0; i < got.size(); ++i) {
    const llm::GenerateResult r =
        solo(ref, ref.tokenizer.encode(prompts[i / 2], true, false), openai_defaults(0, 0), 40);
    EXPECT_EQ(got[i], r.text) << "client " << i;
  }
  EXPECT_TRUE(drains(s));
  EXPECT_GT(s.stats().preemptions, 0) << "the cache was meant to be too small for all at once";
  server.stop();
}

// `tessera serve-llm` on a GGUF file: its key, its routes, and a clean stop on SIGTERM.
TEST(LlmServiceCli, ServesAGgufFileAndStopsOnSigterm) {
  const std::string root = tessera::testing::scratch_dir("serve_llm_cli");
  std::filesystem::create_directories(root);
  nn::zoo::Llama* llama = nullptr;
  tessera::testing::Fixture f = tessera::testing::fixture(&llama);
  llm::save_llama_gguf(*llama, root + "/tiny.gguf", {.type = llm::GgmlType::F32, .tokenizer = &f.tok});
  std::ofstream(root + "/key") << "0123456789abcdef-secret\n";
  tessera::testing::CliProcess server = tessera::testing::start_cli(
      {"serve-llm", root + "/tiny.gguf", "--port", "0", "--api-key-file", root + "/key", "--threads", "1",
       "--max-seqs", "4", "--max-batched-tokens", "64"});
  // "listening on http://127.0.0.1:PORT/v1", then the model's lines.
  ASSERT_TRUE(server.read_until("KV cache:")) << server.log;
  const int port = server.port();
  ASSERT_GT(port, 0) << server.log;
  EXPECT_NE(server.log.find("serving 'tiny'"), std::string::npos) << server.log;
  httplib::Client c("127.0.0.1", port);
  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  const json chat = {{"model", "tiny"}, {"messages", {{{"role", "user"}, {"content", "abc"}}}}, {"max_tokens", 8},
                     {"temperature", 0}, {"ignore_eos", true}};
  auto no_key = c.Post("/v1/chat/completions", chat.dump(), "application/json");
  ASSERT_TRUE(no_key);
  EXPECT_EQ(no_key->status, 401);
  const httplib::Headers key{{"Authorization", "Bearer 0123456789abcdef-secret"}};
  auto ok = c.Post("/v1/chat/completions", key, chat.dump(), "application/json");
  ASSERT_TRUE(ok);
  ASSERT_EQ(ok->status, 200) << ok->body;
  EXPECT_EQ(json::parse(ok->body)["usage"]["completion_tokens"], 8);
  json streamed = chat;
  streamed["stream"] = true;
  auto sse = c.Post("/v1/chat/completions", key, streamed.dump(), "application/json");
  ASSERT_TRUE(sse);
  EXPECT_EQ(sse->get_header_value("Content-Type"), "text/event-stream");
  std::string text;
  for (const std::string& e : events(sse->body))
    if (e != "[DONE]") {
      const json d = json::parse(e)["choices"][0]["delta"];
      if (d.contains("content")) text += d["content"].get<std::string>();
    }
  EXPECT_EQ(text, json::parse(ok->body)["choices"][0]["message"]["content"]);
  EXPECT_EQ(server.stop(), 0) << server.log;
  EXPECT_NE(server.log.find("SIGTERM: stopping"), std::string::npos) << server.log;
  std::filesystem::remove_all(root);
}
