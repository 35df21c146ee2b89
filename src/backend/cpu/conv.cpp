#include "backend/cpu/conv.h"
#include "backend/cpu/dnnl_context.h"
#include "backend/cpu/dnnl_post_ops.h"
#include "tessera/core/allocator.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <array>
#include <cstring>
#include <unordered_map>
#include <map>
#include <mutex>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/core/half.h"
#include "tessera/core/parallel.h"

namespace tessera::cpu {
namespace {

using dnnl::memory;
using tag = memory::format_tag;

struct Key {
  std::array<int64_t, 23> v;
  bool operator<(const Key& o) const { return v < o.v; }
};
// A forward primitive's epilogue (the residual sum and the activation) and
// the activation layouts it was asked for (0: its choice, reordered from and
// to NCHW; 8 or 16: channel-blocked, fixed in the primitive).
struct Fused {
  bool residual = false;
  Epilogue act = Epilogue::None;
  int src_block = 0, dst_block = 0;
  bool any() const { return residual || act != Epilogue::None; }
};
Fused fused_of(const ConvFusion& f) { return {f.residual != nullptr, f.act, f.src_block, f.dst_block}; }

Key key_of(const ConvGeometry& g, int kind, Fused f) {
  return {{g.N, g.C, g.H, g.W, g.OC, g.KH, g.KW, g.OH, g.OW, g.sh, g.sw, g.dh, g.dw, g.pt, g.pl, g.pb, g.pr, g.groups,
           static_cast<int64_t>(g.dtype), kind, (f.residual ? 16 : 0) + static_cast<int64_t>(f.act), f.src_block,
           f.dst_block}};
}

struct Prims {
  dnnl::convolution_forward::primitive_desc fwd_pd;
  dnnl::primitive prim;
  memory::desc src, wei, dst, bias;  // what the primitive wants
  memory::desc scratch;              // its scratchpad (we provide it)
};

// Note [oneDNN memory]: reorder buffers and scratchpads come from Tessera's
// caching allocator, not from oneDNN's own malloc: fresh pages cost ~15 us
// each to fault in on these machines, and a ResNet step reorders hundreds of
// MiB. Buffers (dnnl_context.h) live until the call that took them returns.
using dnnl_context::Buffers;

dnnl::primitive_attr user_scratchpad(Fused f = {}) {
  dnnl::primitive_attr a;
  a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (f.any()) {
    dnnl::post_ops po;
    if (f.residual) po.append_sum(1.0f);  // dst holds the residual when the primitive runs
    append_activation(po, f.act);
    a.set_post_ops(po);
  }
  return a;
}

dnnl_context::PrimitiveCache<Key, Prims>& cache() {
  static auto* c = new dnnl_context::PrimitiveCache<Key, Prims>();
  return *c;
}

memory::data_type dt_of(DType t) { return t == DType::BF16 ? memory::data_type::bf16 : memory::data_type::f32; }

struct Descs {
  memory::dims src, wei, dst, bias, strides, dil, pl, pr;
  memory::desc user_src, user_wei, user_dst, user_bias;
};
Descs descs(const ConvGeometry& g) {
  Descs d;
  auto t = dt_of(g.dtype);
  d.src = {g.N, g.C, g.H, g.W};
  d.dst = {g.N, g.OC, g.OH, g.OW};
  d.bias = {g.OC};
  if (g.groups > 1) d.wei = {g.groups, g.OC / g.groups, g.C / g.groups, g.KH, g.KW};
  else d.wei = {g.OC, g.C, g.KH, g.KW};
  d.strides = {g.sh, g.sw};
  d.dil = {g.dh - 1, g.dw - 1};
  d.pl = {g.pt, g.pl};
  d.pr = {g.pb, g.pr};
  d.user_src = memory::desc(d.src, t, tag::nchw);
  d.user_dst = memory::desc(d.dst, t, tag::nchw);
  d.user_wei = memory::desc(d.wei, t, g.groups > 1 ? tag::goihw : tag::oihw);
  d.user_bias = memory::desc(d.bias, t, tag::x);
  return d;
}

tag block_tag(int block) { return block == 0 ? tag::any : block == 8 ? tag::nChw8c : tag::nChw16c; }

// A fused forward never has a backward (its op has no gradient): inference.
// Blocked activations are fixed in the descriptor, as PyTorch's frozen
// TorchScript does: left to choose ("any"), oneDNN may pick a kernel with
// another layout for one geometry (brgconv's NHWC on AVX-512 for 3x3
// convolutions at batch 32), and every such convolution then reorders its
// input and output between the blocks the graph keeps and that layout.
dnnl::convolution_forward::primitive_desc forward_pd(const ConvGeometry& g, const Descs& d, dnnl::engine& eng,
                                                     Fused f = {}) {
  auto t = dt_of(g.dtype);
  memory::desc src(d.src, t, block_tag(f.src_block)), wei(d.wei, t, tag::any), dst(d.dst, t, block_tag(f.dst_block)),
      bias(d.bias, t, tag::any);
  auto prop = f.any() ? dnnl::prop_kind::forward_inference : dnnl::prop_kind::forward_training;
  dnnl::convolution_forward::desc fd(prop, dnnl::algorithm::convolution_direct, src, wei, bias, dst, d.strides, d.dil,
                                     d.pl, d.pr);
  return dnnl::convolution_forward::primitive_desc(fd, user_scratchpad(f), eng);
}

// Builds (once per geometry and kind) the primitive and remembers its
// layouts (Note [oneDNN context]: shared by threads, each run with its own
// scratchpad and buffers).
Prims build_prims(const ConvGeometry& g, int kind, Fused f);
const Prims& prims(const ConvGeometry& g, int kind, Fused f = {}) {
  return cache().get(key_of(g, kind, f), [&] { return build_prims(g, kind, f); });
}

Prims build_prims(const ConvGeometry& g, int kind, Fused f) {
  dnnl::engine& eng = dnnl_context::engine();
  Descs d = descs(g);
  auto t = dt_of(g.dtype);
  Prims p{forward_pd(g, d, eng, f), {}, {}, {}, {}, {}, {}};
  if (kind == 0) {
    p.prim = dnnl::convolution_forward(p.fwd_pd);
    p.scratch = p.fwd_pd.scratchpad_desc();
    p.src = p.fwd_pd.src_desc();
    p.wei = p.fwd_pd.weights_desc();
    p.dst = p.fwd_pd.dst_desc();
    p.bias = p.fwd_pd.bias_desc();
  } else if (kind == 1) {
    memory::desc src(d.src, t, tag::any), wei(d.wei, t, tag::any), dst(d.dst, t, tag::any);
    dnnl::convolution_backward_data::desc bd(dnnl::algorithm::convolution_direct, src, wei, dst, d.strides, d.dil,
                                              d.pl, d.pr);
    dnnl::convolution_backward_data::primitive_desc pd(bd, user_scratchpad(), eng, p.fwd_pd);
    p.prim = dnnl::convolution_backward_data(pd);
    p.scratch = pd.scratchpad_desc();
    p.src = pd.diff_src_desc();
    p.wei = pd.weights_desc();
    p.dst = pd.diff_dst_desc();
  } else {
    memory::desc src(d.src, t, tag::any), wei(d.wei, t, tag::any), dst(d.dst, t, tag::any), bias(d.bias, t, tag::any);
    dnnl::convolution_backward_weights::desc bd(dnnl::algorithm::convolution_direct, src, wei, bias, dst, d.strides,
                                                 d.dil, d.pl, d.pr);
    dnnl::convolution_backward_weights::primitive_desc pd(bd, user_scratchpad(), eng, p.fwd_pd);
    p.prim = dnnl::convolution_backward_weights(pd);
    p.scratch = pd.scratchpad_desc();
    p.src = pd.src_desc();
    p.wei = pd.diff_weights_desc();
    p.dst = pd.diff_dst_desc();
    p.bias = pd.diff_bias_desc();
  }
  return p;
}

// A memory in the primitive's layout: the user's buffer itself when the
// layouts agree, else a reordered copy (for inputs) or a scratch buffer.
memory in_layout(dnnl::stream& st, dnnl::engine& eng, const memory::desc& user, const memory::desc& want,
                 const void* data, Buffers& b) {
  memory um(user, eng, const_cast<void*>(data));
  if (user == want) return um;
  memory m(want, eng, b.get(want.get_size()));
  dnnl::reorder(um, m).execute(st, um, m);
  return m;
}
void to_user(dnnl::stream& st, dnnl::engine& eng, memory m, const memory::desc& user, void* data) {
  memory um(user, eng, data);
  if (m.get_desc() == user) return;
  dnnl::reorder(m, um).execute(st, m, um);
}
memory out_layout(dnnl::engine& eng, const memory::desc& user, const memory::desc& want, void* data, Buffers& b) {
  if (user == want) return memory(user, eng, data);
  return memory(want, eng, b.get(want.get_size()));
}

bool use_dnnl(DType t) { return t == DType::F32 || t == DType::BF16; }

// ---- portable loops (f64 and the 16-bit float fallback) ------------------------
template <typename T>
struct Ref {
  const ConvGeometry& g;
  int64_t cin_g() const { return g.C / g.groups; }
  int64_t cout_g() const { return g.OC / g.groups; }
  // Calls f(n, oc, oh, ow, c, kh, kw, ih, iw) for every valid tap.
  template <typename F>
  void taps_for(int64_t n, int64_t oc, F&& f) const {
    int64_t grp = oc / cout_g();
    for (int64_t oh = 0; oh < g.OH; ++oh)
      for (int64_t ow = 0; ow < g.OW; ++ow)
        for (int64_t ci = 0; ci < cin_g(); ++ci)
          for (int64_t kh = 0; kh < g.KH; ++kh) {
            int64_t ih = oh * g.sh - g.pt + kh * g.dh;
            if (ih < 0 || ih >= g.H) continue;
            for (int64_t kw = 0; kw < g.KW; ++kw) {
              int64_t iw = ow * g.sw - g.pl + kw * g.dw;
              if (iw < 0 || iw >= g.W) continue;
              f(oh, ow, grp * cin_g() + ci, ci, kh, kw, ih, iw);
            }
          }
  }
};

template <typename T>
void ref_forward(const ConvGeometry& g, const T* x, const T* w, const T* b, T* y) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  Ref<T> r{g};
  parallel_for(0, g.N * g.OC, 1, [&](int64_t b0, int64_t b1) {
    std::vector<A> acc(g.OH * g.OW);
    for (int64_t i = b0; i < b1; ++i) {
      int64_t n = i / g.OC, oc = i % g.OC;
      std::fill(acc.begin(), acc.end(), b ? static_cast<A>(b[oc]) : A(0));
      r.taps_for(n, oc, [&](int64_t oh, int64_t ow, int64_t c, int64_t ci, int64_t kh, int64_t kw, int64_t ih, int64_t iw) {
        acc[oh * g.OW + ow] += static_cast<A>(x[((n * g.C + c) * g.H + ih) * g.W + iw]) *
                               static_cast<A>(w[((oc * r.cin_g() + ci) * g.KH + kh) * g.KW + kw]);
      });
      for (int64_t j = 0; j < g.OH * g.OW; ++j) y[i * g.OH * g.OW + j] = static_cast<T>(acc[j]);
    }
  });
}

template <typename T>
void ref_backward_data(const ConvGeometry& g, const T* gy, const T* w, T* gx) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  Ref<T> r{g};
  parallel_for(0, g.N, 1, [&](int64_t n0, int64_t n1) {
    std::vector<A> acc(g.C * g.H * g.W);
    for (int64_t n = n0; n < n1; ++n) {
      std::fill(acc.begin(), acc.end(), A(0));
      for (int64_t oc = 0; oc < g.OC; ++oc)
        r.taps_for(n, oc, [&](int64_t oh, int64_t ow, int64_t c, int64_t ci, int64_t kh, int64_t kw, int64_t ih, int64_t iw) {
          acc[(c * g.H + ih) * g.W + iw] += static_cast<A>(gy[((n * g.OC + oc) * g.OH + oh) * g.OW + ow]) *
                                            static_cast<A>(w[((oc * r.cin_g() + ci) * g.KH + kh) * g.KW + kw]);
        });
      for (int64_t j = 0; j < g.C * g.H * g.W; ++j) gx[n * g.C * g.H * g.W + j] = static_cast<T>(acc[j]);
    }
  });
}

