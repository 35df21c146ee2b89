#pragma once
// A real Prometheus server (Debian's `prometheus`, installed by
// scripts/setup.sh --test) scraping one target on loopback, for the
// integration tests of /metrics endpoints, and queries through its HTTP API.
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

extern char** environ;

namespace tessera::testing {

inline const char* kPrometheus = "/usr/bin/prometheus";

inline int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// Prometheus scraping 127.0.0.1:target_port every second; killed and its
// data removed when this goes out of scope.
class Prometheus {
 public:
  Prometheus(const std::string& dir, int target_port) : dir_(dir), port_(free_port()) {
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/prometheus.yml") << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                                           << "scrape_configs:\n  - job_name: tessera\n    static_configs:\n"
                                           << "      - targets: ['127.0.0.1:" << target_port << "']\n";
    std::string a1 = "--config.file=" + dir + "/prometheus.yml";
    std::string a2 = "--storage.tsdb.path=" + dir + "/data";
    std::string a3 = "--web.listen-address=127.0.0.1:" + std::to_string(port_);
    std::string a4 = "--log.level=error";
    char* argv[] = {const_cast<char*>(kPrometheus), a1.data(), a2.data(), a3.data(), a4.data(), nullptr};
    if (posix_spawn(&pid_, kPrometheus, nullptr, nullptr, argv, environ) != 0) pid_ = 0;
  }
  ~Prometheus() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
    std::filesystem::remove_all(dir_);
  }
  bool started() const { return pid_ > 0; }

  // One instant-vector value, or NaN when Prometheus has none (yet).
  double query(const std::string& promql) {
    httplib::Client c("127.0.0.1", port_);
    auto res = c.Get("/api/v1/query", httplib::Params{{"query", promql}}, httplib::Headers{});
    if (!res || res->status != 200) return NAN;
    nlohmann::json j = nlohmann::json::parse(res->body, nullptr, false);
    if (j.is_discarded() || j["data"]["result"].empty()) return NAN;
    return std::stod(j["data"]["result"][0]["value"][1].get<std::string>());
  }
  // Polls until `promql` has a value that `done` accepts (a static target
  // shows up some seconds after Prometheus starts); the last value seen
  // after `seconds`.
  double wait_for(const std::string& promql, const std::function<bool(double)>& done = [](double v) { return v > 0; },
                  int seconds = 60) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    double v = NAN;
    while (!done(v) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
      v = query(promql);
    }
    return v;
  }

 private:
  std::string dir_;
  int port_;
  pid_t pid_ = 0;
};

}  // namespace tessera::testing
