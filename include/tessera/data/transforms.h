#pragma once
// Per-sample image transforms on F32 [C, H, W] tensors. Random ones draw from
// sample_generator(), so augmentation is reproducible and worker-independent.
#include <functional>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::data {

using Transform = std::function<Tensor(const Tensor&)>;

// (x - mean[c]) / std[c] per channel (one value = every channel).
Transform normalize(std::vector<double> mean, std::vector<double> std);
// Zero-pads by `padding` on each side, then crops a random size x size window.
Transform random_crop(int64_t size, int64_t padding = 0);
Transform random_horizontal_flip(double p = 0.5);
// With probability p, fills a random rectangle (area fraction in `scale`,
// aspect ratio in `ratio`, log-uniform) with `value` (Zhong et al. 2017).
Transform random_erasing(double p = 0.5, std::pair<double, double> scale = {0.02, 0.33},
                         std::pair<double, double> ratio = {0.3, 3.3}, double value = 0.0);
Transform compose(std::vector<Transform> transforms);

}  // namespace tessera::data
