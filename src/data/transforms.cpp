#include "tessera/data/transforms.h"

#include <cmath>

#include "tessera/data/dataset.h"
#include "tessera/ops/ops.h"

namespace tessera::data {

namespace {
// A uniform double in [0, 1) from the sample generator (one Philox block).
double uniform01() {
  Generator& g = sample_generator();
  uint64_t off = g.reserve(1);
  uint64_t seed = g.seed();
  auto r = philox4x32({static_cast<uint32_t>(off), static_cast<uint32_t>(off >> 32), 0, 0},
                      {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  uint64_t bits = (static_cast<uint64_t>(r[0]) << 21) ^ r[1];
  return static_cast<double>(bits & ((uint64_t(1) << 53) - 1)) / static_cast<double>(uint64_t(1) << 53);
}

void check_image(const Tensor& x, const char* name) {
  TS_CHECK(x.dim() == 3, name, ": expected an image [C, H, W], got shape ", shape_str(x.shape()));
}
}  // namespace

Transform normalize(std::vector<double> mean, std::vector<double> std) {
  TS_CHECK(!mean.empty() && mean.size() == std.size(), "normalize: mean and std must have the same, non-zero length");
  for (double s : std) TS_CHECK(s > 0, "normalize: std must be positive, got ", s);
  return [mean, std](const Tensor& x) {
    check_image(x, "normalize");
    const int64_t C = x.size(0);
    TS_CHECK(mean.size() == 1 || static_cast<int64_t>(mean.size()) == C, "normalize: ", mean.size(),
             " means for an image with ", C, " channels");
    std::vector<double> m(C), s(C);
    for (int64_t c = 0; c < C; ++c) m[c] = mean[mean.size() == 1 ? 0 : c], s[c] = std[std.size() == 1 ? 0 : c];
    Tensor mt = tensor(m).to(x.dtype()).view({C, 1, 1}), st = tensor(s).to(x.dtype()).view({C, 1, 1});
    return ops::div(ops::sub(x, mt), st);
  };
}

Transform random_crop(int64_t size, int64_t padding) {
  TS_CHECK(size > 0 && padding >= 0, "random_crop: size must be positive and padding non-negative");
  return [size, padding](const Tensor& x) {
    check_image(x, "random_crop");
    Tensor p = padding ? ops::pad(x, {padding, padding, padding, padding}) : x;
    const int64_t H = p.size(1), W = p.size(2);
    TS_CHECK(H >= size && W >= size, "random_crop: a ", size, "x", size, " crop does not fit the padded image ",
             shape_str(p.shape()));
    int64_t top = static_cast<int64_t>(uniform01() * static_cast<double>(H - size + 1));
    int64_t left = static_cast<int64_t>(uniform01() * static_cast<double>(W - size + 1));
    return p.slice(1, top, top + size).slice(2, left, left + size).contiguous();
  };
}

Transform random_horizontal_flip(double p) {
  TS_CHECK(p >= 0 && p <= 1, "random_horizontal_flip: p must be in [0, 1], got ", p);
  return [p](const Tensor& x) {
    check_image(x, "random_horizontal_flip");
    return uniform01() < p ? ops::flip(x, {2}) : x;
  };
}

Transform random_erasing(double p, std::pair<double, double> scale, std::pair<double, double> ratio, double value) {
  TS_CHECK(p >= 0 && p <= 1, "random_erasing: p must be in [0, 1], got ", p);
  TS_CHECK(scale.first > 0 && scale.first <= scale.second && scale.second <= 1, "random_erasing: scale must satisfy "
           "0 < min <= max <= 1");
  TS_CHECK(ratio.first > 0 && ratio.first <= ratio.second, "random_erasing: ratio must satisfy 0 < min <= max");
  return [=](const Tensor& x) {
    check_image(x, "random_erasing");
    if (uniform01() >= p) return x;
    const int64_t H = x.size(1), W = x.size(2);
    for (int attempt = 0; attempt < 10; ++attempt) {
      double area = static_cast<double>(H * W) * (scale.first + (scale.second - scale.first) * uniform01());
      double lr0 = std::log(ratio.first), lr1 = std::log(ratio.second);
      double r = std::exp(lr0 + (lr1 - lr0) * uniform01());
      int64_t h = static_cast<int64_t>(std::round(std::sqrt(area * r)));
      int64_t w = static_cast<int64_t>(std::round(std::sqrt(area / r)));
      if (h < 1 || w < 1 || h >= H || w >= W) continue;
      int64_t top = static_cast<int64_t>(uniform01() * static_cast<double>(H - h + 1));
      int64_t left = static_cast<int64_t>(uniform01() * static_cast<double>(W - w + 1));
      Tensor out = x.clone();
      out.slice(1, top, top + h).slice(2, left, left + w).fill_(value);
      return out;
    }
    return x;
  };
}

Transform compose(std::vector<Transform> transforms) {
  return [transforms](const Tensor& x) {
    Tensor y = x;
    for (auto& t : transforms) y = t(y);
    return y;
  };
}

}  // namespace tessera::data
