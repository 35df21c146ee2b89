// The dispatch of qmatmul onto the per-ISA kernels (kernels/quant.cpp).
#include "backend/cpu/quant.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <vector>

#include "backend/cpu/gemm.h"
#include "backend/cpu/kernel_table.h"
#include "tessera/core/allocator.h"
#include "tessera/core/parallel.h"

namespace tessera::cpu {

// Up to this many activation rows, weights are decoded in registers; above,
// dequantized tiles feed the f32 GEMM (measured crossover: docs/quantization.md).
constexpr int64_t kDecodeRows = 4;
// Up to this many rows the block formats' int8 dot products beat dequantizing
// for the f32 GEMM; above, the GEMM path runs (without activation rounding).
constexpr int64_t kIntegerDotRows = 16;

void qmatmul(const QuantMatrix& w, const float* x, int64_t m, float* y, bool integer) {
  if (m <= 0 || w.rows <= 0) return;
  const KernelTable& kt = kernels();
  const int f = static_cast<int>(w.format);
  // Enough rows per thread that waking the pool pays off (~64k multiply-adds).
  const int64_t grain = std::max<int64_t>(4, 65536 / std::max<int64_t>(1, w.cols * m));
  if (integer && w.format == QFormat::Int8 && m > kDecodeRows) {
    // Batches: one int8 GEMM (oneDNN), activations quantized per tensor (one
    // scale for the whole batch, as PyTorch's dynamic quantization does).
    float amax = 0.f;
    bool finite = true;
    for (int64_t i = 0; i < m * w.cols; ++i) {
      amax = std::max(amax, std::fabs(x[i]));
      finite = finite && std::isfinite(x[i]);
    }
    if (!finite) return qmatmul(w, x, m, y, false);  // NaN/Inf propagate through the float path
    const float d = amax / 127.f, id = d != 0.f ? 1.f / d : 0.f;
    std::vector<int8_t> xq(m * w.cols);
    for (int64_t i = 0; i < m * w.cols; ++i) xq[i] = static_cast<int8_t>(std::nearbyint(x[i] * id));
    std::vector<float> scales(w.rows);
    for (int64_t r = 0; r < w.rows; ++r) scales[r] = static_cast<const float*>(w.scales)[r] * d;
    gemm_s8(m, w.rows, w.cols, xq.data(), reinterpret_cast<const int8_t*>(w.data), scales.data(), y);
    return;
  }
  if (integer && qdot_supported(w) && m <= kIntegerDotRows) {
    const int64_t nb = w.cols / kQBlock;
    std::vector<BlockQ8Act> xq(m * nb);
    parallel_for(0, m, std::max<int64_t>(1, 16384 / w.cols),
                 [&](int64_t i0, int64_t i1) {
                   for (int64_t i = i0; i < i1; ++i) kt.quantize_act(x + i * w.cols, w.cols, xq.data() + i * nb);
                 });
    parallel_for(0, w.rows, grain, [&](int64_t r0, int64_t r1) { kt.qdot_rows[f](w, xq.data(), m, y, w.rows, r0, r1); });
    return;
  }
  if (m <= kDecodeRows) {
    parallel_for(0, w.rows, grain,
                 [&](int64_t r0, int64_t r1) { kt.qmatmul_rows[f](w, x, w.cols, m, y, w.rows, r0, r1); });
    return;
  }
  // Larger batches: dequantize ~4 MiB of rows (at least 256) at a time and run the f32 GEMM.
  // The tile comes from the caching allocator: fresh pages cost ~15 us each.
  const int64_t tile = std::min<int64_t>(std::max<int64_t>(1048576 / w.cols, 256), w.rows);
  const size_t tile_bytes = static_cast<size_t>(tile * w.cols) * sizeof(float);
  std::unique_ptr<float, std::function<void(float*)>> buf(static_cast<float*>(cpu_allocate(tile_bytes)),
                                                          [tile_bytes](float* p) { cpu_free(p, tile_bytes); });
  for (int64_t t0 = 0; t0 < w.rows; t0 += tile) {
    const int64_t tr = std::min(tile, w.rows - t0);
    parallel_for(0, tr, std::max<int64_t>(1, 16384 / w.cols), [&](int64_t a, int64_t b) {
      kt.qdequant_rows[f](w, t0 + a, t0 + b, buf.get() + a * w.cols);
    });
    GemmArgs g;
    g.dtype = DType::F32;
    g.m = m;
    g.n = tr;
    g.k = w.cols;
    g.sa[0] = 0, g.sa[1] = w.cols, g.sa[2] = 1;
    g.sb[0] = 0, g.sb[1] = 1, g.sb[2] = w.cols;
    g.sc[0] = 0, g.sc[1] = w.rows, g.sc[2] = 1;
    g.a = x;
    g.b = buf.get();
    g.c = y + t0;
    gemm(g);
  }
}

}  // namespace tessera::cpu
