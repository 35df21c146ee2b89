#include "backend/cpu/fused.h"

#include <cmath>
#include <cstring>

#include "tessera/core/error.h"
#include "tessera/core/numbers.h"
#include "tessera/core/parallel.h"

namespace tessera::cpu {
namespace {

constexpr int kMaxArgs = 24;

struct Geometry {
  int nargs = 0, ndim = 0;
  int64_t shape[kMaxDims];
  int64_t strides[kMaxArgs][kMaxDims];  // bytes, innermost dim first
  char* base[kMaxArgs];
};

void build(Geometry& g, const TensorList& outs, const TensorList& ins) {
  const Tensor& out = outs[0];
  std::vector<const Tensor*> ops;
  for (const Tensor& t : outs) ops.push_back(&t);
  for (const Tensor& t : ins) ops.push_back(&t);
  g.nargs = static_cast<int>(ops.size());
  int od = static_cast<int>(out.dim()), nd = 0;
  int64_t shape[kMaxDims], strides[kMaxArgs][kMaxDims];
  for (int d = 0; d < od; ++d) {
    int64_t size = out.shape()[d];
    if (size == 1) continue;
    shape[nd] = size;
    for (int a = 0; a < g.nargs; ++a) {
      const Tensor& t = *ops[a];
      int td = d - (od - static_cast<int>(t.dim()));
      strides[a][nd] = td >= 0 && t.shape()[td] != 1 ? t.strides()[td] * static_cast<int64_t>(t.itemsize()) : 0;
    }
    ++nd;
  }
  g.ndim = 0;
  for (int d = nd - 1; d >= 0; --d) {
    if (g.ndim > 0) {
      int last = g.ndim - 1;
      bool ok = true;
      for (int a = 0; a < g.nargs && ok; ++a) ok = strides[a][d] == strides[a][last] * g.shape[last];
      if (ok) {
        g.shape[last] *= shape[d];
        continue;
      }
    }
    g.shape[g.ndim] = shape[d];
    for (int a = 0; a < g.nargs; ++a) g.strides[a][g.ndim] = strides[a][d];
    ++g.ndim;
  }
  if (g.ndim == 0) {
    g.ndim = 1;
    g.shape[0] = 1;
    for (int a = 0; a < g.nargs; ++a) g.strides[a][0] = 0;
  }
  for (int a = 0; a < g.nargs; ++a) g.base[a] = static_cast<char*>(ops[a]->raw_data());
}

// One thread's share: output elements [begin, end) in tiles.
class TileRunner {
 public:
  TileRunner(const FusedProgram& p, const Geometry& g, const TensorList& ins)
      : p_(p), g_(g), buf_(static_cast<size_t>(p.num_regs) * kFusedTile), regs_(p.num_regs) {
    const KernelTable& kt = kernels();
    for (const Tensor& t : ins) {
      dtypes_.push_back(t.dtype());
      casts_.push_back(kt.cast[idx(t.dtype())][idx(DType::F32)]);
    }
    // Registers stored to an output are computed straight into it, unless
    // they are loads (read in place) or stored twice.
    alias_.assign(p.num_regs, -1);
    std::vector<int> stores(p.num_regs, 0);
    std::vector<bool> computed(p.num_regs, false);
    for (const FusedInstr& i : p.code) {
      if (i.kind == FusedInstr::kStore) ++stores[i.a];
      else if (i.kind != FusedInstr::kLoad && i.kind != FusedInstr::kConst) computed[i.dst] = true;
    }
    for (const FusedInstr& i : p.code)
      if (i.kind == FusedInstr::kStore && computed[i.a] && stores[i.a] == 1) alias_[i.a] = i.dst;
    for (int r = 0; r < p.num_regs; ++r) regs_[r] = buf_.data() + static_cast<size_t>(r) * kFusedTile;
    // Constants fill their tile once.
    for (const FusedInstr& i : p.code)
      if (i.kind == FusedInstr::kConst) std::fill_n(regs_[i.dst], kFusedTile, static_cast<float>(p.params[i.param]));
  }

  void run(int64_t begin, int64_t end) {
    int64_t counter[kMaxDims];
    char* ptrs[kMaxArgs];
    int64_t rem = begin;
    for (int a = 0; a < g_.nargs; ++a) ptrs[a] = g_.base[a];
    for (int d = 0; d < g_.ndim; ++d) {
      counter[d] = rem % g_.shape[d];
      rem /= g_.shape[d];
      for (int a = 0; a < g_.nargs; ++a) ptrs[a] += counter[d] * g_.strides[a][d];
    }
    int64_t left = end - begin;
    while (left > 0) {
      int64_t run = std::min({g_.shape[0] - counter[0], left, kFusedTile});
      tile(ptrs, run);
      left -= run;
      for (int a = 0; a < g_.nargs; ++a) ptrs[a] += run * g_.strides[a][0];
      counter[0] += run;
      if (counter[0] < g_.shape[0] || left == 0) continue;
      for (int a = 0; a < g_.nargs; ++a) ptrs[a] -= counter[0] * g_.strides[a][0];
      counter[0] = 0;
      for (int d = 1; d < g_.ndim; ++d) {
        for (int a = 0; a < g_.nargs; ++a) ptrs[a] += g_.strides[a][d];
        if (++counter[d] < g_.shape[d]) break;
        for (int a = 0; a < g_.nargs; ++a) ptrs[a] -= counter[d] * g_.strides[a][d];
        counter[d] = 0;
      }
    }
  }

