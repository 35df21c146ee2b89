#include "backend/cpu/gemm.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <array>
#include <bit>
#include <unordered_map>
#include <vector>

#include "backend/cpu/dnnl_context.h"
#include "backend/cpu/dnnl_post_ops.h"
#include "backend/cpu/scratch.h"
#include "backend/cpu/skinny.h"

#include "tessera/core/allocator.h"
#include "tessera/core/error.h"
#include "tessera/core/half.h"
#include "tessera/core/parallel.h"

namespace tessera::cpu {
namespace {

using dt = dnnl::memory::data_type;

struct Key {
  std::array<int64_t, 20> v;
  bool operator<(const Key& o) const { return v < o.v; }
};

// A cached product and its scratchpad's size (Note [oneDNN context]: each run
// brings its own scratchpad; attention runs its per-head GEMMs in parallel on
// one primitive).
struct Prim {
  dnnl::matmul matmul;
  dnnl::memory::desc scratch;
  dnnl::memory::desc wei;  // the layout it reads B in
};

dnnl_context::PrimitiveCache<Key, Prim>& cache() {
  static auto* c = new dnnl_context::PrimitiveCache<Key, Prim>();
  return *c;
}

// oneDNN needs one of the two inner strides of every operand to be 1.
bool dnnl_layout_ok(const int64_t* s) { return s[1] == 1 || s[2] == 1; }

// The operands' descriptors as the caller lays them out.
struct Descs {
  dnnl::memory::desc a, b, c, bias;
};
Descs descs(const GemmArgs& g) {
  dt type = g.dtype == DType::BF16 ? dt::bf16 : dt::f32;
  bool batched = g.batch > 1;
  auto md = [&](int64_t r, int64_t c, const int64_t* s) {
    return batched ? dnnl::memory::desc({g.batch, r, c}, type, {s[0], s[1], s[2]})
                   : dnnl::memory::desc({r, c}, type, {s[1], s[2]});
  };
  dnnl::memory::desc bias = batched ? dnnl::memory::desc({1, 1, g.n}, type, {g.n, g.n, 1})
                                    : dnnl::memory::desc({1, g.n}, type, {g.n, 1});
  return {md(g.m, g.k, g.sa), md(g.k, g.n, g.sb), md(g.m, g.n, g.sc), bias};
}

// The cached primitive for g; with `packed_b`, made to read B in the layout
// it likes best (format any), which the caller then provides.
const Prim& primitive(const GemmArgs& g, bool packed_b) {
  dt type = g.dtype == DType::BF16 ? dt::bf16 : dt::f32;
  Key key{{g.batch, g.m, g.n, g.k, g.sa[0], g.sa[1], g.sa[2], g.sb[0], g.sb[1], g.sb[2], g.sc[0], g.sc[1],
           g.sc[2], g.bias ? 1 : 0, static_cast<int64_t>(type), std::bit_cast<int64_t>(g.alpha), g.accumulate,
           static_cast<int64_t>(g.act), g.residual ? 1 : 0, packed_b}};
  return cache().get(key, [&] {
    const dnnl::engine& eng = dnnl_context::engine();
    Descs d = descs(g);
    dnnl::memory::desc amd = d.a, cmd = d.c, biasmd = d.bias;
    dnnl::memory::desc bmd = packed_b ? dnnl::memory::desc(d.b.dims(), type, dnnl::memory::format_tag::any) : d.b;
    auto desc = g.bias ? dnnl::matmul::desc(amd, bmd, biasmd, cmd) : dnnl::matmul::desc(amd, bmd, cmd);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (g.alpha != 1.0) attr.set_output_scales(0, {static_cast<float>(g.alpha)});
    dnnl::post_ops po;
    if (g.accumulate) po.append_sum(1.0f);
    append_activation(po, g.act);
    if (g.residual) po.append_binary(dnnl::algorithm::binary_add, cmd);
    if (po.len() > 0) attr.set_post_ops(po);
    dnnl::matmul::primitive_desc pd(desc, attr, eng);
    return Prim{dnnl::matmul(pd), pd.scratchpad_desc(), pd.weights_desc()};
  });
}

// oneDNN picks its fast (JIT/brgemm) kernels only for plain layouts: 2-D
// descriptors when there is one matrix, and real (non-zero) batch strides.
// A broadcast operand (batch stride 0) is run as one 2-D GEMM per batch.
void gemm_dnnl(const GemmArgs& g) {
  if (g.batch > 1 && (g.sa[0] == 0 || g.sb[0] == 0)) {
    GemmArgs one = g;
    one.batch = 1;
    size_t item = g.dtype == DType::BF16 ? 2 : 4;
    for (int64_t b = 0; b < g.batch; ++b) {
      one.a = static_cast<const char*>(g.a) + b * g.sa[0] * item;
      one.b = static_cast<const char*>(g.b) + b * g.sb[0] * item;
      one.c = static_cast<char*>(g.c) + b * g.sc[0] * item;
      if (g.residual) one.residual = static_cast<const char*>(g.residual) + b * g.sc[0] * item;
      gemm_dnnl(one);
    }
    return;
  }
  const Prim& prim = primitive(g, g.packed_b != nullptr);
  const dnnl::engine& eng = dnnl_context::engine();
  Descs d = descs(g);
  dnnl::memory am(d.a, eng, const_cast<void*>(g.a));
  dnnl::memory bm(g.packed_b ? prim.wei : d.b, eng, const_cast<void*>(g.packed_b ? g.packed_b : g.b));
  dnnl::memory cm(d.c, eng, g.c);
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
  if (g.bias) args.insert({DNNL_ARG_BIAS, dnnl::memory(d.bias, eng, const_cast<void*>(g.bias))});
  if (g.residual) {
    int index = (g.accumulate ? 1 : 0) + (g.act != Epilogue::None ? 1 : 0);  // the binary post-op's place
    args.insert({DNNL_ARG_ATTR_MULTIPLE_POST_OP(index) | DNNL_ARG_SRC_1,
                 dnnl::memory(d.c, eng, const_cast<void*>(g.residual))});
  }
  dnnl_context::execute(prim.matmul, prim.scratch, args);
}

// Note [Small products]
// Running a cached oneDNN matmul primitive costs about 2.3 us before any
// arithmetic (memory objects, the argument map, the stream): a 16x16 product
// took 2.7 us that way and 0.35 us through oneDNN's sgemm, which goes straight
// to its JIT kernels; at 64 it was 7.3 against 5.3 us, and sgemm was still
// ahead at 128 (Zen 4, 1 thread). Plain f32 products up to 128^3 multiply-adds
// per matrix, without a fused epilogue, go through dnnl_sgemm (row-major);
// larger ones, epilogues and packed weights keep the primitive.
constexpr int64_t kSmallProduct = 128 * 128 * 128;

// The transpose flag and leading dimension sgemm reads an operand of r x c
// with strides s in, or false when it cannot (neither stride is 1).
bool sgemm_operand(const int64_t* s, int64_t r, int64_t c, char& trans, int64_t& ld) {
  if (s[2] == 1 && s[1] >= std::max<int64_t>(c, 1)) {
    trans = 'N', ld = std::max<int64_t>(s[1], 1);
    return true;
  }
  if (s[1] == 1 && s[2] >= std::max<int64_t>(r, 1)) {
    trans = 'T', ld = std::max<int64_t>(s[2], 1);
    return true;
  }
  return false;
}

bool gemm_small(const GemmArgs& g) {
  if (g.dtype != DType::F32 || g.bias || g.act != Epilogue::None || g.residual || g.packed_b || g.k == 0 ||
      g.m * g.n * g.k > kSmallProduct || g.sc[2] != 1 || g.sc[1] < g.n)
    return false;
  char ta, tb;
  int64_t lda, ldb;
  if (!sgemm_operand(g.sa, g.m, g.k, ta, lda) || !sgemm_operand(g.sb, g.k, g.n, tb, ldb)) return false;
  const float alpha = static_cast<float>(g.alpha), beta = g.accumulate ? 1.0f : 0.0f;
  for (int64_t b = 0; b < g.batch; ++b) {
    const float* a = static_cast<const float*>(g.a) + b * g.sa[0];
    const float* bm = static_cast<const float*>(g.b) + b * g.sb[0];
    float* c = static_cast<float*>(g.c) + b * g.sc[0];
    dnnl_status_t st = dnnl_sgemm(ta, tb, g.m, g.n, g.k, alpha, a, lda, bm, ldb, beta, c, std::max<int64_t>(g.sc[1], 1));
    TS_INTERNAL_ASSERT(st == dnnl_success);
  }
  return true;
}

// Portable path: accumulate in acc_t (double for f64, float for 16-bit floats,
// int64 for integers), row-parallel, k-outer loop so the inner loop is contiguous in B.
template <typename T>
void gemm_loop(const GemmArgs& g) {
  using A = std::conditional_t<std::is_floating_point_v<acc_t<T>>, acc_t<T>, int64_t>;
  const T* a = static_cast<const T*>(g.a);
  const T* b = static_cast<const T*>(g.b);
  const T* bias = static_cast<const T*>(g.bias);
  T* c = static_cast<T*>(g.c);
  parallel_for(0, g.batch * g.m, std::max<int64_t>(1, 4096 / std::max<int64_t>(g.n * g.k, 1)), [&](int64_t r0, int64_t r1) {
    std::vector<A> acc(g.n);
    for (int64_t r = r0; r < r1; ++r) {
      int64_t bi = r / g.m, i = r % g.m;
      std::fill(acc.begin(), acc.end(), A(0));
      for (int64_t p = 0; p < g.k; ++p) {
        A av = static_cast<A>(static_cast<acc_t<T>>(a[bi * g.sa[0] + i * g.sa[1] + p * g.sa[2]]));
        const T* brow = b + bi * g.sb[0] + p * g.sb[1];
        for (int64_t j = 0; j < g.n; ++j) acc[j] += av * static_cast<A>(static_cast<acc_t<T>>(brow[j * g.sb[2]]));
      }
      for (int64_t j = 0; j < g.n; ++j) {
        A v = acc[j];
        if constexpr (std::is_floating_point_v<A>) v *= static_cast<A>(g.alpha);
        if (bias) v += static_cast<A>(static_cast<acc_t<T>>(bias[j]));
        T& dst = c[bi * g.sc[0] + i * g.sc[1] + j * g.sc[2]];
        if (g.accumulate) v += static_cast<A>(static_cast<acc_t<T>>(dst));
        dst = static_cast<T>(static_cast<acc_t<T>>(v));
      }
    }
  });
}

// 16-bit floats through an f32 GEMM: operands widened into contiguous
// buffers, the result narrowed back (and added when accumulating). Rows are
// converted in parallel; a contiguous row is a plain loop the compiler vectorizes.
template <typename T>
void gemm_via_f32(const GemmArgs& g) {
  auto widen = [&](const void* p, const int64_t* s, int64_t rows, int64_t cols, F32Scratch& out, int64_t* fs) {
    const int64_t batches = s[0] == 0 ? 1 : g.batch;
    const T* src = static_cast<const T*>(p);
    float* dst = out.data();
    parallel_for(0, batches * rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t b = r / rows, i = r % rows;
        const T* in = src + b * s[0] + i * s[1];
        float* o = dst + r * cols;
        if (s[2] == 1)
          for (int64_t j = 0; j < cols; ++j) o[j] = static_cast<float>(in[j]);
        else
          for (int64_t j = 0; j < cols; ++j) o[j] = static_cast<float>(in[j * s[2]]);
      }
    });
    fs[0] = s[0] == 0 ? 0 : rows * cols;
    fs[1] = cols;
    fs[2] = 1;
  };
  const int64_t abatches = g.sa[0] == 0 ? 1 : g.batch, bbatches = g.sb[0] == 0 ? 1 : g.batch;
  F32Scratch a(abatches * g.m * g.k), b(bbatches * g.k * g.n), c(g.batch * g.m * g.n), bias(g.bias ? g.n : 1);
  GemmArgs f = g;
  f.dtype = DType::F32;
  widen(g.a, g.sa, g.m, g.k, a, f.sa);
  widen(g.b, g.sb, g.k, g.n, b, f.sb);
  f.a = a.data();
  f.b = b.data();
  f.c = c.data();
  f.sc[0] = g.m * g.n;
  f.sc[1] = g.n;
  f.sc[2] = 1;
  f.accumulate = false;
  if (g.bias) {
    for (int64_t j = 0; j < g.n; ++j) bias.data()[j] = static_cast<float>(static_cast<const T*>(g.bias)[j]);
    f.bias = bias.data();
  } else {
    f.bias = nullptr;
  }
  gemm(f);
  T* out = static_cast<T*>(g.c);
  parallel_for(0, g.batch * g.m, std::max<int64_t>(1, 16384 / std::max<int64_t>(g.n, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t bi = r / g.m, i = r % g.m;
      const float* in = c.data() + r * g.n;
      T* o = out + bi * g.sc[0] + i * g.sc[1];
      for (int64_t j = 0; j < g.n; ++j) {
        T& dst = o[j * g.sc[2]];
        dst = static_cast<T>(g.accumulate ? in[j] + static_cast<float>(dst) : in[j]);
      }
    }
  });
}

}  // namespace

