// FLOPs of one call of an op by its ops.def FLOP class: the estimate
// `tessera inspect` prints for a graph. The ops' own counts (trace::add_flops,
// what the profiler shows) agree with it: tests/ops/test_op_table.cpp.
#include <algorithm>
#include <map>

#include "ops/op_utils.h"
#include "tessera/ops/op_table.h"

namespace tessera::ops {
namespace {

int64_t numel(const Shape& s) { return numel_of(s); }
int64_t tail(const Shape& s, size_t from) {  // the product of s[from:]
  int64_t n = 1;
  for (size_t i = from; i < s.size(); ++i) n *= s[i];
  return n;
}
int64_t last(const Shape& s) { return s.empty() ? 1 : s.back(); }

// A contraction costs 2 per multiply-add over every index of the equation;
// an equation that contracts nothing (a transpose, a product of broadcasts)
// one per output element.
int64_t einsum_flops(const std::string& eq, const std::vector<Shape>& in, const Shape& out) {
  const size_t arrow = eq.find("->");
  if (eq.find("...") != std::string::npos || arrow == std::string::npos) return numel(out);
  std::map<char, int64_t> size;
  size_t operand = 0, dim = 0;
  for (size_t i = 0; i < arrow; ++i) {
    const char c = eq[i];
    if (c == ',') ++operand, dim = 0;
    else if (c != ' ' && operand < in.size() && dim < in[operand].size()) size[c] = in[operand][dim++];
  }
  bool contracts = false;
  int64_t all = 1;
  for (auto [c, n] : size) {
    all *= n;
    contracts = contracts || eq.find(c, arrow) == std::string::npos;
  }
  return contracts ? 2 * all : numel(out);
}

// Instructions that compute (not loads, constants or stores) per element.
int64_t fused_flops(const std::string& program, const Shape& out) {
  int64_t ops = 0;
  size_t start = 0;
  while (start < program.size()) {
    size_t end = program.find(';', start);
    if (end == std::string::npos) end = program.size();
    const std::string instr = program.substr(start, end - start);
    const size_t eq = instr.find('=');
    if (eq != std::string::npos) {
      const size_t rhs = instr.find_first_not_of(' ', eq + 1);
      const bool store = instr.find("out") < eq;
      const bool load = rhs != std::string::npos && (instr.compare(rhs, 2, "in") == 0 || instr.compare(rhs, 5, "const") == 0);
      if (!store && !load) ++ops;
    }
    start = end + 1;
  }
  return ops * numel(out);
}

}  // namespace

int64_t op_flops(OpId op, const std::vector<Shape>& in, const std::vector<Shape>& out, const Attrs& attrs) {
  const OpEntry& e = op_entry(op);
  auto input = [&](size_t i) -> const Shape& {
    static const Shape kNone{};
    return i < in.size() ? in[i] : kNone;
  };
  const Shape& y = out.empty() ? input(0) : out[0];
  switch (e.flops) {
    case Flops::kFlopNone: return 0;
    case Flops::kFlopPerOutput: {
      int64_t n = 0;
      for (const Shape& s : out) n += numel(s);
      return n;
    }
    case Flops::kFlopPerInput: return numel(input(0));
    case Flops::kFlopMatmul:  // the reduced dimension is the last of the left operand ("self mat1 mat2": mat1)
      return 2 * numel(y) * last(input(e.inputs.starts_with("self ") ? 1 : 0));
    case Flops::kFlopConv:  // weight [C_out, C_in / groups, kernel...]
      return 2 * numel(y) * tail(input(1), 1);
    case Flops::kFlopConvTranspose:  // weight [C_in, C_out / groups, kernel...]
      return 2 * numel(input(0)) * tail(input(1), 1);
    case Flops::kFlopAttention: {  // q [..., L, E], k [..., S, E], v [..., S, Ev]
      const Shape& k = input(1);
      const int64_t s = k.size() >= 2 ? k[k.size() - 2] : 1;
      return 2 * numel(input(0)) * s + 2 * numel(y) * s;
    }
    case Flops::kFlopCustom: break;
  }
  switch (op) {
    case OpId::einsum: return einsum_flops(attrs.s("equation"), in, y);
    case OpId::sparse_linear:  // 2 per stored weight and row of x
      return 2 * (numel(input(0)) / std::max<int64_t>(1, last(input(0)))) * numel(input(1));
    case OpId::convolution_backward: {  // the data and the weight gradient: two convolution passes
      const Shape& pass_out = attrs.b("transposed") ? input(1) : input(0);
      return 2 * 2 * numel(pass_out) * tail(input(2), 1);
    }
    case OpId::attention_backward: {  // [the forward again, unless given its out and lse], then q k^T, dv, dp, dq, dk
      const Shape& q = input(1);
      const Shape& k = input(2);
      const Shape& v = input(3);
      const bool forward = input(6).empty();
      const int64_t s = k.size() >= 2 ? k[k.size() - 2] : 1, E = last(q), Ev = last(v);
      return 2 * (numel(q) / std::max<int64_t>(1, E)) * s * (3 * E + 2 * Ev + (forward ? E + Ev : 0));
    }
    case OpId::fused_elementwise: return fused_flops(attrs.s("program"), y);
    default: TS_ERROR("op_flops: ", e.name, " is declared kFlopCustom in ops.def but has no formula in ops/flops.cpp");
  }
}

}  // namespace tessera::ops
