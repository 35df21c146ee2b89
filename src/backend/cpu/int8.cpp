#include "backend/cpu/int8.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backend/cpu/dnnl_context.h"
#include "backend/cpu/scratch.h"
#include "tessera/core/allocator.h"
#include "tessera/core/error.h"
#include "tessera/core/parallel.h"

namespace tessera::cpu {
namespace {

using dnnl::memory;
using dt = memory::data_type;
using tag = memory::format_tag;

// oneDNN 2.x takes int8 output scales and zero points when the primitive is
// made (runtime values are for matmul only), so a primitive is keyed by its
// geometry and by those values: one per quantized layer.
struct Key {
  std::vector<int64_t> dims;
  std::vector<float> scales;
  bool operator<(const Key& o) const { return std::tie(dims, scales) < std::tie(o.dims, o.scales); }
};

struct Prim {
  dnnl::primitive prim;
  memory::desc src, wei, bias, dst, scratch;
  std::string impl;
};

// Keyed by geometry and scales: one entry per quantized layer (Note [oneDNN context]).
dnnl_context::PrimitiveCache<Key, Prim>& cache() {
  static auto* c = new dnnl_context::PrimitiveCache<Key, Prim>();
  return *c;
}

// Per output channel: the factor from the int32 sum to the output (the u8
// output's 1/y_scale folded in), and the bias in units of the sum (oneDNN
// adds the bias before scaling: y = scale * (acc + bias)).
std::vector<float> output_scales(int64_t n, const Int8Epilogue& e) {
  std::vector<float> s(n);
  for (int64_t j = 0; j < n; ++j) s[j] = e.x_scale * e.w_scales[j] / (e.out_u8 ? e.y_scale : 1.0f);
  return s;
}
std::vector<float> scaled_bias(int64_t n, const Int8Epilogue& e) {
  std::vector<float> b(n, 0.0f);
  if (e.bias)
    for (int64_t j = 0; j < n; ++j) b[j] = e.bias[j] / (e.x_scale * e.w_scales[j]);
  return b;
}

dnnl::primitive_attr attr_of(const Int8Epilogue& e, const std::vector<float>& scales) {
  TS_CHECK(e.act == Epilogue::None || e.act == Epilogue::Relu, "int8 products fuse relu only");
  dnnl::primitive_attr a;
  a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  a.set_output_scales(1 << 1, scales);  // dimension 1: the output channel (conv) or column (matmul)
  if (e.x_zero_point) a.set_zero_points(DNNL_ARG_SRC, 0, {e.x_zero_point});
  if (e.out_u8 && e.y_zero_point) a.set_zero_points(DNNL_ARG_DST, 0, {e.y_zero_point});
  if (e.act == Epilogue::Relu) {
    dnnl::post_ops po;
    po.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    a.set_post_ops(po);
  }
  return a;
}

std::vector<int64_t> epilogue_key(const Int8Epilogue& e) {
  return {e.x_zero_point, e.out_u8 ? e.y_zero_point : -1, static_cast<int64_t>(e.act), e.out_u8, e.x_s8};
}

const Prim& conv_prim(const ConvGeometry& g, const Int8Epilogue& e, const std::vector<float>& scales) {
  Key k{{0, g.N, g.C, g.H, g.W, g.OC, g.KH, g.KW, g.OH, g.OW, g.sh, g.sw, g.dh, g.dw, g.pt, g.pl, g.pb, g.pr,
         g.groups},
        scales};
  for (int64_t v : epilogue_key(e)) k.dims.push_back(v);
  return cache().get(k, [&] {
    const dnnl::engine& eng = dnnl_context::engine();
    memory::dims wd = g.groups > 1 ? memory::dims{g.groups, g.OC / g.groups, g.C / g.groups, g.KH, g.KW}
                                   : memory::dims{g.OC, g.C, g.KH, g.KW};
    memory::desc src({g.N, g.C, g.H, g.W}, e.x_s8 ? dt::s8 : dt::u8, tag::nhwc), wei(wd, dt::s8, tag::any), bias({g.OC}, dt::f32, tag::x),
        dst({g.N, g.OC, g.OH, g.OW}, e.out_u8 ? dt::u8 : dt::f32, tag::nhwc);
    dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src, wei,
                                      bias, dst, {g.sh, g.sw}, {g.dh - 1, g.dw - 1}, {g.pt, g.pl}, {g.pb, g.pr});
    dnnl::convolution_forward::primitive_desc pd(d, attr_of(e, scales), eng);
    return Prim{dnnl::convolution_forward(pd), pd.src_desc(), pd.weights_desc(), pd.bias_desc(), pd.dst_desc(),
                pd.scratchpad_desc(), pd.impl_info_str()};
  });
}

const Prim& linear_prim(int64_t m, int64_t n, int64_t k, const Int8Epilogue& e, const std::vector<float>& scales) {
  Key key{{1, m, n, k}, scales};
  for (int64_t v : epilogue_key(e)) key.dims.push_back(v);
  return cache().get(key, [&] {
    const dnnl::engine& eng = dnnl_context::engine();
    memory::desc src({m, k}, e.x_s8 ? dt::s8 : dt::u8, {k, 1}), wei({k, n}, dt::s8, {1, k}), bias({1, n}, dt::f32, {n, 1}),
        dst({m, n}, e.out_u8 ? dt::u8 : dt::f32, {n, 1});
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, wei, bias, dst), attr_of(e, scales), eng);
    return Prim{dnnl::matmul(pd), src, wei, bias, dst, pd.scratchpad_desc(), pd.impl_info_str()};
  });
}

