// HTTP/1.1 for the inference service (serve/http_server.h): Boost.Beast's
// parser and serializer over blocking sockets, a thread per connection.
//
// Why this shape, from the load test (docs/serving.md): on 2 vCPUs the
// kernel's loopback TCP and wake-ups cost more than anything Tessera does per
// request, so the transport is chosen by its system calls. A request here is a
// recv (or two) and one sendmsg for the whole response; the connection's
// thread waits for its batch on a futex. cpp-httplib used ~17 system calls per
// request (a poll before every read and write, headers and body sent apart,
// getpeername/getsockname per request) and an asynchronous Asio server paid
// for cross-thread posts and per-operation timers.
#include "tessera/serve/http_server.h"

#include "serve/beast_message.h"  // first: Boost 1.74's Asio needs <utility> before it

#include <boost/beast/core.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

#include "tessera/core/error.h"

namespace tessera::serve {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;

namespace {

// A connected socket as Beast's SyncReadStream/SyncWriteStream: recv and
// sendmsg straight on the descriptor. SO_RCVTIMEO bounds every read, so an
// idle or slow client times out without a timer per operation.
class Socket {
 public:
  explicit Socket(int fd) : fd_(fd) {}

  template <class Buffers>
  size_t read_some(const Buffers& buffers, beast::error_code& ec) {
    ec = {};
    for (auto it = net::buffer_sequence_begin(buffers); it != net::buffer_sequence_end(buffers); ++it) {
      net::mutable_buffer b(*it);
      if (b.size() == 0) continue;
      for (;;) {
        const ssize_t n = ::recv(fd_, b.data(), b.size(), 0);
        if (n > 0) return static_cast<size_t>(n);
        if (n == 0) ec = net::error::eof;
        else if (errno == EINTR) continue;
        else if (errno == EAGAIN || errno == EWOULDBLOCK) ec = net::error::timed_out;
        else ec = beast::error_code(errno, beast::system_category());
        return 0;
      }
    }
    return 0;
  }
  template <class Buffers>
  size_t read_some(const Buffers& buffers) {
    beast::error_code ec;
    const size_t n = read_some(buffers, ec);
    if (ec) throw beast::system_error(ec);
    return n;
  }

  template <class Buffers>
  size_t write_some(const Buffers& buffers, beast::error_code& ec) {
    ec = {};
    iovec iov[16];
    int count = 0;
    for (auto it = net::buffer_sequence_begin(buffers); it != net::buffer_sequence_end(buffers) && count < 16; ++it) {
      net::const_buffer b(*it);
      if (b.size() == 0) continue;
      iov[count].iov_base = const_cast<void*>(b.data());
      iov[count].iov_len = b.size();
      ++count;
    }
    if (count == 0) return 0;
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(count);
    for (;;) {
      const ssize_t n = ::sendmsg(fd_, &msg, MSG_NOSIGNAL);
      if (n >= 0) return static_cast<size_t>(n);
      if (errno == EINTR) continue;
      ec = errno == EAGAIN || errno == EWOULDBLOCK ? beast::error_code(net::error::timed_out)
                                                   : beast::error_code(errno, beast::system_category());
      return 0;
    }
  }
  template <class Buffers>
  size_t write_some(const Buffers& buffers) {
    beast::error_code ec;
    const size_t n = write_some(buffers, ec);
    if (ec) throw beast::system_error(ec);
    return n;
  }

 private:
  int fd_;
};

std::string peer_of(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return "";
  char host[INET6_ADDRSTRLEN] = "";
  int port = 0;
  if (a.ss_family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&a);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    port = ntohs(in->sin_port);
  } else if (a.ss_family == AF_INET6) {
    auto* in = reinterpret_cast<sockaddr_in6*>(&a);
    ::inet_ntop(AF_INET6, &in->sin6_addr, host, sizeof host);
    port = ntohs(in->sin6_port);
  }
  return std::string(host) + ":" + std::to_string(port);
}

// A request's answer on its connection: a whole response, or a chunked one
// written as the handler makes it.
class Exchange final : public HttpExchange {
 public:
  Exchange(Socket& socket, int fd, bool keep_alive, unsigned version)
      : socket_(socket), fd_(fd), keep_alive_(keep_alive), version_(version) {}

  bool send(HttpResponse response) override {
    if (state_ != State::Idle) return false;
    state_ = State::Done;
    http::response<http::string_body> res = to_beast(std::move(response), keep_alive_, version_);
    beast::error_code ec;
    http::write(socket_, res, ec);  // the header and body in one sendmsg
    ok_ = !ec;
    return ok_;
  }

