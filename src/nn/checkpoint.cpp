#include "tessera/nn/checkpoint.h"

#include "tessera/autograd/checkpoint.h"
#include "tessera/autograd/grad_mode.h"

namespace tessera::nn {

Tensor checkpoint_sequential(int64_t n, int64_t segments, const Tensor& x,
                             const std::function<Tensor(int64_t, const Tensor&)>& run) {
  TS_CHECK(segments >= 1, "checkpoint_sequential: segments must be >= 1, got ", segments);
  TS_CHECK(n >= 0, "checkpoint_sequential: the number of modules must be >= 0, got ", n);
  segments = std::min(segments, std::max<int64_t>(n, 1));
  Tensor h = x;
  // Runs of ceil(n / segments) modules, as in torch.utils.checkpoint.checkpoint_sequential.
  int64_t per = (n + segments - 1) / segments;
  for (int64_t start = 0; start < n; start += per) {
    int64_t end = std::min(n, start + per);
    auto segment = [run, start, end](const Tensor& in) {
      Tensor y = in;
      for (int64_t i = start; i < end; ++i) y = run(i, y);
      return y;
    };
    h = end < n ? autograd::checkpoint(segment, h) : segment(h);
  }
  return h;
}

Tensor checkpoint_sequential(const Sequential& modules, int64_t segments, const Tensor& x) {
  return checkpoint_sequential(static_cast<int64_t>(modules.size()), segments, x,
                               [&modules](int64_t i, const Tensor& h) { return (*modules[i])(h); });
}

Tensor checkpoint_sequential(const ModuleList& modules, int64_t segments, const Tensor& x) {
  return checkpoint_sequential(static_cast<int64_t>(modules.size()), segments, x,
                               [&modules](int64_t i, const Tensor& h) { return (*modules[i])(h); });
}

Tensor run_blocks(int64_t n, bool checkpointing, int64_t segments, const Tensor& x,
                  const std::function<Tensor(int64_t, const Tensor&)>& run) {
  TS_CHECK(segments >= 0, "gradient checkpointing: checkpoint_segments must be >= 0 (0: one per block), got ",
           segments);
  if (!checkpointing || !GradMode::is_enabled()) {
    Tensor h = x;
    for (int64_t i = 0; i < n; ++i) h = run(i, h);
    return h;
  }
  if (segments > 0) return checkpoint_sequential(n, segments, x, run);
  Tensor h = x;
  for (int64_t i = 0; i < n; ++i) h = autograd::checkpoint([run, i](const Tensor& in) { return run(i, in); }, h);
  return h;
}

}  // namespace tessera::nn
