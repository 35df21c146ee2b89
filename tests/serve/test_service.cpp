// The KServe v2 routes, called without sockets: conformance of every route,
// inference in JSON and binary, and the right 4xx for every bad request —
// after which the service keeps serving.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tessera/compile/compile.h"
#include "tessera/compile/serialize.h"
#include "tessera/nn/nn.h"
#include "tessera/ops/ops.h"
#include "tessera/io/npy.h"
#include "tessera/version.h"
#include "tessera/serve/service.h"
#include "serve_test_util.h"
#include "test_util.h"

using namespace tessera;
using namespace tessera::serve;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

struct Fixture {
  std::string root = tessera::testing::scratch_dir("serve_service");
  std::shared_ptr<nn::Sequential> net;
  Fixture() {
    net = tessera::testing::serve_mlp(4, 8, 3, 3);
    compile::save(tessera::testing::serve_graph(*net, 4), root + "/mlp/1/model.tsr");
  }
  ~Fixture() { fs::remove_all(root); }
};

HttpResponse call(InferenceService& s, const std::string& method, const std::string& path, const std::string& body = "",
                  std::map<std::string, std::string> headers = {}) {
  return s.handle({method, path, std::move(headers), body});
}

const char* kInfer = R"({"id": "q1", "inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32",
                         "data": [1, 2, 3, 4, -1, 0.5, 0, 2]}]})";

}  // namespace

TEST(ServeService, RoutesAndInference) {
  Fixture f;
  InferenceService s;
  s.load_repository(f.root);
  EXPECT_EQ(json::parse(call(s, "GET", "/v2").body)["extensions"][0], "binary_tensor_data");
  EXPECT_EQ(json::parse(call(s, "GET", "/v2").body)["version"], tessera::version());  // the library's, one place
  EXPECT_EQ(call(s, "GET", "/v2/health/live").status, 200);
  EXPECT_EQ(call(s, "GET", "/v2/health/ready").status, 200);
  json meta = json::parse(call(s, "GET", "/v2/models/mlp").body);
  EXPECT_EQ(meta["inputs"][0], json({{"name", "x"}, {"datatype", "FP32"}, {"shape", {-1, 4}}}));
  EXPECT_EQ(meta["versions"], json({"1"}));
  EXPECT_EQ(call(s, "GET", "/v2/models/mlp/versions/1").status, 200);
  EXPECT_EQ(call(s, "GET", "/v2/models/mlp/ready").status, 200);
  EXPECT_EQ(call(s, "GET", "/v2/models/mlp/versions/1/ready").status, 200);

  // JSON inference: the model's own answer, the id echoed.
  HttpResponse r = call(s, "POST", "/v2/models/mlp/infer", kInfer);
  ASSERT_EQ(r.status, 200) << r.body;
  json out = json::parse(r.body);
  EXPECT_EQ(out["id"], "q1");
  EXPECT_EQ(out["model_version"], "1");
  EXPECT_EQ(out["outputs"][0]["shape"], json({2, 3}));
  Tensor x = tensor(std::vector<float>{1, 2, 3, 4, -1, 0.5f, 0, 2}).reshape({2, 4});
  Tensor want;
  {
    NoGradGuard ng;
    want = (*f.net)(x);
  }
  auto got = out["outputs"][0]["data"].get<std::vector<float>>();
  auto w = want.contiguous().to_vector<float>();
  for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(got[i], w[i], 1e-5);

  // Binary extension both ways.
  std::string header = R"({"inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32",
                           "parameters": {"binary_data_size": 32}}], "outputs": [{"name": "output0",
                           "parameters": {"binary_data": true}}]})";
  std::string body = header + std::string(static_cast<const char*>(x.raw_data()), 32);
  HttpResponse b = call(s, "POST", "/v2/models/mlp/versions/1/infer", body,
                        {{"inference-header-content-length", std::to_string(header.size())}});
  ASSERT_EQ(b.status, 200) << b.body;
  ASSERT_EQ(b.headers.size(), 1u);
  const size_t jl = std::stoul(b.headers[0].second);
  ASSERT_EQ(b.body.size(), jl + 24);
  float y[6];
  std::memcpy(y, b.body.data() + jl, 24);
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(y[i], w[i], 1e-5);

  std::string metrics = call(s, "GET", "/metrics").body;
  EXPECT_NE(metrics.find("tessera_serve_requests_total{model=\"mlp\",status=\"200\"}"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("tessera_serve_batch_size_bucket"), std::string::npos);
  EXPECT_NE(metrics.find("tessera_serve_model_ready{model=\"mlp\",version=\"1\"} 1"), std::string::npos);
}

