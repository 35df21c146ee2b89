#include "tessera/core/parallel.h"

#include <pthread.h>

#include "tessera/core/error.h"

namespace tessera {

// Note [Threads after fork]: a child forked from a process whose OpenMP pool
// has started hangs in its first parallel region (libgomp's workers do not
// exist in the child). Children therefore run single-threaded; a process that
// wants threads again calls set_num_threads() (which resets the flag) or execs.
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
}  // namespace

int get_num_threads() { return g_forked ? 1 : omp_get_max_threads(); }

void set_num_threads(int n) {
  TS_CHECK(n >= 1, "set_num_threads: expected a positive thread count, got ", n);
  omp_set_num_threads(n);
}

}  // namespace tessera