template <typename T>
void ref_backward_weights(const ConvGeometry& g, const T* x, const T* gy, T* gw, T* gb) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  Ref<T> r{g};
  int64_t wsize = r.cin_g() * g.KH * g.KW;
  parallel_for(0, g.OC, 1, [&](int64_t o0, int64_t o1) {
    std::vector<A> acc(wsize);
    for (int64_t oc = o0; oc < o1; ++oc) {
      std::fill(acc.begin(), acc.end(), A(0));
      A bsum = 0;
      for (int64_t n = 0; n < g.N; ++n) {
        r.taps_for(n, oc, [&](int64_t oh, int64_t ow, int64_t c, int64_t ci, int64_t kh, int64_t kw, int64_t ih, int64_t iw) {
          acc[(ci * g.KH + kh) * g.KW + kw] += static_cast<A>(gy[((n * g.OC + oc) * g.OH + oh) * g.OW + ow]) *
                                               static_cast<A>(x[((n * g.C + c) * g.H + ih) * g.W + iw]);
        });
        for (int64_t j = 0; j < g.OH * g.OW; ++j) bsum += static_cast<A>(gy[(n * g.OC + oc) * g.OH * g.OW + j]);
      }
      for (int64_t j = 0; j < wsize; ++j) gw[oc * wsize + j] = static_cast<T>(acc[j]);
      if (gb) gb[oc] = static_cast<T>(bsum);
    }
  });
}

}  // namespace

