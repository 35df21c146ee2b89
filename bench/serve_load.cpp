// tessera_serve_load: an open-loop HTTP/1.1 load generator for `tessera serve`
// (bench/serve_bench.py drives it).
//
//   tessera_serve_load --port 8000 --path /v2/models/mlp/infer --body req.json
//                      [--header 'Inference-Header-Content-Length: 123']
//                      [--connections 64] [--rate 1000 | --rate 0] [--duration 10] [--warmup 2]
//
// --rate R sends R requests per second on a fixed schedule whatever the
// server does (open loop): a request whose turn comes while every connection
// is busy waits, and its latency counts from its scheduled time, so a slow
// server cannot hide its queueing (no coordinated omission). --rate 0 is a
// closed loop: each connection sends again as soon as it has its answer (the
// maximum throughput). One thread, epoll, keep-alive connections.
//
// Prints one JSON line: offered and achieved requests per second, latency
// percentiles in ms over the measured window, and errors (non-200 answers,
// broken connections).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string host = "127.0.0.1", path, body_file;
  std::vector<std::string> headers;
  int port = 8000, connections = 64;
  double rate = 0, duration = 10, warmup = 2;
};

struct Connection {
  int fd = -1;
  bool busy = false;
  size_t sent = 0;             // bytes of the request written so far
  Clock::time_point scheduled;  // when the request in flight was due
  std::string in;
};

[[noreturn]] void fail(const std::string& why) {
  std::fprintf(stderr, "tessera_serve_load: %s\n", why.c_str());
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) fail("option " + a + " needs a value");
    const std::string v = argv[++i];
    if (a == "--host") o.host = v;
    else if (a == "--port") o.port = std::stoi(v);
    else if (a == "--path") o.path = v;
    else if (a == "--body") o.body_file = v;
    else if (a == "--header") o.headers.push_back(v);
    else if (a == "--connections") o.connections = std::stoi(v);
    else if (a == "--rate") o.rate = std::stod(v);
    else if (a == "--duration") o.duration = std::stod(v);
    else if (a == "--warmup") o.warmup = std::stod(v);
    else fail("unknown option " + a);
  }
  if (o.path.empty() || o.body_file.empty()) fail("--path and --body are required");
  if (o.connections < 1 || o.connections > 10000) fail("--connections must be in 1..10000");
  if (o.rate < 0 || o.duration <= 0 || o.warmup < 0) fail("--rate >= 0, --duration > 0 and --warmup >= 0");
  return o;
}

int connect_to(const Options& o) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  if (fd < 0) fail("socket: " + std::string(std::strerror(errno)));
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(o.port));
  if (::inet_pton(AF_INET, o.host.c_str(), &a.sin_addr) != 1) fail("--host must be an IPv4 address");
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) < 0 && errno != EINPROGRESS)
    fail("connect: " + std::string(std::strerror(errno)));
  return fd;
}

// The status and total length of the first complete response in `in`, or 0 when it is not all there yet.
size_t complete_response(const std::string& in, int& status) {
  const size_t end = in.find("\r\n\r\n");
  if (end == std::string::npos) return 0;
  if (in.size() < 12 || in.compare(0, 5, "HTTP/") != 0) throw std::runtime_error("not an HTTP response");
  status = std::atoi(in.c_str() + 9);
  size_t length = 0;
  std::istringstream lines(in.substr(0, end));
  std::string line;
  while (std::getline(lines, line)) {
    std::string lower = line;
    std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
    if (lower.rfind("content-length:", 0) == 0) length = std::strtoull(line.c_str() + 15, nullptr, 10);
  }
  return in.size() >= end + 4 + length ? end + 4 + length : 0;
}

