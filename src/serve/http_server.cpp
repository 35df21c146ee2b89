// HTTP/1.1 for the services (serve/http_server.h): Boost.Beast's parser and
// serializer over plain sockets. One thread reads every connection's
// requests (epoll), under deadlines and caps; a pool of `threads` workers
// answers the requests read in full.
//
// Why this shape, from the load test (docs/serving.md): on 2 vCPUs the
// kernel's loopback TCP and wake-ups cost more than anything Tessera does per
// request, so the transport is chosen by its system calls. A request here is a
// recv (or two) and one sendmsg for the whole response. cpp-httplib used ~17
// system calls per request (a poll before every read and write, headers and
// body sent apart, getpeername/getsockname per request) and an asynchronous
// Asio server paid for cross-thread posts and per-operation timers.
//
// Note [Slow clients]
// A thread per connection let 64 clients that never finish their headers
// take every thread, and a client sending a byte every 29 s kept its thread
// forever. Now no thread waits on a client's pace: the reading thread holds
// each connection's bytes until its request is whole, and a worker is
// handed only whole requests. Every request has a deadline for its headers
// (header_timeout_s from its first byte) and one for its body
// (body_timeout_s from its headers), however it trickles; a connection idle
// between requests closes after idle_timeout_s. A client address may hold
// max_connections_per_client connections; one more is refused at once (429),
// not queued, and so is any past max_connections (503). The bytes held for
// requests still arriving are bounded by max_buffered_bytes.
#include "tessera/serve/http_server.h"

#include "serve/beast_message.h"  // first: Boost 1.74's Asio needs <utility> before it

#include <boost/beast/core.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <optional>
#include <unordered_map>
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

// A connected, non-blocking socket as Beast's SyncWriteStream: sendmsg
// straight on the descriptor, waiting up to `timeout_ms` for room whenever
// the client reads too slowly.
class Socket {
 public:
  Socket(int fd, int timeout_ms) : fd_(fd), timeout_ms_(timeout_ms) {}

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
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        pollfd p{fd_, POLLOUT, 0};
        const int r = ::poll(&p, 1, timeout_ms_);
        if (r > 0 || (r < 0 && errno == EINTR)) continue;
        ec = net::error::timed_out;
        return 0;
      }
      ec = beast::error_code(errno, beast::system_category());
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
  int timeout_ms_;
};

// A peer's address (its IP) and port.
std::pair<std::string, int> peer_of(const sockaddr_storage& a) {
  char host[INET6_ADDRSTRLEN] = "";
  int port = 0;
  if (a.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&a);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    port = ntohs(in->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* in = reinterpret_cast<const sockaddr_in6*>(&a);
    ::inet_ntop(AF_INET6, &in->sin6_addr, host, sizeof host);
    port = ntohs(in->sin6_port);
  }
  return {host, port};
}

using Clock = std::chrono::steady_clock;
using Parser = http::request_parser<http::string_body>;

// A client's connection: the bytes read and the request they are making.
struct Conn {
  int fd = -1;
  std::string address, remote;  // "127.0.0.1", "127.0.0.1:51234"
  beast::flat_buffer buffer;
  std::optional<Parser> parser;
  enum class Phase { Idle, Header, Body, Answering } phase = Phase::Idle;
  Clock::time_point deadline;
  size_t held = 0;  // bytes counted in Impl::buffered
};

