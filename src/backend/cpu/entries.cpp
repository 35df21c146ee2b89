// The CPU backend's kernel entries (backend/backend.h): the per-dtype loops
// of the kernel table run over tensors, threaded with a grain size. The op
// layer has already checked the inputs and allocated the outputs.
#include <algorithm>
#include <cmath>

#include "backend/cpu/backend.h"
#include "backend/cpu/attention.h"
#include "backend/cpu/conv.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/kernel_table.h"
#include "backend/cpu/loops.h"
#include "backend/cpu/pool.h"
#include "backend/cpu/scan.h"
#include "tessera/core/parallel.h"

namespace tessera::cpu::entry {
namespace {

int64_t row_grain(int64_t n) { return std::max<int64_t>(1, kGrainSize / std::max<int64_t>(n, 1)); }

std::array<uint32_t, 4> philox_block(uint64_t seed, uint64_t counter) {
  return philox4x32({static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0, 0},
                    {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
}
// Uniform in [0, 1): 24 bits for float, 53 for double.
inline float u01f(uint32_t x) { return static_cast<float>(x >> 8) * (1.0f / 16777216.0f); }
inline double u01d(uint32_t hi, uint32_t lo) {
  uint64_t v = (static_cast<uint64_t>(hi) << 21) ^ (lo >> 11);
  return static_cast<double>(v & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
}

}  // namespace

void copy(const Tensor& dst, const Tensor& src) { copy_into(dst, src); }

void fill(const Tensor& dst, const Scalar& value) { cpu::fill(dst, value); }

void unary(const Tensor& out, const Tensor& x, UnaryKernel k, const double* params) {
  auto loop = kernels().unary[static_cast<int>(k)][idx(x.dtype())];
  TS_INTERNAL_ASSERT(loop != nullptr);
  run_elementwise(out, {&x}, loop, params);
}

void binary(const Tensor& out, const Tensor& a, const Tensor& b, BinaryKernel k) {
  auto loop = kernels().binary[static_cast<int>(k)][idx(a.dtype())];
  TS_INTERNAL_ASSERT(loop != nullptr && a.dtype() == b.dtype());
  run_elementwise(out, {&a, &b}, loop);
}

void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  run_elementwise(out, {&cond, &a, &b}, kernels().where[idx(a.dtype())]);
}

// Element i of a draw uses Philox block (offset + i / lanes), so results do
// not depend on the number of threads.
void random(const Tensor& t, RandomDist dist, double a, double b, uint64_t seed, uint64_t base) {
  bool dbl = t.dtype() == DType::F64;
  int64_t n = t.numel();
  int lanes = dbl ? 2 : 4;
  uint64_t blocks = static_cast<uint64_t>((n + lanes - 1) / lanes);
  double* pd = dbl ? t.data_ptr<double>() : nullptr;
  float* pf = dbl ? nullptr : t.data_ptr<float>();
  parallel_for(0, static_cast<int64_t>(blocks), 2048, [&](int64_t b0, int64_t b1) {
    for (int64_t bi = b0; bi < b1; ++bi) {
      auto r = philox_block(seed, base + static_cast<uint64_t>(bi));
      double v[4];
      int k = 0;
      if (dbl) {
        double u0 = u01d(r[0], r[1]), u1 = u01d(r[2], r[3]);
        if (dist == RandomDist::Uniform) {
          v[0] = u0;
          v[1] = u1;
        } else {
          double rad = std::sqrt(-2.0 * std::log(1.0 - u0)), th = 2.0 * M_PI * u1;
          v[0] = rad * std::cos(th);
          v[1] = rad * std::sin(th);
        }
        k = 2;
      } else {
        for (int j = 0; j < 4; ++j) v[j] = u01f(r[j]);
        if (dist == RandomDist::Normal) {
          for (int j = 0; j < 4; j += 2) {
            double rad = std::sqrt(-2.0 * std::log(1.0 - v[j])), th = 2.0 * M_PI * v[j + 1];
            v[j] = rad * std::cos(th);
            v[j + 1] = rad * std::sin(th);
          }
        }
        k = 4;
      }
      for (int j = 0; j < k; ++j) {
        int64_t i = bi * lanes + j;
        if (i >= n) break;
        double x = dist == RandomDist::Uniform ? a + (b - a) * v[j] : a + b * v[j];
        if (dbl) pd[i] = x;
        else {
          float f = static_cast<float>(x);
          // Rounding can reach the open upper bound of a float uniform: step back.
          if (dist == RandomDist::Uniform && f >= static_cast<float>(b) && b > a)
            f = std::nextafter(static_cast<float>(b), -INFINITY);
          pf[i] = f;
        }
      }
    }
  });
}

void randint(const Tensor& t, int64_t low, uint64_t range, uint64_t seed, uint64_t base) {
  int64_t n = t.numel();
  int64_t* p = t.data_ptr<int64_t>();
  parallel_for(0, (n + 1) / 2, 2048, [&](int64_t b0, int64_t b1) {
    for (int64_t bi = b0; bi < b1; ++bi) {
      auto r = philox_block(seed, base + static_cast<uint64_t>(bi));
      for (int j = 0; j < 2; ++j) {
        int64_t i = bi * 2 + j;
        if (i >= n) break;
        uint64_t v = (static_cast<uint64_t>(r[2 * j]) << 32) | r[2 * j + 1];
        p[i] = static_cast<int64_t>(static_cast<uint64_t>(low) + v % range);
      }
    }
  });
}

void arange(const Tensor& t, const Scalar& start, const Scalar& step) {
  int64_t n = t.numel();
  if (t.dtype() == DType::I64) {
    const int64_t s = start.to_int(), st = step.to_int();
    int64_t* q = t.data_ptr<int64_t>();
    for (int64_t i = 0; i < n; ++i) q[i] = s + i * st;  // the op checked it stays inside [start, end)
    return;
  }
  const double s = start.to_double(), st = step.to_double();
  double* p = t.data_ptr<double>();
  for (int64_t i = 0; i < n; ++i) p[i] = s + static_cast<double>(i) * st;
}

void linspace(const Tensor& t, double start, double end) {
  int64_t steps = t.numel();
  double* p = t.data_ptr<double>();
  double step = steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0;
  // Symmetric evaluation, as PyTorch does, so both ends are exact.
  int64_t half = steps / 2;
  for (int64_t i = 0; i < steps; ++i)
    p[i] = i < half ? start + step * static_cast<double>(i) : end - step * static_cast<double>(steps - 1 - i);
}

// Few long rows are split into fixed-size chunks, whose partials are then
// reduced in order, so results do not depend on the number of threads.
void reduce_rows(ReduceKernel k, const Tensor& x, const Tensor& out, int64_t rows, int64_t len) {
  constexpr int64_t kChunk = 65536;
  auto fn = kernels().reduce_rows[static_cast<int>(k)][idx(x.dtype())];
  size_t in_item = x.itemsize(), out_item = out.itemsize();
  const char* in = static_cast<const char*>(x.raw_data());
  char* o = static_cast<char*>(out.raw_data());
  int nt = get_num_threads();
  if (rows >= nt || len <= 2 * kChunk) {
    parallel_for(0, rows, row_grain(len), [&](int64_t r0, int64_t r1) {
      fn(in + r0 * len * in_item, o + r0 * out_item, r1 - r0, len);
    });
    return;
  }
  int64_t chunks = (len + kChunk - 1) / kChunk;
  Tensor partial = empty({rows, chunks}, TensorOptions(out.dtype(), out.device()));
  char* p = static_cast<char*>(partial.raw_data());
  parallel_for(0, rows * chunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      int64_t r = i / chunks, c = i % chunks;
      int64_t start = c * kChunk, n = std::min(kChunk, len - start);
      fn(in + (r * len + start) * in_item, p + i * out_item, 1, n);
    }
  });
  // Partials combine with the same reduction (sum of sums, max of maxes, ...).
  kernels().reduce_rows[static_cast<int>(k)][idx(partial.dtype())](p, o, rows, chunks);
}

void cumulative(const Tensor& x, const Tensor& out, bool prod) { cpu::cumulative(x, out, prod); }
void cumprod_backward(const Tensor& x, const Tensor& y, const Tensor& g, const Tensor& gx) {
  cpu::cumprod_backward(x, y, g, gx);
}

void reduce_mid(ReduceKernel k, const Tensor& x, const Tensor& out, int64_t outer, int64_t len, int64_t inner) {
  auto fn = kernels().reduce_mid[static_cast<int>(k)][idx(x.dtype())];
  const char* in = static_cast<const char*>(x.raw_data());
  char* o = static_cast<char*>(out.raw_data());
  size_t ii = x.itemsize(), oi = out.itemsize();
  parallel_for(0, outer, std::max<int64_t>(1, kGrainSize / (len * inner)), [&](int64_t b, int64_t e) {
    fn(in + b * len * inner * ii, o + b * inner * oi, e - b, len, inner);
  });
}

void arg_reduce_rows(const Tensor& x, const Tensor& values, const Tensor& indices, bool is_max, int64_t rows,
                     int64_t len) {
  auto fn = is_max ? kernels().argmax_rows[idx(x.dtype())] : kernels().argmin_rows[idx(x.dtype())];
  const char* in = static_cast<const char*>(x.raw_data());
  char* vo = static_cast<char*>(values.raw_data());
  int64_t* io = indices.data_ptr<int64_t>();
  size_t item = x.itemsize();
  parallel_for(0, rows, row_grain(len), [&](int64_t b, int64_t e) {
    fn(in + b * len * item, vo + b * item, io + b, e - b, len);
  });
}

namespace {
void fill_strides(int64_t* s, const Tensor& t) {
  // [batch, row, col] element strides of a 2-D or 3-D tensor.
  if (t.dim() == 2) {
    s[0] = 0;
    s[1] = t.strides()[0];
    s[2] = t.strides()[1];
  } else {
    s[0] = t.strides()[0];
    s[1] = t.strides()[1];
    s[2] = t.strides()[2];
  }
}
}  // namespace

void matmul(const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& bias) {
  GemmArgs g;
  g.dtype = c.dtype();
  g.batch = c.dim() == 3 ? c.shape()[0] : 1;
  g.m = c.shape()[c.dim() - 2];
  g.n = c.shape()[c.dim() - 1];
  g.k = a.shape()[a.dim() - 1];
  fill_strides(g.sa, a);
  fill_strides(g.sb, b);
  fill_strides(g.sc, c);
  if (a.dim() == 2 && c.dim() == 3) g.sa[0] = 0;
  if (b.dim() == 2 && c.dim() == 3) g.sb[0] = 0;
  g.a = a.raw_data();
  g.b = b.raw_data();
  g.c = c.raw_data();
  g.bias = bias.defined() ? bias.raw_data() : nullptr;
  gemm(g);
}

bool linear_epilogue(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& residual, const Tensor& y,
                     Epilogue act, bool constant_weights) {
  Tensor wt = w.t();
  GemmArgs g;
  g.dtype = DType::F32;
  g.m = y.shape()[0];
  g.n = y.shape()[1];
  g.k = x.shape()[1];
  fill_strides(g.sa, x);
  fill_strides(g.sb, wt);
  fill_strides(g.sc, y);
  g.a = x.raw_data();
  g.b = wt.raw_data();
  g.c = y.raw_data();
  g.bias = bias.defined() ? bias.raw_data() : nullptr;
  g.act = act;
  g.residual = residual.defined() ? residual.raw_data() : nullptr;
  if (!gemm_epilogue_ok(g)) return false;
  std::shared_ptr<const void> packed;
  if (constant_weights && w.is_contiguous()) {
    // Packed once into the primitive's layout and kept with the weights'
    // storage (a new version packs again): no per-call repacking inside it.
    if (std::string layout = gemm_weights_layout(g); !layout.empty()) {
      std::string key = "linear_weights@" + std::to_string(w.offset()) + ":" + layout;
      packed = w.storage()->derived(key, [&] { return pack_gemm_weights(g); });
      g.packed_b = packed.get();
    }
  }
  gemm(g);
  return true;
}

void max_pool2d_fwd(const PoolGeometry& g, const Tensor& x, const Tensor& y, const Tensor& indices) {
  if (y.numel() > 0) max_pool2d_forward(g, x.raw_data(), y.raw_data(), indices.defined() ? indices.data_ptr<int64_t>() : nullptr);
}
void max_pool2d_bwd(const PoolGeometry& g, const Tensor& gy, const Tensor& indices, const Tensor& gx) {
  if (gx.numel() > 0) max_pool2d_backward(g, gy.raw_data(), indices.data_ptr<int64_t>(), gx.raw_data());
}
void avg_pool2d_fwd(const PoolGeometry& g, const Tensor& x, const Tensor& y) {
  if (y.numel() > 0) avg_pool2d_forward(g, x.raw_data(), y.raw_data());
}
void avg_pool2d_bwd(const PoolGeometry& g, const Tensor& gy, const Tensor& gx) {
  if (gx.numel() > 0) avg_pool2d_backward(g, gy.raw_data(), gx.raw_data());
}

namespace {
AttentionArgs attention_args(const backend::AttentionParams& p, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& mask) {
  AttentionArgs a;
  a.bh = p.bh, a.L = p.L, a.S = p.S, a.E = p.E, a.Ev = p.Ev;
  for (int i = 0; i < 3; ++i) {
    a.sq[i] = q.strides()[i];
    a.sk[i] = k.strides()[i];
    a.sv[i] = v.strides()[i];
  }
  a.q = q.raw_data();
  a.k = k.raw_data();
  a.v = v.raw_data();
  if (mask.defined()) {
    for (int i = 0; i < 3; ++i) a.sm[i] = mask.strides()[i];
    a.mask = mask.raw_data();
  }
  a.causal = p.causal;
  a.scale = p.scale;
  a.dropout_p = p.dropout_p;
  a.seed = p.seed;
  a.offset = p.offset;
  a.f64 = p.f64;
  return a;
}
}  // namespace

void attention_fwd(const backend::AttentionParams& p, const Tensor& q, const Tensor& k, const Tensor& v,
                   const Tensor& mask, const Tensor& out, const Tensor& lse) {
  if (out.numel() > 0 || lse.numel() > 0)
    attention_forward(attention_args(p, q, k, v, mask), out.raw_data(), lse.raw_data());
}

void attention_bwd(const backend::AttentionParams& p, const Tensor& q, const Tensor& k, const Tensor& v,
                   const Tensor& mask, const Tensor& dout, const Tensor& out, const Tensor& lse, const Tensor& dq,
                   const Tensor& dk, const Tensor& dv) {
  attention_backward(attention_args(p, q, k, v, mask), dout.raw_data(), out.raw_data(), lse.raw_data(),
                     dq.raw_data(), dk.raw_data(), dv.raw_data());
}

void attention_keep_mask(const backend::AttentionParams& p, const Tensor& keep) {
  AttentionArgs a;
  a.bh = p.bh, a.L = p.L, a.S = p.S;
  a.dropout_p = p.dropout_p;
  a.seed = p.seed;
  a.offset = p.offset;
  visit_floating(keep.dtype(), [&]<typename T>() {
    T* k = keep.data_ptr<T>();
    for (int64_t b = 0; b < a.bh; ++b)
      for (int64_t i = 0; i < a.L; ++i)
        for (int64_t j = 0; j < a.S; ++j) k[(b * a.L + i) * a.S + j] = attention_keep(a, b, i, j) ? 1 : 0;
  });
}

namespace {
const void* data_or_null(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }
void* mutable_data_or_null(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }
}  // namespace

void conv2d_fwd(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y) {
  conv2d_forward(g, x.raw_data(), w.raw_data(), data_or_null(bias), y.raw_data());
}
void conv2d_bwd_data(const ConvGeometry& g, const Tensor& gy, const Tensor& w, const Tensor& gx) {
  conv2d_backward_data(g, gy.raw_data(), w.raw_data(), gx.raw_data());
}
void conv2d_bwd_weights(const ConvGeometry& g, const Tensor& x, const Tensor& gy, const Tensor& gw,
                        const Tensor& gbias) {
  conv2d_backward_weights(g, x.raw_data(), gy.raw_data(), gw.raw_data(), mutable_data_or_null(gbias));
}
void conv2d_fused(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& residual,
                  const Tensor& y, Epilogue act, int in_block, int out_block, bool constant_weights) {
  ConvFusion f{data_or_null(residual), act, in_block, out_block};
  std::shared_ptr<const void> packed;
  if (constant_weights) {
    // Packed once into the primitive's layout and kept with the weights'
    // storage (a new version packs again): no reorder per call.
    std::string key = "conv2d_weights@" + std::to_string(w.offset()) + ":" + conv_weights_layout(g, f);
    packed = w.storage()->derived(key, [&] { return pack_conv_weights(g, f, w.raw_data()); });
    f.packed_weights = packed.get();
  }
  conv2d_forward(g, x.raw_data(), w.raw_data(), data_or_null(bias), y.raw_data(), f);
}
bool conv_epilogue_ok(DType t) { return cpu::conv_epilogue_ok(t); }
bool native_bf16() { return has_native_bf16(); }
int64_t conv_activation_block() { return cpu::conv_activation_block(); }

void adam_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const Tensor& vmax,
               const AdamArgs& a) {
  auto kernel = kernels().adam_step[idx(param.dtype())];
  const size_t item = param.itemsize();
  char* p = static_cast<char*>(param.raw_data());
  const char* g = static_cast<const char*>(grad.raw_data());
  char *mp = static_cast<char*>(m.raw_data()), *vp = static_cast<char*>(v.raw_data());
  char* xp = vmax.defined() ? static_cast<char*>(vmax.raw_data()) : nullptr;
  parallel_for(0, param.numel(), kGrainSize, [&](int64_t i0, int64_t i1) {
    kernel(p + i0 * item, g + i0 * item, mp + i0 * item, vp + i0 * item, xp ? xp + i0 * item : nullptr, i1 - i0, a);
  });
}