TEST(ServeService, BadRequestsGetTheRightStatusAndServingGoesOn) {
  Fixture f;
  InferenceService s({.api_key = "k3y", .max_body_bytes = 4096});
  s.load_repository(f.root);
  std::map<std::string, std::string> auth{{"authorization", "Bearer k3y"}};
  auto status = [&](const std::string& m, const std::string& p, const std::string& body = "",
                    std::map<std::string, std::string> h = {{"authorization", "Bearer k3y"}}) {
    HttpResponse r = call(s, m, p, body, h);
    EXPECT_NO_THROW(json::parse(r.body)) << r.body;  // every error is JSON
    return r.status;
  };
  EXPECT_EQ(status("GET", "/v2/models/mlp", "", {}), 401);
  EXPECT_EQ(status("GET", "/v2/models/mlp", "", {{"authorization", "Bearer nope"}}), 401);
  EXPECT_EQ(status("GET", "/v2/health/live", "", {}), 200);  // probes need no key
  EXPECT_EQ(status("GET", "/v2/models/cnn"), 404);
  EXPECT_EQ(status("GET", "/v2/models/mlp/versions/7"), 404);
  EXPECT_EQ(status("GET", "/v2/models/mlp/versions/x/ready"), 404);
  EXPECT_EQ(status("GET", "/v3"), 404);
  EXPECT_EQ(status("DELETE", "/v2/models/mlp"), 405);
  EXPECT_EQ(status("GET", "/v2/models/mlp/infer"), 405);
  EXPECT_EQ(status("POST", "/v2/models/mlp/infer", "{not json"), 400);
  EXPECT_EQ(status("POST", "/v2/models/mlp/infer",
                   R"({"inputs": [{"name": "x", "shape": [1, 5], "datatype": "FP32", "data": [1,2,3,4,5]}]})"),
            400);
  EXPECT_EQ(status("POST", "/v2/models/mlp/infer",
                   R"({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "INT64", "data": [1,2,3,4]}]})"),
            400);
  EXPECT_EQ(status("POST", "/v2/models/mlp/infer", std::string(5000, ' ')), 413);
  HttpResponse e = call(s, "POST", "/v2/models/mlp/infer", "{}", auth);
  EXPECT_EQ(json::parse(e.body)["error"], "the request has no \"inputs\"");
  // Still serving.
  EXPECT_EQ(status("POST", "/v2/models/mlp/infer", kInfer), 200);
  std::string m = call(s, "GET", "/metrics", "", auth).body;
  EXPECT_NE(m.find("status=\"400\""), std::string::npos);
  EXPECT_NE(m.find("status=\"401\""), std::string::npos);
  // Unloading a version, then shutting down.
  s.unload("mlp", 1);
  EXPECT_EQ(status("POST", "/v2/models/mlp/infer", kInfer), 404);
  s.drain();
  EXPECT_EQ(status("GET", "/v2/health/ready", "", {}), 503);
}

