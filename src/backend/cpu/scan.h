#pragma once
// Cumulative sum/product along the last dim of a contiguous tensor, and the
// backward of cumprod (which handles zeros exactly, in O(n) per row).
#include "tessera/core/tensor.h"

namespace tessera::cpu {

void cumulative(const Tensor& x, const Tensor& out, bool prod);
void cumprod_backward(const Tensor& x, const Tensor& y, const Tensor& g, const Tensor& gx);

}  // namespace tessera::cpu