void execute(const Prim& p, std::unordered_map<int, memory>& args) { dnnl_context::execute(p.prim, p.scratch, args); }

memory::desc user_weights(const ConvGeometry& g) {
  return g.groups > 1 ? memory::desc({g.groups, g.OC / g.groups, g.C / g.groups, g.KH, g.KW}, dt::s8, tag::goihw)
                      : memory::desc({g.OC, g.C, g.KH, g.KW}, dt::s8, tag::oihw);
}

// The reference epilogue of one output: v = act(acc * scale + bias), then u8 or f32.
inline void store(const Int8Epilogue& e, int64_t oc, int32_t acc, void* y, int64_t at) {
  float v = static_cast<float>(acc) * (e.x_scale * e.w_scales[oc]) + (e.bias ? e.bias[oc] : 0.0f);
  if (e.act == Epilogue::Relu) v = std::max(v, 0.0f);
  if (!e.out_u8) {
    static_cast<float*>(y)[at] = v;
    return;
  }
  float q = std::nearbyint(v / e.y_scale) + static_cast<float>(e.y_zero_point);
  static_cast<uint8_t*>(y)[at] = static_cast<uint8_t>(std::clamp(q, 0.0f, 255.0f));
}

// Activation code i of x (u8 or s8) minus its zero point.
inline int32_t code(const void* x, int64_t i, const Int8Epilogue& e) {
  return (e.x_s8 ? static_cast<int32_t>(static_cast<const int8_t*>(x)[i])
                 : static_cast<int32_t>(static_cast<const uint8_t*>(x)[i])) -
         e.x_zero_point;
}

}  // namespace

namespace {
// Note [int8 without VNNI] in dnnl_context.h: the products as f32 products of
// the codes (x - x_zero_point, w), then the same epilogue.
void int8_conv2d_via_f32(const ConvGeometry& g, const void* x, const int8_t* w, const Int8Epilogue& e, void* y) {
  const int64_t cg = g.C / g.groups;
  F32Scratch xs(g.N * g.C * g.H * g.W), ws(g.OC * cg * g.KH * g.KW), accs(g.N * g.OC * g.OH * g.OW);
  float *xf = xs.data(), *acc = accs.data();
  for (int64_t n = 0; n < g.N; ++n)  // NCHW, from NHWC codes
    for (int64_t h = 0; h < g.H; ++h)
      for (int64_t ww = 0; ww < g.W; ++ww)
        for (int64_t c = 0; c < g.C; ++c)
          xf[((n * g.C + c) * g.H + h) * g.W + ww] = static_cast<float>(code(x, ((n * g.H + h) * g.W + ww) * g.C + c, e));
  std::copy(w, w + g.OC * cg * g.KH * g.KW, ws.data());
  ConvGeometry gf = g;
  gf.dtype = DType::F32;
  conv2d_forward(gf, xf, ws.data(), nullptr, acc);
  parallel_for(0, g.N * g.OH, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t n = r / g.OH, oh = r % g.OH;
      for (int64_t ow = 0; ow < g.OW; ++ow)
        for (int64_t oc = 0; oc < g.OC; ++oc)
          store(e, oc, static_cast<int32_t>(std::lrint(acc[((n * g.OC + oc) * g.OH + oh) * g.OW + ow])), y,
                ((n * g.OH + oh) * g.OW + ow) * g.OC + oc);
    }
  });
}

void int8_linear_via_f32(int64_t m, int64_t n, int64_t k, const void* x, const int8_t* w, const Int8Epilogue& e,
                         void* y) {
  F32Scratch xf(m * k), wf(n * k), acc(m * n);
  for (int64_t i = 0; i < m * k; ++i) xf.data()[i] = static_cast<float>(code(x, i, e));
  std::copy(w, w + n * k, wf.data());
  gemm_rows(m, n, k, xf.data(), wf.data(), acc.data());
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) store(e, j, static_cast<int32_t>(std::lrint(acc.data()[i * n + j])), y, i * n + j);
}
}  // namespace

std::string int8_conv2d_impl(const ConvGeometry& g, const Int8Epilogue& e) {
  if (!dnnl_context::int8_products_exact()) return "f32 products of the codes (no VNNI)";
  return conv_prim(g, e, output_scales(g.OC, e)).impl;
}

