#pragma once
// Collectives that autograd differentiates, on a ProcessGroupPtr: the
// communication ops of the op table (tessera/ops/ops.h, Note [Collectives as
// ops]) called with the group's name. The building blocks of SyncBatchNorm
// and of tensor parallelism:
//
//   all_reduce(x)          y = sum over ranks of x               dx = all_reduce(dy)
//   all_gather(x, dim)     y = the ranks' x joined along dim     dx = reduce_scatter(dy)
//   reduce_scatter(x, dim) y = block `rank` of the sum           dx = all_gather(dy)
//   copy_to_group(x)       y = x                                 dx = all_reduce(dy)
//   reduce_from_group(x)   y = sum over ranks of x               dx = dy
//
// With the first four, the gradient each rank gets is that of the sum of
// every rank's loss, which is what data parallelism averages: summed over
// ranks, the local gradients equal the one-process gradient
// (docs/distributed.md). copy_to_group and reduce_from_group are the pair
// around a computation split across the group whose result every rank then
// uses alike (one loss, computed on every rank), as tensor parallelism's are.
#include "tessera/distributed/process_group.h"
#include "tessera/ops/ops.h"

namespace tessera::distributed {

inline Tensor all_reduce(const Tensor& x, const ProcessGroupPtr& g) { return ops::all_reduce(x, g->name()); }
inline Tensor all_gather(const Tensor& x, const ProcessGroupPtr& g, int64_t dim = 0) {
  return ops::all_gather(x, g->name(), dim);
}
inline Tensor reduce_scatter(const Tensor& x, const ProcessGroupPtr& g, int64_t dim = 0) {
  return ops::reduce_scatter(x, g->name(), dim);
}
inline Tensor copy_to_group(const Tensor& x, const ProcessGroupPtr& g) { return ops::copy_to_group(x, g->name()); }
inline Tensor reduce_from_group(const Tensor& x, const ProcessGroupPtr& g) {
  return ops::reduce_from_group(x, g->name());
}

}  // namespace tessera::distributed
