#include "tessera/quant/observer.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tessera/core/error.h"
#include "tessera/ops/ops.h"

namespace tessera::quant {
namespace {

// The values of a batch as contiguous f32, checked finite, and their min/max.
struct Batch {
  Tensor x;
  const float* data = nullptr;
  int64_t n = 0;
  double lo = 0, hi = 0;
};
Batch batch_of(const Tensor& t, const std::string& what) {
  TS_CHECK(t.defined() && is_floating(t.dtype()), "calibration: ", what, " is not a floating-point tensor");
  Batch b;
  b.x = t.detach().to(DType::F32).contiguous();
  b.data = static_cast<const float*>(b.x.raw_data());
  b.n = b.x.numel();
  TS_CHECK(b.n > 0, "calibration: ", what, " is empty");
  float lo = std::numeric_limits<float>::infinity(), hi = -lo;
  bool finite = true;
  for (int64_t i = 0; i < b.n; ++i) {
    float v = b.data[i];
    finite &= std::isfinite(v);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  TS_CHECK(finite, "calibration: ", what, " has NaN or infinite values; int8 cannot represent them (check the model "
           "in float on the calibration data first)");
  b.lo = lo;
  b.hi = hi;
  return b;
}

class MinMax : public Observer {
 public:
  void observe(const Tensor& x, const std::string& what) override {
    Batch b = batch_of(x, what);
    lo_ = batches_ ? std::min(lo_, b.lo) : b.lo;
    hi_ = batches_ ? std::max(hi_, b.hi) : b.hi;
    ++batches_;
  }
  std::pair<double, double> range() const override { return {lo_, hi_}; }

 private:
  double lo_ = 0, hi_ = 0;
};

class MovingAverage : public Observer {
 public:
  explicit MovingAverage(double c) : c_(c) {}
  void observe(const Tensor& x, const std::string& what) override {
    Batch b = batch_of(x, what);
    if (!batches_) {
      lo_ = b.lo;
      hi_ = b.hi;
    } else {
      lo_ += c_ * (b.lo - lo_);
      hi_ += c_ * (b.hi - hi_);
    }
    ++batches_;
  }
  std::pair<double, double> range() const override { return {lo_, hi_}; }

 private:
  double c_, lo_ = 0, hi_ = 0;
};

// A histogram over [lo, hi] that widens (and re-bins what it holds) when a
// batch falls outside it.
class Histogram : public Observer {
 public:
  explicit Histogram(int64_t bins) : counts_(bins, 0.0) {}
  void observe(const Tensor& x, const std::string& what) override {
    Batch b = batch_of(x, what);
    if (!batches_) {
      lo_ = b.lo;
      hi_ = b.hi;
    } else if (b.lo < lo_ || b.hi > hi_) {
      rebin(std::min(lo_, b.lo), std::max(hi_, b.hi));
    }
    const double w = width();
    const int64_t B = bins();
    for (int64_t i = 0; i < b.n; ++i) {
      int64_t k = w > 0 ? static_cast<int64_t>((b.data[i] - lo_) / w) : 0;
      counts_[std::clamp<int64_t>(k, 0, B - 1)] += 1;
    }
    ++batches_;
  }

 protected:
  int64_t bins() const { return static_cast<int64_t>(counts_.size()); }
  double width() const { return (hi_ - lo_) / static_cast<double>(bins()); }
  double total() const {
    double t = 0;
    for (double c : counts_) t += c;
    return t;
  }
  // The value below which a fraction q of the mass lies (linear inside a bin).
  double quantile(double q) const {
    const double target = q * total();
    double acc = 0;
    for (int64_t k = 0; k < bins(); ++k) {
      if (acc + counts_[k] >= target && counts_[k] > 0)
        return lo_ + width() * (static_cast<double>(k) + (target - acc) / counts_[k]);
      acc += counts_[k];
    }
    return hi_;
  }
  std::vector<double> counts_;
  double lo_ = 0, hi_ = 0;

 private:
  void rebin(double lo, double hi) {
    std::vector<double> next(counts_.size(), 0.0);
    const double w_old = width(), w_new = (hi - lo) / static_cast<double>(bins());
    for (int64_t k = 0; k < bins(); ++k) {
      if (!counts_[k]) continue;
      const double center = lo_ + (static_cast<double>(k) + 0.5) * w_old;
      int64_t j = w_new > 0 ? static_cast<int64_t>((center - lo) / w_new) : 0;
      next[std::clamp<int64_t>(j, 0, bins() - 1)] += counts_[k];
    }
    counts_ = std::move(next);
    lo_ = lo;
    hi_ = hi;
  }
};

class Percentile : public Histogram {
 public:
  Percentile(int64_t bins, double p) : Histogram(bins), p_(p) {}
  std::pair<double, double> range() const override {
    const double q = p_ / 100.0;
    return {quantile(1.0 - q), quantile(q)};
  }

 private:
  double p_;
};

class Entropy : public Histogram {
 public:
  explicit Entropy(int64_t bins) : Histogram(bins) {}
  std::pair<double, double> range() const override {
    constexpr int64_t kLevels = 256;
    const int64_t B = bins();
    if (B <= kLevels || width() <= 0) return {lo_, hi_};
    double best = std::numeric_limits<double>::infinity();
    int64_t best_i = B;
    std::vector<double> p, q;
    for (int64_t i = kLevels; i <= B; ++i) {
      // P: the first i bins, everything beyond folded into the last one.
      p.assign(counts_.begin(), counts_.begin() + i);
      for (int64_t k = i; k < B; ++k) p[i - 1] += counts_[k];
      // Q: the first i bins without the tail, merged into kLevels groups, each
      // group's mass spread over its non-empty bins. The folded tail is what
      // Q lacks: clipping a heavy tail costs, clipping a sparse one does not.
      q.assign(i, 0.0);
      for (int64_t g = 0; g < kLevels; ++g) {
        const int64_t a = g * i / kLevels, b = (g + 1) * i / kLevels;
        double mass = 0;
        int64_t used = 0;
        for (int64_t k = a; k < b; ++k) {
          mass += counts_[k];
          used += counts_[k] > 0;
        }
        for (int64_t k = a; k < b; ++k)
          if (counts_[k] > 0) q[k] = mass / static_cast<double>(used);
      }
      double sp = 0, sq = 0;
      for (int64_t k = 0; k < i; ++k) {
        sp += p[k];
        sq += q[k];
      }
      double kl = 0;
      for (int64_t k = 0; k < i; ++k)
        if (p[k] > 0) kl += p[k] / sp * std::log((p[k] / sp) / std::max(q[k] / sq, 1e-12));
      if (kl < best) {
        best = kl;
        best_i = i;
      }
    }
    return {lo_, lo_ + width() * static_cast<double>(best_i)};
  }
};

}  // namespace

void check(const ObserverConfig& c) {
  TS_CHECK(c.kind == "minmax" || c.kind == "moving_average" || c.kind == "percentile" || c.kind == "entropy",
           "observer: kind must be minmax, moving_average, percentile or entropy, got '", c.kind, "'");
  TS_CHECK(c.averaging_constant > 0 && c.averaging_constant <= 1,
           "observer: averaging_constant must be in (0, 1], got ", c.averaging_constant);
  TS_CHECK(c.percentile > 50 && c.percentile <= 100, "observer: percentile must be in (50, 100], got ", c.percentile);
  TS_CHECK(c.bins >= 512 && c.bins <= (1 << 16), "observer: bins must be in [512, 65536], got ", c.bins);
}

std::unique_ptr<Observer> make_observer(const ObserverConfig& c) {
  check(c);
  if (c.kind == "moving_average") return std::make_unique<MovingAverage>(c.averaging_constant);
  if (c.kind == "percentile") return std::make_unique<Percentile>(c.bins, c.percentile);
  if (c.kind == "entropy") return std::make_unique<Entropy>(c.bins);
  return std::make_unique<MinMax>();
}

QParams affine_qparams(double lo, double hi, int qmax) {
  TS_CHECK(std::isfinite(lo) && std::isfinite(hi) && lo <= hi, "quantization range [", lo, ", ", hi,
           "] is not a finite interval");
  lo = std::min(lo, 0.0);
  hi = std::max(hi, 0.0);
  QParams p;
  if (hi - lo <= 0) return p;  // always 0: any scale is exact
  p.scale = (hi - lo) / qmax;
  p.zero_point = std::clamp<int64_t>(static_cast<int64_t>(std::nearbyint(-lo / p.scale)), 0, qmax);
  return p;
}

QParams symmetric_qparams(double lo, double hi) {
  TS_CHECK(std::isfinite(lo) && std::isfinite(hi) && lo <= hi, "quantization range [", lo, ", ", hi,
           "] is not a finite interval");
  const double amax = std::max(std::fabs(lo), std::fabs(hi));
  return {amax > 0 ? amax / 127 : 1.0, 0, true};
}

std::pair<Tensor, Tensor> quantize_weight_per_channel(const Tensor& w) {
  TS_CHECK(w.defined() && is_floating(w.dtype()) && w.dim() >= 1 && w.size(0) > 0,
           "quantize_weight_per_channel: expected a floating tensor [out_channels, ...], got ",
           w.defined() ? shape_str(w.shape()) : std::string("none"));
  Tensor wf = w.detach().to(DType::F32).contiguous();
  const int64_t oc = wf.size(0), per = wf.numel() / oc;
  Tensor q = empty(w.shape(), DType::I8), s = empty({oc}, DType::F32);
  const float* in = static_cast<const float*>(wf.raw_data());
  auto* qo = static_cast<int8_t*>(q.raw_data());
  auto* so = static_cast<float*>(s.raw_data());
  for (int64_t c = 0; c < oc; ++c) {
    float amax = 0;
    for (int64_t i = 0; i < per; ++i) {
      const float v = in[c * per + i];
      TS_CHECK(std::isfinite(v), "quantize_weight_per_channel: weight of output channel ", c,
               " has a NaN or infinite value");
      amax = std::max(amax, std::fabs(v));
    }
    const float scale = amax > 0 ? amax / 127.0f : 1.0f;
    so[c] = scale;
    for (int64_t i = 0; i < per; ++i)
      qo[c * per + i] = static_cast<int8_t>(std::clamp(std::nearbyint(in[c * per + i] / scale), -127.0f, 127.0f));
  }
  return {q, s};
}

}  // namespace tessera::quant
