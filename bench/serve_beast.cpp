// tessera_serve_beast: the inference service over Boost.Beast, asynchronous,
// for the load test that chose `tessera serve`'s HTTP library
// (bench/serve_bench.py --only http; docs/serving.md). The same
// InferenceService answers every request; only the transport differs.
//
//   tessera_serve_beast REPOSITORY PORT [IO_THREADS]
//
// Every request goes to InferenceService::handle_async and its reply is
// written when it comes, posted from the model worker that ran its batch: no
// thread waits for a batch, and a few I/O threads serve any number of
// keep-alive connections (with idle timeouts and a connection cap). On 2 vCPUs
// it served fewer requests per second than a thread per connection: Asio's
// cross-thread posts and per-operation timers cost more than the waits they
// save (docs/serving.md).
#include "serve/beast_message.h"  // first: Boost 1.74's Asio needs <utility> before it

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <thread>
#include <vector>


namespace {

using tessera::serve::error_body;
using tessera::serve::HttpRequest;
using tessera::serve::HttpResponse;
using tessera::serve::InferenceService;

struct Options {
  int threads = 2;
  int max_connections = 10000;
  int idle_timeout_s = 60;
};

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

struct Shared {
  InferenceService& service;
  Options options;
  std::atomic<int> connections{0};
  std::atomic<int> answering{0};  // requests read and not yet written back
};

// One connection: read a request, hand it to the service, write its reply
// (posted back from whichever thread answers), then read the next one.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, Shared& shared) : stream_(std::move(socket)), shared_(shared) { ++shared_.connections; }
  ~Session() { --shared_.connections; }

  void read() {
    parser_.emplace();
    parser_->body_limit(shared_.service.max_body_bytes());  // refused (413) before the body is read
    parser_->header_limit(64 * 1024);
    stream_.expires_after(std::chrono::seconds(shared_.options.idle_timeout_s));  // idle or slow clients are dropped
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
  }

 private:
  void on_read(beast::error_code ec) {
    if (ec == http::error::end_of_stream || ec == beast::error::timeout || ec == net::error::operation_aborted) {
      return close();
    }
    if (ec == http::error::body_limit) {
      return write_error(413, "the request body is larger than the server takes (" +
                                  std::to_string(shared_.service.max_body_bytes()) + " bytes)");
    }
    if (ec == http::error::header_limit) return write_error(431, "the request's headers exceed 64 KiB");
    if (ec) {
      // A malformed request: say so if the connection is still open, then close it.
      if (ec.category() == http::make_error_code(http::error::bad_target).category())
        return write_error(400, "the request is not valid HTTP/1.1 (" + ec.message() + ")");
      return close();
    }
    http::request<http::string_body> req = parser_->release();
    beast::error_code ignored;
    const tcp::endpoint peer = stream_.socket().remote_endpoint(ignored);
    keep_alive_ = req.keep_alive();
    version_ = req.version();
    HttpRequest r = tessera::serve::from_beast(std::move(req), peer.address().to_string() + ":" +
                                                                  std::to_string(peer.port()));
    stream_.expires_never();  // the service answers within its own timeouts
    ++shared_.answering;
    shared_.service.handle_async(std::move(r), [self = shared_from_this()](HttpResponse out) {
      // Called on a model worker for infer requests: the write runs on this connection's strand.
      net::post(self->stream_.get_executor(),
                [self, out = std::move(out)]() mutable { self->write(std::move(out), self->keep_alive_); });
    });
  }

  void write(HttpResponse out, bool keep_alive) {
    auto res = std::make_shared<http::response<http::string_body>>(
        tessera::serve::to_beast(std::move(out), keep_alive, version_));
    stream_.expires_after(std::chrono::seconds(shared_.options.idle_timeout_s));
    http::async_write(stream_, *res, [self = shared_from_this(), res](beast::error_code ec, size_t) {
      --self->shared_.answering;
      if (ec || !res->keep_alive()) return self->close();
      self->read();
    });
  }

  void write_error(int status, const std::string& message) {
    ++shared_.answering;
    HttpResponse out;
    out.status = status;
    out.body = error_body(message);
    write(std::move(out), false);
  }

  void close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  Shared& shared_;
  bool keep_alive_ = true;
  unsigned version_ = 11;
};

struct Server {
  Server(InferenceService& service, const Options& o) : shared{service, o}, io(o.threads) {}

  void accept() {
    acceptor->async_accept(net::make_strand(io), [this](beast::error_code ec, tcp::socket socket) {
      if (ec == net::error::operation_aborted || !acceptor->is_open()) return;
      if (!ec) {
        if (shared.connections.load() >= shared.options.max_connections) {
          beast::error_code ignored;
          socket.close(ignored);  // over the limit: refused, not queued
        } else {
          socket.set_option(tcp::no_delay(true));  // else each response waits ~40 ms on Nagle
          std::make_shared<Session>(std::move(socket), shared)->read();
        }
      }
      accept();
    });
  }

  Shared shared;
  net::io_context io;
  // Keeps the I/O threads running while requests wait for their batch with
  // no socket operation pending (once the acceptor closes, nothing else would).
  net::executor_work_guard<net::io_context::executor_type> keep_running = net::make_work_guard(io);
  std::optional<tcp::acceptor> acceptor;
  std::vector<std::thread> threads;
};


}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: tessera_serve_beast REPOSITORY PORT [IO_THREADS]\n");
    return 2;
  }
  InferenceService service;
  service.load_repository(argv[1]);
  Options o;
  if (argc > 3) o.threads = std::atoi(argv[3]);
  Server server(service, o);
  server.acceptor.emplace(server.io, tcp::endpoint(net::ip::make_address("127.0.0.1"),
                                                   static_cast<unsigned short>(std::atoi(argv[2]))));
  server.accept();
  net::signal_set signals(server.io, SIGINT, SIGTERM);
  signals.async_wait([&](beast::error_code, int) {
    server.acceptor->close();
    server.keep_running.reset();
    server.io.stop();
  });
  std::printf("listening on http://127.0.0.1:%s/v2\n", argv[2]);
  std::fflush(stdout);
  for (int i = 0; i < o.threads; ++i) server.threads.emplace_back([&] { server.io.run(); });
  for (auto& t : server.threads) t.join();
  service.drain();
  return 0;
}
