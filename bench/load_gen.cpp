// tessera_load: the one load generator of bench/, for `tessera serve`
// (bench/serve_bench.py) and for `tessera serve-llm` and llama.cpp's
// llama-server (bench/llm_serve_bench.py): one thread, epoll, keep-alive
// HTTP/1.1 connections, the same engine for both.
//
//   tessera_load http --port 8000 --path /v2/models/mlp/infer --body req.json
//                     [--header 'Inference-Header-Content-Length: 123']
//                     [--connections 64] [--rate 1000 | --rate 0] [--duration 10] [--warmup 2]
//     One request over and over. --rate R sends R requests a second on a
//     fixed schedule whatever the server does (open loop) over at most
//     --connections connections; --rate 0 is a closed loop, each connection
//     sending again as soon as it has its answer (the maximum throughput).
//     Prints one JSON line: offered and achieved requests per second, latency
//     percentiles in ms over the measured window (after --warmup, for
//     --duration), errors (non-200 answers, broken connections).
//
//   tessera_load openai --port 8000 --requests trace.json [--concurrency C] [--server tessera|llama]
//     Streamed completions, the same requests to either server. trace.json:
//     {"requests": [{"prompt": [ids] or "text", "max_tokens": N, "at": seconds,
//     "tag": "...", "extra": {...}}]} ("extra": more body fields, such as a
//     response_format; such a request may stop before max_tokens). With
//     --concurrency C (closed loop) C connections each send the next request
//     as soon as their last is answered and "at" is ignored; without it (open
//     loop) each request is sent at its "at" on a connection of its own.
//     Each request has a connection of its own (as a client of a chat
//     service opens one per answer; llama-server closes one after a stream).
//     Every request streams (greedy, `ignore_eos`) and asks for each token's
//     log-prob (`"logprobs": 0`; llama-server: `"n_probs": 1`), so that a
//     token arrives in a chunk of its own even while its text is held back:
//     a token's time is when its chunk is read. llama-server sends no chunk
//     for a token that leaves its text inside an unfinished UTF-8 character
//     (a byte token; those tokens' log-probs are dropped), so the count of
//     tokens generated is the final chunk's usage.completion_tokens (asked
//     for with stream_options.include_usage) where there is one, and a
//     request is whole when that count is what it asked. A second thread reads
//     /metrics every 50 ms for the peak of tessera:kv_cache_usage_perc
//     (llama-server allocates its cache whole when it starts). Prints one JSON
//     line: requests, errors, wall seconds, tokens generated and their
//     aggregate rate, TTFT, inter-token and end-to-end percentiles (seconds),
//     the decode rate (tokens after each first, over the time from first to
//     last token, summed over requests), the peak KV cache use, this
//     program's own CPU seconds, and the same latencies per tag.
//
// Both modes count a request's latencies from its scheduled time (in the
// open loop, when it was due, not when a connection was free to send it), so
// a slow server cannot hide its queueing (no coordinated omission).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

[[noreturn]] void fail(const std::string& why) {
  std::fprintf(stderr, "tessera_load: %s\n", why.c_str());
  std::exit(2);
}

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}
double since(Clock::time_point from, Clock::time_point t) { return std::chrono::duration<double>(t - from).count(); }

// ---- HTTP/1.1 responses, read as their bytes arrive ---------------------------------------

// The status and headers, then the body by Content-Length, by chunked
// transfer coding, or up to the connection's close; the body's bytes go to
// `body` as they come (a stream's events are timed when they are read).
class ResponseReader {
 public:
  using Sink = std::function<void(std::string_view)>;
  // False for a response that is not HTTP.
  bool feed(const char* p, size_t n, const Sink& body) {
    buf_.append(p, n);
    while (state_ != State::Done) {
      if (state_ == State::Head) {
        const size_t end = buf_.find("\r\n\r\n");
        if (end == std::string::npos) return buf_.size() < (64 << 10);
        if (!head(buf_.substr(0, end))) return false;
        buf_.erase(0, end + 4);
      } else if (state_ == State::Length || state_ == State::ChunkData || state_ == State::UntilClose) {
        const size_t take = state_ == State::UntilClose ? buf_.size() : std::min<size_t>(left_, buf_.size());
        if (take == 0) return true;
        body(std::string_view(buf_.data(), take));
        buf_.erase(0, take);
        if (state_ == State::UntilClose) return true;
        left_ -= take;
        if (left_ == 0) state_ = state_ == State::Length ? State::Done : State::ChunkEnd;
      } else {  // ChunkSize, ChunkEnd, Trailer: a line
        const size_t eol = buf_.find("\r\n");
        if (eol == std::string::npos) return buf_.size() < 4096;
        const std::string line = buf_.substr(0, eol);
        buf_.erase(0, eol + 2);
        if (state_ == State::ChunkSize) {
          char* end = nullptr;
          left_ = std::strtoull(line.c_str(), &end, 16);
          if (end == line.c_str()) return false;
          state_ = left_ == 0 ? State::Trailer : State::ChunkData;
        } else if (state_ == State::ChunkEnd) {
          if (!line.empty()) return false;
          state_ = State::ChunkSize;
        } else if (line.empty()) {
          state_ = State::Done;
        }
      }
    }
    return true;
  }
  // The server closed the connection: the end of a body that had no length.
  void closed() {
    if (state_ == State::UntilClose) state_ = State::Done;
  }
  bool complete() const { return state_ == State::Done; }
  int status() const { return status_; }
  bool keep_alive() const { return keep_alive_; }
  // Bytes past the response (a server never sends them unasked): kept for
  // the next one.
  std::string rest() const { return buf_; }