void sgd_step(const Tensor& param, const Tensor& grad, const Tensor& buf, const SgdArgs& a) {
  auto kernel = kernels().sgd_step[idx(param.dtype())];
  const size_t item = param.itemsize();
  char* p = static_cast<char*>(param.raw_data());
  const char* g = static_cast<const char*>(grad.raw_data());
  char* b = buf.defined() ? static_cast<char*>(buf.raw_data()) : nullptr;
  parallel_for(0, param.numel(), kGrainSize, [&](int64_t i0, int64_t i1) {
    kernel(p + i0 * item, g + i0 * item, b ? b + i0 * item : nullptr, i1 - i0, a);
  });
}

void softmax_fwd(const Tensor& x, const Tensor& y, bool is_log) {
  int64_t n = x.shape().back();
  if (n == 0 || x.numel() == 0) return;
  int64_t rows = x.numel() / n;
  auto fn = kernels().softmax_fwd[idx(x.dtype())];
  const char* xp = static_cast<const char*>(x.raw_data());
  char* yp = static_cast<char*>(y.raw_data());
  size_t item = x.itemsize();
  parallel_for(0, rows, row_grain(n), [&](int64_t b, int64_t e) {
    fn(xp + b * n * item, yp + b * n * item, e - b, n, is_log);
  });
}

