#pragma once
// The HTTP transport of the inference service (cpp-httplib, chosen over
// Boost.Beast by the load test in docs/serving.md): every request goes to
// InferenceService::handle. Binds 127.0.0.1 unless told otherwise; port 0
// picks a free port. A blocking server: the thread pool must be at least as
// large as the number of concurrent connections, and a connection idle for 5 s
// is closed (httplib's keep-alive and read timeouts).
#include <memory>
#include <string>

#include "tessera/serve/service.h"

namespace tessera::serve {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;
  int threads = 64;               // connections served at once
  int keep_alive_requests = 100000;  // per connection
};

class HttpServer {
 public:
  // Binds (an Error naming host:port when it cannot) and starts serving on a background thread.
  HttpServer(InferenceService& service, const HttpServerOptions& options = {});
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const;
  // Stops accepting connections; requests being handled finish first.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::serve
