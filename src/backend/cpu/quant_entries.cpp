// The CPU backend's entries for quantized, int8, sparse and fused elementwise
// products (backend/backend.h): views of the checked tensors, then the
// kernels of quant.h, int8.h, sparse.h and fused.h.
#include <atomic>

#include "backend/cpu/backend.h"
#include "backend/cpu/fused.h"
#include "backend/cpu/int8.h"
#include "backend/cpu/kernel_table.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/sparse.h"
#include "tessera/core/parallel.h"

namespace tessera::cpu::entry {
namespace {

cpu::QuantMatrix view(const QuantWeight& w) {
  cpu::QuantMatrix m;
  m.format = w.format;
  m.rows = w.rows;
  m.cols = w.cols;
  m.group = w.group;
  m.data = static_cast<const uint8_t*>(w.qweight.raw_data());
  m.scales = w.scales.defined() ? w.scales.raw_data() : nullptr;
  m.mins = w.mins.defined() ? w.mins.raw_data() : nullptr;
  return m;
}

}  // namespace

void quantized_matmul(const QuantWeight& w, const Tensor& x, const Tensor& y, bool integer) {
  qmatmul(view(w), static_cast<const float*>(x.raw_data()), x.numel() / std::max<int64_t>(w.cols, 1),
          static_cast<float*>(y.raw_data()), integer);
}

void dequantize_weight(const QuantWeight& w, const Tensor& out) {
  const cpu::QuantMatrix m = view(w);
  auto* o = static_cast<float*>(out.raw_data());
  const auto rows = kernels().qdequant_rows[static_cast<int>(m.format)];
  parallel_for(0, m.rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(m.cols, 1)),
               [&](int64_t r0, int64_t r1) { rows(m, r0, r1, o + r0 * m.cols); });
}

bool quantize_affine(const Tensor& x, const Tensor& out, float inv_scale, float zero_point, float lo, float hi) {
  const float* in = static_cast<const float*>(x.raw_data());
  char* o = static_cast<char*>(out.raw_data());
  const bool u8 = out.dtype() == DType::U8;
  const auto kernel = kernels().quantize_affine;
  std::atomic<bool> nan{false};
  parallel_for(0, x.numel(), 16384, [&](int64_t i0, int64_t i1) {
    if (kernel(in + i0, i1 - i0, inv_scale, zero_point, lo, hi, o + i0, u8)) nan = true;
  });
  return nan;
}

void dequantize_affine(const Tensor& q, const Tensor& out, float scale, int32_t zero_point) {
  float* o = static_cast<float*>(out.raw_data());
  parallel_for(0, q.numel(), 16384, [&](int64_t i0, int64_t i1) {
    auto run = [&]<typename Q>(const Q* in) {
      for (int64_t i = i0; i < i1; ++i) o[i] = static_cast<float>(static_cast<int32_t>(in[i]) - zero_point) * scale;
    };
    if (q.dtype() == DType::U8) run(static_cast<const uint8_t*>(q.raw_data()));
    else run(static_cast<const int8_t*>(q.raw_data()));
  });
}

void int8_linear(const Tensor& x, const Tensor& w, const Int8Epilogue& e, const Tensor& y) {
  const int64_t n = w.size(0), k = w.size(1), m = k ? x.numel() / k : 0;
  cpu::int8_linear(m, n, k, x.raw_data(), static_cast<const int8_t*>(w.raw_data()), e, y.raw_data());
}

void int8_conv2d(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Int8Epilogue& e, const Tensor& y) {
  // Packed once per layout and kept with the weights' storage (a new version packs again).
  const std::string key = "int8_conv2d_weights@" + std::to_string(w.offset()) + ":" + int8_conv_weights_layout(g, e);
  const auto* wq = static_cast<const int8_t*>(w.raw_data());
  std::shared_ptr<const void> packed = w.storage()->derived(key, [&] { return pack_int8_conv_weights(g, e, wq); });
  cpu::int8_conv2d(g, x.raw_data(), wq, e, y.raw_data(), packed.get());
}

void csr_linear(const Tensor& values, const Tensor& col_idx, const Tensor& row_ptr, int64_t cols, const Tensor& x,
                const Tensor& bias, const Tensor& y) {
  const CsrMatrix w{row_ptr.numel() - 1, cols, row_ptr.data_ptr<int64_t>(), col_idx.data_ptr<int32_t>(),
                    values.data_ptr<float>()};
  cpu::csr_linear(w, x.data_ptr<float>(), x.numel() / cols, bias.defined() ? bias.data_ptr<float>() : nullptr,
                  y.data_ptr<float>());
}

void fused_elementwise(const FusedProgram& p, const TensorList& inputs, const TensorList& outputs) {
  run_fused(p, inputs, outputs);
}

}  // namespace tessera::cpu::entry
