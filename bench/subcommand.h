#pragma once
// What the benchmarks run as `binary SUBCOMMAND --name value ...` share
// (bench/tessera_dist_bench.cpp, bench/tessera_model_parallel_bench.cpp):
// their options, elapsed times and medians.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

namespace bench {

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// The value after `name` among the options that follow the subcommand, else `fallback`.
inline std::string arg(int argc, char** argv, const char* name, const char* fallback) {
  for (int i = 2; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return fallback;
}

}  // namespace bench
