#include "tessera/compile/inspect.h"

#include <sstream>

#include "ops/op_utils.h"
#include "tessera/core/numbers.h"

namespace tessera::compile {
namespace {

using ops::OpId;

int64_t numel(const SymShape& s, std::span<const int64_t> syms) {
  int64_t n = 1;
  for (const SymInt& d : s) n *= d.eval(syms);
  return n;
}

// Multiply-adds of the dense ops, x2; other ops one per output element.
int64_t node_flops(const Node& n, std::span<const int64_t> syms) {
  auto dims = [&](const Value* v) { return eval_shape(v->shape, syms); };
  const Value* out = n.outputs[0];
  switch (n.op) {
    case OpId::linear:
    case OpId::fused_linear:
    case OpId::matmul:
    case OpId::mm:
    case OpId::bmm:
    case OpId::addmm: {
      const Value* a = n.op == OpId::addmm ? n.inputs[1] : n.inputs[0];
      Shape as = dims(a);
      int64_t k = as.empty() ? 1 : as.back();
      return 2 * numel(out->shape, syms) * k;
    }
    case OpId::conv1d:
    case OpId::conv2d:
    case OpId::fused_conv2d:  // a blocked output has the same elements as NCHW
    case OpId::conv_transpose2d: {
      Shape w = dims(n.inputs[1]);
      int64_t per = 1;
      for (size_t i = 1; i < w.size(); ++i) per *= w[i];  // C/groups * kernel
      if (n.op == OpId::conv_transpose2d) return 2 * numel(n.inputs[0]->shape, syms) * per * w[0] / std::max<int64_t>(1, w[1]);
      return 2 * numel(out->shape, syms) * per;
    }
    case OpId::scaled_dot_product_attention: {
      Shape q = dims(n.inputs[0]), k = dims(n.inputs[1]);
      int64_t s = k.size() >= 2 ? k[k.size() - 2] : 1;
      return 2 * numel(n.inputs[0]->shape, syms) * s + 2 * numel(out->shape, syms) * s;
    }
    default: {
      int64_t total = 0;
      for (const Value* v : n.outputs) total += v->data_dependent_shape ? 0 : numel(v->shape, syms);
      return total;
    }
  }
}

}  // namespace

GraphSummary summarize(const Graph& g, int64_t symbol_value) {
  GraphSummary s;
  s.symbol_value = symbol_value;
  std::vector<int64_t> syms(g.symbols().size(), symbol_value);
  for (const Node* n : g.nodes()) {
    ++s.op_counts[std::string(n->op_name())];
    s.flops += node_flops(*n, syms);
  }
  for (const Value* p : g.parameters()) {
    s.parameters += p->data.numel();
    s.parameter_bytes += static_cast<int64_t>(p->data.nbytes());
  }
  for (const Value* c : g.constants()) s.constant_bytes += static_cast<int64_t>(c->data.nbytes());
  return s;
}

std::string summary_text(const Graph& g, int64_t symbol_value) {
  GraphSummary s = summarize(g, symbol_value);
  std::ostringstream os;
  auto type = [&](const Value* v) {
    std::string t = std::string(dtype_name(v->dtype)) + "[";
    for (size_t i = 0; i < v->shape.size(); ++i) t += (i ? ", " : "") + v->shape[i].str(g.symbols());
    return t + "]";
  };
  os << "inputs\n";
  for (const Value* v : g.inputs()) os << "  " << v->name << ": " << type(v) << "\n";
  os << "outputs\n";
  for (size_t i = 0; i < g.outputs().size(); ++i) os << "  output" << i << ": " << type(g.outputs()[i]) << "\n";
  if (!g.symbols().empty()) {
    os << "dynamic dimensions:";
    for (const auto& n : g.symbols()) os << " " << n;
    os << "\n";
  }
  os << "parameters  " << s.parameters << " (" << g.parameters().size() << " tensors, " << s.parameter_bytes / 1024
     << " KiB)";
  if (s.constant_bytes) os << "; constants " << s.constant_bytes / 1024 << " KiB";
  os << "\n";
  os << "FLOPs       " << format_double(static_cast<double>(s.flops), 'g', 4);
  if (!g.symbols().empty()) os << " per run with every dynamic dimension = " << symbol_value;
  os << "\nops (" << g.num_nodes() << " nodes)\n";
  std::vector<std::pair<int, std::string>> hist;
  for (const auto& [op, n] : s.op_counts) hist.push_back({-n, op});
  std::sort(hist.begin(), hist.end());
  for (const auto& [n, op] : hist) os << "  " << op << std::string(op.size() < 30 ? 30 - op.size() : 1, ' ') << -n << "\n";
  return os.str();
}

}  // namespace tessera::compile
