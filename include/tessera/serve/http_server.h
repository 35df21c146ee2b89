#pragma once
// The HTTP/1.1 transport of the inference service (Boost.Beast, asynchronous):
// every request goes to InferenceService::handle_async, and its reply is
// written when it comes — from the model worker that ran its batch — so no
// thread waits for a batch, and `threads` I/O threads serve any number of
// keep-alive connections. Chosen over cpp-httplib (a thread blocked per
// connection) by the load test in docs/serving.md. Binds 127.0.0.1 unless
// told otherwise; port 0 picks a free port.
#include <memory>
#include <string>

#include "tessera/serve/service.h"

namespace tessera::serve {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;
  int threads = 0;              // I/O threads; 0: one per CPU (at least 2)
  int max_connections = 10000;  // more are closed as they arrive
  int idle_timeout_s = 60;      // a connection silent this long (or a request this slow to arrive) is closed
};

class HttpServer {
 public:
  // Binds (an Error naming host:port when it cannot) and starts serving on a background thread.
  HttpServer(InferenceService& service, const HttpServerOptions& options = {});
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const;
  // Stops accepting connections; requests already read are answered first.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::serve