 private:
  enum class State { Head, Length, ChunkSize, ChunkData, ChunkEnd, Trailer, UntilClose, Done };
  bool head(const std::string& h) {
    if (h.size() < 12 || h.compare(0, 5, "HTTP/") != 0) return false;
    status_ = std::atoi(h.c_str() + 9);
    std::istringstream lines(h);
    std::string line;
    std::optional<size_t> length;
    bool chunked = false;
    while (std::getline(lines, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      std::string lower = line;
      std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
      if (lower.rfind("content-length:", 0) == 0) length = std::strtoull(line.c_str() + 15, nullptr, 10);
      if (lower.rfind("transfer-encoding:", 0) == 0 && lower.find("chunked") != std::string::npos) chunked = true;
      if (lower.rfind("connection:", 0) == 0 && lower.find("close") != std::string::npos) keep_alive_ = false;
    }
    if (chunked) {
      state_ = State::ChunkSize;
    } else if (length) {
      left_ = *length;
      state_ = left_ == 0 ? State::Done : State::Length;
    } else if (status_ == 204 || status_ == 304) {
      state_ = State::Done;
    } else {
      state_ = State::UntilClose;
      keep_alive_ = false;
    }
    return true;
  }

  State state_ = State::Head;
  std::string buf_;
  size_t left_ = 0;
  int status_ = 0;
  bool keep_alive_ = true;
};

// ---- the engine ----------------------------------------------------------------------------

// A request to send: its bytes, when it was due, and what to do with the
// body's bytes (a streamed completion times its tokens).
struct Job {
  size_t id = 0;
  const std::string* bytes = nullptr;
  Clock::time_point due;
};

// What became of a job.
struct Outcome {
  int status = 0;
  bool broken = false;  // the connection failed before the whole response
  Clock::time_point done;
};

// Where jobs come from: take(now) gives the next job whose time has come
// (open loop: due <= now, in order; closed loop: any, due now), or nothing;
// next_due() when the open loop's next one is due; exhausted() once no job
// will ever come again.
struct Source {
  bool closed_loop = false;
  // Keep a connection for the next request after an answer. Off: a connection
  // per request (llama-server closes one after a stream, whatever its
  // Keep-Alive header says, and the next request on it would fail).
  bool keep_alive = true;
  std::function<std::optional<Job>(Clock::time_point)> take;
  std::function<std::optional<Clock::time_point>()> next_due;
  std::function<bool(Clock::time_point)> exhausted;
  // Called with each body's bytes as they are read, and at the end.
  std::function<void(const Job&, std::string_view, Clock::time_point)> body;
  std::function<void(const Job&, const Outcome&)> finish;
};

struct Connection {
  int fd = -1;
  bool busy = false;
  Job job;
  size_t sent = 0;
  ResponseReader reader;
};

class Engine {
 public:
  Engine(std::string host, int port, size_t max_connections)
      : host_(std::move(host)), port_(port), max_(max_connections), ep_(::epoll_create1(0)) {
    if (ep_ < 0) fail("epoll_create1: " + std::string(std::strerror(errno)));
  }
  ~Engine() { ::close(ep_); }

