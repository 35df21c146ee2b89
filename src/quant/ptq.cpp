// Post-training static int8 quantization of a graph (quant/ptq.h): find the
// layers, calibrate their activations, rewrite them as int8 ops.
#include "tessera/quant/ptq.h"

#include <array>
#include <map>
#include <sstream>

#include "ops/op_utils.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/compile/executor.h"
#include "tessera/compile/passes.h"
#include "tessera/core/error.h"
#include "tessera/ops/op_table.h"

namespace tessera::quant {
namespace {

using compile::Graph;
using compile::Node;
using compile::Value;
using compile::ValueKind;
using ops::OpId;

bool frozen(const Value* v) { return !v || v->kind == ValueKind::kParameter || v->kind == ValueKind::kConstant; }

bool skipped(const std::string& scope, const std::vector<std::string>& skip) {
  for (const auto& s : skip)
    if (scope == s || (scope.size() > s.size() && scope.compare(0, s.size(), s) == 0 && scope[s.size()] == '.'))
      return true;
  return false;
}

// A conv2d or linear layer to quantize, and the ReLU fused after it.
struct Candidate {
  Node* node = nullptr;
  Node* relu = nullptr;
  Value* x = nullptr;  // its input
  Value* y = nullptr;  // its output (the ReLU's when fused)
  int layer = 0;       // index in the report
};

// Why `n` cannot become an int8 layer, or "" if it can.
std::string unsupported(const Node* n) {
  const Value* x = n->inputs[0];
  const Value* w = n->inputs[1];
  const Value* b = n->inputs.size() > 2 ? n->inputs[2] : nullptr;
  if (x->dtype != DType::F32) return std::string("input is ") + dtype_name(x->dtype) + ", not f32";
  if (!frozen(w) || !frozen(b)) return "weights are computed in the graph, not parameters or constants";
  if (w->dtype != DType::F32 || (b && b->dtype != DType::F32)) return "weights are not f32";
  if (n->op == OpId::conv2d && x->shape.size() != 4) return "not a batched 4-D convolution";
  return "";
}

// Ops that move or select u8 codes without changing what they mean (ops.def's
// kPtqPassCodes): an int8 activation passes through them without being
// dequantized. On NCHW tensors only (not channel-blocked).
bool passes_codes(const Node* n) {
  if (ops::op_entry(n->op).ptq != ops::Ptq::kPtqPassCodes) return false;
  return !n->attrs.has("channel_block") || n->attrs.i("channel_block") == 0;
}

// A reshape of a static [N, C, H, W] to [N, C*H*W] whose every reader is an
// int8 linear layer.
bool flattens_for_int8_linear(const Node* n, const std::vector<std::vector<Node*>>& uses,
                              const std::map<const Node*, const struct Candidate*>& cands) {
  if (n->op != OpId::reshape || n->inputs.empty() || !n->inputs[0]) return false;
  const compile::SymShape &in = n->inputs[0]->shape, &out = n->outputs[0]->shape;
  if (in.size() != 4 || out.size() != 2 || !(in[0] == out[0])) return false;
  for (int d = 1; d < 4; ++d)
    if (!in[d].is_static()) return false;
  if (!out[1].is_static() || out[1].static_value() != in[1].static_value() * in[2].static_value() * in[3].static_value())
    return false;
  const auto& readers = uses[n->outputs[0]->id];
  if (readers.empty()) return false;
  for (const Node* u : readers)
    if (u->op != OpId::linear || !cands.count(u) || u->inputs[0] != n->outputs[0]) return false;
  return true;
}

std::string layer_name(const Node* n) { return n->scope.empty() ? compile::value_str(n->outputs[0]) : n->scope; }

std::string qstr(const QParams& p) {
  std::ostringstream os;
  os.precision(4);
  os << "scale " << p.scale << " zp " << p.zero_point;
  return os.str();
}

}  // namespace

int PtqReport::quantized() const {
  int n = 0;
  for (const auto& l : layers) n += l.quantized;
  return n;
}

std::string PtqReport::text() const {
  std::ostringstream os;
  os << "int8: " << quantized() << " of " << layers.size() << " layers, calibrated on " << batches << " batches\n";
  for (const auto& l : layers) {
    os << "  " << (l.quantized ? "int8 " : "f32  ") << l.scope << " (" << l.op << ")";
    if (l.quantized)
      os << "  in " << (l.input.s8 ? "s8 " : "u8 ") << qstr(l.input) << ", out " << (l.output_u8 ? "u8 " + qstr(l.output) : std::string("f32"));
    else
      os << "  kept float: " << l.reason;
    os << "\n";
  }
  if (!float_ops.empty()) {
    os << "  other ops in f32:";
    for (const auto& s : float_ops) os << " " << s;
    os << "\n";
  }
  return os.str();
}

PtqResult quantize_static(const Graph& graph, const std::vector<TensorList>& calibration, const PtqConfig& config) {
  check(config.observer);
  const int qmax = config.activation_max ? config.activation_max : 255;
  TS_CHECK(qmax >= 15 && qmax <= 255, "quantize_static: activation_max must be in [15, 255], got ", qmax);
  NoGradGuard no_grad;
  PtqResult r;
  Graph& g = r.graph;
  g = graph.clone();
  compile::PassOptions po;
  po.disable = compile::tessera_only_passes();  // plain conv2d/linear nodes, batch norm folded into them
  compile::optimize(g, po);

  // 1. The layers.
  auto uses = g.uses();
  auto is_out = g.is_output();
  std::vector<Candidate> cands;
  std::map<std::string, int> other;
  for (Node* n : g.nodes()) {
    const ops::Ptq role = ops::op_entry(n->op).ptq;
    if (role != ops::Ptq::kPtqLayer) {
      // f32 work left in the graph: not the layers' activations, code moves or data moves.
      bool compute = role != ops::Ptq::kPtqFusedActivation && role != ops::Ptq::kPtqNoCompute && !passes_codes(n);
      if (compute) ++other[std::string(n->op_name())];
      continue;
    }
    PtqLayer layer;
    layer.scope = layer_name(n);
    layer.op = std::string(n->op_name());
    std::string why = skipped(n->scope, config.skip) ? "skipped by the config" : unsupported(n);
    Candidate c{n, nullptr, n->inputs[0], n->outputs[0], static_cast<int>(r.report.layers.size())};
    if (why.empty() && !is_out[c.y->id] && uses[c.y->id].size() == 1 &&
        ops::op_entry(uses[c.y->id][0]->op).ptq == ops::Ptq::kPtqFusedActivation) {
      c.relu = uses[c.y->id][0];
      c.y = c.relu->outputs[0];
      layer.op += "+relu";
    }
    layer.reason = why;
    r.report.layers.push_back(layer);
    if (why.empty()) cands.push_back(c);
  }
  for (const auto& [op, count] : other) r.report.float_ops.push_back(op + " x" + std::to_string(count));

  // 2. Parameters learned by QAT (convert_qat), for a layer's input and for
  // whatever reaches it through pooling and reshapes (the previous layer's
  // output).
  std::map<int, QParams> qp;
  for (const Candidate& c : cands) {
    auto it = config.fixed_inputs.find(c.node->scope);
    if (it == config.fixed_inputs.end()) continue;
    for (Value* v = c.x;; v = v->producer->inputs[0]) {
      qp[v->id] = it->second;
      if (v->kind != ValueKind::kNode || !passes_codes(v->producer)) break;
    }
  }
  // 3. Calibration: the f32 graph with every other activation to observe as an output.
  std::map<int, std::unique_ptr<Observer>> observers;  // by value id
  std::vector<int> watched;
  for (const Candidate& c : cands)
    for (Value* v : {c.x, c.y})
      if (!observers.count(v->id) && !qp.count(v->id)) {
        observers[v->id] = make_observer(config.observer);
        watched.push_back(v->id);
      }
  TS_CHECK(!calibration.empty() || watched.empty(), "quantize_static: calibration needs at least one batch of "
           "inputs, got none");
  {
    Graph obs = g.clone();
    std::map<int, Value*> by_id;
    for (Value* v : obs.inputs()) by_id[v->id] = v;
    for (Node* n : obs.nodes())
      for (Value* v : n->outputs) by_id[v->id] = v;
    std::vector<Value*> outs;
    for (int id : watched) outs.push_back(by_id.at(id));
    obs.set_outputs(outs);
    compile::Executable exe(std::move(obs), /*plan_memory=*/false);
    for (size_t b = 0; b < calibration.size(); ++b) {
      TensorList got = exe.run(calibration[b]);
      for (size_t i = 0; i < watched.size(); ++i)
        observers[watched[i]]->observe(got[i], "the activation " + compile::value_str(by_id.at(watched[i])) +
                                                   " (calibration batch " + std::to_string(b) + ")");
    }
  }
  r.report.batches = static_cast<int64_t>(calibration.size());
  std::map<int, std::pair<double, double>> ranges;
  for (auto& [id, o] : observers) {
    ranges[id] = o->range();
    qp[id] = affine_qparams(ranges[id].first, ranges[id].second, qmax);
  }

  // 4. The rewrite. codes[v]: the u8 value standing for float value v.
  std::map<int, Value*> codes;
  std::vector<std::pair<Value*, Node*>> leaves;  // (float value, the node before which its codes exist)
  // Where float enters int8, a signed range becomes symmetric s8 codes when
  // the config says so (oneDNN's s8 kernels run without the zero-point
  // compensation u8 needs; see PtqConfig::signed_inputs).
  auto code_of = [&](Value* x, Node* before) -> Value* {
    if (auto it = codes.find(x->id); it != codes.end()) return it->second;
    DType t = DType::U8;
    if (auto r = ranges.find(x->id); r != ranges.end() && config.signed_inputs && r->second.first < 0)
      qp[x->id] = symmetric_qparams(r->second.first, r->second.second);
    if (qp.at(x->id).s8) t = DType::I8;
    const QParams& p = qp.at(x->id);
    Node* qn = g.add_node(OpId::quantize_per_tensor, {x},
                          ops::Attrs{{"scale", p.scale}, {"zero_point", p.zero_point}, {"dtype", t}},
                          {{t, x->shape}}, before);
    qn->scope = before->scope;
    return codes[x->id] = qn->outputs[0];
  };
  std::map<int, std::array<int64_t, 3>> hwc_order;  // flattened codes in [N, H, W, C] order: {C, H, W}
  std::map<const Node*, const Candidate*> cand_of;
  for (const Candidate& c : cands) cand_of[c.node] = &c;
  for (Node* n : g.nodes()) {
    if (auto it = cand_of.find(n); it != cand_of.end()) {
      const Candidate& c = *it->second;
      Node* last = c.relu ? c.relu : n;
      Value* xq = code_of(c.x, n);
      Tensor w = n->inputs[1]->data;
      if (auto h = hwc_order.find(c.x->id); h != hwc_order.end()) {
        const auto& [C, H, W] = h->second;
        w = w.reshape({w.size(0), C, H, W}).permute({0, 2, 3, 1}).reshape({w.size(0), -1}).contiguous();
      }
      auto [wq, ws] = quantize_weight_per_channel(w);
      const QParams &in = qp.at(c.x->id), &out = qp.at(c.y->id);
      ops::Attrs a = n->op == OpId::conv2d ? n->attrs : ops::Attrs{};
      a.set("x_scale", in.scale);
      a.set("x_zero_point", in.zero_point);
      a.set("y_scale", out.scale);
      a.set("y_zero_point", out.zero_point);
      a.set("activation", std::string(c.relu ? "relu" : "none"));
      a.set("out_dtype", DType::U8);
      Value* bias = n->inputs.size() > 2 ? n->inputs[2] : nullptr;
      Node* q = g.add_node(n->op == OpId::conv2d ? OpId::int8_conv2d : OpId::int8_linear,
                           {xq, g.add_constant(wq), g.add_constant(ws), bias}, a, {{DType::U8, c.y->shape}}, last);
      q->scope = n->scope;
      codes[c.y->id] = q->outputs[0];
      leaves.push_back({c.y, last});
      PtqLayer& l = r.report.layers[c.layer];
      l.quantized = true;
      l.input = in;
      l.output = out;
    } else if (Value* v = n->inputs.empty() ? nullptr : n->inputs[0]; flattens_for_int8_linear(n, uses, cand_of) &&
                                                                      v && codes.count(v->id)) {
      // flatten [N, C, H, W] -> [N, C*H*W] read only by int8 linear layers:
      // flattened in [N, H, W, C] order instead (a free view of the
      // channels-last codes, no transposing copy), and the layers' weight
      // columns permuted to match (hwc_order).
      const compile::SymShape& s = v->shape;
      Node* p = g.add_node(OpId::permute, {codes[v->id]}, ops::Attrs{{"dims", std::vector<int64_t>{0, 2, 3, 1}}},
                           {{DType::U8, {s[0], s[2], s[3], s[1]}}}, n);
      Node* q = g.add_node(n->op, {p->outputs[0]}, n->attrs, {{DType::U8, n->outputs[0]->shape}}, n);
      p->scope = q->scope = n->scope;
      q->sym_attrs = n->sym_attrs;
      codes[n->outputs[0]->id] = q->outputs[0];
      hwc_order[n->outputs[0]->id] = {s[1].static_value(), s[2].static_value(), s[3].static_value()};
    } else if (passes_codes(n) && n->inputs[0] && codes.count(n->inputs[0]->id)) {
      Value* y = n->outputs[0];
      Node* q = g.add_node(n->op, {codes[n->inputs[0]->id]}, n->attrs, {{DType::U8, y->shape}}, n);
      q->sym_attrs = n->sym_attrs;
      q->scope = n->scope;
      codes[y->id] = q->outputs[0];
      qp[y->id] = qp.at(n->inputs[0]->id);
      leaves.push_back({y, n});
    }
  }
  // Float users of an int8 activation read it dequantized; the float layers
  // the int8 ones replace are then unused and removed.
  for (auto& [v, before] : leaves) {
    const QParams& p = qp.at(v->id);
    Node* dq = g.add_node(OpId::dequantize_per_tensor, {codes.at(v->id)},
                          ops::Attrs{{"scale", p.scale}, {"zero_point", p.zero_point}}, {{DType::F32, v->shape}},
                          before);
    dq->scope = before->scope;
    g.replace_uses(v, dq->outputs[0]);
  }
  compile::eliminate_dead_code(g);
  // A layer whose codes only a dequantize reads stores f32 itself (one pass
  // over its output instead of two).
  uses = g.uses();
  is_out = g.is_output();
  for (Node* n : g.nodes()) {
    if (n->op != OpId::int8_conv2d && n->op != OpId::int8_linear) continue;
    Value* y = n->outputs[0];
    if (is_out[y->id] || uses[y->id].size() != 1 || uses[y->id][0]->op != OpId::dequantize_per_tensor) continue;
    Node* dq = uses[y->id][0];
    ops::Attrs a = n->attrs;
    a.set("out_dtype", DType::F32);
    Node* f = g.add_node(n->op, n->inputs, a, {{DType::F32, y->shape}}, dq);
    f->scope = n->scope;
    g.replace_uses(dq->outputs[0], f->outputs[0]);
    for (PtqLayer& l : r.report.layers)
      if (l.quantized && l.scope == layer_name(n)) l.output_u8 = false;
  }
  compile::eliminate_dead_code(g);
  compile::verify(g, "quantize_static");
  return r;
}

PtqConfig ptq_config_from_json(const nlohmann::json& j) {
  TS_CHECK(j.is_object(), "calibration config: expected an object {observer, percentile, averaging_constant, bins, "
           "skip, activation_max}, got ", j.dump());
  PtqConfig c;
  for (const auto& item : j.items()) {
    const std::string& k = item.key();  // named, not a structured binding: lambdas below capture them
    const nlohmann::json& v = item.value();
    auto number = [&](const char* what) {
      TS_CHECK(v.is_number(), "calibration config: ", k, " must be a number, got ", v.dump(), " (", what, ")");
      return v.get<double>();
    };
    if (k == "observer") {
      TS_CHECK(v.is_string(), "calibration config: observer must be a string (minmax, moving_average, percentile, "
               "entropy), got ", v.dump());
      c.observer.kind = v.get<std::string>();
    } else if (k == "percentile") {
      c.observer.percentile = number("in (50, 100]");
    } else if (k == "averaging_constant") {
      c.observer.averaging_constant = number("in (0, 1]");
    } else if (k == "bins") {
      c.observer.bins = static_cast<int64_t>(number("histogram bins, 512 to 65536"));
    } else if (k == "activation_max") {
      c.activation_max = static_cast<int>(number("the largest u8 code, 15 to 255"));
    } else if (k == "skip") {
      TS_CHECK(v.is_array(), "calibration config: skip must be a list of module paths, got ", v.dump());
      for (const auto& e : v) {
        TS_CHECK(e.is_string(), "calibration config: skip must list module paths (strings), got ", e.dump());
        c.skip.push_back(e.get<std::string>());
      }
    } else if (k != "batches") {  // read by the CLI
      TS_ERROR("calibration config: unknown key '", k, "' (expected observer, percentile, averaging_constant, bins, "
               "skip, activation_max, batches)");
    }
  }
  check(c.observer);
  return c;
}

}  // namespace tessera::quant
