#pragma once
// Observers: what calibration learns about an activation, and the int8
// parameters it turns into.
//
//   minmax          the smallest and largest value seen
//   moving_average  min and max of each batch, averaged (x += c * (batch - x))
//   percentile      the p-th and (100-p)-th percentiles of every value seen
//   entropy         the upper bound whose 256-level quantization keeps the
//                   histogram closest in KL divergence (TensorRT's method);
//                   the lower bound is the smallest value seen
//
// The histogram observers keep `bins` bins over the range seen so far and
// re-bin when a batch widens it. Values that are NaN or infinite are an error:
// a range built on them would quantize everything wrongly.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::quant {

struct ObserverConfig {
  std::string kind = "minmax";  // minmax | moving_average | percentile | entropy
  double averaging_constant = 0.01;
  double percentile = 99.99;
  int64_t bins = 2048;
};
// Checks the fields; errors name the field and the allowed values.
void check(const ObserverConfig& c);

class Observer {
 public:
  virtual ~Observer() = default;
  // Adds a batch of values (`what` names the activation in errors).
  virtual void observe(const Tensor& x, const std::string& what) = 0;
  // The range to quantize, [lo, hi]; only after at least one observe().
  virtual std::pair<double, double> range() const = 0;
  int64_t batches() const { return batches_; }

 protected:
  int64_t batches_ = 0;
};
std::unique_ptr<Observer> make_observer(const ObserverConfig& c);

// Affine u8 parameters: x = (q - zero_point) * scale with q in [0, qmax].
struct QParams {
  double scale = 1.0;
  int64_t zero_point = 0;
  bool s8 = false;  // symmetric s8 codes instead (zero point 0; a signed model input)
};
// The parameters covering [lo, hi] widened to hold 0 (so zero, padding and
// ReLU's floor are exact). A range of width 0 (an activation that was always
// 0) gets scale 1: every code of it is exact. NaN or infinite bounds are an error.
QParams affine_qparams(double lo, double hi, int qmax = 255);

// Symmetric s8 parameters covering [lo, hi] (s8 set): zero point 0, codes
// in [-127, 127]. A range of width 0 gets scale 1.
QParams symmetric_qparams(double lo, double hi);

// Per output channel symmetric s8 weights: w ≈ q * scale[oc], q in [-127, 127].
// A channel of zeros gets scale 1. Returns {codes (i8, w's shape), scales (f32 [OC])}.
std::pair<Tensor, Tensor> quantize_weight_per_channel(const Tensor& w);

}  // namespace tessera::quant