  // Runs the source's jobs to the end (or `give_up` past its exhaustion);
  // returns whether the open loop fell more than a million requests behind.
  bool run(Source& src, Clock::duration give_up) {
    std::deque<Job> backlog;  // due, waiting for a free connection (open loop)
    bool overloaded = false;
    std::optional<Clock::time_point> ended;
    std::vector<epoll_event> events(256);
    while (true) {
      const Clock::time_point now = Clock::now();
      if (!src.closed_loop && !overloaded)
        while (auto j = src.take(now)) {
          backlog.push_back(*j);
          if (backlog.size() > 1'000'000) overloaded = true;
        }
      for (size_t i = 0; i < conns_.size() || conns_.size() < max_; ++i) {
        if (i < conns_.size() && conns_[i].busy) continue;
        std::optional<Job> j;
        if (src.closed_loop) {
          j = src.take(now);
        } else if (!backlog.empty()) {
          j = backlog.front();
          backlog.pop_front();
        }
        if (!j) break;
        if (i == conns_.size()) conns_.emplace_back();
        start(i, *j, src);
      }
      const bool idle = in_flight_ == 0 && backlog.empty();
      if ((src.exhausted(now) || overloaded) && idle) break;
      if (src.exhausted(now) && !ended) ended = now;
      if (ended && now > *ended + give_up) break;  // answers that never come

      // Up to 100 ms, or to the open loop's next due time.
      Clock::duration wait = std::chrono::milliseconds(100);
      if (!src.closed_loop)
        if (const auto due = src.next_due()) wait = std::clamp(*due - Clock::now(), Clock::duration::zero(), wait);
      const timespec ts{0, static_cast<long>(std::chrono::duration_cast<std::chrono::nanoseconds>(wait).count())};
      const int n = ::epoll_pwait2(ep_, events.data(), static_cast<int>(events.size()), &ts, nullptr);
      for (int k = 0; k < n; ++k) serve(events[k].data.u64, events[k].events, src);
    }
    for (Connection& c : conns_)
      if (c.fd >= 0) ::close(c.fd);
    return overloaded;
  }

 private:
  int connect_new() {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (fd < 0) fail("socket: " + std::string(std::strerror(errno)));
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port_));
    if (::inet_pton(AF_INET, host_.c_str(), &a.sin_addr) != 1) fail("--host must be an IPv4 address");
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) < 0 && errno != EINPROGRESS)
      fail("connect: " + std::string(std::strerror(errno)));
    return fd;
  }

  void watch(size_t i, bool write) {
    epoll_event ev{};
    ev.events = EPOLLIN | (write ? uint32_t{EPOLLOUT} : 0u);
    ev.data.u64 = i;
    ::epoll_ctl(ep_, EPOLL_CTL_MOD, conns_[i].fd, &ev);
  }

  void start(size_t i, const Job& j, Source& src) {
    Connection& c = conns_[i];
    if (c.fd < 0) {
      c.fd = connect_new();
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = i;
      ::epoll_ctl(ep_, EPOLL_CTL_ADD, c.fd, &ev);
    }
    c.busy = true;
    c.job = j;
    c.sent = 0;
    c.reader = ResponseReader{};
    ++in_flight_;
    if (!send_more(i)) end(i, src, true);
  }

  bool send_more(size_t i) {
    Connection& c = conns_[i];
    const std::string& b = *c.job.bytes;
    while (c.sent < b.size()) {
      const ssize_t n = ::send(c.fd, b.data() + c.sent, b.size() - c.sent, MSG_NOSIGNAL);
      if (n > 0) {
        c.sent += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      return false;
    }
    watch(i, c.sent < b.size());
    return true;
  }

  // The job on connection i is over: answered, or broken.
  void end(size_t i, Source& src, bool broken) {
    Connection& c = conns_[i];
    Outcome o;
    o.status = c.reader.status();
    o.broken = broken;
    o.done = Clock::now();
    c.busy = false;
    --in_flight_;
    if (broken || !c.reader.keep_alive() || !src.keep_alive) {
      ::epoll_ctl(ep_, EPOLL_CTL_DEL, c.fd, nullptr);
      ::close(c.fd);
      c.fd = -1;
    }
    src.finish(c.job, o);
  }

  void serve(size_t i, uint32_t ev, Source& src) {
    Connection& c = conns_[i];
    if (c.fd < 0) return;
    if ((ev & EPOLLOUT) && c.busy && !send_more(i)) return end(i, src, true);
    if (!(ev & (EPOLLIN | EPOLLERR | EPOLLHUP))) return;
    char buf[65536];
    bool closed = false, bad = false;
    while (true) {
      const ssize_t r = ::recv(c.fd, buf, sizeof buf, 0);
      if (r > 0) {
        if (!c.busy) continue;  // nothing was asked: drop it
        const Clock::time_point t = Clock::now();
        const Job job = c.job;
        bad = !c.reader.feed(buf, static_cast<size_t>(r), [&](std::string_view b) { src.body(job, b, t); });
        if (bad || c.reader.complete()) break;
        continue;
      }
      if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) closed = true;
      break;
    }
    if (!c.busy) {
      if (closed) {
        ::epoll_ctl(ep_, EPOLL_CTL_DEL, c.fd, nullptr);
        ::close(c.fd);
        c.fd = -1;
      }
      return;
    }
    if (closed) c.reader.closed();
    if (c.reader.complete() && !bad) return end(i, src, false);
    if (bad || closed) end(i, src, true);
  }

  std::string host_;
  int port_;
  size_t max_;
  int ep_;
  std::vector<Connection> conns_;
  int64_t in_flight_ = 0;
};

