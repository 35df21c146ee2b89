#include "tessera/compile/inspect.h"

#include <sstream>

#include "ops/op_utils.h"
#include "tessera/core/numbers.h"
#include "tessera/ops/op_table.h"

namespace tessera::compile {
namespace {

using ops::OpId;

// By the op's FLOP class in ops.def (ops::op_flops); a data-dependent output counts 0.
int64_t node_flops(const Node& n, std::span<const int64_t> syms) {
  std::vector<Shape> in, out;
  for (const Value* v : n.inputs) in.push_back(v && !v->data_dependent_shape ? eval_shape(v->shape, syms) : Shape{});
  for (const Value* v : n.outputs) {
    if (v->data_dependent_shape) return 0;
    out.push_back(eval_shape(v->shape, syms));
  }
  return ops::op_flops(n.op, in, out, n.attrs);
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
