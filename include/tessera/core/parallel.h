#pragma once
// Intra-op parallelism over OpenMP with a grain size, so that small ops run on
// the calling thread and never pay for waking the pool.
#include <algorithm>
#include <cstdint>
#include <exception>
#include <omp.h>

namespace tessera {

// Honours OMP_NUM_THREADS at start-up; set_num_threads overrides it (for
// every thread), and a ThreadLimit lowers it on its own thread.
int get_num_threads();
void set_num_threads(int n);

// While alive, parallel_for on this thread uses at most n threads (a small
// model's steps, where a parallel region costs more than its work).
class ThreadLimit {
 public:
  explicit ThreadLimit(int n);
  ~ThreadLimit();
  ThreadLimit(const ThreadLimit&) = delete;
  ThreadLimit& operator=(const ThreadLimit&) = delete;

 private:
  int previous_;
};

// Elements below which an elementwise op stays on one thread.
constexpr int64_t kGrainSize = 32768;

inline bool in_parallel_region() { return omp_in_parallel() != 0; }

namespace detail {
// f(b, e) inside a parallel region: the first exception any thread throws is
// kept for the caller to rethrow.
template <typename F>
void run_range(const F& f, int64_t b, int64_t e, std::exception_ptr& err) {
  if (b >= e) return;
  try {
    f(b, e);
  } catch (...) {
#pragma omp critical(tessera_parallel_error)
    if (!err) err = std::current_exception();
  }
}
}  // namespace detail

// Runs f(begin, end) over disjoint chunks of [begin, end), each at least `grain`
// long (except the last). Exceptions thrown by f are rethrown on the caller.
template <typename F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, const F& f) {
  int64_t n = end - begin;
  if (n <= 0) return;
  int nt = get_num_threads();
  if (grain < 1) grain = 1;
  if (nt <= 1 || n <= grain || in_parallel_region()) {
    f(begin, end);
    return;
  }
  int64_t chunks = (n + grain - 1) / grain;
  if (chunks > nt) chunks = nt;
  int64_t chunk = (n + chunks - 1) / chunks;
  std::exception_ptr err;
#pragma omp parallel num_threads(static_cast<int>(chunks))
  {
    int64_t b = begin + omp_get_thread_num() * chunk;
    int64_t e = b + chunk < end ? b + chunk : end;
    detail::run_range(f, b, e, err);
  }
  if (err) std::rethrow_exception(err);
}

// Runs f(begin, end) over one contiguous range of [0, n) per thread, cut
// where the running sum of cost(i) reaches equal shares: for items of unequal
// work (attention for a long prompt's chunk beside single decode tokens),
// where parallel_for's equal counts would leave one thread with all the
// heavy items. Serial when the total is under min_cost. Item i goes to the
// thread whose share holds the middle of its cost, so the cut depends only
// on the costs and the thread count.
template <typename Cost, typename F>
void parallel_for_balanced(int64_t n, double min_cost, const Cost& cost, const F& f) {
  if (n <= 0) return;
  const int nt = get_num_threads();
  double total = 0;
  for (int64_t i = 0; i < n; ++i) total += cost(i);
  if (nt <= 1 || n == 1 || total < min_cost || !(total > 0) || in_parallel_region()) {
    f(0, n);
    return;
  }
  const int threads = static_cast<int>(n < nt ? n : nt);
  std::exception_ptr err;
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num();
    int64_t b = -1, e = n;
    double before = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double c = cost(i);
      const int owner = static_cast<int>(std::min<double>(threads - 1, threads * (before + c / 2) / total));
      before += c;
      if (owner == t && b < 0) b = i;
      if (owner > t) {
        e = i;
        break;
      }
    }
    if (b >= 0) detail::run_range(f, b, e, err);
  }
  if (err) std::rethrow_exception(err);
}

}  // namespace tessera
