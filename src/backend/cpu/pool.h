#pragma once
// 2-D max and average pooling over [planes, H, W] contiguous data (max
// pooling without indices also over channel-blocked [planes, H, W, lanes]).
#include <cstdint>

#include "backend/kernel_ids.h"

namespace tessera::cpu {

using backend::PoolGeometry;

// indices: flat position in the H*W plane of each maximum (NaN wins); null
// when nothing needs them (inference), which takes the vectorized kernel.
void max_pool2d_forward(const PoolGeometry& g, const void* x, void* y, int64_t* indices);
// gx (overwritten) = gy summed into the positions `indices` chose.
void max_pool2d_backward(const PoolGeometry& g, const void* gy, const int64_t* indices, void* gx);
void avg_pool2d_forward(const PoolGeometry& g, const void* x, void* y);
// gx is overwritten.
void avg_pool2d_backward(const PoolGeometry& g, const void* gy, void* gx);

}  // namespace tessera::cpu
