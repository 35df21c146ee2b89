#pragma once
// The HTTP/1.1 transport of the services: Boost.Beast's parser and
// serializer. One thread reads every connection (epoll) until its request is
// whole, under deadlines for the headers and the body; `threads` workers
// hand whole requests to the handler (InferenceService::handle,
// LlmService::handle), which answers with a whole response or a chunked
// stream. A slow client costs a connection's bytes, never a thread
// (Note [Slow clients] in http_server.cpp). Binds 127.0.0.1 unless told
// otherwise; port 0 picks a free port.
#include <cstddef>
#include <memory>
#include <string>

#include "tessera/serve/service.h"

namespace tessera::serve {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;
  int threads = 64;            // requests answered at once
  int idle_timeout_s = 30;     // a connection idle between requests, or a write the client does not read, closes
  int header_timeout_s = 10;   // a request's headers must arrive whole within this of its first byte (else 408)
  int body_timeout_s = 60;     // and its body within this of its headers (else 408)
  int max_connections = 4096;  // open at once; one more is refused (503)
  int max_connections_per_client = 256;  // from one client address; one more is refused (429), not queued
  size_t max_buffered_bytes = size_t{1} << 30;  // held for requests still arriving (past it: 503)
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