bool conv_epilogue_ok(DType t) { return use_dnnl(t); }

int conv_activation_block() {
  static const int block = [] {
    // A typical mid-network convolution: which layout does the primitive want?
    ConvGeometry g{1, 64, 8, 8, 64, 3, 3, 8, 8, 1, 1, 1, 1, 1, 1, 1, 1, 1, DType::F32};
    const memory::desc& dst = prims(g, 0).dst;
    memory::dims dims{1, 64, 8, 8};
    if (dst == memory::desc(dims, memory::data_type::f32, tag::nChw8c)) return 8;
    if (dst == memory::desc(dims, memory::data_type::f32, tag::nChw16c)) return 16;
    return 0;
  }();
  return block;
}

namespace {
memory::desc activation_desc(const memory::dims& dims, DType t, int block) {
  tag layout = block == 0 ? tag::nchw : block == 8 ? tag::nChw8c : tag::nChw16c;
  TS_CHECK(block == 0 || block == 8 || block == 16, "conv2d_forward: channel block must be 0, 8 or 16, got ", block);
  return memory::desc(dims, dt_of(t), layout);
}
}  // namespace

std::string conv_weights_layout(const ConvGeometry& g, const ConvFusion& fusion) {
  TS_CHECK(use_dnnl(g.dtype), "conv_weights_layout: f32 or bf16 only, got ", dtype_name(g.dtype));
  const memory::desc& wei = prims(g, 0, fused_of(fusion)).wei;
  // The descriptor is a plain struct that oneDNN zero-fills before describing.
  return std::string(reinterpret_cast<const char*>(&wei.data), sizeof(wei.data));
}

