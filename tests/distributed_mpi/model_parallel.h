#pragma once
// What the model-parallel tests share: the groups to split over, and a
// comparison relative to the reference's largest value.
#include <gtest/gtest.h>

#include <vector>

#include "tessera/distributed/process_group.h"
#include "tessera/ops/ops.h"

namespace tessera::testing {

// Groups of consecutive ranks of each size that divides the world: 2 and
// the world's size (one group of each, on every rank).
inline std::vector<distributed::ProcessGroupPtr> model_parallel_groups() {
  auto w = distributed::world();
  std::vector<distributed::ProcessGroupPtr> out;
  for (int n : {2, w->size()}) {
    if (w->size() % n != 0 || (!out.empty() && out.back()->size() == n)) continue;
    out.push_back(w->split(w->rank() / n));
  }
  return out;
}

// |a - b| <= tol * max|b|, with the worst difference in the message.
inline ::testing::AssertionResult close_relative(const Tensor& a, const Tensor& b, double tol) {
  if (a.shape() != b.shape())
    return ::testing::AssertionFailure() << "shapes " << shape_str(a.shape()) << " and " << shape_str(b.shape());
  const double scale = ops::max(ops::abs(b)).to(DType::F64).item<double>() + 1e-30;
  const double d = ops::max(ops::abs(ops::sub(a.to(DType::F64), b.to(DType::F64)))).item<double>();
  if (d <= tol * scale) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "differ by " << d << " (relative " << d / scale << ")";
}

}  // namespace tessera::testing
