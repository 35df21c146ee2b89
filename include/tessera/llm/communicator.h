#pragma once
// What the LLM engine needs from a group of processes to run a model split
// across them (EngineOptions::group, Note [An engine across ranks]): a sum
// and a broadcast over raw buffers, every rank calling them in the same
// order. The engine stays free of the distributed layer, which hands it
// one over a process group (distributed::llm_communicator).
#include <cstdint>

namespace tessera::llm {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // data[0, n) = the sum over ranks of data[0, n), on every rank.
  virtual void all_reduce_sum(float* data, int64_t n) = 0;
  // data[0, n) = rank `root`'s data[0, n), on every rank.
  virtual void broadcast(int64_t* data, int64_t n, int root) = 0;
};

}  // namespace tessera::llm
