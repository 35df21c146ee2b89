#include "tessera/core/parallel.h"

#include <pthread.h>

#include <atomic>

#include "tessera/core/error.h"

namespace tessera {

// Note [Threads after fork]: a child forked from a process whose OpenMP pool
// has started hangs in its first parallel region (libgomp's workers do not
// exist in the child). Children therefore run single-threaded, whatever
// set_num_threads() says later; a child that wants threads again execs.
namespace {
bool g_forked = false;
void on_fork_child() {
  g_forked = true;
  omp_set_num_threads(1);
}
const bool g_registered = [] {
  pthread_atfork(nullptr, nullptr, on_fork_child);
  return true;
}();

// Note [Thread count for every thread]: omp_set_num_threads sets the
// calling thread's count only; a thread started later (a server's engine
// thread, a data loader's worker) would still see OMP_NUM_THREADS or the
// number of cores. So the count set here is kept for the whole process, and
// parallel_for asks for it explicitly.
std::atomic<int> g_threads{0};  // 0: not set
thread_local int t_limit = 0;   // ThreadLimit's (0: none)
}  // namespace

int get_num_threads() {
  if (g_forked) return 1;
  const int n = g_threads.load(std::memory_order_relaxed);
  const int all = n > 0 ? n : omp_get_max_threads();
  return t_limit > 0 && t_limit < all ? t_limit : all;
}

ThreadLimit::ThreadLimit(int n) : previous_(t_limit) {
  TS_CHECK(n >= 1, "ThreadLimit: expected a positive thread count, got ", n);
  t_limit = n;
}

ThreadLimit::~ThreadLimit() { t_limit = previous_; }

void set_num_threads(int n) {
  TS_CHECK(n >= 1, "set_num_threads: expected a positive thread count, got ", n);
  g_threads.store(n, std::memory_order_relaxed);
  omp_set_num_threads(n);
}

}  // namespace tessera