double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  std::ifstream f(o.body_file, std::ios::binary);
  if (!f) fail("cannot read --body " + o.body_file);
  const std::string body((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::string request = "POST " + o.path + " HTTP/1.1\r\nHost: " + o.host + "\r\nContent-Type: application/" +
                        (o.headers.empty() ? "json" : "octet-stream") + "\r\nContent-Length: " +
                        std::to_string(body.size()) + "\r\n";
  for (const auto& h : o.headers) request += h + "\r\n";
  request += "\r\n" + body;

  const int ep = ::epoll_create1(0);
  std::vector<Connection> conns(static_cast<size_t>(o.connections));
  auto open = [&](size_t i) {
    conns[i] = Connection{};
    conns[i].fd = connect_to(o);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = i;
    ::epoll_ctl(ep, EPOLL_CTL_ADD, conns[i].fd, &ev);
  };
  for (size_t i = 0; i < conns.size(); ++i) open(i);

  const Clock::time_point start = Clock::now();
  const Clock::time_point measure_from = start + std::chrono::duration_cast<Clock::duration>(
                                                     std::chrono::duration<double>(o.warmup));
  const Clock::time_point stop_sending = measure_from + std::chrono::duration_cast<Clock::duration>(
                                                            std::chrono::duration<double>(o.duration));
  const auto interval = o.rate > 0 ? std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(1 / o.rate))
                                   : Clock::duration::zero();
  Clock::time_point next = start;
  std::deque<Clock::time_point> backlog;  // requests due but waiting for a free connection
  std::vector<double> latencies;
  std::map<int, long> statuses;
  long broken = 0, done_in_window = 0, in_flight = 0;
  bool overloaded = false;

  auto send_more = [&](size_t i) {
    Connection& c = conns[i];
    while (c.sent < request.size()) {
      const ssize_t n = ::send(c.fd, request.data() + c.sent, request.size() - c.sent, MSG_NOSIGNAL);
      if (n > 0) {
        c.sent += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      return false;
    }
    epoll_event ev{};
    ev.events = EPOLLIN | (c.sent < request.size() ? EPOLLOUT : 0);
    ev.data.u64 = i;
    ::epoll_ctl(ep, EPOLL_CTL_MOD, c.fd, &ev);
    return true;
  };
  auto start_request = [&](size_t i, Clock::time_point due) {
    Connection& c = conns[i];
    c.busy = true;
    c.sent = 0;
    c.scheduled = due;
    ++in_flight;
    if (!send_more(i)) {
      ++broken;
      --in_flight;
      ::close(c.fd);
      open(i);
    }
  };

  std::vector<epoll_event> events(conns.size());
  while (true) {
    const Clock::time_point now = Clock::now();
    const bool sending = now < stop_sending && !overloaded;
    if (sending && o.rate > 0) {
      while (next <= now) {
        backlog.push_back(next);
        next += interval;
      }
      if (backlog.size() > 1'000'000) overloaded = true;
    }
    for (size_t i = 0; i < conns.size(); ++i) {
      if (conns[i].busy) continue;
      if (o.rate > 0 && !backlog.empty()) {
        start_request(i, backlog.front());
        backlog.pop_front();
      } else if (o.rate == 0 && sending) {
        start_request(i, now);
      }
    }
    if (!sending && in_flight == 0) break;
    if (!sending && now > stop_sending + std::chrono::seconds(30)) break;  // answers that never come

    timespec timeout{0, 100'000'000};
    if (sending && o.rate > 0) {
      const auto wait = std::max(Clock::duration::zero(), next - Clock::now());
      timeout.tv_nsec = std::min<long>(100'000'000, std::chrono::duration_cast<std::chrono::nanoseconds>(wait).count());
    }
    const int n = ::epoll_pwait2(ep, events.data(), static_cast<int>(events.size()), &timeout, nullptr);
    for (int k = 0; k < n; ++k) {
      const size_t i = events[k].data.u64;
      Connection& c = conns[i];
      if (events[k].events & EPOLLOUT) send_more(i);
      if (!(events[k].events & (EPOLLIN | EPOLLERR | EPOLLHUP))) continue;
      char buf[65536];
      bool closed = false;
      while (true) {
        const ssize_t r = ::recv(c.fd, buf, sizeof buf, 0);
        if (r > 0) {
          c.in.append(buf, static_cast<size_t>(r));
          continue;
        }
        if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) closed = true;
        break;
      }
      int status = 0;
      size_t used = 0;
      try {
        used = c.busy ? complete_response(c.in, status) : 0;
      } catch (const std::exception&) {
        closed = true;
      }
      if (used > 0) {
        const Clock::time_point t = Clock::now();
        c.in.erase(0, used);
        c.busy = false;
        --in_flight;
        if (c.scheduled >= measure_from && c.scheduled < stop_sending) {
          latencies.push_back(ms(t - c.scheduled));
          ++statuses[status];
        }
        if (t >= measure_from && t < stop_sending) ++done_in_window;
      }
      if (closed) {
        if (c.busy) {
          --in_flight;
          if (c.scheduled >= measure_from) ++broken;
        }
        ::epoll_ctl(ep, EPOLL_CTL_DEL, c.fd, nullptr);
        ::close(c.fd);
        if (Clock::now() < stop_sending) open(i);
        else c = Connection{};
      }
    }
  }
  std::sort(latencies.begin(), latencies.end());
  auto pct = [&](double p) {
    return latencies.empty() ? 0.0 : latencies[std::min(latencies.size() - 1, static_cast<size_t>(p * latencies.size()))];
  };
  long errors = broken;
  std::string codes;
  for (auto& [code, count] : statuses) {
    if (code != 200) errors += count;
    codes += (codes.empty() ? "" : ", ") + ("\"" + std::to_string(code) + "\": " + std::to_string(count));
  }
  std::printf("{\"offered\": %.0f, \"achieved\": %.1f, \"requests\": %zu, \"errors\": %ld, \"broken\": %ld, "
              "\"statuses\": {%s}, \"overloaded\": %s, \"p50_ms\": %.3f, \"p90_ms\": %.3f, \"p99_ms\": %.3f, "
              "\"p999_ms\": %.3f, \"max_ms\": %.3f}\n",
              o.rate, done_in_window / o.duration, latencies.size(), errors, broken, codes.c_str(),
              overloaded ? "true" : "false", pct(0.5), pct(0.9), pct(0.99), pct(0.999),
              latencies.empty() ? 0.0 : latencies.back());
  return 0;
}
