// tessera_serve_beast: the inference service over Boost.Beast instead of
// cpp-httplib, for the load test that chose the HTTP library
// (bench/serve_bench.py --compare-http; docs/serving.md). The same
// InferenceService answers every request; only the transport differs.
//
//   tessera_serve_beast REPOSITORY PORT [THREADS]
//
// Asynchronous Beast: one io_context run by THREADS threads, a session per
// connection reading requests with keep-alive. InferenceService::handle waits
// for the batcher, so a handler holds its io thread while its request is
// queued; THREADS must cover the concurrent connections, as with httplib.
#include <utility>  // before Asio: Boost 1.74 uses std::exchange without including it

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

#include "tessera/serve/service.h"

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, tessera::serve::InferenceService& service)
      : stream_(std::move(socket)), service_(service) {}
  void start() { read(); }

 private:
  void read() {
    parser_.emplace();
    parser_->body_limit(service_.max_body_bytes());
    http::async_read(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->close();
      self->answer(self->parser_->release());
    });
  }

  void answer(http::request<http::string_body> req) {
    tessera::serve::HttpRequest r;
    r.method = std::string(req.method_string());
    r.path = std::string(req.target().substr(0, req.target().find('?')));
    for (const auto& field : req) {
      std::string key(field.name_string());
      std::transform(key.begin(), key.end(), key.begin(), [](unsigned char c) { return std::tolower(c); });
      r.headers[key] = std::string(field.value());
    }
    r.body = std::move(req.body());
    tessera::serve::HttpResponse out = service_.handle(r);
    auto res = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(out.status), req.version());
    res->set(http::field::content_type, out.content_type);
    for (const auto& [k, v] : out.headers) res->set(k, v);
    res->keep_alive(req.keep_alive());
    res->body() = std::move(out.body);
    res->prepare_payload();
    http::async_write(stream_, *res, [self = shared_from_this(), res](beast::error_code ec, size_t) {
      if (ec || !res->keep_alive()) return self->close();
      self->read();
    });
  }

  void close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  tessera::serve::InferenceService& service_;
};

void accept(tcp::acceptor& acceptor, tessera::serve::InferenceService& service) {
  acceptor.async_accept([&acceptor, &service](beast::error_code ec, tcp::socket socket) {
    if (!ec) {
      socket.set_option(tcp::no_delay(true));
      std::make_shared<Session>(std::move(socket), service)->start();
    }
    accept(acceptor, service);
  });
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: tessera_serve_beast REPOSITORY PORT [THREADS]\n");
    return 2;
  }
  const int threads = argc > 3 ? std::atoi(argv[3]) : 64;
  tessera::serve::InferenceService service;
  service.load_repository(argv[1]);
  net::io_context io(threads);
  tcp::acceptor acceptor(io, {net::ip::make_address("127.0.0.1"), static_cast<unsigned short>(std::atoi(argv[2]))});
  accept(acceptor, service);
  net::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](beast::error_code, int) { io.stop(); });
  std::printf("listening on http://127.0.0.1:%d/v2\n", acceptor.local_endpoint().port());
  std::fflush(stdout);
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) pool.emplace_back([&io] { io.run(); });
  for (auto& t : pool) t.join();
  service.drain();
  return 0;
}