// Whether oneDNN has a native bf16 matmul on this CPU (AVX-512 BF16 / AMX);
// elsewhere bf16 is computed in f32.
bool has_native_bf16() {
  static const bool ok = [] {
    try {
      dnnl::memory::desc md({1, 16, 16}, dt::bf16, {256, 16, 1});
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(md, md, md), dnnl_context::engine());
      return std::string(pd.impl_info_str()).find("ref") == std::string::npos;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return ok;
}

bool gemm_epilogue_ok(const GemmArgs& g) {
  return (g.dtype == DType::F32 || (g.dtype == DType::BF16 && has_native_bf16())) && g.k > 0 && !g.accumulate &&
         dnnl_layout_ok(g.sa) && dnnl_layout_ok(g.sb) && g.sc[2] == 1;
}

void gemm(const GemmArgs& g) {
  if (g.batch == 0 || g.m == 0 || g.n == 0) return;
  TS_CHECK((g.act == Epilogue::None && !g.residual) || gemm_epilogue_ok(g),
           "gemm: an epilogue was asked for where it cannot be fused (check gemm_epilogue_ok first)");
  if (skinny_ok(g)) {  // a few rows against a weight: Tessera's kernel, at the speed weights stream in
    gemm_skinny(g);
    return;
  }
  if (g.dtype == DType::F16 || (g.dtype == DType::BF16 && !has_native_bf16())) {
    if (g.dtype == DType::F16) gemm_via_f32<Half>(g);
    else gemm_via_f32<BFloat16>(g);
    return;
  }
  if (gemm_small(g)) return;  // Note [Small products]
  bool dnnl_type = g.dtype == DType::F32 || g.dtype == DType::BF16;
  if (dnnl_type && g.k > 0 && dnnl_layout_ok(g.sa) && dnnl_layout_ok(g.sb) && g.sc[2] == 1) {
    gemm_dnnl(g);
    return;
  }
  visit_dtype(g.dtype, [&]<typename T>() {
    if constexpr (std::is_same_v<T, bool>) TS_ERROR("matmul: not supported for bool tensors");
    else gemm_loop<T>(g);
  });
}

namespace {
// Whether gemm() runs g as one oneDNN primitive (gemm_dnnl without splitting).
bool one_dnnl_product(const GemmArgs& g) {
  bool type = g.dtype == DType::F32 || (g.dtype == DType::BF16 && has_native_bf16());
  return type && g.batch == 1 && g.m > 0 && g.n > 0 && g.k > 0 && !skinny_ok(g) && dnnl_layout_ok(g.sa) &&
         dnnl_layout_ok(g.sb) && g.sc[2] == 1;
}
}  // namespace

std::string gemm_weights_layout(const GemmArgs& g) {
  if (!one_dnnl_product(g)) return "";
  const dnnl::memory::desc& want = primitive(g, true).wei;
  // Only a blocked layout (brgemm's, with AVX-512) repays the copy: a plain
  // one is B's own or its transpose, and oneDNN's AVX2 gemm ran a 64-row
  // product 30% slower on B transposed into the plain layout it picked.
  if (want == descs(g).b || want.data.format_kind != dnnl_blocked || want.data.format_desc.blocking.inner_nblks == 0)
    return "";
  // The descriptor is a plain struct that oneDNN zero-fills before describing.
  return std::string(reinterpret_cast<const char*>(&want.data), sizeof(want.data));
}

std::shared_ptr<const void> pack_gemm_weights(const GemmArgs& g) {
  TS_CHECK(one_dnnl_product(g), "pack_gemm_weights: this product runs no oneDNN primitive (check gemm_weights_layout)");
  return dnnl_context::reordered_copy(descs(g).b, primitive(g, true).wei, g.b);
}

void gemm_rows(int64_t m, int64_t n, int64_t k, const float* a, const float* w_rows, float* c) {
  GemmArgs g;
  g.m = m, g.n = n, g.k = k;
  g.a = a, g.b = w_rows, g.c = c;
  g.sa[0] = m * k, g.sa[1] = k, g.sa[2] = 1;
  g.sb[0] = n * k, g.sb[1] = 1, g.sb[2] = k;  // B [k, n]: the rows transposed
  g.sc[0] = m * n, g.sc[1] = n, g.sc[2] = 1;
  gemm(g);
}

void gemm_s8(int64_t m, int64_t n, int64_t k, const int8_t* a, const int8_t* b_rows, const float* scales, float* c) {
  if (m == 0 || n == 0) return;
  if (!dnnl_context::int8_products_exact()) {  // Note [int8 without VNNI]: f32 products of the codes
    F32Scratch af(m * k), bf(n * k);
    std::copy(a, a + m * k, af.data());
    std::copy(b_rows, b_rows + n * k, bf.data());
    gemm_rows(m, n, k, af.data(), bf.data(), c);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * n + j] *= scales[j];
    return;
  }
  const dnnl::engine& eng = dnnl_context::engine();
  // Keyed apart from the f32 products by a dtype tag no GemmArgs carries.
  Key key{{1, m, n, k, -8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}};
  dnnl::memory::desc amd({m, k}, dt::s8, {k, 1}), bmd({k, n}, dt::s8, {1, k}), cmd({m, n}, dt::f32, {n, 1});
  dnnl::memory::desc smd({n}, dt::f32, {1});
  const Prim& prim = cache().get(key, [&] {
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    attr.set_output_scales(1 << 1, {DNNL_RUNTIME_F32_VAL});  // one scale per output column, given per call
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(amd, bmd, cmd), attr, eng);
    return Prim{dnnl::matmul(pd), pd.scratchpad_desc(), pd.weights_desc()};
  });
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, dnnl::memory(amd, eng, const_cast<int8_t*>(a))},
      {DNNL_ARG_WEIGHTS, dnnl::memory(bmd, eng, const_cast<int8_t*>(b_rows))},
      {DNNL_ARG_DST, dnnl::memory(cmd, eng, c)},
      {DNNL_ARG_ATTR_OUTPUT_SCALES, dnnl::memory(smd, eng, const_cast<float*>(scales))}};
  dnnl_context::execute(prim.matmul, prim.scratch, args);
}

int64_t gemm_cache_size() { return static_cast<int64_t>(cache().size()); }

}  // namespace tessera::cpu
