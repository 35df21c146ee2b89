// The world group, made once from the launcher's environment.
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "distributed/comm.h"
#include "tessera/distributed/status.h"

namespace tessera::distributed {

namespace {
std::mutex g_world_mu;
ProcessGroupPtr g_world;
bool g_mpi = false;
// The communication ops make the world on first use, as world() does.
const bool g_world_maker_set = (ops::detail::set_world_maker([] { world(); }), true);
}  // namespace

double collective_timeout() {
  static const double seconds = [] {
    const char* s = std::getenv("TESSERA_DIST_TIMEOUT");
    if (!s || !*s) return 300.0;
    char* end = nullptr;
    double v = std::strtod(s, &end);
    TS_CHECK(end && *end == 0 && v > 0 && v <= 86400, "TESSERA_DIST_TIMEOUT='", s,
             "': expected a number of seconds in (0, 86400]");
    return v;
  }();
  return seconds;
}

bool debug_collectives() {
  static const bool on = [] {
    const char* s = std::getenv("TESSERA_DIST_DEBUG");
    return s && *s && std::strcmp(s, "0") != 0;
  }();
  return on;
}

ProcessGroupPtr world() {
  std::lock_guard<std::mutex> lock(g_world_mu);
  if (!g_world) {
    if (mpi_launched()) {
      g_world = make_mpi_world();
      g_mpi = true;
    } else {
      g_world = make_self_group();
      StatusBoard::get().open("", 0);
    }
    registered(g_world);
  }
  return g_world;
}

bool is_distributed() { return world()->size() > 1; }

bool running_distributed() {
  std::lock_guard<std::mutex> lock(g_world_mu);
  return g_world && g_world->size() > 1;
}

int local_rank() {
  world();
  return g_mpi ? mpi_local_rank() : 0;
}

int local_size() {
  world();
  return g_mpi ? mpi_local_size() : 1;
}

void set_step(int64_t step) { StatusBoard::get().set_step(step); }

void abort_job(int code) {
  if (g_mpi) mpi_abort(code);
  std::fflush(nullptr);
  std::_Exit(code);
}

void shutdown() {
  std::lock_guard<std::mutex> lock(g_world_mu);
  if (g_mpi) mpi_shutdown();
}

}  // namespace tessera::distributed