  bool begin_stream(int status, const std::string& content_type, const HttpHeaders& headers) override {
    if (state_ != State::Idle) return false;
    state_ = State::Streaming;
    http::response<http::empty_body> res{static_cast<http::status>(status), version_};
    res.set(http::field::server, "tessera");
    res.set(http::field::content_type, content_type);
    for (const auto& [k, v] : headers) res.set(k, v);
    res.keep_alive(keep_alive_);
    res.chunked(true);
    http::response_serializer<http::empty_body> sr{res};
    beast::error_code ec;
    http::write_header(socket_, sr, ec);
    ok_ = !ec;
    return ok_;
  }

  bool write(std::string_view data) override {
    if (state_ != State::Streaming || !ok_) return false;
    if (data.empty()) return true;  // an empty chunk would end the body
    char size[24];
    const int n = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
    const std::array<net::const_buffer, 3> chunk{net::const_buffer(size, static_cast<size_t>(n)),
                                                 net::const_buffer(data.data(), data.size()),
                                                 net::const_buffer("\r\n", 2)};
    beast::error_code ec;
    net::write(socket_, chunk, ec);
    ok_ = !ec;
    return ok_;
  }

  bool end_stream() override {
    if (state_ != State::Streaming) return false;
    state_ = State::Done;
    if (!ok_) return false;
    beast::error_code ec;
    net::write(socket_, net::const_buffer("0\r\n\r\n", 5), ec);
    ok_ = !ec;
    return ok_;
  }

  bool client_gone() override {
    if (!ok_) return true;
    pollfd p{fd_, POLLRDHUP, 0};
    return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
  }

  // After the handler: a stream it left open is ended, no answer at all is a 500.
  bool close() {
    if (state_ == State::Streaming) end_stream();
    if (state_ == State::Idle) {
      HttpResponse out;
      out.status = 500;
      out.body = error_body("an internal error");
      send(std::move(out));
    }
    return ok_;
  }

 private:
  enum class State { Idle, Streaming, Done };
  Socket& socket_;
  int fd_;
  bool keep_alive_;
  unsigned version_;
  State state_ = State::Idle;
  bool ok_ = true;
};

}  // namespace

struct HttpServer::Impl {
  HttpHandler handler;
  size_t max_body_bytes;
  HttpServerOptions options;
  int listen_fd = -1;
  int port = 0;
  std::thread acceptor;
  std::mutex mu;
  std::condition_variable cv;
  std::set<int> connections;  // open connection sockets, shut down by stop()
  int answering = 0;          // connections between reading a request and writing its response
  bool stopping = false;

  Impl(HttpHandler h, size_t max_body, const HttpServerOptions& o)
      : handler(std::move(h)), max_body_bytes(max_body), options(o) {}

  void accept_loop() {
    for (;;) {
      {
        // At most `threads` connections; later ones wait in the listen backlog.
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stopping || static_cast<int>(connections.size()) < options.threads; });
        if (stopping) return;
      }
      const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EMFILE || errno == ENFILE) {
          // Out of descriptors: the connection waits in the backlog; do not spin on it.
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          continue;
        }
        return;  // the listening socket was shut down
      }
      std::lock_guard<std::mutex> lock(mu);
      if (stopping) {
        ::close(fd);
        return;
      }
      connections.insert(fd);
      std::thread([this, fd] { serve(fd); }).detach();
    }
  }

  void serve(int fd) {
    int yes = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);  // else each response waits ~40 ms on Nagle
    timeval idle{options.idle_timeout_s, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &idle, sizeof idle);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &idle, sizeof idle);
    Socket socket(fd);
    const std::string remote = peer_of(fd);
    // Beast reads as much as the buffer has room for: reserved up front, a
    // request arrives in one or two recv calls instead of ~10 of 512 bytes.
    beast::flat_buffer buffer;
    buffer.reserve(64 * 1024);
    for (;;) {
      http::request_parser<http::string_body> parser;
      parser.body_limit(max_body_bytes);  // refused (413) before the body is read
      parser.header_limit(64 * 1024);
      beast::error_code ec;
      http::read(socket, buffer, parser, ec);
      if (ec == http::error::body_limit) {
        reply_error(socket, 413, "the request body is larger than the server takes (" +
                                     std::to_string(max_body_bytes) + " bytes)");
        break;
      }
      if (ec == http::error::header_limit) {
        reply_error(socket, 431, "the request's headers exceed 64 KiB");
        break;
      }
      if (ec && ec.category() == http::make_error_code(http::error::bad_target).category() &&
          ec != http::error::end_of_stream && ec != http::error::partial_message) {
        reply_error(socket, 400, "the request is not valid HTTP/1.1 (" + ec.message() + ")");
        break;
      }
      if (ec) break;  // closed, timed out or reset
      {
        // A request read in full is answered, even while stop() runs.
        std::lock_guard<std::mutex> lock(mu);
        ++answering;
      }
      http::request<http::string_body> req = parser.release();
      const bool keep_alive = req.keep_alive();
      const unsigned version = req.version();
      Exchange exchange(socket, fd, keep_alive, version);
      try {
        handler(from_beast(std::move(req), remote), exchange);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "serve: a handler failed: %s\n", e.what());
      }
      const bool written = exchange.close();
      bool stop_now;
      {
        std::lock_guard<std::mutex> lock(mu);
        --answering;
        stop_now = stopping;
      }
      cv.notify_all();
      if (!written || !keep_alive || stop_now) break;
    }
    {
      // The last touch of this object: stop() may return (and the server be
      // destroyed) as soon as the lock is released. The descriptor is closed
      // after, so stop() never shuts down a number another open reused.
      std::lock_guard<std::mutex> lock(mu);
      connections.erase(fd);
      cv.notify_all();
    }
    ::shutdown(fd, SHUT_RDWR);
    ::close(fd);
  }

  static void reply_error(Socket& socket, int status, const std::string& message) {
    HttpResponse out;
    out.status = status;
    out.body = error_body(message);
    Exchange(socket, -1, false, 11).send(std::move(out));
  }
};

