#pragma once
// The Trainer across the ranks of a process group (train/parallel.h): data
// parallelism with DistributedDataParallel, the shared decisions as
// collectives. `tessera train` makes it when a launcher started the process
// or the config asks for `parallel: {data: N}`.
#include <nlohmann/json.hpp>

#include "tessera/distributed/process_group.h"
#include "tessera/train/parallel.h"
#include "tessera/train/recipe.h"

namespace tessera::distributed {

// Checks the settings against the group (parallel.data must equal its size)
// and returns the Trainer's parallel strategy.
std::shared_ptr<train::Parallel> trainer_parallel(const train::ParallelSettings& settings, ProcessGroupPtr group);

// Every rank must run the same config: rank 0's is compared with each rank's,
// and a difference is an error on every rank naming the first differing key.
void check_same_config(ProcessGroup& group, const nlohmann::json& config);

}  // namespace tessera::distributed
