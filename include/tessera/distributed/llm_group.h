#pragma once
// A process group as the LLM engine's communicator (llm/communicator.h), for
// tensor-parallel serving: `tessera serve-llm --tensor-parallel T`.
//
//   auto g = distributed::world();
//   auto part = llm::Model::load("model.gguf", {g->rank(), g->size()});
//   llm::Engine engine(part, {.group = distributed::llm_communicator(g)});
//   if (g->rank() != 0) engine.follow();   // rank 0 drives; the others follow
#include <memory>

#include "tessera/distributed/process_group.h"
#include "tessera/llm/communicator.h"

namespace tessera::distributed {

std::shared_ptr<llm::Communicator> llm_communicator(ProcessGroupPtr group);

}  // namespace tessera::distributed
