#pragma once
// `tessera launch`: starts a command as N ranks under Open MPI's mpirun (or
// Slurm's srun inside an allocation), watches them, and restarts the job from
// its newest checkpoint after a failure (apps/launch.cpp, docs/distributed.md).
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace tessera::cli {

struct LaunchFlags {
  CLI::App* cmd = nullptr;
  int n = 1;
  std::string hostfile;
  int max_restarts = 0;
  int restart_n = 0;         // ranks after a restart; 0: n
  double kill_timeout = 30;  // seconds from the first failure to the end of the job
  double restart_delay = 0;  // seconds between a failed attempt and the next
  int threads = 0;           // OMP_NUM_THREADS per rank; 0: the host's cores / its ranks
  std::string launcher = "auto";
  std::vector<std::string> command;
};

void add_launch_command(CLI::App& app, LaunchFlags& f);
// `self`: this executable, for a command that names `tessera`.
int cmd_launch(const LaunchFlags& f, const std::string& self);

}  // namespace tessera::cli