// ---- tessera_load http ---------------------------------------------------------------------

int run_http(int argc, char** argv) {
  std::string host = "127.0.0.1", path, body_file;
  std::vector<std::string> headers;
  int port = 8000, connections = 64;
  double rate = 0, duration = 10, warmup = 2;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) fail("option " + a + " needs a value");
    const std::string v = argv[++i];
    if (a == "--host") host = v;
    else if (a == "--port") port = std::stoi(v);
    else if (a == "--path") path = v;
    else if (a == "--body") body_file = v;
    else if (a == "--header") headers.push_back(v);
    else if (a == "--connections") connections = std::stoi(v);
    else if (a == "--rate") rate = std::stod(v);
    else if (a == "--duration") duration = std::stod(v);
    else if (a == "--warmup") warmup = std::stod(v);
    else fail("unknown option " + a);
  }
  if (path.empty() || body_file.empty()) fail("--path and --body are required");
  if (connections < 1 || connections > 10000) fail("--connections must be in 1..10000");
  if (rate < 0 || duration <= 0 || warmup < 0) fail("--rate >= 0, --duration > 0 and --warmup >= 0");
  std::ifstream f(body_file, std::ios::binary);
  if (!f) fail("cannot read --body " + body_file);
  const std::string body((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::string request = "POST " + path + " HTTP/1.1\r\nHost: " + host + "\r\nContent-Type: application/" +
                        (headers.empty() ? "json" : "octet-stream") + "\r\nContent-Length: " +
                        std::to_string(body.size()) + "\r\n";
  for (const auto& h : headers) request += h + "\r\n";
  request += "\r\n" + body;

  const Clock::time_point start = Clock::now(), measure_from = start + seconds(warmup),
                          stop = measure_from + seconds(duration);
  const Clock::duration interval = rate > 0 ? seconds(1 / rate) : Clock::duration::zero();
  Clock::time_point next = start;
  size_t issued = 0;
  std::vector<double> latencies;
  std::map<int, long> statuses;
  long broken = 0, done_in_window = 0;

  Source src;
  src.closed_loop = rate == 0;
  src.take = [&](Clock::time_point now) -> std::optional<Job> {
    if (rate == 0) {
      if (now >= stop) return std::nullopt;
      return Job{issued++, &request, now};
    }
    if (next > now || next >= stop) return std::nullopt;
    Job j{issued++, &request, next};
    next += interval;
    return j;
  };
  src.next_due = [&]() -> std::optional<Clock::time_point> {
    if (next >= stop) return std::nullopt;
    return next;
  };
  src.exhausted = [&](Clock::time_point now) { return rate == 0 ? now >= stop : next >= stop; };
  src.body = [](const Job&, std::string_view, Clock::time_point) {};
  src.finish = [&](const Job& j, const Outcome& o) {
    const bool measured = j.due >= measure_from && j.due < stop;
    if (o.broken) {
      broken += measured;
      return;
    }
    if (measured) {
      latencies.push_back(std::chrono::duration<double, std::milli>(o.done - j.due).count());
      ++statuses[o.status];
    }
    if (o.done >= measure_from && o.done < stop) ++done_in_window;
  };
  Engine engine(host, port, static_cast<size_t>(connections));
  const bool overloaded = engine.run(src, std::chrono::seconds(30));

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
              rate, done_in_window / duration, latencies.size(), errors, broken, codes.c_str(),
              overloaded ? "true" : "false", pct(0.5), pct(0.9), pct(0.99), pct(0.999),
              latencies.empty() ? 0.0 : latencies.back());
  return 0;
}

