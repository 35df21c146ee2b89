#include "tessera/core/parallel.h"

#include "tessera/core/error.h"

namespace tessera {

int get_num_threads() { return omp_get_max_threads(); }

void set_num_threads(int n) {
  TS_CHECK(n >= 1, "set_num_threads: expected a positive thread count, got ", n);
  omp_set_num_threads(n);
}

}  // namespace tessera