TEST(ServeService, AccessLogMetricsAndClientBytes) {
  Fixture f;
  std::vector<std::string> lines;
  ServiceOptions o;
  o.access_log = [&](const std::string& line) { lines.push_back(line); };
  InferenceService s(o);
  s.load_repository(f.root);
  HttpRequest req{"POST", "/v2/models/mlp/infer", {}, kInfer, "127.0.0.1:5000"};
  ASSERT_EQ(s.handle(req).status, 200);
  ASSERT_EQ(lines.size(), 1u);
  json line = json::parse(lines[0]);
  EXPECT_EQ(line["remote"], "127.0.0.1:5000");
  EXPECT_EQ(line["method"], "POST");
  EXPECT_EQ(line["path"], "/v2/models/mlp/infer");
  EXPECT_EQ(line["status"], 200);
  EXPECT_EQ(line["model"], "mlp");
  EXPECT_EQ(line["version"], "1");
  EXPECT_EQ(line["bytes_in"], std::strlen(kInfer));
  EXPECT_GT(line["bytes_out"].get<int>(), 0);
  EXPECT_GE(line["ms"].get<double>(), 0);
  EXPECT_EQ(line["time"].get<std::string>().size(), std::string("2026-01-01T00:00:00.000Z").size());

  // A path with bytes that are not UTF-8: a JSON 404 and a log line, never an exception.
  HttpResponse bad = call(s, "GET", std::string("/v2/models/\xff\xfe/ready"));
  EXPECT_EQ(bad.status, 404);
  EXPECT_NO_THROW(json::parse(bad.body));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NO_THROW(json::parse(lines[1]));
  // Unknown model names from clients do not become metric labels (the series stay bounded).
  for (int i = 0; i < 5; ++i) call(s, "GET", "/v2/models/nosuch" + std::to_string(i));
  const std::string m = call(s, "GET", "/metrics").body;
  EXPECT_EQ(m.find("nosuch"), std::string::npos);
  EXPECT_NE(m.find("tessera_serve_requests_total{model=\"\",status=\"404\"} 6"), std::string::npos) << m;
  EXPECT_NE(m.find("tessera_serve_requests_in_flight 1"), std::string::npos) << m;  // the /metrics request itself
  EXPECT_NE(m.find("tessera_serve_model_ready{model=\"mlp\",version=\"1\"} 1"), std::string::npos) << m;
}

TEST(ServeService, RepositoryRoutesLoadAndUnload) {
  Fixture f;
  InferenceService off;
  off.load_repository(f.root);
  EXPECT_EQ(call(off, "POST", "/v2/repository/index").status, 404);  // off unless asked for

  InferenceService s({.repository_routes = true});
  s.load_repository(f.root);
  json index = json::parse(call(s, "POST", "/v2/repository/index").body);
  EXPECT_EQ(index, json::parse(R"([{"name": "mlp", "version": "1", "state": "READY"}])"));
  EXPECT_EQ(call(s, "GET", "/v2/repository/index").status, 405);
  EXPECT_EQ(call(s, "POST", "/v2/repository/models/mlp/unload").status, 200);
  EXPECT_EQ(call(s, "POST", "/v2/models/mlp/infer", kInfer).status, 404);
  EXPECT_EQ(call(s, "POST", "/v2/repository/models/mlp/unload").status, 404);
  HttpResponse load = call(s, "POST", "/v2/repository/models/mlp/load");
  ASSERT_EQ(load.status, 200) << load.body;
  EXPECT_EQ(json::parse(load.body)["changes"], json({"loaded mlp version 1"}));
  EXPECT_EQ(call(s, "POST", "/v2/models/mlp/infer", kInfer).status, 200);
  // A folder that is not a model: 400 naming the problem, and the index lists it as unavailable.
  fs::create_directories(f.root + "/broken/1");
  HttpResponse broken = call(s, "POST", "/v2/repository/models/broken/load");
  EXPECT_EQ(broken.status, 400);
  EXPECT_NE(json::parse(broken.body)["error"].get<std::string>().find("holds neither model.tsr/"), std::string::npos)
      << broken.body;
  index = json::parse(call(s, "POST", "/v2/repository/index").body);
  ASSERT_EQ(index.size(), 2u);
  EXPECT_EQ(index[1]["name"], "broken");
  EXPECT_EQ(index[1]["state"], "UNAVAILABLE");
  EXPECT_EQ(call(s, "POST", "/v2/repository/models/..%2f/load").status, 400);
  EXPECT_EQ(call(s, "POST", "/v2/repository/models/nothere/load").status, 404);
}

