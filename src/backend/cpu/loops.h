#pragma once
// Running a 1-D kernel over tensors of any shape and strides: the broadcasting,
// stride walking and threading are done here once, so kernels are plain loops.
#include <initializer_list>

#include "backend/cpu/kernel_table.h"
#include "tessera/core/tensor.h"

namespace tessera::cpu {

// out = loop(ins...), elementwise. Every input must already have out's shape
// or broadcast to it (stride-0 dims are used, nothing is copied). `grain` is
// the number of elements below which one thread does the work.
void run_elementwise(const Tensor& out, std::initializer_list<const Tensor*> ins, Loop1d loop,
                     const double* params = nullptr, int64_t grain = -1);

// Copies src into dst (same shape, any strides, any dtypes).
void copy_into(const Tensor& dst, const Tensor& src);
void fill(const Tensor& dst, const Scalar& value);

}  // namespace tessera::cpu
