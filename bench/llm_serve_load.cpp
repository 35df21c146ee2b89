// tessera_llm_serve_load: the load generator of bench/llm_serve_bench.py,
// streaming completions from `tessera serve-llm` or llama.cpp's llama-server
// (or any OpenAI-compatible server that reports each token's log-prob in its
// stream), the same requests to each.
//
//   tessera_llm_serve_load --port 8000 --requests trace.json [--concurrency C] [--server tessera|llama]
//
// trace.json: {"requests": [{"prompt": [ids] or "text", "max_tokens": N, "at": seconds, "tag": "...", "extra": {...}}]}
// ("extra": more body fields, such as a response_format; such a request may
// stop before max_tokens).
// With --concurrency C (closed loop) C clients each send the next request as
// soon as their last is answered, and "at" is ignored. Without it (open loop)
// each request is sent at its "at" (seconds from the start) on a connection of
// its own, whatever the server is doing, and its latencies count from that
// time (no coordinated omission).
//
// Every request streams (`"stream": true`, greedy, `ignore_eos`) and asks for
// each token's log-prob (`"logprobs": 0`; llama-server: `"n_probs": 1`), so
// that every token arrives in a chunk of its own even while its text is held
// back: the time of each token is the time its chunk is read (OpenAI's
// `logprobs.tokens`, llama-server's `logprobs.content`). A thread reads
// /metrics every 50 ms for the peak of tessera:kv_cache_usage_perc (Tessera
// only: llama-server's cache is allocated whole when it starts).
//
// Prints one JSON line: requests, errors, wall seconds, tokens generated and
// their aggregate rate, TTFT, inter-token latency and end-to-end percentiles
// (seconds), the decode rate (tokens after each first, over the time from
// first to last token, summed over requests), the peak KV cache use, this
// program's own CPU seconds, and the
// same latencies per tag.
#include <httplib.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Request {
  json prompt;
  int64_t max_tokens = 128;
  double at = 0;
  std::string tag;
  json extra = json::object();
};

struct Result {
  bool ok = false;
  double ttft = 0, e2e = 0, last = 0;  // last: when the last token came
  std::vector<double> gaps;  // between tokens
  int64_t tokens = 0;
};

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// One streamed completion; latencies from `start` (its scheduled time).
Result run(int port, const Request& r, Clock::time_point start, bool llama) {
  Result out;
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(600);
  json body = {{"prompt", r.prompt}, {"max_tokens", r.max_tokens}, {"stream", true}, {"ignore_eos", true},
               {"temperature", 0}, {"logprobs", 0}};
  if (llama) body["n_probs"] = 1;
  body.update(r.extra);
  std::string pending;
  double last = -1;
  // Debian's cpp-httplib (0.11) streams a POST's response through Request::content_receiver.
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    pending.append(data, n);
    for (size_t end; (end = pending.find("\n\n")) != std::string::npos; pending.erase(0, end + 2)) {
      const std::string event = pending.substr(0, end);
      if (event.rfind("data: ", 0) != 0 || event == "data: [DONE]") continue;
      const json chunk = json::parse(event.substr(6), nullptr, false);
      if (chunk.is_discarded() || chunk.contains("error")) return false;
      for (const json& ch : chunk["choices"]) {
        if (!ch.contains("logprobs") || ch["logprobs"].is_null()) continue;
        const double now = seconds_since(start);
        const json& lp = ch["logprobs"];
        const size_t n = lp.contains("tokens") ? lp["tokens"].size() : lp.contains("content") ? lp["content"].size() : 0;
        for (size_t k = 0; k < n; ++k) {
          if (last < 0) out.ttft = now;
          else out.gaps.push_back(now - last);
          last = now;
          out.last = now;
          ++out.tokens;
        }
      }
    }
    return true;
  };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  const bool sent = c.send(req, res, error);
  out.e2e = seconds_since(start);
  out.ok = sent && res.status == 200 && (out.tokens == r.max_tokens || (!r.extra.empty() && out.tokens > 0));
  return out;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