std::shared_ptr<const void> pack_conv_weights(const ConvGeometry& g, const ConvFusion& fusion, const void* w) {
  TS_CHECK(use_dnnl(g.dtype), "pack_conv_weights: f32 or bf16 only, got ", dtype_name(g.dtype));
  return dnnl_context::reordered_copy(descs(g).user_wei, prims(g, 0, fused_of(fusion)).wei, w);
}

void conv2d_forward(const ConvGeometry& g, const void* x, const void* w, const void* bias, void* y,
                    const ConvFusion& fusion) {
  Fused f = fused_of(fusion);
  const void* residual = fusion.residual;
  TS_CHECK((!f.any() && fusion.src_block == 0 && fusion.dst_block == 0) || use_dnnl(g.dtype),
           "conv2d_forward: a fused epilogue or blocked layout needs f32 or bf16, got ", dtype_name(g.dtype));
  if (!use_dnnl(g.dtype)) {
    visit_floating(g.dtype, [&]<typename T>() {
      ref_forward<T>(g, static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(bias), static_cast<T*>(y));
    });
    return;
  }
  dnnl::engine& eng = dnnl_context::engine();
  const Prims& p = prims(g, 0, f);
  Descs d = descs(g);
  d.user_src = activation_desc(d.src, g.dtype, fusion.src_block);
  d.user_dst = activation_desc(d.dst, g.dtype, fusion.dst_block);
  dnnl::stream& st = dnnl_context::stream();
  Buffers b;
  memory xm = in_layout(st, eng, d.user_src, p.src, x, b);
  memory wm = fusion.packed_weights ? memory(p.wei, eng, const_cast<void*>(fusion.packed_weights))
                                    : in_layout(st, eng, d.user_wei, p.wei, w, b);
  memory ym = out_layout(eng, d.user_dst, p.dst, y, b);
  // The sum post-op adds what dst holds: the residual, in dst's layout. In
  // place (the residual is y, the primitive writes y) it is there already.
  if (residual && !(residual == y && ym.get_data_handle() == y)) {
    memory rm(d.user_dst, eng, const_cast<void*>(residual));
    dnnl::reorder(rm, ym).execute(st, rm, ym);
  }
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, xm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, ym},
                                       {DNNL_ARG_SCRATCHPAD, memory(p.scratch, eng, b.get(p.scratch.get_size()))}};
  if (bias) {
    args[DNNL_ARG_BIAS] = in_layout(st, eng, d.user_bias, p.bias, bias, b);
  } else {
    // The primitive was made with a bias: give it zeros.
    memory bm(p.bias, eng, b.get(p.bias.get_size()));
    std::memset(bm.get_data_handle(), 0, p.bias.get_size());
    args[DNNL_ARG_BIAS] = bm;
  }
  p.prim.execute(st, args);
  to_user(st, eng, ym, d.user_dst, y);
  st.wait();
}

