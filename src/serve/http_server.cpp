// cpp-httplib carrying the inference service (serve/http_server.h). Each
// connection's pool thread parses its request and waits for its batch
// (InferenceService::handle); an asynchronous Boost.Beast transport, where the
// batch's worker writes the replies, measured slower on 2 vCPUs
// (bench/serve_beast.cpp, docs/serving.md).
#include "tessera/serve/http_server.h"

#include <httplib.h>

#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <thread>

#include "tessera/core/error.h"

namespace tessera::serve {

struct HttpServer::Impl {
  httplib::Server server;
  std::thread thread;
  int port = 0;
};

HttpServer::HttpServer(InferenceService& service, const HttpServerOptions& o) : impl_(new Impl) {
  TS_CHECK(o.port >= 0 && o.port <= 65535, "serve: port must be in 0..65535, got ", o.port);
  TS_CHECK(o.threads >= 1 && o.threads <= 4096, "serve: threads must be in 1..4096, got ", o.threads);
  auto& s = impl_->server;
  // Measured on these machines (docs/serving.md): without TCP_NODELAY each
  // response waits ~40 ms on Nagle; httplib's defaults of 8 threads and 5
  // requests per keep-alive connection starve concurrent clients.
  s.set_tcp_nodelay(true);
  s.set_keep_alive_max_count(static_cast<size_t>(o.keep_alive_requests));
  // A body over the service's limit is refused (413) before it is read: memory stays bounded.
  s.set_payload_max_length(service.max_body_bytes());
  const size_t threads = static_cast<size_t>(o.threads);
  s.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  // SO_REUSEADDR only: httplib's default SO_REUSEPORT would let a second
  // process bind the same port and take half the traffic.
  int listening = -1;
  s.set_socket_options([&listening](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listening = sock;
  });
  auto handler = [&service](const httplib::Request& req, httplib::Response& res) {
    HttpRequest r;
    r.method = req.method;
    r.path = req.path;
    r.remote = req.remote_addr + ":" + std::to_string(req.remote_port);
    for (const auto& [k, v] : req.headers) {
      std::string key = k;
      std::transform(key.begin(), key.end(), key.begin(), [](unsigned char c) { return std::tolower(c); });
      r.headers[key] = v;
    }
    r.body = req.body;
    HttpResponse out = service.handle(r);
    res.status = out.status;
    for (const auto& [k, v] : out.headers) res.set_header(k, v);
    res.set_content(std::move(out.body), out.content_type);
  };
  s.Get(".*", handler);
  s.Post(".*", handler);
  s.Put(".*", handler);
  s.Delete(".*", handler);
  s.Patch(".*", handler);
  const int bound = o.port == 0 ? s.bind_to_any_port(o.host) : (s.bind_to_port(o.host, o.port) ? o.port : -1);
  TS_CHECK(bound > 0, "serve: cannot listen on ", o.host, ":", o.port,
           " (is the port in use, or the address not local?); choose another --port, or 0 for any free port");
  // Debian's httplib is built with a listen backlog of 5: a burst of new
  // connections (64 clients starting at once) overflowed it, and clients saw
  // resets and 1 s SYN retries. listen() again on the bound socket raises it.
  if (listening >= 0) ::listen(listening, SOMAXCONN);
  impl_->port = bound;
  impl_->thread = std::thread([this] { impl_->server.listen_after_bind(); });
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::port() const { return impl_->port; }

void HttpServer::stop() {
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

}  // namespace tessera::serve