// A whole response written at once on a connection about to close, best
// effort (the refusals of the reading thread, which never waits).
void refuse(int fd, int status, const char* reason, const std::string& message) {
  const std::string body = error_body(message);
  const std::string text = "HTTP/1.1 " + std::to_string(status) + " " + reason +
                           "\r\nServer: tessera\r\nContent-Type: application/json\r\nConnection: close\r\n"
                           "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  [[maybe_unused]] const ssize_t n = ::send(fd, text.data(), text.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
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
  int listen_fd = -1, epoll_fd = -1, wake_fd = -1;
  int port = 0;
  std::thread reader;
  std::vector<std::thread> workers;

  std::mutex mu;
  std::condition_variable cv;  // workers wait for requests
  std::unordered_map<int, std::unique_ptr<Conn>> conns;  // every open connection, by descriptor
  std::unordered_map<std::string, int> per_address;      // open connections of each client address
  std::deque<Conn*> ready;                                // requests read in full, waiting for a worker
  size_t buffered = 0;                                    // bytes held for requests still arriving
  bool stopping = false, reading_done = false;

  Impl(HttpHandler h, size_t max_body, const HttpServerOptions& o)
      : handler(std::move(h)), max_body_bytes(max_body), options(o) {}

  static Clock::time_point after(int seconds) { return Clock::now() + std::chrono::seconds(seconds); }

  // ---- the reading thread ----

  void read_loop() {
    std::vector<epoll_event> events(256);
    auto next_sweep = Clock::now();
    for (;;) {
      const int n = ::epoll_wait(epoll_fd, events.data(), static_cast<int>(events.size()), 200);
      {
        std::lock_guard<std::mutex> lock(mu);
        if (stopping) break;
      }
      for (int k = 0; k < n; ++k) {
        const int fd = events[k].data.fd;
        if (fd == listen_fd) accept_all();
        else if (fd != wake_fd) on_readable(fd);
      }
      if (Clock::now() >= next_sweep) {  // deadlines, checked five times a second
        close_late();
        next_sweep = Clock::now() + std::chrono::milliseconds(200);
      }
    }
    // Stopping: connections not being answered close now; the workers close theirs.
    std::lock_guard<std::mutex> lock(mu);
    std::vector<int> idle;
    for (auto& [fd, c] : conns)
      if (c->phase != Conn::Phase::Answering) idle.push_back(fd);  // queued requests are Answering too
    for (int fd : idle) close_locked(fd);
    reading_done = true;
    cv.notify_all();
  }

  void accept_all() {
    for (;;) {
      sockaddr_storage peer{};
      socklen_t len = sizeof peer;
      const int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        // Out of descriptors: the connection waits in the backlog; do not spin on it.
        if (errno == EMFILE || errno == ENFILE) std::this_thread::sleep_for(std::chrono::milliseconds(50));
        return;  // EAGAIN: none left
      }
      auto [address, peer_port] = peer_of(peer);
      std::lock_guard<std::mutex> lock(mu);
      if (static_cast<int>(conns.size()) >= options.max_connections) {
        refuse(fd, 503, "Service Unavailable",
               "the server holds its most connections (" + std::to_string(options.max_connections) + "); try again");
        ::close(fd);
        continue;
      }
      int& mine = per_address[address];
      if (mine >= options.max_connections_per_client) {
        refuse(fd, 429, "Too Many Requests",
               "too many connections from " + address + " (at most " +
                   std::to_string(options.max_connections_per_client) + " at once)");
        ::close(fd);
        continue;
      }
      ++mine;
      int yes = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);  // else each response waits ~40 ms on Nagle
      auto c = std::make_unique<Conn>();
      c->fd = fd;
      c->address = address;
      c->remote = address + ":" + std::to_string(peer_port);
      c->deadline = after(options.idle_timeout_s);
      conns.emplace(fd, std::move(c));
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT;
      ev.data.fd = fd;
      ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev);
    }
  }

  // Reads what the client sent; a whole request goes to the workers.
  void on_readable(int fd) {
    Conn* c;
    {
      std::lock_guard<std::mutex> lock(mu);
      auto it = conns.find(fd);
      if (it == conns.end()) return;
      c = it->second.get();
    }
    for (;;) {
      const size_t room = std::clamp<size_t>(c->buffer.capacity() - c->buffer.size(), 4096, 64 * 1024);
      auto buf = c->buffer.prepare(room);
      const ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
      if (n > 0) {
        c->buffer.commit(static_cast<size_t>(n));
        if (!parse(*c)) return;  // answered with an error and closed, or handed to a worker
        if (static_cast<size_t>(n) < buf.size()) break;
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      std::lock_guard<std::mutex> lock(mu);  // closed by the client, or reset
      close_locked(fd);
      return;
    }
    rearm(*c);
  }

  // Feeds the buffered bytes to the request's parser. False when the
  // connection left the reading thread: its request is whole (queued for a
  // worker) or bad (answered and closed). `rearm`: a connection still
  // reading is handed back to epoll here (a worker's, under the lock).
  bool parse(Conn& c, bool rearm_if_reading = false) {
    if (!c.parser) {
      c.parser.emplace();
      c.parser->body_limit(max_body_bytes);  // refused (413) before the body is read
      c.parser->header_limit(64 * 1024);
      c.parser->eager(true);
    }
    beast::error_code ec;
    while (c.buffer.size() > 0 && !c.parser->is_done()) {
      const size_t used = c.parser->put(c.buffer.data(), ec);
      c.buffer.consume(used);
      if (ec == http::error::need_more) {
        ec = {};
        break;
      }
      if (ec || used == 0) break;
    }
    std::lock_guard<std::mutex> lock(mu);
    if (ec) {
      if (ec == http::error::body_limit)
        refuse(c.fd, 413, "Payload Too Large",
               "the request body is larger than the server takes (" + std::to_string(max_body_bytes) + " bytes)");
      else if (ec == http::error::header_limit)
        refuse(c.fd, 431, "Request Header Fields Too Large", "the request's headers exceed 64 KiB");
      else
        refuse(c.fd, 400, "Bad Request", "the request is not valid HTTP/1.1 (" + ec.message() + ")");
      close_locked(c.fd);
      return false;
    }
    buffered -= c.held;
    c.held = c.parser->is_done() ? 0 : c.buffer.size() + c.parser->get().body().size();
    buffered += c.held;
    if (c.parser->is_done()) {
      c.phase = Conn::Phase::Answering;
      ready.push_back(&c);
      cv.notify_one();  // one worker, not all of them, per request
      return false;
    }
    if (buffered > options.max_buffered_bytes) {
      refuse(c.fd, 503, "Service Unavailable", "the server holds too many requests still arriving; try again");
      close_locked(c.fd);
      return false;
    }
    // Still arriving: the headers' deadline from the first byte, the body's from the headers.
    if (c.parser->is_header_done()) {
      if (c.phase != Conn::Phase::Body) c.phase = Conn::Phase::Body, c.deadline = after(options.body_timeout_s);
    } else if (c.phase != Conn::Phase::Header) {
      c.phase = Conn::Phase::Header, c.deadline = after(options.header_timeout_s);
    }
    if (rearm_if_reading) {
      if (stopping) {  // the reading thread has ended: nobody would read the rest
        close_locked(c.fd);
        return false;
      }
      rearm(c);
    }
    return true;
  }

  void rearm(Conn& c) {
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT;
    ev.data.fd = c.fd;
    ::epoll_ctl(epoll_fd, EPOLL_CTL_MOD, c.fd, &ev);
  }

  // Connections past their deadline: a request's headers or body too slow,
  // or idle too long between requests.
  void close_late() {
    const auto now = Clock::now();
    std::lock_guard<std::mutex> lock(mu);
    std::vector<int> late;
    for (auto& [fd, c] : conns)
      if (c->phase != Conn::Phase::Answering && now > c->deadline) late.push_back(fd);
    for (int fd : late) {
      Conn& c = *conns[fd];
      if (c.phase == Conn::Phase::Header)
        refuse(fd, 408, "Request Timeout",
               "the request's headers took longer than " + std::to_string(options.header_timeout_s) + " s");
      else if (c.phase == Conn::Phase::Body)
        refuse(fd, 408, "Request Timeout",
               "the request's body took longer than " + std::to_string(options.body_timeout_s) + " s");
      close_locked(fd);
    }
  }

  // Closes and forgets a connection (mu held). Its descriptor is closed last,
  // so no other open can reuse the number while it is still in the table.
  void close_locked(int fd) {
    auto it = conns.find(fd);
    if (it == conns.end()) return;
    buffered -= it->second->held;
    if (--per_address[it->second->address] == 0) per_address.erase(it->second->address);
    ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, fd, nullptr);
    conns.erase(it);
    ::shutdown(fd, SHUT_RDWR);
    ::close(fd);
  }

  // ---- the workers ----

  void work_loop() {
    for (;;) {
      Conn* c;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return !ready.empty() || reading_done; });
        if (ready.empty()) return;  // stopping, and every request read has been answered
        c = ready.front();
        ready.pop_front();
      }
      const bool again = answer(*c);
      {
        std::lock_guard<std::mutex> lock(mu);
        if (!again || stopping) {
          close_locked(c->fd);
          continue;
        }
        c->parser.reset();
        if (c->buffer.size() == 0) {  // back to the reading thread, idle
          c->phase = Conn::Phase::Idle;
          c->deadline = after(options.idle_timeout_s);
          rearm(*c);
          continue;
        }
      }
      // Keep-alive with the next request's bytes already here (pipelined):
      // parsed now, still owned by this worker until parse hands it on.
      parse(*c, true);
    }
  }

  // Hands the request to the handler and writes its answer; whether the
  // connection stays open for another.
  bool answer(Conn& c) {
    http::request<http::string_body> req = c.parser->release();
    const bool keep_alive = req.keep_alive();
    Socket socket(c.fd, options.idle_timeout_s * 1000);
    Exchange exchange(socket, c.fd, keep_alive, req.version());
    try {
      handler(from_beast(std::move(req), c.remote), exchange);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "serve: a handler failed: %s\n", e.what());
    }
    return exchange.close() && keep_alive;
  }
};

