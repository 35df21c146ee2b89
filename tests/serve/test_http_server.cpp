// The inference service over real HTTP: many concurrent clients each get
// their own answers through the batcher; and `tessera serve` as a process
// serves a repository, refuses a missing key, and on SIGTERM finishes and
// exits 0.
#include <gtest/gtest.h>

#include <httplib.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
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

TEST(ServeHttp, ServeCommandNeedsItsKeyAndStopsCleanlyOnSigterm) {
  std::string root = tessera::testing::scratch_dir("serve_cli");
  save_mlp(root + "/repo/mlp/1/model.tsr");
  std::ofstream(root + "/key") << "0123456789abcdef-secret\n";
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dup2(out[1], 1);
    dup2(out[1], 2);
    close(out[0]);
    execl(TESSERA_CLI, TESSERA_CLI, "serve", (root + "/repo").c_str(), "--port", "0", "--api-key-file",
          (root + "/key").c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out[1]);
  // The port from "listening on http://127.0.0.1:PORT/v2".
  std::string log;
  char buf[512];
  int port = 0;
  while (port == 0) {
    ssize_t n = read(out[0], buf, sizeof buf);
    if (n <= 0) break;
    log.append(buf, static_cast<size_t>(n));
    auto at = log.find("listening on http://127.0.0.1:");
    if (at != std::string::npos && log.find("/v2", at) != std::string::npos)
      port = std::atoi(log.c_str() + at + std::strlen("listening on http://127.0.0.1:"));
  }
  ASSERT_GT(port, 0) << log;
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
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  ssize_t n;
  while ((n = read(out[0], buf, sizeof buf)) > 0) log.append(buf, static_cast<size_t>(n));
  close(out[0]);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << log;
  EXPECT_NE(log.find("SIGTERM: stopping"), std::string::npos) << log;
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
