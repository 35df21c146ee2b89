#include "backend/cpu/fused.h"

#include <cmath>
#include <cstring>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "tessera/core/error.h"
#include "tessera/core/numbers.h"
#include "tessera/core/parallel.h"

namespace tessera::cpu {
namespace {

const char* const kUnaryNames[] = {
#define TS_X(n) #n,
    TS_UNARY_KERNELS(TS_X)
#undef TS_X
};
const char* const kBinaryNames[] = {
#define TS_X(n) #n,
    TS_BINARY_KERNELS(TS_X)
#undef TS_X
};

// Kernels whose result is not a float of the operands' dtype cannot live in
// an f32 register.
bool unary_ok(UnaryKernel k) {
  return k != UnaryKernel::Isnan && k != UnaryKernel::Isinf && k != UnaryKernel::Isfinite &&
         k != UnaryKernel::LogicalNot;
}
bool binary_ok(BinaryKernel k) {
  using B = BinaryKernel;
  return k != B::Eq && k != B::Ne && k != B::Lt && k != B::Le && k != B::Gt && k != B::Ge && k != B::LogicalAnd &&
         k != B::LogicalOr && k != B::LogicalXor;
}

constexpr int kParamSlots = 4;  // a unary kernel reads at most this many parameters

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\n"), e = s.find_last_not_of(" \t\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

int parse_index(const std::string& tok, const char* prefix, const std::string& instr) {
  size_t n = std::strlen(prefix);
  TS_CHECK(tok.size() > n && tok.compare(0, n, prefix) == 0 &&
               tok.find_first_not_of("0123456789", n) == std::string::npos && tok.size() - n <= 6,
           "fused_elementwise: expected ", prefix, "<number>, got '", tok, "' in instruction '", instr, "'");
  return std::stoi(tok.substr(n));
}

// Numbers as format_double writes them (the same in every locale).
double parse_number(const std::string& tok, const std::string& instr) {
  if (tok == "inf" || tok == "-inf") return tok[0] == '-' ? -INFINITY : INFINITY;
  if (tok == "nan") return NAN;
  auto v = parse_double(tok);
  TS_CHECK(v.has_value(), "fused_elementwise: expected a number, got '", tok, "' in instruction '", instr, "'");
  return *v;
}

FusedProgram parse(const std::string& text) {
  FusedProgram p;
  std::vector<int> written;  // per register: 0 or 1
  auto reg_read = [&](const std::string& tok, const std::string& instr) {
    int r = parse_index(tok, "r", instr);
    TS_CHECK(r < static_cast<int>(written.size()) && written[r], "fused_elementwise: register ", tok,
             " is read before it is written, in instruction '", instr, "'");
    return r;
  };
  auto reg_write = [&](const std::string& tok, const std::string& instr) {
    // Registers are numbered in the order they are written (as fusion writes
    // them), so a program has no more registers than instructions.
    int r = parse_index(tok, "r", instr);
    TS_CHECK(r <= static_cast<int>(written.size()), "fused_elementwise: register ", tok, " is written before r",
             written.size(), " (registers are numbered in the order they are written), in '", instr, "'");
    TS_CHECK(r == static_cast<int>(written.size()), "fused_elementwise: register ", tok,
             " is written twice (instruction '", instr, "')");
    written.push_back(1);
    p.num_regs = std::max(p.num_regs, r + 1);
    return r;
  };
  std::stringstream ss(text);
  std::string instr;
  while (std::getline(ss, instr, ';')) {
    instr = trim(instr);
    if (instr.empty()) continue;
    size_t eq = instr.find('=');
    TS_CHECK(eq != std::string::npos, "fused_elementwise: instruction '", instr, "' has no '='");
    std::string lhs = trim(instr.substr(0, eq));
    std::vector<std::string> rhs;
    std::stringstream rs(instr.substr(eq + 1));
    for (std::string t; rs >> t;) rhs.push_back(t);
    TS_CHECK(!rhs.empty(), "fused_elementwise: instruction '", instr, "' has nothing after '='");
    FusedInstr in{};
    if (lhs.compare(0, 3, "out") == 0) {
      TS_CHECK(rhs.size() == 1, "fused_elementwise: a store is 'outK = rN', got '", instr, "'");
      in.kind = FusedInstr::kStore;
      in.dst = parse_index(lhs, "out", instr);
      TS_CHECK(in.dst <= p.num_outputs, "fused_elementwise: outputs are numbered in order; '", instr,
               "' skips out", p.num_outputs);
      in.a = reg_read(rhs[0], instr);
      p.num_outputs = std::max(p.num_outputs, in.dst + 1);
      p.code.push_back(in);
      continue;
    }
    const std::string& head = rhs[0];
    if (head.compare(0, 2, "in") == 0 && rhs.size() == 1) {
      in.kind = FusedInstr::kLoad;
      in.a = parse_index(head, "in", instr);
      TS_CHECK(in.a <= p.num_inputs, "fused_elementwise: inputs are numbered in order; '", instr, "' skips in",
               p.num_inputs);
      p.num_inputs = std::max(p.num_inputs, in.a + 1);
    } else if (head == "const") {
      TS_CHECK(rhs.size() == 2, "fused_elementwise: a constant is 'rN = const V', got '", instr, "'");
      in.kind = FusedInstr::kConst;
      in.param = static_cast<int>(p.params.size());
      p.params.push_back(parse_number(rhs[1], instr));
    } else if (head == "where") {
      TS_CHECK(rhs.size() == 4, "fused_elementwise: 'where' takes three registers, got '", instr, "'");
      in.kind = FusedInstr::kWhere;
      in.c = reg_read(rhs[1], instr);
      in.a = reg_read(rhs[2], instr);
      in.b = reg_read(rhs[3], instr);
    } else {
      // Kernel[p0,p1] rA [rB]
      std::string name = head, args;
      if (size_t lb = head.find('['); lb != std::string::npos) {
        TS_CHECK(head.back() == ']', "fused_elementwise: unclosed '[' in '", instr, "'");
        name = head.substr(0, lb);
        args = head.substr(lb + 1, head.size() - lb - 2);
      }
      int u = -1, b = -1;
      for (int i = 0; i < kNumUnary; ++i)
        if (name == kUnaryNames[i]) u = i;
      for (int i = 0; i < kNumBinary; ++i)
        if (name == kBinaryNames[i]) b = i;
      TS_CHECK(u >= 0 || b >= 0, "fused_elementwise: unknown kernel '", name, "' in instruction '", instr, "'");
      if (u >= 0) {
        TS_CHECK(unary_ok(static_cast<UnaryKernel>(u)) && rhs.size() == 2, "fused_elementwise: '", name,
                 "' is not a float-to-float kernel taking one register, in '", instr, "'");
        in.kind = FusedInstr::kUnary;
        in.kernel = static_cast<uint8_t>(u);
        in.a = reg_read(rhs[1], instr);
        in.param = static_cast<int>(p.params.size());
        std::stringstream as(args);
        int n = 0;
        for (std::string v; std::getline(as, v, ',');) {
          TS_CHECK(++n <= kParamSlots, "fused_elementwise: too many parameters in '", instr, "'");
          p.params.push_back(parse_number(trim(v), instr));
        }
        for (; n < kParamSlots; ++n) p.params.push_back(0.0);
      } else {
        TS_CHECK(binary_ok(static_cast<BinaryKernel>(b)) && rhs.size() == 3 && args.empty(), "fused_elementwise: '",
                 name, "' is not a float-to-float kernel taking two registers, in '", instr, "'");
        in.kind = FusedInstr::kBinary;
        in.kernel = static_cast<uint8_t>(b);
        in.a = reg_read(rhs[1], instr);
        in.b = reg_read(rhs[2], instr);
      }
    }
    in.dst = reg_write(lhs, instr);
    p.code.push_back(in);
  }
  TS_CHECK(p.num_outputs > 0, "fused_elementwise: the program stores no output");
  std::vector<bool> stored(p.num_outputs, false);
  for (const FusedInstr& i : p.code)
    if (i.kind == FusedInstr::kStore) {
      TS_CHECK(!stored[i.dst], "fused_elementwise: out", i.dst, " is stored twice");
      stored[i.dst] = true;
    }
  for (int k = 0; k < p.num_outputs; ++k) TS_CHECK(stored[k], "fused_elementwise: out", k, " is never stored");
  return p;
}

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

std::shared_ptr<const FusedProgram> parse_fused_program(const std::string& text) {
  static std::mutex mu;
  static std::unordered_map<std::string, std::shared_ptr<const FusedProgram>> cache;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache.find(text); it != cache.end()) return it->second;
  }
  auto p = std::make_shared<const FusedProgram>(parse(text));
  std::lock_guard<std::mutex> lock(mu);
  if (cache.size() > 4096) cache.clear();  // programs are few; a flood of new ones must not grow memory
  cache.emplace(text, p);
  return p;
}

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