std::string int8_conv_weights_layout(const ConvGeometry& g, const Int8Epilogue& e) {
  const memory::desc& w = conv_prim(g, e, output_scales(g.OC, e)).wei;
  // The descriptor is plain data: its bytes name the layout (blocking and the
  // compensation flags) exactly.
  const auto& raw = w.data;
  return std::string(reinterpret_cast<const char*>(&raw), sizeof(raw));
}

std::shared_ptr<const void> pack_int8_conv_weights(const ConvGeometry& g, const Int8Epilogue& e, const int8_t* w) {
  dnnl::engine& eng = dnnl_context::engine();
  const memory::desc want = conv_prim(g, e, output_scales(g.OC, e)).wei;
  const size_t bytes = want.get_size();
  std::shared_ptr<void> buf(cpu_allocate(bytes), [bytes](void* p) { cpu_free(p, bytes); });
  memory um(user_weights(g), eng, const_cast<int8_t*>(w)), pm(want, eng, buf.get());
  dnnl::stream& st = dnnl_context::stream();
  dnnl::reorder(um, pm).execute(st, um, pm);
  st.wait();
  return buf;
}

void int8_conv2d(const ConvGeometry& g, const void* x, const int8_t* w, const Int8Epilogue& e, void* y,
                 const void* packed) {
  if (g.N == 0 || g.OC == 0 || g.OH <= 0 || g.OW <= 0) return;
  if (!dnnl_context::int8_products_exact()) return int8_conv2d_via_f32(g, x, w, e, y);
  dnnl::engine& eng = dnnl_context::engine();
  std::vector<float> scales = output_scales(g.OC, e), bias = scaled_bias(g.OC, e);
  const Prim& p = conv_prim(g, e, scales);
  std::shared_ptr<const void> own;
  if (!packed) {
    own = pack_int8_conv_weights(g, e, w);
    packed = own.get();
  }
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, memory(p.src, eng, const_cast<void*>(x))},
                                       {DNNL_ARG_WEIGHTS, memory(p.wei, eng, const_cast<void*>(packed))},
                                       {DNNL_ARG_BIAS, memory(p.bias, eng, bias.data())},
                                       {DNNL_ARG_DST, memory(p.dst, eng, y)}};
  execute(p, args);
}

void int8_linear(int64_t m, int64_t n, int64_t k, const void* x, const int8_t* w, const Int8Epilogue& e, void* y) {
  if (m == 0 || n == 0) return;
  if (!dnnl_context::int8_products_exact()) return int8_linear_via_f32(m, n, k, x, w, e, y);
  dnnl::engine& eng = dnnl_context::engine();
  std::vector<float> scales = output_scales(n, e), bias = scaled_bias(n, e);
  const Prim& p = linear_prim(m, n, k, e, scales);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, memory(p.src, eng, const_cast<void*>(x))},
                                       {DNNL_ARG_WEIGHTS, memory(p.wei, eng, const_cast<int8_t*>(w))},
                                       {DNNL_ARG_BIAS, memory(p.bias, eng, bias.data())},
                                       {DNNL_ARG_DST, memory(p.dst, eng, y)}};
  execute(p, args);
}

void int8_conv2d_ref(const ConvGeometry& g, const void* x, const int8_t* w, const Int8Epilogue& e, void* y) {
  const int64_t cg = g.C / g.groups, og = g.OC / g.groups;
  parallel_for(0, g.N * g.OH, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t n = r / g.OH, oh = r % g.OH;
      for (int64_t ow = 0; ow < g.OW; ++ow)
        for (int64_t oc = 0; oc < g.OC; ++oc) {
          const int64_t grp = oc / og;
          int32_t acc = 0;
          for (int64_t kh = 0; kh < g.KH; ++kh) {
            const int64_t ih = oh * g.sh - g.pt + kh * g.dh;
            if (ih < 0 || ih >= g.H) continue;
            for (int64_t kw = 0; kw < g.KW; ++kw) {
              const int64_t iw = ow * g.sw - g.pl + kw * g.dw;
              if (iw < 0 || iw >= g.W) continue;
              const int64_t xp = ((n * g.H + ih) * g.W + iw) * g.C + grp * cg;
              const int8_t* wp = w + oc * cg * g.KH * g.KW + kh * g.KW + kw;
              for (int64_t c = 0; c < cg; ++c) acc += code(x, xp + c, e) * static_cast<int32_t>(wp[c * g.KH * g.KW]);
            }
          }
          store(e, oc, acc, y, ((n * g.OH + oh) * g.OW + ow) * g.OC + oc);
        }
    }
  });
}

void int8_linear_ref(int64_t m, int64_t n, int64_t k, const void* x, const int8_t* w, const Int8Epilogue& e,
                     void* y) {
  parallel_for(0, m, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      for (int64_t j = 0; j < n; ++j) {
        int32_t acc = 0;
        for (int64_t c = 0; c < k; ++c) acc += code(x, i * k + c, e) * static_cast<int32_t>(w[j * k + c]);
        store(e, j, acc, y, i * n + j);
      }
  });
}

}  // namespace tessera::cpu
