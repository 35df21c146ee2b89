#pragma once
// Intra-op parallelism over OpenMP with a grain size, so that small ops run on
// the calling thread and never pay for waking the pool.
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
    if (b < e) {
      try {
        f(b, e);
      } catch (...) {
#pragma omp critical(tessera_parallel_error)
        if (!err) err = std::current_exception();
      }
    }
  }
  if (err) std::rethrow_exception(err);
}

}  // namespace tessera
