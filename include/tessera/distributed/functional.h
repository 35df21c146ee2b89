#pragma once
// Collectives that autograd differentiates: the building blocks of
// SyncBatchNorm and of tensor parallelism. Each runs synchronously on the
// group and records a node whose backward is the adjoint collective:
//
//   all_reduce(x)       y = sum over ranks of x         dx = all_reduce(dy)
//   all_gather(x)       y = the ranks' x stacked on dim 0   dx = reduce_scatter(dy)
//   reduce_scatter(x)   y = block `rank` of the sum      dx = all_gather(dy)
//   copy_to_group(x)    y = x                            dx = all_reduce(dy)
//
// The gradient each rank gets is that of the sum of every rank's loss, which
// is what data parallelism averages: summed over ranks, the local gradients
// equal the one-process gradient (docs/distributed.md).
#include "tessera/distributed/process_group.h"

namespace tessera::distributed {

Tensor all_reduce(const Tensor& x, const ProcessGroupPtr& group);
Tensor all_gather(const Tensor& x, const ProcessGroupPtr& group);      // [n, ...] -> [size * n, ...]
Tensor reduce_scatter(const Tensor& x, const ProcessGroupPtr& group);  // [size * n, ...] -> [n, ...]
Tensor copy_to_group(const Tensor& x, const ProcessGroupPtr& group);

}  // namespace tessera::distributed
