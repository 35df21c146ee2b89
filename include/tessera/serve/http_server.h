#pragma once
// The HTTP/1.1 transport of the services: Boost.Beast's parser and
// serializer over blocking sockets, a thread per connection (up to
// `threads`; more wait in the listen backlog), every request handed to a
// handler (InferenceService::handle, LlmService::handle), which answers with
// a whole response or a chunked stream. Chosen by the load test in
// docs/serving.md. Binds
// 127.0.0.1 unless told otherwise; port 0 picks a free port. A connection
// silent for idle_timeout_s (between requests or inside one) is closed.
#include <memory>
#include <string>

#include "tessera/serve/service.h"

namespace tessera::serve {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;
  int threads = 64;         // connections served at once
  int idle_timeout_s = 30;  // a read or write that waits longer closes the connection
};

class HttpServer {
 public:
  // Binds (an Error naming host:port when it cannot) and starts serving on a
  // background thread. A request body over max_body_bytes is answered 413
  // before it is read.
  HttpServer(HttpHandler handler, size_t max_body_bytes, const HttpServerOptions& options = {});
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