// ---- tessera_load openai -------------------------------------------------------------------

struct Completion {
  int64_t max_tokens = 128;
  double at = 0;
  std::string tag;
  bool extra = false;  // body fields beyond the prompt (such a request may stop early)
  std::string bytes;   // the HTTP request
  // What came back.
  std::string pending;  // the stream's bytes not yet a whole event
  bool error = false;   // an error event
  int64_t tokens = 0;     // tokens that arrived, each in a chunk
  int64_t generated = -1; // the final chunk's usage.completion_tokens
  double ttft = 0, last = -1, e2e = 0;  // seconds from the request's scheduled time
  std::vector<double> gaps;
  bool ok = false;

  // The tokens generated: the server's own count where it gave one.
  int64_t count() const { return generated >= 0 ? generated : tokens; }
};

// The stream's whole events ("data: {...}\n\n") in c.pending: each token
// (one per entry of a chunk's log-probs: OpenAI's logprobs.tokens,
// llama-server's logprobs.content) timed at `t`.
void read_events(Completion& c, double t) {
  for (size_t end; (end = c.pending.find("\n\n")) != std::string::npos; c.pending.erase(0, end + 2)) {
    const std::string event = c.pending.substr(0, end);
    if (event.rfind("data: ", 0) != 0 || event == "data: [DONE]") continue;
    const json chunk = json::parse(event.substr(6), nullptr, false);
    if (chunk.is_discarded() || chunk.contains("error") || !chunk.contains("choices")) {
      c.error = true;
      continue;
    }
    if (chunk.contains("usage") && chunk["usage"].is_object())
      c.generated = chunk["usage"].value("completion_tokens", int64_t{-1});
    for (const json& ch : chunk["choices"]) {
      if (!ch.contains("logprobs") || ch["logprobs"].is_null()) continue;
      const json& lp = ch["logprobs"];
      const size_t n = lp.contains("tokens") ? lp["tokens"].size() : lp.contains("content") ? lp["content"].size() : 0;
      for (size_t k = 0; k < n; ++k) {
        if (c.last < 0) c.ttft = t;
        else c.gaps.push_back(t - c.last);
        c.last = t;
        ++c.tokens;
      }
    }
  }
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

json summary(const std::vector<const Completion*>& cs) {
  std::vector<double> ttft, itl, e2e;
  int64_t tokens = 0, errors = 0, unsent = 0;  // unsent: generated, never in a chunk of their own
  double decode_seconds = 0;  // first token to last, summed over requests
  for (const Completion* c : cs) {
    if (!c->ok) {
      ++errors;
      continue;
    }
    decode_seconds += c->last - c->ttft;
    ttft.push_back(c->ttft);
    e2e.push_back(c->e2e);
    itl.insert(itl.end(), c->gaps.begin(), c->gaps.end());
    tokens += c->count();
    unsent += std::max<int64_t>(0, c->count() - c->tokens);
  }
  return {{"requests", cs.size()}, {"errors", errors}, {"generated", tokens}, {"unsent", unsent},
          {"ttft_p50", percentile(ttft, 50)}, {"ttft_p99", percentile(ttft, 99)},
          {"itl_p50", percentile(itl, 50)}, {"itl_p90", percentile(itl, 90)}, {"itl_p99", percentile(itl, 99)},
          {"itl_max", percentile(itl, 100)}, {"gaps", itl.size()},
          {"e2e_p50", percentile(e2e, 50)}, {"e2e_p99", percentile(e2e, 99)},
          {"decode_tokens_per_s",
           decode_seconds > 0 ? static_cast<double>(tokens - static_cast<int64_t>(ttft.size())) / decode_seconds : 0.0}};
}

// GET path from the server, whole (a blocking connection of its own); empty
// when it cannot be had.
std::string get(int port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return {};
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string body;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    const std::string req = "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    ResponseReader r;
    if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size())) {
      char buf[65536];
      ssize_t n;
      while (!r.complete() && (n = ::recv(fd, buf, sizeof buf, 0)) > 0)
        if (!r.feed(buf, static_cast<size_t>(n), [&](std::string_view b) { body.append(b); })) break;
      if (!r.complete()) r.closed();
    }
    if (!r.complete() || r.status() != 200) body.clear();
  }
  ::close(fd);
  return body;
}

