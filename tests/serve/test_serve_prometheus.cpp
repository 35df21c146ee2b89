// A real Prometheus server scrapes `tessera serve`'s (and serve-llm's) /metrics while clients
// send requests, and the serving metrics read back through Prometheus's HTTP
// API (Debian's `prometheus`, installed by scripts/setup.sh --test; the test
// is skipped where it is missing).
#include <gtest/gtest.h>

#include <httplib.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tessera/compile/serialize.h"
#include "../llm/llm_fixture.h"
#include "tessera/serve/http_server.h"
#include "tessera/serve/llm_service.h"
#include "prometheus_util.h"
#include "serve_test_util.h"
#include "test_util.h"

using namespace tessera;
using namespace tessera::serve;
using nlohmann::json;
namespace fs = std::filesystem;

TEST(ServePrometheus, ScrapesTheServingMetrics) {
  if (!fs::exists(tessera::testing::kPrometheus))
    GTEST_SKIP() << "prometheus is not installed (scripts/setup.sh --test installs it)";
  std::string root = tessera::testing::scratch_dir("serve_prometheus");
  auto net = tessera::testing::serve_mlp(4, 8, 3, 5);
  compile::save(tessera::testing::serve_graph(*net, 4), root + "/repo/mlp/1/model.tsr");
  InferenceService service;
  service.load_repository(root + "/repo");
  HttpServer server(service, {.port = 0, .threads = 4});
  tessera::testing::Prometheus prometheus(root + "/prometheus", server.port());
  ASSERT_TRUE(prometheus.started());

  httplib::Client c("127.0.0.1", server.port());
  const std::string body =
      R"({"inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32", "data": [1, 2, 3, 4, 5, 6, 7, 8]}]})";
  int sent = 0;
  for (; sent < 50; ++sent) ASSERT_EQ(c.Post("/v2/models/mlp/infer", body, "application/json")->status, 200);
  ASSERT_EQ(c.Post("/v2/models/mlp/infer", "{", "application/json")->status, 400);
  // Prometheus shows the counters once it has scraped after the requests.
  const double ok = prometheus.wait_for("tessera_serve_requests_total{model=\"mlp\",status=\"400\"}");
  EXPECT_EQ(ok, 1);
  EXPECT_EQ(prometheus.query("tessera_serve_requests_total{model=\"mlp\",status=\"200\"}"), sent);
  EXPECT_EQ(prometheus.query("tessera_serve_model_ready{model=\"mlp\",version=\"1\"}"), 1);
  EXPECT_EQ(prometheus.query("tessera_serve_request_seconds_count{model=\"mlp\"}"), sent + 1);
  // Every run merged 2-row requests: the batch-size histogram's rows sum to the rows sent.
  EXPECT_EQ(prometheus.query("tessera_serve_batch_size_sum{model=\"mlp\"}"), 2 * sent);
  EXPECT_GT(prometheus.query("tessera_serve_compute_seconds_count{model=\"mlp\"}"), 0);
  EXPECT_GE(prometheus.query("tessera_serve_queue_seconds_count{model=\"mlp\"}"), 1);
  const double p99 = prometheus.query(
      "histogram_quantile(0.99, sum by (le) (tessera_serve_request_seconds_bucket{model=\"mlp\"}))");
  EXPECT_TRUE(p99 > 0 && p99 < 10) << p99;
  EXPECT_EQ(prometheus.query("tessera_serve_queue_depth{model=\"mlp\"}"), 0);
  EXPECT_GE(prometheus.query("tessera_serve_requests_in_flight"), 0);
  server.stop();
  fs::remove_all(root);
}

// `tessera serve-llm`'s metrics, by vLLM's names under tessera:, read back
// through Prometheus.
TEST(ServePrometheus, ScrapesTheLlmServingMetrics) {
  if (!fs::exists(tessera::testing::kPrometheus))
    GTEST_SKIP() << "prometheus is not installed (scripts/setup.sh --test installs it)";
  std::string root = tessera::testing::scratch_dir("serve_llm_prometheus");
  tessera::testing::Fixture f = tessera::testing::fixture();
  LlmModel m;
  m.model = f.model;
  m.tokenizer = f.tok;
  m.engine.max_sequences = 4;
  m.engine.max_batch_tokens = 64;
  LlmServiceOptions o;
  o.model_name = "tiny";
  LlmService service(o);
  service.load(std::move(m));
  HttpServer server([&service](HttpRequest r, HttpExchange& x) { service.handle(std::move(r), x); },
                    service.max_body_bytes(), {.port = 0, .threads = 4});
  tessera::testing::Prometheus prometheus(root + "/prometheus", server.port());
  ASSERT_TRUE(prometheus.started());
  httplib::Client c("127.0.0.1", server.port());
  const int sent = 5;
  for (int i = 0; i < sent; ++i) {
    const json req = {{"prompt", "ab"}, {"max_tokens", 8}, {"ignore_eos", true}, {"stream", i % 2 == 1}};
    auto res = c.Post("/v1/completions", req.dump(), "application/json");
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200);
  }
  const double done = prometheus.wait_for("tessera:request_success_total{model_name=\"tiny\",finished_reason=\"length\"}");
  EXPECT_EQ(done, sent);
  EXPECT_EQ(prometheus.query("tessera:generation_tokens_total{model_name=\"tiny\"}"), 8 * sent);
  EXPECT_EQ(prometheus.query("tessera:time_to_first_token_seconds_count{model_name=\"tiny\"}"), sent);
  EXPECT_EQ(prometheus.query("tessera:inter_token_latency_seconds_count{model_name=\"tiny\"}"), 7 * sent);
  EXPECT_EQ(prometheus.query("tessera:num_requests_running{model_name=\"tiny\"}"), 0);
  EXPECT_EQ(prometheus.query("tessera:kv_cache_usage_perc{model_name=\"tiny\"}"), 0);
  const double p50 = prometheus.query(
      "histogram_quantile(0.5, sum by (le) (tessera:e2e_request_latency_seconds_bucket{model_name=\"tiny\"}))");
  EXPECT_TRUE(p50 > 0 && p50 < 10) << p50;
  server.stop();
  fs::remove_all(root);
}