HttpServer::HttpServer(InferenceService& service, const HttpServerOptions& o)
    : HttpServer([&service](HttpRequest r, HttpExchange& x) { x.send(service.handle(std::move(r))); },
                 service.max_body_bytes(), o) {}

HttpServer::HttpServer(HttpHandler handler, size_t max_body_bytes, const HttpServerOptions& o)
    : impl_(new Impl(std::move(handler), max_body_bytes, o)) {
  TS_CHECK(o.port >= 0 && o.port <= 65535, "serve: port must be in 0..65535, got ", o.port);
  TS_CHECK(o.threads >= 1 && o.threads <= 4096, "serve: threads must be in 1..4096, got ", o.threads);
  TS_CHECK(o.idle_timeout_s >= 1, "serve: idle_timeout_s must be at least 1, got ", o.idle_timeout_s);
  in6_addr v6{};
  in_addr v4{};
  const bool ipv6 = ::inet_pton(AF_INET6, o.host.c_str(), &v6) == 1;
  TS_CHECK(ipv6 || ::inet_pton(AF_INET, o.host.c_str(), &v4) == 1, "serve: --host '", o.host,
           "' is not an IP address (127.0.0.1 for this machine only, 0.0.0.0 for every interface)");
  const int fd = ::socket(ipv6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  TS_CHECK(fd >= 0, "serve: cannot make a socket: ", std::strerror(errno));
  // SO_REUSEADDR only: SO_REUSEPORT would let a second server bind the same port and take half the traffic.
  int yes = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  int rc;
  if (ipv6) {
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = v6;
    a.sin6_port = htons(static_cast<uint16_t>(o.port));
    rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  } else {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr = v4;
    a.sin_port = htons(static_cast<uint16_t>(o.port));
    rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  }
  if (rc == 0) rc = ::listen(fd, SOMAXCONN);
  if (rc != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    TS_ERROR("serve: cannot listen on ", o.host, ":", o.port, " (", why,
             "); choose another --port, or 0 for any free port");
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  impl_->port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                                  : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  impl_->listen_fd = fd;
  impl_->acceptor = std::thread([this] { impl_->accept_loop(); });
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::port() const { return impl_->port; }

void HttpServer::stop() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->stopping) return;
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  ::shutdown(impl_->listen_fd, SHUT_RDWR);  // wakes the blocked accept
  if (impl_->acceptor.joinable()) impl_->acceptor.join();
  ::close(impl_->listen_fd);
  std::unique_lock<std::mutex> lock(impl_->mu);
  // Requests already read are answered; connections idle between requests are shut down.
  impl_->cv.wait(lock, [&] { return impl_->answering == 0; });
  for (int fd : impl_->connections) ::shutdown(fd, SHUT_RD);
  impl_->cv.wait(lock, [&] { return impl_->connections.empty(); });
}

}  // namespace tessera::serve