json summary(const std::vector<const Result*>& rs) {
  std::vector<double> ttft, itl, e2e;
  int64_t tokens = 0, errors = 0;
  double decode_seconds = 0;  // first token to last, summed over requests
  for (const Result* r : rs) {
    if (!r->ok) {
      ++errors;
      continue;
    }
    decode_seconds += r->last - r->ttft;
    ttft.push_back(r->ttft);
    e2e.push_back(r->e2e);
    itl.insert(itl.end(), r->gaps.begin(), r->gaps.end());
    tokens += r->tokens;
  }
  return {{"requests", rs.size()}, {"errors", errors}, {"generated", tokens},
          {"ttft_p50", percentile(ttft, 50)}, {"ttft_p99", percentile(ttft, 99)},
          {"itl_p50", percentile(itl, 50)}, {"itl_p99", percentile(itl, 99)},
          {"e2e_p50", percentile(e2e, 50)}, {"e2e_p99", percentile(e2e, 99)},
          {"decode_tokens_per_s",
           decode_seconds > 0 ? static_cast<double>(tokens - static_cast<int64_t>(ttft.size())) / decode_seconds : 0.0}};
}

}  // namespace

int main(int argc, char** argv) {
  int port = 0, concurrency = 0;
  std::string trace, server = "tessera";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--port") port = std::atoi(argv[i + 1]);
    else if (a == "--requests") trace = argv[i + 1];
    else if (a == "--concurrency") concurrency = std::atoi(argv[i + 1]);
    else if (a == "--server") server = argv[i + 1];
    else {
      std::fprintf(stderr, "llm_serve_load: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (port <= 0 || trace.empty() || (server != "tessera" && server != "llama")) {
    std::fprintf(stderr, "usage: tessera_llm_serve_load --port P --requests trace.json [--concurrency C] "
                 "[--server tessera|llama]\n");
    return 2;
  }
  const bool llama = server == "llama";
  std::ifstream in(trace);
  const json t = json::parse(in);
  std::vector<Request> requests;
  for (const json& r : t["requests"])
    requests.push_back({r["prompt"], r.value("max_tokens", 128), r.value("at", 0.0), r.value("tag", ""),
                        r.value("extra", json::object())});

  // The peak KV cache use, read from the server's metrics.
  std::atomic<bool> done{false};
  std::atomic<double> peak_kv{0};
  std::thread poller([&] {
    httplib::Client c("127.0.0.1", port);
    while (!done) {
      if (auto res = c.Get("/metrics"); res && res->status == 200) {
        std::istringstream lines(res->body);
        for (std::string line; std::getline(lines, line);)
          if (line.rfind("tessera:kv_cache_usage_perc{", 0) == 0)
            peak_kv = std::max(peak_kv.load(), std::stod(line.substr(line.rfind(' ') + 1)));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });

  std::vector<Result> results(requests.size());
  const Clock::time_point start = Clock::now();
  std::vector<std::thread> threads;
  if (concurrency > 0) {
    std::atomic<size_t> next{0};
    for (int c = 0; c < concurrency; ++c)
      threads.emplace_back([&] {
        for (size_t i; (i = next++) < requests.size();) results[i] = run(port, requests[i], Clock::now(), llama);
      });
  } else {
    for (size_t i = 0; i < requests.size(); ++i) {
      const Clock::time_point at = start + std::chrono::duration_cast<Clock::duration>(
                                               std::chrono::duration<double>(requests[i].at));
      std::this_thread::sleep_until(at);
      threads.emplace_back([&, i, at] { results[i] = run(port, requests[i], at, llama); });
    }
  }
  for (std::thread& th : threads) th.join();
  const double wall = seconds_since(start);
  done = true;
  poller.join();

  std::vector<const Result*> all;
  std::map<std::string, std::vector<const Result*>> by_tag;
  for (size_t i = 0; i < results.size(); ++i) {
    all.push_back(&results[i]);
    if (!requests[i].tag.empty()) by_tag[requests[i].tag].push_back(&results[i]);
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
