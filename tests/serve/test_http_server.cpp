// The inference service over real HTTP: many concurrent clients each get
// their own answers through the batcher; and `tessera serve` as a process
// serves a repository, refuses a missing key, and on SIGTERM finishes and
// exits 0.
#include <gtest/gtest.h>

#include <httplib.h>

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <mutex>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "tessera/compile/compile.h"
#include "tessera/compile/serialize.h"
#include "tessera/nn/nn.h"
#include "tessera/ops/ops.h"
#include "tessera/serve/http_server.h"
#include "serve_test_util.h"
#include "slow_clients.h"
#include "test_util.h"

using namespace tessera;
using namespace tessera::serve;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::shared_ptr<nn::Sequential> save_mlp(const std::string& dir) {
  auto net = tessera::testing::serve_mlp(4, 8, 3, 4);
  compile::save(tessera::testing::serve_graph(*net, 4), dir);
  return net;
}

std::string request_for(const std::vector<float>& x) {
  return json{{"inputs", {{{"name", "x"}, {"shape", {1, 4}}, {"datatype", "FP32"}, {"data", x}}}}}.dump();
}

}  // namespace

TEST(ServeHttp, ConcurrentClientsThroughTheBatcher) {
  std::string root = tessera::testing::scratch_dir("serve_http");
  auto net = save_mlp(root + "/mlp/1/model.tsr");
  std::ofstream(root + "/mlp/config.yaml") << "max_batch_size: 32\nmax_queue_delay_us: 1000\n";
  InferenceService service;
  service.load_repository(root);
  HttpServer server(service, {.port = 0, .threads = 16});
  std::atomic<int> wrong{0}, ok{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 8; ++t)
    clients.emplace_back([&, t] {
      httplib::Client c("127.0.0.1", server.port());
      for (int i = 0; i < 30; ++i) {
        std::vector<float> x{float(t), float(i), float(t - i), 0.5f};
        auto res = c.Post("/v2/models/mlp/infer", request_for(x), "application/json");
        if (!res || res->status != 200) {
          ++wrong;
          continue;
        }
        auto got = json::parse(res->body)["outputs"][0]["data"].get<std::vector<float>>();
        Tensor want;
        {
          NoGradGuard ng;
          want = (*net)(tensor(x).reshape({1, 4}));
        }
        auto w = want.contiguous().to_vector<float>();
        bool same = got.size() == w.size();
        for (size_t k = 0; same && k < w.size(); ++k) same = std::fabs(got[k] - w[k]) < 1e-5f;
        (same ? ok : wrong) += 1;
      }
    });
  for (auto& c : clients) c.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(ok.load(), 240);
  httplib::Client c("127.0.0.1", server.port());
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find("tessera_serve_batch_size_count{model=\"mlp\"}"), std::string::npos);
  auto bad = c.Post("/v2/models/mlp/infer", "{", "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(bad->get_header_value("Content-Type"), "application/json");
  server.stop();
  fs::remove_all(root);
}