HttpServer::HttpServer(InferenceService& service, const HttpServerOptions& o)
    : HttpServer([&service](HttpRequest r, HttpExchange& x) { x.send(service.handle(std::move(r))); },
                 service.max_body_bytes(), o) {}

HttpServer::HttpServer(HttpHandler handler, size_t max_body_bytes, const HttpServerOptions& o)
    : impl_(new Impl(std::move(handler), max_body_bytes, o)) {
  TS_CHECK(o.port >= 0 && o.port <= 65535, "serve: port must be in 0..65535, got ", o.port);
  TS_CHECK(o.threads >= 1 && o.threads <= 4096, "serve: threads must be in 1..4096, got ", o.threads);
  TS_CHECK(o.idle_timeout_s >= 1 && o.header_timeout_s >= 1 && o.body_timeout_s >= 1,
           "serve: the idle, header and body timeouts must be at least 1 s, got ", o.idle_timeout_s, ", ",
           o.header_timeout_s, " and ", o.body_timeout_s);
  TS_CHECK(o.max_connections >= 1 && o.max_connections_per_client >= 1,
           "serve: max_connections and max_connections_per_client must be at least 1, got ", o.max_connections,
           " and ", o.max_connections_per_client);
  in6_addr v6{};
  in_addr v4{};
  const bool ipv6 = ::inet_pton(AF_INET6, o.host.c_str(), &v6) == 1;
  TS_CHECK(ipv6 || ::inet_pton(AF_INET, o.host.c_str(), &v4) == 1, "serve: --host '", o.host,
           "' is not an IP address (127.0.0.1 for this machine only, 0.0.0.0 for every interface)");
  const int fd = ::socket(ipv6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
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
  impl_->epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  impl_->wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  TS_CHECK(impl_->epoll_fd >= 0 && impl_->wake_fd >= 0, "serve: cannot make an epoll set: ", std::strerror(errno));
  for (int watched : {fd, impl_->wake_fd}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = watched;
    ::epoll_ctl(impl_->epoll_fd, EPOLL_CTL_ADD, watched, &ev);
  }
  impl_->reader = std::thread([this] { impl_->read_loop(); });
  for (int k = 0; k < o.threads; ++k) impl_->workers.emplace_back([this] { impl_->work_loop(); });
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::port() const { return impl_->port; }

void HttpServer::stop() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->stopping) return;
    impl_->stopping = true;
  }
  // The reading thread closes the connections not being answered and ends;
  // the workers answer every request read in full, then end.
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(impl_->wake_fd, &one, sizeof one);
  if (impl_->reader.joinable()) impl_->reader.join();
  for (std::thread& w : impl_->workers) w.join();
  ::close(impl_->listen_fd);
  ::close(impl_->epoll_fd);
  ::close(impl_->wake_fd);
}

}  // namespace tessera::serve
