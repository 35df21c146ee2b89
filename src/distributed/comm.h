#pragma once
// Inside distributed/: the backends behind ProcessGroup and the world's setup.
#include <string>
#include <utility>
#include <vector>

#include "tessera/distributed/process_group.h"

namespace tessera::distributed {

ProcessGroupPtr make_self_group();
// Registers a new group (if any) with the communication ops under its name
// (tessera/ops/communicator.h) and returns it.
ProcessGroupPtr registered(ProcessGroupPtr g);

// True when the environment says a launcher started this process as an MPI
// rank (mpirun, srun --mpi=pmix) or TESSERA_DIST_BACKEND=mpi asks for MPI.
bool mpi_launched();
// Starts MPI on the communication thread and returns MPI_COMM_WORLD's group.
ProcessGroupPtr make_mpi_world();
int mpi_local_rank();
int mpi_local_size();
void mpi_shutdown();
[[noreturn]] void mpi_abort(int code);

// The error for parameters that got no gradient in a backward (DDP, ZeRO),
// naming up to five of them, the step and the rank.
[[noreturn]] void unused_parameters_error(const char* who, const std::vector<std::string>& names, int64_t step,
                                          int rank);

// Adds one finished collective to collective_stats().
void record_collective(const CollectiveInfo& info, double seconds);

// TESSERA_DIST_TIMEOUT (seconds, default 300) and TESSERA_DIST_DEBUG.
double collective_timeout();
bool debug_collectives();

// Every rank must hold the same parameters (names, dtypes, shapes, order);
// the first difference is an error on every rank. `who` names the caller.
void check_same_parameters(ProcessGroup& g, const std::vector<std::pair<std::string, Tensor>>& named, const char* who);

}  // namespace tessera::distributed
