#pragma once
// Anomaly mode: finds the first op whose forward, or whose backward, produced a
// NaN or an Inf, and raises an error naming it, the module it ran in, and a
// summary of its inputs (shape, dtype, range, NaN/Inf counts).
//
//   { autograd::DetectAnomalyGuard anomaly; loss = model(x); loss.backward(); }
//
// Checked: the outputs of every op that records an autograd node (so, in a
// training forward, every op on the path to the loss) and every gradient a
// backward node returns. Ops run without grad recording are not checked; a
// NaN that enters the graph from one of them is reported as "already in
// input i" of the first recorded op that reads it. Every checked tensor is
// scanned, so expect the step to take roughly twice as long.
#include <string>

#include "tessera/core/tensor.h"

namespace tessera::autograd {

class DetectAnomalyGuard {
 public:
  DetectAnomalyGuard();
  ~DetectAnomalyGuard();
  DetectAnomalyGuard(const DetectAnomalyGuard&) = delete;
  DetectAnomalyGuard& operator=(const DetectAnomalyGuard&) = delete;

 private:
  struct Impl;
  Impl* impl_;
};

bool anomaly_mode_enabled();

// "shape [2, 3] f32, min -1, max 4.5, 1 NaN, 0 Inf": for error messages.
std::string summarize(const Tensor& t);

}  // namespace tessera::autograd