void conv2d_backward_data(const ConvGeometry& g, const void* gy, const void* w, void* gx) {
  if (!use_dnnl(g.dtype)) {
    visit_floating(g.dtype, [&]<typename T>() {
      ref_backward_data<T>(g, static_cast<const T*>(gy), static_cast<const T*>(w), static_cast<T*>(gx));
    });
    return;
  }
  dnnl::engine& eng = dnnl_context::engine();
  const Prims& p = prims(g, 1);
  Descs d = descs(g);
  dnnl::stream& st = dnnl_context::stream();
  Buffers b;
  memory gym = in_layout(st, eng, d.user_dst, p.dst, gy, b);
  memory wm = in_layout(st, eng, d.user_wei, p.wei, w, b);
  memory gxm = out_layout(eng, d.user_src, p.src, gx, b);
  p.prim.execute(st, {{DNNL_ARG_DIFF_DST, gym}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DIFF_SRC, gxm},
                      {DNNL_ARG_SCRATCHPAD, memory(p.scratch, eng, b.get(p.scratch.get_size()))}});
  to_user(st, eng, gxm, d.user_src, gx);
  st.wait();
}

void conv2d_backward_weights(const ConvGeometry& g, const void* x, const void* gy, void* gw, void* gbias) {
  if (!use_dnnl(g.dtype)) {
    visit_floating(g.dtype, [&]<typename T>() {
      ref_backward_weights<T>(g, static_cast<const T*>(x), static_cast<const T*>(gy), static_cast<T*>(gw),
                              static_cast<T*>(gbias));
    });
    return;
  }
  dnnl::engine& eng = dnnl_context::engine();
  const Prims& p = prims(g, 2);
  Descs d = descs(g);
  dnnl::stream& st = dnnl_context::stream();
  Buffers b;
  memory xm = in_layout(st, eng, d.user_src, p.src, x, b);
  memory gym = in_layout(st, eng, d.user_dst, p.dst, gy, b);
  memory gwm = out_layout(eng, d.user_wei, p.wei, gw, b);
  memory gbm = gbias ? out_layout(eng, d.user_bias, p.bias, gbias, b)
                     : memory(p.bias, eng, b.get(p.bias.get_size()));
  p.prim.execute(st, {{DNNL_ARG_SRC, xm}, {DNNL_ARG_DIFF_DST, gym}, {DNNL_ARG_DIFF_WEIGHTS, gwm}, {DNNL_ARG_DIFF_BIAS, gbm},
                      {DNNL_ARG_SCRATCHPAD, memory(p.scratch, eng, b.get(p.scratch.get_size()))}});
  to_user(st, eng, gwm, d.user_wei, gw);
  if (gbias) to_user(st, eng, gbm, d.user_bias, gbias);
  st.wait();
}

}  // namespace tessera::cpu
