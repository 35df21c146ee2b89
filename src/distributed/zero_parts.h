#pragma once
// Inside distributed/: ZeroRedundancy's per-parameter and per-segment records,
// shared by zero.cpp (layout, hooks, communication) and zero_state.cpp
// (optimizer state and checkpoint pieces). Note [ZeRO layout] in zero.cpp.
#include "tessera/distributed/zero.h"

namespace tessera::distributed {

struct ZeroRedundancy::Param {
  std::string name;
  Tensor tensor;
  size_t hook = 0;
  size_t segment = 0;
  int64_t offset = 0;  // elements into the segment
  bool ready = false;
  // This rank's part of the parameter: elements [piece_begin, piece_begin +
  // piece.numel()) of the flattened parameter, a view of the segment.
  Tensor piece;
  int64_t piece_begin = 0;
};

struct ZeroRedundancy::Segment {
  DType dtype = DType::F32;
  std::vector<size_t> params;
  int64_t numel = 0, chunk = 0;  // chunk * group size >= numel
  nn::Module* unit = nullptr;    // stage 3: the first module whose forward gathers it (null: the root)
  int uses = 0;                  // stage 3: the modules whose forwards gather it (a tied embedding: 2)
  Tensor flat;                   // the parameters (chunk * N elements); stage 3: only while gathered
  Tensor shard;                  // stage 3: this rank's chunk, the only lasting copy
  Tensor gathering;              // stage 3: the all-gather's output while it runs
  WorkPtr gather;
  bool resident = false;         // stage 3: the parameters are views of flat
  Tensor grad;                   // stage 1: the gradients; stage 2: this backward's, until reduced
  Tensor received;               // stage 2: the reduce-scatter's output (this rank's chunk)
  Tensor shard_grad;             // stage 2: this step's averaged chunk
  size_t pending = 0;
  WorkPtr work;
};

}  // namespace tessera::distributed
