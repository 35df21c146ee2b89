#pragma once
// Gradient checkpointing for stacks of modules (autograd/checkpoint.h for the
// function form).
//
// checkpoint_sequential splits n modules into `segments` runs of consecutive
// modules; every run but the last is checkpointed (the last one's activations
// are needed right away by backward, as in PyTorch). Memory then holds the
// input of each run plus one run's activations: with sqrt(n) segments it grows
// like sqrt(n) instead of n.
#include <functional>

#include "tessera/nn/container.h"

namespace tessera::nn {

// run(i, x) applies module i; used for blocks whose forward takes more than x.
Tensor checkpoint_sequential(int64_t n, int64_t segments, const Tensor& x,
                             const std::function<Tensor(int64_t, const Tensor&)>& run);
Tensor checkpoint_sequential(const Sequential& modules, int64_t segments, const Tensor& x);
Tensor checkpoint_sequential(const ModuleList& modules, int64_t segments, const Tensor& x);

// How a model with a gradient_checkpointing option runs its blocks: segments
// == 0 checkpoints every block on its own (the per-block flag), segments > 0
// uses checkpoint_sequential. Without grad recording the blocks just run.
Tensor run_blocks(int64_t n, bool checkpointing, int64_t segments, const Tensor& x,
                  const std::function<Tensor(int64_t, const Tensor&)>& run);

}  // namespace tessera::nn
