#pragma once
// Shared harness for the side-by-side benchmark: bench/tessera_bench.cpp and
// bench/torch_bench.cpp both include this (it depends on neither library), so
// both sides time, repeat and report in exactly the same way.
//
// Protocol (parsed by bench/run.py): each case prints one line
//   RESULT <case> <value> <unit> [key=value ...]
// or, when the case cannot run on this side,
//   RESULT <case> n/a <reason>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <set>
#include <string>
#include <vector>

namespace bench {

using Clock = std::chrono::steady_clock;

inline double now_s() {
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

struct Options {
  int threads = 1;
  double min_time = 0.5;  // seconds of timed samples per case (big cases stop at max_reps / max_time)
  double scale = 1.0;     // multiplies min_time (a quick smoke run uses --quick)
  std::set<std::string> cases;  // empty: all
  bool list = false;

  bool wants(const std::string& name) const { return cases.empty() || cases.count(name) > 0; }
};

inline Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "missing value after %s\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--threads") {
      o.threads = std::atoi(next().c_str());
    } else if (a == "--min-time") {
      o.min_time = std::atof(next().c_str());
    } else if (a == "--quick") {
      o.scale = 0.1;
    } else if (a == "--list") {
      o.list = true;
    } else if (a == "--cases") {
      std::string s = next();
      size_t p = 0;
      while (p <= s.size()) {
        size_t q = s.find(',', p);
        if (q == std::string::npos) q = s.size();
        if (q > p) o.cases.insert(s.substr(p, q - p));
        p = q + 1;
      }
    } else {
      std::fprintf(stderr,
                   "usage: %s [--threads N] [--min-time S] [--quick] [--cases a,b,c] [--list]\n", argv[0]);
      std::exit(2);
    }
  }
  if (o.threads < 1) o.threads = 1;
  return o;
}

// Runs `f` `warmup` times untimed, then times single calls until both
// `min_reps` samples and `min_time` seconds are reached (or `max_reps` /
// `max_time` stop it). Returns the median seconds per call.
// `inner` > 1 times batches of `inner` calls (for sub-microsecond ops) and
// returns the median batch time divided by `inner`.
struct Timing {
  double median = 0;
  double min = 0;
  int samples = 0;
};

template <typename F>
Timing measure(const Options& o, F&& f, int warmup, int min_reps, int max_reps, double max_time = 10.0,
               int inner = 1) {
  // Warm-up stops early for very slow calls (half of max_time), so that a
  // pathologically slow implementation still yields a figure quickly; a first
  // call slower than max_time is itself the only sample.
  std::vector<double> t;
  double w0 = now_s();
  for (int i = 0; i < warmup && now_s() - w0 < 0.5 * max_time; ++i) {
    double c0 = now_s();
    for (int j = 0; j < inner; ++j) f();
    double c1 = now_s();
    if (i == 0 && c1 - c0 > max_time) {
      Timing r;
      r.median = r.min = (c1 - c0) / inner;
      r.samples = 1;
      return r;
    }
  }
  double min_time = o.min_time * o.scale;
  double start = now_s();
  while (true) {
    double t0 = now_s();
    for (int j = 0; j < inner; ++j) f();
    double t1 = now_s();
    t.push_back((t1 - t0) / inner);
    int n = static_cast<int>(t.size());
    double elapsed = t1 - start;
    if (n >= max_reps) break;
    if (n >= min_reps && elapsed >= min_time) break;
    if (elapsed >= max_time) break;  // too slow for min_reps: report what we have
  }
  std::vector<double> s = t;
  std::sort(s.begin(), s.end());
  Timing r;
  size_t n = s.size();
  r.median = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  r.min = s.front();
  r.samples = static_cast<int>(n);
  return r;
}

inline void report(const std::string& name, double value, const char* unit, const Timing& t,
                   const std::string& extra = "") {
  std::printf("RESULT %s %.6g %s samples=%d min_s=%.6g%s%s\n", name.c_str(), value, unit, t.samples, t.min,
              extra.empty() ? "" : " ", extra.c_str());
  std::fflush(stdout);
}

inline void report_value(const std::string& name, double value, const char* unit, const std::string& extra = "") {
  std::printf("RESULT %s %.6g %s%s%s\n", name.c_str(), value, unit, extra.empty() ? "" : " ", extra.c_str());
  std::fflush(stdout);
}

inline void report_na(const std::string& name, const std::string& why) {
  std::string w = why;
  for (char& c : w)
    if (c == '\n' || c == '\r') c = ' ';
  if (w.size() > 300) w = w.substr(0, 300) + "...";
  std::printf("RESULT %s n/a %s\n", name.c_str(), w.c_str());
  std::fflush(stdout);
}

// One benchmark case: a name and a body that reports its own RESULT lines
// (a body may report several names, e.g. time and peak memory).
struct Case {
  std::string name;
  std::vector<std::string> reports;  // names it reports (for n/a on failure); empty: {name}
  std::function<void()> body;
};

inline int run_cases(const Options& o, const std::vector<Case>& cases) {
  if (o.list) {
    for (const Case& c : cases) std::printf("%s\n", c.name.c_str());
    return 0;
  }
  for (const Case& c : cases) {
    if (!o.wants(c.name)) continue;
    std::fprintf(stderr, "[case] %s\n", c.name.c_str());
    try {
      c.body();
    } catch (const std::exception& e) {
      std::vector<std::string> names = c.reports.empty() ? std::vector<std::string>{c.name} : c.reports;
      for (const std::string& n : names) report_na(n, std::string("error: ") + e.what());
    }
  }
  return 0;
}

// Shapes and sizes, shared so that both sides run exactly the same problems.
constexpr int64_t kEltN = int64_t(1) << 24;  // 16M f32 elements (64 MiB per tensor)
constexpr int64_t kRows = 4096, kCols = 1024;  // softmax / layer_norm
constexpr int64_t kConvN = 32, kConvC = 64, kConvH = 56, kConvW = 56, kConvK = 64;
constexpr int64_t kAttnB = 1, kAttnH = 8, kAttnL = 1024, kAttnE = 64;
inline const std::vector<int64_t> kMatmulSizes = {256, 512, 1024, 2048};

// Bytes read + written per call (the throughput numerator), FLOPs per call.
inline double elt_bytes(int n_in) { return double(kEltN) * 4.0 * (n_in + 1); }
inline double matmul_flops(int64_t n) { return 2.0 * double(n) * double(n) * double(n); }
inline double conv_fwd_flops() {
  return 2.0 * kConvN * kConvK * kConvH * kConvW * kConvC * 9.0;  // output pixels * MACs each
}

}  // namespace bench