TEST(ServeHttp, HotReloadUnderLoadDropsNothing) {
  std::string root = tessera::testing::scratch_dir("serve_reload");
  auto a = tessera::testing::serve_mlp(4, 8, 3, 11), b = tessera::testing::serve_mlp(4, 8, 3, 12);
  const compile::Graph ga = tessera::testing::serve_graph(*a, 4), gb = tessera::testing::serve_graph(*b, 4);
  compile::save(ga, root + "/mlp/1/model.tsr");
  InferenceService service;
  service.load_repository(root);
  HttpServer server(service, {.port = 0, .threads = 8});
  auto expected = [](nn::Module& net, const std::vector<float>& x) {
    NoGradGuard ng;
    return net(tensor(x).reshape({1, 4})).contiguous().to_vector<float>();
  };
  auto close_to = [](const std::vector<float>& got, const std::vector<float>& want) {
    bool same = got.size() == want.size();
    for (size_t k = 0; same && k < want.size(); ++k) same = std::fabs(got[k] - want[k]) < 1e-5f;
    return same;
  };
  std::atomic<bool> stop{false};
  std::atomic<int> answered{0}, failed{0};
  std::string first_failure;
  std::mutex failure_mu;
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t)
    clients.emplace_back([&, t] {
      httplib::Client c("127.0.0.1", server.port());
      for (int i = 0; !stop; ++i) {
        std::vector<float> x{float(t), float(i % 7), 0.25f, -1};
        auto res = c.Post("/v2/models/mlp/infer", request_for(x), "application/json");
        bool ok = res && res->status == 200;
        if (ok) {
          auto got = json::parse(res->body)["outputs"][0]["data"].get<std::vector<float>>();
          ok = close_to(got, expected(*a, x)) || close_to(got, expected(*b, x));  // the old model or the new one
        }
        if (ok) {
          ++answered;
          continue;
        }
        ++failed;
        std::lock_guard<std::mutex> lock(failure_mu);
        if (first_failure.empty()) first_failure = res ? std::to_string(res->status) + " " + res->body : "no answer";
      }
    });
  auto wait_for_traffic = [&] {
    const int seen = answered;
    while (answered < seen + 20 && failed == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  };
  // Version 1 rewritten back and forth, then a version 2 added and version 1 removed, all while clients send.
  for (int round = 0; round < 4; ++round) {
    wait_for_traffic();
    fs::remove_all(root + "/mlp/1/model.tsr");
    compile::save(round % 2 == 0 ? gb : ga, root + "/mlp/1/model.tsr");
    EXPECT_EQ(service.sync_repository().changes, std::vector<std::string>{"reloaded mlp version 1"});
  }
  wait_for_traffic();
  compile::save(gb, root + "/mlp/2/model.tsr");
  EXPECT_EQ(service.sync_repository().changes, std::vector<std::string>{"loaded mlp version 2"});
  wait_for_traffic();
  fs::remove_all(root + "/mlp/1");
  EXPECT_EQ(service.sync_repository().changes.size(), 1u);
  wait_for_traffic();
  stop = true;
  for (auto& c : clients) c.join();
  EXPECT_EQ(failed.load(), 0) << first_failure;
  EXPECT_GT(answered.load(), 120);
  server.stop();
  fs::remove_all(root);
}