int run_openai(int argc, char** argv) {
  int port = 0, concurrency = 0;
  std::string trace, server = "tessera";
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--port") port = std::atoi(argv[i + 1]);
    else if (a == "--requests") trace = argv[i + 1];
    else if (a == "--concurrency") concurrency = std::atoi(argv[i + 1]);
    else if (a == "--server") server = argv[i + 1];
    else fail("unknown option " + a);
  }
  if (port <= 0 || trace.empty() || (server != "tessera" && server != "llama"))
    fail("usage: tessera_load openai --port P --requests trace.json [--concurrency C] [--server tessera|llama]");
  std::ifstream in(trace);
  if (!in) fail("cannot read --requests " + trace);
  const json t = json::parse(in, nullptr, false);
  if (t.is_discarded() || !t.contains("requests")) fail(trace + ": not a trace ({\"requests\": [...]})");
  std::vector<Completion> cs;
  for (const json& r : t["requests"]) {
    Completion c;
    c.max_tokens = r.value("max_tokens", 128);
    c.at = r.value("at", 0.0);
    c.tag = r.value("tag", "");
    json body = {{"prompt", r["prompt"]}, {"max_tokens", c.max_tokens}, {"stream", true}, {"ignore_eos", true},
                 {"temperature", 0}, {"logprobs", 0},
                 {"stream_options", {{"include_usage", true}}}};
    if (server == "llama") body["n_probs"] = 1;
    if (r.contains("extra")) {
      body.update(r["extra"]);
      c.extra = !r["extra"].empty();
    }
    const std::string b = body.dump();
    c.bytes = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: "
              "application/json\r\nContent-Length: " + std::to_string(b.size()) + "\r\n\r\n" + b;
    cs.push_back(std::move(c));
  }
  // Open loop: in order of "at".
  std::vector<size_t> order(cs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (concurrency == 0)
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return cs[a].at < cs[b].at; });

  // The peak KV cache use, read from the server's metrics.
  std::atomic<bool> done{false};
  std::atomic<double> peak_kv{0};
  std::thread poller([&] {
    while (!done) {
      std::istringstream lines(get(port, "/metrics"));
      for (std::string line; std::getline(lines, line);)
        if (line.rfind("tessera:kv_cache_usage_perc{", 0) == 0)
          peak_kv = std::max(peak_kv.load(), std::stod(line.substr(line.rfind(' ') + 1)));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });

  const Clock::time_point start = Clock::now();
  size_t next = 0;
  Source src;
  src.closed_loop = concurrency > 0;
  src.keep_alive = false;
  src.take = [&](Clock::time_point now) -> std::optional<Job> {
    if (next == order.size()) return std::nullopt;
    const size_t i = order[next];
    const Clock::time_point due = concurrency > 0 ? now : start + seconds(cs[i].at);
    if (due > now) return std::nullopt;
    ++next;
    return Job{i, &cs[i].bytes, due};
  };
  src.next_due = [&]() -> std::optional<Clock::time_point> {
    if (next == order.size()) return std::nullopt;
    return start + seconds(cs[order[next]].at);
  };
  src.exhausted = [&](Clock::time_point) { return next == order.size(); };
  src.body = [&](const Job& j, std::string_view b, Clock::time_point t) {
    Completion& c = cs[j.id];
    c.pending.append(b);
    read_events(c, since(j.due, t));
  };
  src.finish = [&](const Job& j, const Outcome& o) {
    Completion& c = cs[j.id];
    c.e2e = since(j.due, o.done);
    c.ok = !o.broken && o.status == 200 && !c.error && (c.count() == c.max_tokens || (c.extra && c.count() > 0));
  };
  // Closed loop: `concurrency` connections; open: one for each request in flight.
  Engine engine("127.0.0.1", port, concurrency > 0 ? static_cast<size_t>(concurrency) : cs.size());
  engine.run(src, std::chrono::seconds(600));
  const double wall = since(start, Clock::now());
  done = true;
  poller.join();

  std::vector<const Completion*> all;
  std::map<std::string, std::vector<const Completion*>> by_tag;
  for (const Completion& c : cs) {
    all.push_back(&c);
    if (!c.tag.empty()) by_tag[c.tag].push_back(&c);
  }
  json out = summary(all);
  out["wall_s"] = wall;
  out["tokens_per_s"] = out["generated"].get<double>() / wall;
  out["peak_kv_usage"] = peak_kv.load();
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  out["generator_cpu_s"] = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                           static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  for (const auto& [tag, rs] : by_tag) out["tags"][tag] = summary(rs);
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "http") return run_http(argc, argv);
  if (mode == "openai") return run_openai(argc, argv);
  fail("the first argument is the mode: http (tessera serve's requests) or openai (streamed completions)");
}