TEST(ServeService, SyncFollowsTheRepository) {
  Fixture f;
  InferenceService s;
  s.load_repository(f.root);
  auto answer = [&](const std::string& path) {
    HttpResponse r = call(s, "POST", path, kInfer);
    EXPECT_EQ(r.status, 200) << path << ": " << r.body;
    return r.status == 200 ? json::parse(r.body)["outputs"][0]["data"].get<std::vector<float>>() : std::vector<float>{};
  };
  const std::vector<float> first = answer("/v2/models/mlp/infer");
  EXPECT_TRUE(s.sync_repository().changes.empty());  // nothing changed on disk

  // A new version: loaded, and the newest serves requests without a version.
  auto other = tessera::testing::serve_mlp(4, 8, 3, 99);
  compile::save(tessera::testing::serve_graph(*other, 4), f.root + "/mlp/2/model.tsr");
  SyncReport r = s.sync_repository();
  EXPECT_EQ(r.changes, std::vector<std::string>{"loaded mlp version 2"});
  const std::vector<float> second = answer("/v2/models/mlp/infer");
  EXPECT_NE(second, first);
  EXPECT_EQ(answer("/v2/models/mlp/versions/1/infer"), first);

  // Version 1 rewritten with version 2's weights: reloaded in place.
  fs::remove_all(f.root + "/mlp/1/model.tsr");
  compile::save(tessera::testing::serve_graph(*other, 4), f.root + "/mlp/1/model.tsr");
  EXPECT_EQ(s.sync_repository().changes, std::vector<std::string>{"reloaded mlp version 1"});
  EXPECT_EQ(answer("/v2/models/mlp/versions/1/infer"), second);

  // A config change reloads every version with the new settings.
  std::ofstream(f.root + "/mlp/config.yaml") << "max_batch_size: 8\n";
  EXPECT_EQ(s.sync_repository().changes.size(), 2u);

  // A broken new version is reported; what was serving keeps serving.
  fs::create_directories(f.root + "/mlp/3/model.tsr");
  std::ofstream(f.root + "/mlp/3/model.tsr/graph.json") << "{ half written";
  r = s.sync_repository();
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_NE(r.errors[0].find("model 'mlp' version 3"), std::string::npos) << r.errors[0];
  EXPECT_EQ(answer("/v2/models/mlp/infer"), second);
  // A bad config: the model's folder is not read at all, and both versions serve on.
  std::ofstream(f.root + "/mlp/config.yaml") << "max_batch_size: -1\n";
  r = s.sync_repository();
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_NE(r.errors[0].find("max_batch_size must be an integer in [1, 65536], got -1"), std::string::npos)
      << r.errors[0];
  EXPECT_EQ(answer("/v2/models/mlp/versions/1/infer"), second);
  fs::remove(f.root + "/mlp/config.yaml");
  fs::remove_all(f.root + "/mlp/3");

  // A removed version folder, then the whole model: unloaded.
  fs::remove_all(f.root + "/mlp/2");
  r = s.sync_repository();
  EXPECT_EQ(r.changes.back(), "unloaded mlp version 2 (its folder is gone)");
  EXPECT_EQ(call(s, "POST", "/v2/models/mlp/versions/2/infer", kInfer).status, 404);
  fs::remove_all(f.root + "/mlp");
  EXPECT_EQ(s.sync_repository().changes, std::vector<std::string>{"unloaded mlp version 1 (its folder is gone)"});
  EXPECT_EQ(call(s, "POST", "/v2/models/mlp/infer", kInfer).status, 404);
}

TEST(ServeService, WarmupWithConfiguredInputs) {
  Fixture f;
  io::save_npy(f.root + "/mlp/x.npy", ops::randn({3, 4}));
  std::ofstream(f.root + "/mlp/config.yaml") << "warmup_runs: 2\nwarmup_inputs: [x.npy]\n";
  {
    InferenceService s;
    s.load_repository(f.root);
    EXPECT_EQ(call(s, "POST", "/v2/models/mlp/infer", kInfer).status, 200);
  }
  // Inputs that do not fit the signature, a path out of the folder, a missing file: errors naming them.
  io::save_npy(f.root + "/mlp/x.npy", ops::randn({3, 5}));
  {
    InferenceService s;
    SyncReport r = s.load_repository(f.root);  // reported, not thrown: the model is not ready
    ASSERT_EQ(r.errors.size(), 1u);
    EXPECT_NE(r.errors[0].find("warmup_inputs of model 'mlp' do not fit it"), std::string::npos) << r.errors[0];
    HttpResponse res = call(s, "POST", "/v2/models/mlp/infer", kInfer);
    EXPECT_EQ(res.status, 503);
    EXPECT_NE(res.body.find("do not fit it"), std::string::npos) << res.body;
  }
  std::ofstream(f.root + "/mlp/config.yaml") << "warmup_inputs: [../x.npy]\n";
  EXPECT_THROW(scan_repository(f.root), Error);
  std::ofstream(f.root + "/mlp/config.yaml") << "warmup_inputs: [nothere.npy]\n";
  try {
    scan_repository(f.root);
    ADD_FAILURE() << "a missing warm-up file was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("warmup input 'nothere.npy' is not a file"), std::string::npos) << e.what();
  }
}