 private:
  void tile(char* const* ptrs, int64_t n) {
    const KernelTable& kt = kernels();
    const int nout = p_.num_outputs;
    float* r[64];
    float** R = p_.num_regs <= 64 ? r : nullptr;
    std::vector<float*> big;
    if (!R) {
      big.resize(p_.num_regs);
      R = big.data();
    }
    for (int i = 0; i < p_.num_regs; ++i)
      R[i] = alias_[i] >= 0 ? reinterpret_cast<float*>(ptrs[alias_[i]]) : regs_[i];
    const int64_t f4 = sizeof(float);
    for (const FusedInstr& in : p_.code) {
      switch (in.kind) {
        case FusedInstr::kLoad: {
          int arg = nout + in.a;
          int64_t s = g_.strides[arg][0];
          if (dtypes_[in.a] == DType::F32 && s == f4) {
            R[in.dst] = reinterpret_cast<float*>(ptrs[arg]);  // read in place
          } else if (s == 0) {
            float v;
            char* d[2] = {reinterpret_cast<char*>(&v), ptrs[arg]};
            int64_t st[2] = {f4, 0};
            casts_[in.a](d, st, 1, nullptr);
            std::fill_n(R[in.dst], n, v);
          } else {
            char* d[2] = {reinterpret_cast<char*>(R[in.dst]), ptrs[arg]};
            int64_t st[2] = {f4, s};
            casts_[in.a](d, st, n, nullptr);
          }
          break;
        }
        case FusedInstr::kConst: break;  // filled once
        case FusedInstr::kUnary: {
          char* d[2] = {reinterpret_cast<char*>(R[in.dst]), reinterpret_cast<char*>(R[in.a])};
          int64_t st[2] = {f4, f4};
          kt.unary[in.kernel][idx(DType::F32)](d, st, n, p_.params.data() + in.param);
          break;
        }
        case FusedInstr::kBinary: {
          char* d[3] = {reinterpret_cast<char*>(R[in.dst]), reinterpret_cast<char*>(R[in.a]),
                        reinterpret_cast<char*>(R[in.b])};
          int64_t st[3] = {f4, f4, f4};
          kt.binary[in.kernel][idx(DType::F32)](d, st, n, nullptr);
          break;
        }
        case FusedInstr::kWhere: {
          float* o = R[in.dst];
          const float *c = R[in.c], *a = R[in.a], *b = R[in.b];
          for (int64_t i = 0; i < n; ++i) o[i] = c[i] != 0.0f ? a[i] : b[i];
          break;
        }
        case FusedInstr::kStore:
          if (alias_[in.a] != in.dst) std::memcpy(ptrs[in.dst], R[in.a], static_cast<size_t>(n) * sizeof(float));
          break;
      }
    }
  }

  const FusedProgram& p_;
  const Geometry& g_;
  std::vector<float> buf_;
  std::vector<float*> regs_;
  std::vector<int> alias_;
  std::vector<DType> dtypes_;
  std::vector<Loop1d> casts_;
};

}  // namespace

void run_fused(const FusedProgram& p, const TensorList& inputs, const TensorList& outputs) {
  TS_INTERNAL_ASSERT(static_cast<int>(inputs.size()) == p.num_inputs &&
                     static_cast<int>(outputs.size()) == p.num_outputs);
  TS_CHECK(static_cast<int>(inputs.size() + outputs.size()) <= kMaxArgs, "fused_elementwise: ",
           inputs.size() + outputs.size(), " operands; at most ", kMaxArgs, " are supported");
  int64_t n = outputs[0].numel();
  if (n == 0) return;
  Geometry g;
  build(g, outputs, inputs);
  // Grain: each fused element does several ops' work, so split earlier than one op would.
  int64_t grain = std::max<int64_t>(kFusedTile, kGrainSize / std::max<int64_t>(1, p.code.size() / 2));
  if (n <= grain) {
    TileRunner(p, g, inputs).run(0, n);
    return;
  }
  parallel_for(0, n, grain, [&](int64_t b, int64_t e) { TileRunner(p, g, inputs).run(b, e); });
}

}  // namespace tessera::cpu
