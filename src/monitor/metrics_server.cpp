#include "tessera/monitor/metrics_server.h"

#include <httplib.h>

#include <sys/socket.h>

#include <thread>

#include "tessera/core/error.h"

namespace tessera::monitor {

struct MetricsServer::Impl {
  httplib::Server server;
  std::thread thread;
  std::string host;
  int port = 0;
};

MetricsServer::MetricsServer(const Registry& registry, const std::string& host, int port) : impl_(new Impl) {
  TS_CHECK(port >= 0 && port <= 65535, "metrics server: port must be in 0..65535, got ", port);
  auto& s = impl_->server;
  s.set_tcp_nodelay(true);
  // httplib's default adds SO_REUSEPORT, which lets a second process bind the
  // same port and silently steal half the scrapes: keep SO_REUSEADDR only.
  s.set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  s.new_task_queue = [] { return new httplib::ThreadPool(2); };
  s.Get("/metrics", [&registry](const httplib::Request&, httplib::Response& res) {
    res.set_content(registry.render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  s.Get("/health", [](const httplib::Request&, httplib::Response& res) { res.set_content("ok\n", "text/plain"); });
  int bound = port == 0 ? s.bind_to_any_port(host) : (s.bind_to_port(host, port) ? port : -1);
  TS_CHECK(bound > 0, "metrics server: cannot listen on ", host, ":", port,
           " (is the port in use, or the address not local?); choose another monitor.port, or 0 for any free port");
  impl_->host = host;
  impl_->port = bound;
  impl_->thread = std::thread([this] { impl_->server.listen_after_bind(); });
}

MetricsServer::~MetricsServer() {
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

int MetricsServer::port() const { return impl_->port; }

std::string MetricsServer::url() const {
  return "http://" + impl_->host + ":" + std::to_string(impl_->port) + "/metrics";
}

}  // namespace tessera::monitor