TEST(ServeHttp, ServeCommandNeedsItsKeyAndStopsCleanlyOnSigterm) {
  std::string root = tessera::testing::scratch_dir("serve_cli");
  save_mlp(root + "/repo/mlp/1/model.tsr");
  std::ofstream(root + "/key") << "0123456789abcdef-secret\n";
  tessera::testing::CliProcess server = tessera::testing::start_cli(
      {"serve", root + "/repo", "--port", "0", "--api-key-file", root + "/key", "--access-log", root + "/access.log",
       "--poll-seconds", "1"});
  // The port from "listening on http://127.0.0.1:PORT/v2".
  ASSERT_TRUE(server.read_until("/v2")) << server.log;
  const int port = server.port();
  ASSERT_GT(port, 0) << server.log;
  char buf[512];
  httplib::Client c("127.0.0.1", port);
  auto live = c.Get("/v2/health/live");
  ASSERT_TRUE(live);
  EXPECT_EQ(live->status, 200);
  auto no_key = c.Post("/v2/models/mlp/infer", request_for({1, 2, 3, 4}), "application/json");
  ASSERT_TRUE(no_key);
  EXPECT_EQ(no_key->status, 401);
  httplib::Headers h{{"Authorization", "Bearer 0123456789abcdef-secret"}};
  auto ok = c.Post("/v2/models/mlp/infer", h, request_for({1, 2, 3, 4}), "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;

  // `tessera client`: random inputs of the signature, the outputs and the latency printed.
  const std::string client = std::string(TESSERA_CLI) + " client mlp --url http://127.0.0.1:" + std::to_string(port) +
                             " --api-key-file " + root + "/key --repeat 3 2>&1";
  std::string said;
  if (FILE* p = popen(client.c_str(), "r")) {
    while (fgets(buf, sizeof buf, p)) said += buf;
    EXPECT_EQ(pclose(p), 0) << said;
  }
  EXPECT_NE(said.find("input x: random FP32 [-1,4]"), std::string::npos) << said;
  EXPECT_NE(said.find("[1,3] ["), std::string::npos) << said;
  EXPECT_NE(said.find("argmax"), std::string::npos) << said;
  EXPECT_NE(said.find("model mlp version 1: p50 "), std::string::npos) << said;
  EXPECT_NE(said.find(" (3 runs)"), std::string::npos) << said;

  // --poll-seconds: a version added on disk is served without a restart.
  save_mlp(root + "/repo/mlp/2/model.tsr");
  bool reloaded = false;
  for (int i = 0; i < 200 && !reloaded; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    auto meta = c.Get("/v2/models/mlp", h);
    reloaded = meta && meta->status == 200 && json::parse(meta->body)["versions"] == json({"1", "2"});
  }
  EXPECT_TRUE(reloaded);
  auto v2 = c.Post("/v2/models/mlp/versions/2/infer", h, request_for({1, 2, 3, 4}), "application/json");
  ASSERT_TRUE(v2);
  EXPECT_EQ(v2->status, 200);
  EXPECT_EQ(server.stop(), 0) << server.log;
  const std::string& log = server.log;
  EXPECT_NE(log.find("SIGTERM: stopping"), std::string::npos) << log;
  EXPECT_NE(log.find("repository: loaded mlp version 2"), std::string::npos) << log;
  // The access log: one JSON line per request.
  std::ifstream access(root + "/access.log");
  std::string line;
  std::map<int, int> statuses;
  while (std::getline(access, line)) statuses[json::parse(line)["status"].get<int>()]++;
  EXPECT_EQ(statuses[401], 1);
  EXPECT_GE(statuses[200], 6);  // live, infer, the client's metadata and 3 infers, ...
  fs::remove_all(root);
}

TEST(ServeHttp, OversizeBodyIsRefusedBeforeItIsRead) {
  std::string root = tessera::testing::scratch_dir("serve_http_413");
  save_mlp(root + "/mlp/1/model.tsr");
  InferenceService service({.max_body_bytes = 1000});
  service.load_repository(root);
  HttpServer server(service, {.port = 0, .threads = 2});
  httplib::Client c("127.0.0.1", server.port());
  auto big = c.Post("/v2/models/mlp/infer", std::string(5000, ' '), "application/json");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 413);
  auto ok = c.Post("/v2/models/mlp/infer", request_for({1, 2, 3, 4}), "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  server.stop();
  fs::remove_all(root);
}

TEST(ServeHttp, MalformedHttpGets400AndStopAnswersWhatWasRead) {
  std::string root = tessera::testing::scratch_dir("serve_http_raw");
  save_mlp(root + "/mlp/1/model.tsr");
  std::ofstream(root + "/mlp/config.yaml") << "max_queue_delay_us: 300000\n";  // requests wait in the batcher
  InferenceService service;
  service.load_repository(root);
  HttpServer server(service, {.port = 0, .threads = 8});  // a thread per connection

  // Not HTTP: a JSON 400, then the connection closes.
  httplib::Client probe("127.0.0.1", server.port());
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(server.port()));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const std::string junk = "NOT/HTTP \x01\x02\r\n\r\n";
  ASSERT_EQ(::send(fd, junk.data(), junk.size(), 0), static_cast<ssize_t>(junk.size()));
  std::string got;
  char buf[1024];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) got.append(buf, static_cast<size_t>(n));
  ::close(fd);
  EXPECT_EQ(got.rfind("HTTP/1.1 400", 0), 0u) << got;

  // Requests queued in the batcher when stop() is called are still answered.
  std::atomic<int> answered{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t)
    clients.emplace_back([&] {
      httplib::Client c("127.0.0.1", server.port());
      auto res = c.Post("/v2/models/mlp/infer", request_for({1, 2, 3, 4}), "application/json");
      if (res && res->status == 200) ++answered;
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // all four are read and waiting for their batch
  server.stop();
  for (auto& c : clients) c.join();
  EXPECT_EQ(answered.load(), 4);
  fs::remove_all(root);
}

// A thousand clients that never finish their headers cost the server no
// thread: /v2/health/ready still answers within a second.
TEST(ServeHttp, SlowClientsCostNoThreadAndAnAddressPastItsCapIsRefused) {
  std::string root = tessera::testing::scratch_dir("serve_http_slow");
  save_mlp(root + "/mlp/1/model.tsr");
  InferenceService service;
  service.load_repository(root);
  HttpServer server(service, {.port = 0, .threads = 4, .header_timeout_s = 3, .body_timeout_s = 3,
                              .max_connections_per_client = 8});
  tessera::testing::expect_slow_clients_cost_no_thread(server.port(), "/v2/health/ready");
  server.stop();
  fs::remove_all(root);
}