void softmax_bwd(const Tensor& g, const Tensor& y, const Tensor& gx, bool is_log) {
  int64_t n = y.shape().back();
  if (n == 0 || y.numel() == 0) return;
  int64_t rows = y.numel() / n;
  auto fn = kernels().softmax_bwd[idx(y.dtype())];
  const char* gp = static_cast<const char*>(g.raw_data());
  const char* yp = static_cast<const char*>(y.raw_data());
  char* op = static_cast<char*>(gx.raw_data());
  size_t item = y.itemsize();
  parallel_for(0, rows, row_grain(n), [&](int64_t b, int64_t e) {
    fn(gp + b * n * item, yp + b * n * item, op + b * n * item, e - b, n, is_log);
  });
}

void layer_norm_fwd(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y, const Tensor& mean,
                    const Tensor& rstd, int64_t n, double eps, bool rms) {
  if (n == 0) return;
  int64_t rows = x.numel() / n;
  auto fwd = kernels().layer_norm_fwd[idx(x.dtype())];
  size_t item = x.itemsize(), sitem = mean.itemsize();
  const char* xp = static_cast<const char*>(x.raw_data());
  char* yp = static_cast<char*>(y.raw_data());
  char* mp = static_cast<char*>(mean.raw_data());
  char* rp = static_cast<char*>(rstd.raw_data());
  const void* wp = w.defined() ? w.raw_data() : nullptr;
  const void* bp = b.defined() ? b.raw_data() : nullptr;
  parallel_for(0, rows, row_grain(n), [&](int64_t r0, int64_t r1) {
    fwd(xp + r0 * n * item, wp, bp, yp + r0 * n * item, mp + r0 * sitem, rp + r0 * sitem, r1 - r0, n, eps, rms);
  });
}

void layer_norm_bwd(const Tensor& g, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                    const Tensor& gx, const Tensor& gw_part, const Tensor& gb_part, int64_t n, int64_t block_rows,
                    bool rms) {
  int64_t rows = n == 0 ? 0 : x.numel() / n;
  int64_t blocks = (rows + block_rows - 1) / block_rows;
  auto bwd = kernels().layer_norm_bwd[idx(x.dtype())];
  size_t sitem = mean.itemsize();
  parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t blk = b0; blk < b1; ++blk) {
      int64_t r0 = blk * block_rows, r1 = std::min(rows, r0 + block_rows);
      void* gwp = gw_part.defined() ? static_cast<char*>(gw_part.raw_data()) + blk * n * sitem : nullptr;
      void* gbp = gb_part.defined() ? static_cast<char*>(gb_part.raw_data()) + blk * n * sitem : nullptr;
      bwd(g.raw_data(), x.raw_data(), w.defined() ? w.raw_data() : nullptr, mean.raw_data(), rstd.raw_data(),
          gx.defined() ? gx.raw_data() : nullptr, gwp, gbp, r0, r1, n, rms);
    }
  });
}

}  // namespace tessera::cpu::entry
