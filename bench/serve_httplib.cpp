// tessera_serve_httplib: the inference service over cpp-httplib, a transport
// `tessera serve` was compared against (bench/serve_bench.py --only http;
// docs/serving.md). The same InferenceService answers every request; only the
// transport differs.
//
//   tessera_serve_httplib REPOSITORY PORT [THREADS]
//
// httplib blocks one pool thread per connection, and that thread waits for
// its request's batch (InferenceService::handle): THREADS must cover the
// concurrent connections (64 for the load test's 64 connections).
#include <httplib.h>

#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "tessera/serve/service.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: tessera_serve_httplib REPOSITORY PORT [THREADS]\n");
    return 2;
  }
  const size_t threads = argc > 3 ? static_cast<size_t>(std::atoi(argv[3])) : 64;
  tessera::serve::InferenceService service;
  service.load_repository(argv[1]);
  httplib::Server s;
  // Without TCP_NODELAY each response waits ~40 ms on Nagle; httplib's defaults
  // of 8 threads and 5 requests per keep-alive connection starve concurrent clients.
  s.set_tcp_nodelay(true);
  s.set_keep_alive_max_count(1000000);
  s.set_payload_max_length(service.max_body_bytes());
  s.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  auto handler = [&service](const httplib::Request& req, httplib::Response& res) {
    tessera::serve::HttpRequest r;
    r.method = req.method;
    r.path = req.path;
    for (const auto& [k, v] : req.headers) {
      std::string key = k;
      std::transform(key.begin(), key.end(), key.begin(), [](unsigned char c) { return std::tolower(c); });
      r.headers[key] = v;
    }
    r.body = req.body;  // httplib keeps the request: a copy
    tessera::serve::HttpResponse out = service.handle(std::move(r));
    res.status = out.status;
    for (const auto& [k, v] : out.headers) res.set_header(k, v);
    res.set_content(std::move(out.body), out.content_type);
  };
  s.Get(".*", handler);
  s.Post(".*", handler);
  if (!s.bind_to_port("127.0.0.1", std::atoi(argv[2]))) {
    std::fprintf(stderr, "cannot listen on 127.0.0.1:%s\n", argv[2]);
    return 1;
  }
  std::thread t([&] { s.listen_after_bind(); });
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  std::printf("listening on http://127.0.0.1:%s/v2\n", argv[2]);
  std::fflush(stdout);
  int sig = 0;
  sigwait(&stop, &sig);
  s.stop();
  t.join();
  service.drain();
  return 0;
}
