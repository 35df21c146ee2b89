#pragma once
// Latency over repeated runs, reported the same way by every command that
// takes --repeat (run, client, quantize, prune): p50, p90 and p99.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace tessera::cli {

struct Latency {
  double p50 = 0, p90 = 0, p99 = 0;  // ms
  size_t runs = 0;
};

// Nearest-rank percentiles of the samples (ms).
inline Latency latency_of(std::vector<double> ms) {
  Latency l;
  if (ms.empty()) return l;
  std::sort(ms.begin(), ms.end());
  auto rank = [&](double p) { return ms[std::min(ms.size() - 1, static_cast<size_t>(p * static_cast<double>(ms.size())))]; };
  l.p50 = rank(0.50), l.p90 = rank(0.90), l.p99 = rank(0.99);
  l.runs = ms.size();
  return l;
}

// `repeat` timed calls of f after one untimed warm-up call.
inline Latency time_runs(const std::function<void()>& f, int repeat) {
  f();
  std::vector<double> ms;
  for (int i = 0; i < repeat; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return latency_of(ms);
}

// "p50 1.234 ms, p90 1.300 ms, p99 1.420 ms (100 runs)"
inline std::string latency_str(const Latency& l) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "p50 %.3f ms, p90 %.3f ms, p99 %.3f ms (%zu runs)", l.p50, l.p90, l.p99, l.runs);
  return buf;
}

// Three rows of a before/after table: p50, p90 and p99, with the ratio.
inline void print_latency_rows(const char* what, const Latency& before, const Latency& after) {
  const double b[] = {before.p50, before.p90, before.p99}, a[] = {after.p50, after.p90, after.p99};
  const char* names[] = {"p50", "p90", "p99"};
  for (int i = 0; i < 3; ++i) {
    const std::string label = std::string(what) + " " + names[i] + " (ms)";
    std::printf("%-26s %12.3f %16.3f %9.2fx\n", label.c_str(), b[i], a[i], a[i] / b[i]);
  }
}

}  // namespace tessera::cli
