// ONNX export: each node of a graph as ONNX operators of opset 17.
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <unordered_map>

#include "ops/op_utils.h"
#include "tessera/compile/onnx.h"
#include "tessera/core/error.h"
#include "tessera/io/file.h"

namespace tessera::compile {
namespace {

using ops::OpId;
using P = onnx::TensorProto;

int onnx_type(DType t) {
  switch (t) {
    case DType::F32: return P::FLOAT;
    case DType::F64: return P::DOUBLE;
    case DType::F16: return P::FLOAT16;
    case DType::BF16: return P::BFLOAT16;
    case DType::I64: return P::INT64;
    case DType::I32: return P::INT32;
    case DType::I8: return P::INT8;
    case DType::U8: return P::UINT8;
    case DType::Bool: return P::BOOL;
  }
  return P::UNDEFINED;
}

class Exporter {
 public:
  explicit Exporter(const Graph& g) : g_(g) {
    model_.set_ir_version(8);
    model_.set_producer_name("tessera");
    model_.set_producer_version("1");
    auto* op = model_.add_opset_import();
    op->set_domain("");
    op->set_version(kOnnxOpset);
    gp_ = model_.mutable_graph();
    gp_->set_name("tessera");
  }

  onnx::ModelProto run() {
    // Symbols come from the first input dimension that is exactly that symbol.
    for (const Value* v : g_.inputs())
      for (size_t d = 0; d < v->shape.size(); ++d) {
        const auto& t = v->shape[d].terms();
        if (t.size() == 1 && t[0].second == 1 && std::has_single_bit(t[0].first)) {
          int s = std::countr_zero(t[0].first);
          if (!sym_source_.count(s)) sym_source_[s] = {v, static_cast<int64_t>(d)};
        }
      }
    for (const Value* v : g_.inputs()) value_info(gp_->add_input(), name(v), v);
    for (const Value* v : g_.parameters()) initializer(name(v), v->data);
    for (const Value* v : g_.constants()) initializer(name(v), v->data);
    for (const Node* n : g_.nodes()) {
      node_ = n;
      emit(n);
    }
    for (size_t i = 0; i < g_.outputs().size(); ++i) {
      const Value* v = g_.outputs()[i];
      std::string out = "output" + (g_.outputs().size() == 1 ? std::string() : std::to_string(i));
      add("Identity", {name(v)}, {out});
      value_info(gp_->add_output(), out, v);
    }
    return std::move(model_);
  }

 private:
  // ---- names, initializers, nodes -----------------------------------------------------

  std::string name(const Value* v) {
    if (!v) return "";
    switch (v->kind) {
      case ValueKind::kInput:
      case ValueKind::kParameter: return v->name;
      case ValueKind::kConstant: return "c" + std::to_string(v->id);
      case ValueKind::kNode: return "v" + std::to_string(v->id);
    }
    return "";
  }
  std::string fresh(const std::string& hint) { return hint + "_" + std::to_string(counter_++); }

  void value_info(onnx::ValueInfoProto* vi, const std::string& n, const Value* v) {
    vi->set_name(n);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx_type(v->dtype));
    auto* shape = tt->mutable_shape();
    for (const SymInt& d : v->shape) {
      auto* dim = shape->add_dim();
      if (v->data_dependent_shape) dim->set_dim_param(fresh("unk"));
      else if (d.is_static()) dim->set_dim_value(d.static_value());
      else dim->set_dim_param(d.str(g_.symbols()));
    }
  }

  void initializer(const std::string& n, const Tensor& t) {
    Tensor c = t.contiguous();
    auto* tp = gp_->add_initializer();
    tp->set_name(n);
    tp->set_data_type(onnx_type(c.dtype()));
    for (int64_t d : c.shape()) tp->add_dims(d);
    tp->set_raw_data(std::string(static_cast<const char*>(c.raw_data()), c.nbytes()));
  }

  using AttrFn = std::function<void(onnx::NodeProto&)>;
  onnx::NodeProto& add(const std::string& type, const std::vector<std::string>& ins,
                       const std::vector<std::string>& outs, const AttrFn& attrs = {}) {
    auto* n = gp_->add_node();
    n->set_op_type(type);
    n->set_name(fresh(type));
    for (const auto& i : ins) n->add_input(i);
    for (const auto& o : outs) n->add_output(o);
    if (attrs) attrs(*n);
    return *n;
  }
  // One output with a fresh name (or `out` if given).
  std::string op(const std::string& type, const std::vector<std::string>& ins, const AttrFn& attrs = {},
                 std::string out = "") {
    if (out.empty()) out = fresh(type);
    add(type, ins, {out}, attrs);
    return out;
  }

  static void attr_i(onnx::NodeProto& n, const char* k, int64_t v) {
    auto* a = n.add_attribute();
    a->set_name(k);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void attr_f(onnx::NodeProto& n, const char* k, double v) {
    auto* a = n.add_attribute();
    a->set_name(k);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(static_cast<float>(v));
  }
  static void attr_ints(onnx::NodeProto& n, const char* k, const std::vector<int64_t>& v) {
    auto* a = n.add_attribute();
    a->set_name(k);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }

  std::string constant(const Tensor& t) {
    std::string n = fresh("const");
    initializer(n, t);
    return n;
  }
  std::string i64s(const std::vector<int64_t>& v) {
    std::string key;
    for (int64_t x : v) key += std::to_string(x) + ",";
    if (auto it = i64_cache_.find(key); it != i64_cache_.end()) return it->second;
    return i64_cache_[key] = constant(tensor(v, {static_cast<int64_t>(v.size())}));
  }
  std::string scalar(double v, DType t) { return constant(full({}, v, t)); }

  // An int64 [1] tensor holding the value of `s` at run time.
  std::string sym(const SymInt& s) {
    if (s.is_static()) return i64s({s.static_value()});
    std::string key = s.str(g_.symbols());
    if (auto it = sym_cache_.find(key); it != sym_cache_.end()) return it->second;
    std::string total;
    for (const auto& [mask, c] : s.terms()) {
      std::string term;
      for (uint32_t m = mask, i = 0; m; m >>= 1, ++i) {
        if (!(m & 1u)) continue;
        auto src = sym_source_.find(static_cast<int>(i));
        TS_CHECK(src != sym_source_.end(), "ONNX export: dynamic dimension ", g_.symbols()[i],
                 " is not a dimension of any input, so the file could not compute it");
        std::string shape = op("Shape", {name(src->second.first)});
        std::string dim = op("Gather", {shape, i64s({src->second.second})}, [](auto& n) { attr_i(n, "axis", 0); });
        term = term.empty() ? dim : op("Mul", {term, dim});
      }
      if (term.empty()) term = i64s({c});
      else if (c != 1) term = op("Mul", {term, i64s({c})});
      total = total.empty() ? term : op("Add", {total, term});
    }
    return sym_cache_[key] = total;
  }
  // An int list attribute as an int64 [n] tensor (computed when it depends on symbols).
  std::string ints_tensor(const Node* n, const std::string& attr) {
    for (const Node::SymAttr& s : n->sym_attrs)
      if (s.name == attr) {
        std::vector<std::string> parts;
        for (const SymInt& x : s.values) parts.push_back(sym(x));
        return parts.size() == 1 ? parts[0] : op("Concat", parts, [](auto& nd) { attr_i(nd, "axis", 0); });
      }
    return i64s(n->attrs.ints(attr));
  }
  std::string shape_tensor(const SymShape& shape) {
    std::vector<SymInt> dims(shape.begin(), shape.end());
    bool fixed = std::all_of(dims.begin(), dims.end(), [](const SymInt& d) { return d.is_static(); });
    if (fixed) {
      std::vector<int64_t> v;
      for (const SymInt& d : dims) v.push_back(d.static_value());
      return i64s(v);
    }
    std::vector<std::string> parts;
    for (const SymInt& d : dims) parts.push_back(sym(d));
    return op("Concat", parts, [](auto& nd) { attr_i(nd, "axis", 0); });
  }

  // An input as `t` (Cast when its dtype differs; constants are converted here).
  std::string as(const Value* v, DType t) {
    if (v->dtype == t) return name(v);
    if (v->kind == ValueKind::kConstant) return constant(v->data.to(t));
    return op("Cast", {name(v)}, [&](auto& n) { attr_i(n, "to", onnx_type(t)); });
  }

  [[noreturn]] void unsupported(const std::string& why = "") {
    TS_ERROR("ONNX export: op '", node_->op_name(), "' (node ", value_str(node_->outputs[0]),
             node_->scope.empty() ? "" : " in module '" + node_->scope + "'", ") ",
             why.empty() ? "has no mapping to ONNX opset " + std::to_string(kOnnxOpset) : why);
  }

  // An int8 layer as QDQ: DequantizeLinear of its input, weights (per output
  // channel) and int32 bias, the float Conv / Gemm, its ReLU, and
  // QuantizeLinear of the result (when it stays u8) — the pattern ONNX
  // Runtime fuses back into QLinearConv / QGemm.
  void int8_layer(const Node* n, const std::string& out) {
    const ops::Attrs& a = n->attrs;
    const auto& in = n->inputs;
    const bool conv = n->op == OpId::int8_conv2d;
    const double xs = a.f("x_scale");
    auto frozen = [](const Value* v) { return !v || v->kind == ValueKind::kConstant || v->kind == ValueKind::kParameter; };
    if (!frozen(in[2]) || !frozen(in[3]))
      unsupported("with weight scales or a bias computed in the graph (QDQ needs them as constants)");
    const Tensor ws = in[2]->data.contiguous();
    const int64_t oc = ws.numel();
    auto dq = [&](const std::string& q, const std::string& scale, const std::string& zp, bool per_channel) {
      return op("DequantizeLinear", {q, scale, zp}, [&](auto& nd) {
        if (per_channel) attr_i(nd, "axis", 0);
      });
    };
    std::vector<std::string> ins{dq(name(in[0]), scalar(xs, DType::F32),
                                    scalar(static_cast<double>(a.i("x_zero_point")), in[0]->dtype), false),
                                 dq(name(in[1]), name(in[2]), constant(zeros({oc}, DType::I8)), true)};
    if (in[3]) {
      // The bias in units of the product (x_scale * w_scale), as QDQ wants it.
      Tensor bs = ops::mul(ws, xs);
      Tensor bq = ops::round(ops::div(in[3]->data.to(DType::F32), bs)).to(DType::I32);
      ins.push_back(dq(constant(bq), constant(bs), constant(zeros({oc}, DType::I32)), true));
    }
    std::string y;
    if (conv) {
      std::vector<int64_t> pad = a.ints("padding");
      TS_CHECK(!a.b("padding_same"), "ONNX export: int8_conv2d with padding='same' is not exported");
      pad.insert(pad.end(), pad.begin(), pad.end());
      y = op("Conv", ins, [&](auto& nd) {
        attr_ints(nd, "strides", a.ints("stride"));
        attr_ints(nd, "dilations", a.ints("dilation"));
        attr_ints(nd, "pads", pad);
        attr_i(nd, "group", a.i("groups"));
      });
    } else if (in[0]->shape.size() == 2) {
      y = op("Gemm", ins, [](auto& nd) { attr_i(nd, "transB", 1); });
    } else {
      y = op("MatMul", {ins[0], op("Transpose", {ins[1]})});
      if (in[3]) y = op("Add", {y, ins[2]});
    }
    if (a.s("activation") == "relu") y = op("Relu", {y});
    if (a.dtype("out_dtype") == DType::U8)
      op("QuantizeLinear", {y, scalar(a.f("y_scale"), DType::F32),
                            scalar(static_cast<double>(a.i("y_zero_point")), DType::U8)}, {}, out);
    else
      op("Identity", {y}, {}, out);
  }

  // ---- the op table ----------------------------------------------------------------------

  void emit(const Node* n) {
    const ops::Attrs& a = n->attrs;
    const auto& in = n->inputs;
    DType ot = n->outputs[0]->dtype;
    std::string out = name(n->outputs[0]);
    auto x = [&](size_t i) { return name(in[i]); };
    auto unary = [&](const char* type) { op(type, {as(in[0], ot)}, {}, out); };
    auto binary = [&](const char* type) { op(type, {as(in[0], ot), as(in[1], ot)}, {}, out); };
    auto compare = [&](const char* type) {
      DType t = promote_types(in[0]->dtype, in[1]->dtype);
      if (in[0]->kind == ValueKind::kConstant && in[0]->data.impl()->wrapped_number) t = in[1]->dtype;
      if (in[1]->kind == ValueKind::kConstant && in[1]->data.impl()->wrapped_number) t = in[0]->dtype;
      return op(type, {as(in[0], t), as(in[1], t)});
    };
    auto axes_attr = [&](const std::vector<int64_t>& dims, int64_t rank) {
      std::vector<int64_t> ax;
      for (int64_t d : dims) ax.push_back(d < 0 ? d + rank : d);
      return ax;
    };
    int64_t rank0 = in.empty() || !in[0] ? 0 : static_cast<int64_t>(in[0]->shape.size());
    switch (n->op) {
      case OpId::neg: return unary("Neg");
      case OpId::abs: return unary("Abs");
      case OpId::exp: return unary("Exp");
      case OpId::log: return unary("Log");
      case OpId::sqrt: return unary("Sqrt");
      case OpId::sin: return unary("Sin");
      case OpId::cos: return unary("Cos");
      case OpId::tan: return unary("Tan");
      case OpId::tanh: return unary("Tanh");
      case OpId::sigmoid: return unary("Sigmoid");
      case OpId::relu: return unary("Relu");
      case OpId::erf: return unary("Erf");
      case OpId::reciprocal: return unary("Reciprocal");
      case OpId::floor: return unary("Floor");
      case OpId::ceil: return unary("Ceil");
      case OpId::round: return unary("Round");
      case OpId::sign: return unary("Sign");
      case OpId::rsqrt: op("Reciprocal", {op("Sqrt", {as(in[0], ot)})}, {}, out); return;
      case OpId::square: op("Mul", {as(in[0], ot), as(in[0], ot)}, {}, out); return;
      case OpId::silu: op("Mul", {as(in[0], ot), op("Sigmoid", {as(in[0], ot)})}, {}, out); return;
      case OpId::leaky_relu:
        op("LeakyRelu", {as(in[0], ot)}, [&](auto& nd) { attr_f(nd, "alpha", a.f("negative_slope")); }, out);
        return;
      case OpId::elu: op("Elu", {as(in[0], ot)}, [&](auto& nd) { attr_f(nd, "alpha", a.f("alpha")); }, out); return;
      case OpId::softplus: {
        if (a.f("beta") != 1.0) unsupported("with beta != 1 has no ONNX form");
        return unary("Softplus");
      }
      case OpId::mish:
        op("Mul", {as(in[0], ot), op("Tanh", {op("Softplus", {as(in[0], ot)})})}, {}, out);
        return;
      case OpId::gelu: {
        std::string v = as(in[0], ot);
        if (a.s("approximate") == "tanh") {
          // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
          std::string x3 = op("Mul", {op("Mul", {v, v}), v});
          std::string inner = op("Mul", {op("Add", {v, op("Mul", {x3, scalar(0.044715, ot)})}),
                                         scalar(0.79788456080286535588, ot)});
          std::string t = op("Add", {op("Tanh", {inner}), scalar(1, ot)});
          op("Mul", {op("Mul", {v, t}), scalar(0.5, ot)}, {}, out);
        } else {
          // 0.5 x (1 + erf(x / sqrt 2))
          std::string e = op("Add", {op("Erf", {op("Mul", {v, scalar(M_SQRT1_2, ot)})}), scalar(1, ot)});
          op("Mul", {op("Mul", {v, e}), scalar(0.5, ot)}, {}, out);
        }
        return;
      }
      case OpId::clamp:
      case OpId::hardtanh: {
        if (n->op == OpId::clamp && in.size() == 3) {
          std::string r = as(in[0], ot);
          if (in[1]) r = op("Max", {r, as(in[1], ot)});
          if (in[2]) r = op("Min", {r, as(in[2], ot)});
          op("Identity", {r}, {}, out);
          return;
        }
        std::optional<double> lo, hi;
        if (n->op == OpId::hardtanh) lo = a.f("min_val"), hi = a.f("max_val");
        else {
          if (auto s = a.opt_scalar("min")) lo = s->to_double();
          if (auto s = a.opt_scalar("max")) hi = s->to_double();
        }
        op("Clip", {as(in[0], ot), lo ? scalar(*lo, ot) : "", hi ? scalar(*hi, ot) : ""}, {}, out);
        return;
      }
      case OpId::pow:
        if (in.size() == 2) return binary("Pow");
        if (a.has("exponent")) op("Pow", {as(in[0], ot), scalar(a.scalar("exponent").to_double(), ot)}, {}, out);
        else op("Pow", {scalar(a.scalar("base").to_double(), ot), as(in[0], ot)}, {}, out);
        return;
      case OpId::add:
      case OpId::sub: {
        std::string b = as(in[1], ot);
        double alpha = a.scalar("alpha").to_double();
        if (alpha != 1.0) b = op("Mul", {b, scalar(alpha, ot)});
        op(n->op == OpId::add ? "Add" : "Sub", {as(in[0], ot), b}, {}, out);
        return;
      }
      case OpId::mul: return binary("Mul");
      case OpId::div:
        if (!a.s("rounding_mode").empty()) unsupported("with rounding_mode has no exported form yet");
        return binary("Div");
      case OpId::maximum: return binary("Max");
      case OpId::minimum: return binary("Min");
      case OpId::eq: op("Identity", {compare("Equal")}, {}, out); return;
      case OpId::ne: op("Not", {compare("Equal")}, {}, out); return;
      case OpId::lt: op("Identity", {compare("Less")}, {}, out); return;
      case OpId::le: op("Identity", {compare("LessOrEqual")}, {}, out); return;
      case OpId::gt: op("Identity", {compare("Greater")}, {}, out); return;
      case OpId::ge: op("Identity", {compare("GreaterOrEqual")}, {}, out); return;
      case OpId::logical_and: op("And", {as(in[0], DType::Bool), as(in[1], DType::Bool)}, {}, out); return;
      case OpId::logical_or: op("Or", {as(in[0], DType::Bool), as(in[1], DType::Bool)}, {}, out); return;
      case OpId::logical_xor: op("Xor", {as(in[0], DType::Bool), as(in[1], DType::Bool)}, {}, out); return;
      case OpId::logical_not: op("Not", {as(in[0], DType::Bool)}, {}, out); return;
      case OpId::where: op("Where", {x(0), as(in[1], ot), as(in[2], ot)}, {}, out); return;

      case OpId::sum:
      case OpId::mean:
      case OpId::amax:
      case OpId::amin:
      case OpId::prod: {
        const auto& dims = a.ints("dim");
        bool keep = a.b("keepdim");
        std::string src = as(in[0], ot);
        if (n->op == OpId::sum) {
          std::vector<std::string> ins{src};
          if (!dims.empty()) ins.push_back(i64s(axes_attr(dims, rank0)));
          op("ReduceSum", ins, [&](auto& nd) { attr_i(nd, "keepdims", keep); }, out);
          return;
        }
        const char* type = n->op == OpId::mean ? "ReduceMean" : n->op == OpId::amax ? "ReduceMax"
                           : n->op == OpId::amin ? "ReduceMin" : "ReduceProd";
        op(type, {src}, [&](auto& nd) {
          attr_i(nd, "keepdims", keep);
          if (!dims.empty()) attr_ints(nd, "axes", axes_attr(dims, rank0));
        }, out);
        return;
      }

      case OpId::matmul:
      case OpId::mm:
      case OpId::bmm: return binary("MatMul");
      case OpId::linear: {
        if (rank0 == 2) {
          std::vector<std::string> ins{x(0), x(1)};
          if (in[2]) ins.push_back(x(2));
          op("Gemm", ins, [](auto& nd) { attr_i(nd, "transB", 1); }, out);
          return;
        }
        std::string wt = op("Transpose", {x(1)}, [](auto& nd) { attr_ints(nd, "perm", {1, 0}); });
        if (!in[2]) op("MatMul", {x(0), wt}, {}, out);
        else op("Add", {op("MatMul", {x(0), wt}), x(2)}, {}, out);
        return;
      }
      case OpId::addmm:
        op("Gemm", {x(1), x(2), as(in[0], ot)}, [&](auto& nd) {
          attr_f(nd, "alpha", a.scalar("alpha").to_double());
          attr_f(nd, "beta", a.scalar("beta").to_double());
        }, out);
        return;

      case OpId::cat: {
        std::vector<std::string> ins;
        for (const Value* v : in) ins.push_back(as(v, ot));
        int64_t d = a.i("dim");
        op("Concat", ins, [&](auto& nd) { attr_i(nd, "axis", d < 0 ? d + rank0 : d); }, out);
        return;
      }
      case OpId::split:
      case OpId::chunk: {
        int64_t d = a.i("dim");
        if (d < 0) d += rank0;
        std::vector<std::string> sizes;
        for (const Value* o : n->outputs) sizes.push_back(sym(o->shape[d]));
        std::string st = sizes.size() == 1 ? sizes[0] : op("Concat", sizes, [](auto& nd) { attr_i(nd, "axis", 0); });
        std::vector<std::string> outs;
        for (const Value* o : n->outputs) outs.push_back(name(o));
        add("Split", {x(0), st}, outs, [&](auto& nd) { attr_i(nd, "axis", d); });
        return;
      }
      case OpId::view:
      case OpId::reshape:
        op("Reshape", {x(0), shape_tensor(n->outputs[0]->shape)}, {}, out);
        return;
      case OpId::expand: op("Expand", {x(0), shape_tensor(n->outputs[0]->shape)}, {}, out); return;
      case OpId::transpose: {
        std::vector<int64_t> perm(rank0);
        for (int64_t i = 0; i < rank0; ++i) perm[i] = i;
        int64_t d0 = a.i("dim0"), d1 = a.i("dim1");
        std::swap(perm[d0 < 0 ? d0 + rank0 : d0], perm[d1 < 0 ? d1 + rank0 : d1]);
        op("Transpose", {x(0)}, [&](auto& nd) { attr_ints(nd, "perm", perm); }, out);
        return;
      }
      case OpId::permute:
        op("Transpose", {x(0)}, [&](auto& nd) { attr_ints(nd, "perm", axes_attr(a.ints("dims"), rank0)); }, out);
        return;
      case OpId::unsqueeze: {
        int64_t d = a.i("dim");
        op("Unsqueeze", {x(0), i64s({d < 0 ? d + rank0 + 1 : d})}, {}, out);
        return;
      }
      case OpId::squeeze: {
        if (auto d = a.opt_i("dim")) {
          int64_t dd = *d < 0 ? *d + rank0 : *d;
          // squeeze(dim) of a dim that is not 1 is the identity.
          const SymInt& size = in[0]->shape[dd];
          if (!(size.is_static() && size.static_value() == 1)) {
            op("Identity", {x(0)}, {}, out);
            return;
          }
          op("Squeeze", {x(0), i64s({dd})}, {}, out);
        } else {
          op("Reshape", {x(0), shape_tensor(n->outputs[0]->shape)}, {}, out);
        }
        return;
      }
      case OpId::slice: {
        int64_t d = a.i("dim");
        if (d < 0) d += rank0;
        auto pick = [&](const char* k, int64_t idx) {
          for (const Node::SymAttr& s : n->sym_attrs)
            if (s.name == k) return sym(s.values[0]);
          int64_t v = a.i(k);
          return i64s({idx == 1 && v > (int64_t{1} << 62) ? int64_t{1} << 62 : v});
        };
        op("Slice", {x(0), pick("start", 0), pick("end", 1), i64s({d}), i64s({a.i("step")})}, {}, out);
        return;
      }
      case OpId::select: {
        int64_t d = a.i("dim");
        op("Gather", {x(0), constant(full({}, a.i("index"), DType::I64))},
           [&](auto& nd) { attr_i(nd, "axis", d < 0 ? d + rank0 : d); }, out);
        return;
      }
      case OpId::contiguous:
      case OpId::clone:
      case OpId::detach:
      case OpId::dropout:
        if (n->op == OpId::dropout && a.b("training") && a.f("p") > 0) unsupported("in training mode has no inference form");
        op("Identity", {x(0)}, {}, out);
        return;
      case OpId::to_dtype: op("Cast", {x(0)}, [&](auto& nd) { attr_i(nd, "to", onnx_type(ot)); }, out); return;

      case OpId::softmax:
      case OpId::log_softmax: {
        int64_t d = a.i("dim");
        op(n->op == OpId::softmax ? "Softmax" : "LogSoftmax", {as(in[0], ot)},
           [&](auto& nd) { attr_i(nd, "axis", d < 0 ? d + rank0 : d); }, out);
        return;
      }
      case OpId::layer_norm: {
        int64_t k = static_cast<int64_t>(a.ints("normalized_shape").size());
        std::string w = in[1] ? x(1) : constant(ones(a.ints("normalized_shape"), ot));
        std::vector<std::string> ins{x(0), w};
        if (in[2]) ins.push_back(x(2));
        op("LayerNormalization", ins, [&](auto& nd) {
          attr_i(nd, "axis", -k);
          attr_f(nd, "epsilon", a.f("eps"));
        }, out);
        return;
      }
      case OpId::rms_norm: {
        int64_t k = static_cast<int64_t>(a.ints("normalized_shape").size());
        std::vector<int64_t> axes;
        for (int64_t i = rank0 - k; i < rank0; ++i) axes.push_back(i);
        double eps = a.opt_f("eps").value_or(ot == DType::F64 ? 2.220446049250313e-16 : 1.1920928955078125e-07);
        std::string v = x(0);
        std::string ms = op("ReduceMean", {op("Mul", {v, v})}, [&](auto& nd) {
          attr_i(nd, "keepdims", 1);
          attr_ints(nd, "axes", axes);
        });
        std::string r = op("Mul", {v, op("Reciprocal", {op("Sqrt", {op("Add", {ms, scalar(eps, ot)})})})});
        op(in[1] ? "Mul" : "Identity", in[1] ? std::vector<std::string>{r, x(1)} : std::vector<std::string>{r}, {}, out);
        return;
      }
      case OpId::batch_norm: {
        if (a.b("training")) unsupported("in training mode has no inference form; export the model in eval mode");
        int64_t c = in[0]->shape[1].static_value();
        std::string w = in[3] ? x(3) : constant(ones({c}, ot));
        std::string b = in[4] ? x(4) : constant(zeros({c}, ot));
        op("BatchNormalization", {x(0), w, b, x(1), x(2)}, [&](auto& nd) {
          attr_f(nd, "epsilon", a.f("eps"));
          attr_f(nd, "momentum", 1.0 - a.f("momentum"));
        }, out);
        return;
      }
      case OpId::embedding: op("Gather", {x(0), x(1)}, [](auto& nd) { attr_i(nd, "axis", 0); }, out); return;
      case OpId::quantize_per_tensor:
        op("QuantizeLinear", {as(in[0], DType::F32), scalar(a.f("scale"), DType::F32),
                              scalar(static_cast<double>(a.i("zero_point")), a.dtype("dtype"))}, {}, out);
        return;
      case OpId::dequantize_per_tensor:
        op("DequantizeLinear", {x(0), scalar(a.f("scale"), DType::F32),
                                scalar(static_cast<double>(a.i("zero_point")), in[0]->dtype)}, {}, out);
        return;
      case OpId::int8_conv2d:
      case OpId::int8_linear: return int8_layer(n, out);
      case OpId::conv1d:
      case OpId::conv2d: {
        bool one = n->op == OpId::conv1d;
        std::vector<int64_t> stride = one ? std::vector<int64_t>{a.i("stride")} : a.ints("stride");
        std::vector<int64_t> dil = one ? std::vector<int64_t>{a.i("dilation")} : a.ints("dilation");
        std::vector<int64_t> pad = one ? std::vector<int64_t>{a.i("padding")} : a.ints("padding");
        std::vector<int64_t> pads;
        const SymShape& ws = in[1]->shape;
        size_t sp = ws.size() - 2;
        if (a.b("padding_same")) {
          std::vector<int64_t> lo, hi;
          for (size_t i = 0; i < sp; ++i) {
            int64_t total = dil[i] * (ws[2 + i].static_value() - 1);
            lo.push_back(total / 2);
            hi.push_back(total - total / 2);
          }
          pads = lo;
          pads.insert(pads.end(), hi.begin(), hi.end());
        } else {
          pads = pad;
          pads.insert(pads.end(), pad.begin(), pad.end());
        }
        std::vector<std::string> ins{x(0), x(1)};
        if (in[2]) ins.push_back(x(2));
        op("Conv", ins, [&](auto& nd) {
          attr_ints(nd, "strides", stride);
          attr_ints(nd, "dilations", dil);
          attr_ints(nd, "pads", pads);
          attr_i(nd, "group", a.i("groups"));
        }, out);
        return;
      }
      case OpId::max_pool2d:
      case OpId::avg_pool2d: {
        bool mx = n->op == OpId::max_pool2d;
        if (mx && a.b("return_indices")) unsupported("returning indices has no exported form");
        if (mx && a.has("channel_block") && a.i("channel_block") != 0)
          unsupported("channel-blocked pooling (the layout pass) has no exported form; export without the passes "
                      "compile::tessera_only_passes() names");
        auto two = [](std::vector<int64_t> v, std::vector<int64_t> dflt) {
          if (v.empty()) v = dflt;
          if (v.size() == 1) v.push_back(v[0]);
          return v;
        };
        std::vector<int64_t> k = two(a.ints("kernel_size"), {}), s = two(a.ints("stride"), k),
                             p = two(a.ints("padding"), {0, 0});
        std::vector<int64_t> pads{p[0], p[1], p[0], p[1]};
        op(mx ? "MaxPool" : "AveragePool", {x(0)}, [&](auto& nd) {
          attr_ints(nd, "kernel_shape", k);
          attr_ints(nd, "strides", s);
          attr_ints(nd, "pads", pads);
          attr_i(nd, "ceil_mode", a.b("ceil_mode"));
          if (mx) attr_ints(nd, "dilations", two(a.ints("dilation"), {1, 1}));
          else attr_i(nd, "count_include_pad", a.b("count_include_pad"));
        }, out);
        return;
      }
      case OpId::adaptive_avg_pool2d: {
        auto o = a.ints("output_size");
        if (o.size() == 1) o.push_back(o[0]);
        if (o[0] == 1 && o[1] == 1) {
          op("GlobalAveragePool", {x(0)}, {}, out);
          return;
        }
        const SymShape& s = in[0]->shape;
        int64_t H = s[s.size() - 2].is_static() ? s[s.size() - 2].static_value() : -1;
        int64_t W = s[s.size() - 1].is_static() ? s[s.size() - 1].static_value() : -1;
        if (H < 0 || W < 0 || H % o[0] || W % o[1]) unsupported("with an output size that does not divide the input");
        std::vector<int64_t> k{H / o[0], W / o[1]};
        op("AveragePool", {x(0)}, [&](auto& nd) {
          attr_ints(nd, "kernel_shape", k);
          attr_ints(nd, "strides", k);
        }, out);
        return;
      }
      case OpId::scaled_dot_product_attention: {
        if (a.f("dropout_p") > 0) unsupported("with dropout has no inference form");
        const SymShape& qs = in[0]->shape;
        int64_t E = qs.back().static_value();
        double scale = a.opt_f("scale").value_or(1.0 / std::sqrt(static_cast<double>(E)));
        int64_t kr = static_cast<int64_t>(in[1]->shape.size());
        std::vector<int64_t> perm(kr);
        for (int64_t i = 0; i < kr; ++i) perm[i] = i;
        std::swap(perm[kr - 1], perm[kr - 2]);
        std::string kt = op("Transpose", {x(1)}, [&](auto& nd) { attr_ints(nd, "perm", perm); });
        std::string s = op("Mul", {op("MatMul", {x(0), kt}), scalar(scale, ot)});
        if (a.b("is_causal")) {
          // Row i attends to columns <= i: a lower-triangular [L, S] mask.
          const SymInt& L = qs[qs.size() - 2];
          const SymInt& S = in[1]->shape[in[1]->shape.size() - 2];
          std::string shape = op("Concat", {sym(L), sym(S)}, [](auto& nd) { attr_i(nd, "axis", 0); });
          std::string ones_ls = op("ConstantOfShape", {shape}, [&](auto& nd) {
            auto* at = nd.add_attribute();
            at->set_name("value");
            at->set_type(onnx::AttributeProto::TENSOR);
            auto* t = at->mutable_t();
            t->set_data_type(P::BOOL);
            t->add_dims(1);
            t->set_raw_data(std::string(1, '\1'));
          });
          std::string mask = op("Trilu", {ones_ls}, [](auto& nd) { attr_i(nd, "upper", 0); });
          s = op("Where", {mask, s, scalar(-INFINITY, ot)});
        }
        if (in[3]) {
          if (in[3]->dtype == DType::Bool) s = op("Where", {x(3), s, scalar(-INFINITY, ot)});
          else s = op("Add", {s, as(in[3], ot)});
        }
        std::string p = op("Softmax", {s}, [](auto& nd) { attr_i(nd, "axis", -1); });
        op("MatMul", {p, x(2)}, {}, out);
        return;
      }
      case OpId::arange: {
        // Integral bounds run Range in int64 (sizes stay integers for importers), then Cast.
        bool integral = true;
        for (const char* k : {"start", "end", "step"}) {
          bool sym_attr = std::any_of(n->sym_attrs.begin(), n->sym_attrs.end(), [&](const auto& sa) { return sa.name == k; });
          integral = integral && (sym_attr || !a.scalar(k).is_floating());
        }
        DType t = integral ? DType::I64 : ot;
        auto val = [&](const char* k) -> std::string {
          for (const Node::SymAttr& sa : n->sym_attrs)
            if (sa.name == k) {
              std::string v = op("Squeeze", {sym(sa.values[0]), i64s({0})});
              return t == DType::I64 ? v : op("Cast", {v}, [&](auto& nd) { attr_i(nd, "to", onnx_type(t)); });
            }
          return scalar(a.scalar(k).to_double(), t);
        };
        if (t == ot) {
          op("Range", {val("start"), val("end"), val("step")}, {}, out);
        } else {
          op("Cast", {op("Range", {val("start"), val("end"), val("step")})},
             [&](auto& nd) { attr_i(nd, "to", onnx_type(ot)); }, out);
        }
        return;
      }
      case OpId::full: {
        Tensor v = full({1}, a.scalar("value"), ot);
        op("ConstantOfShape", {shape_tensor(n->outputs[0]->shape)}, [&](auto& nd) {
          auto* at = nd.add_attribute();
          at->set_name("value");
          at->set_type(onnx::AttributeProto::TENSOR);
          auto* t = at->mutable_t();
          t->set_data_type(onnx_type(ot));
          t->add_dims(1);
          t->set_raw_data(std::string(static_cast<const char*>(v.raw_data()), v.nbytes()));
        }, out);
        return;
      }
      case OpId::fused_elementwise:
        unsupported("is made by the fusion pass; export the graph before fusion (optimize with "
                    "\"fuse-elementwise\" disabled)");
      case OpId::channel_blocks:
        unsupported("is made by the layout pass; export the graph before it (optimize with \"layout\" disabled)");
      case OpId::fused_linear:
      case OpId::fused_conv2d:
        unsupported("is made by the epilogue fusion pass; export the graph before fusion (optimize with "
                    "\"fuse-epilogue\" disabled)");
      default: unsupported();
    }
  }

  const Graph& g_;
  onnx::ModelProto model_;
  onnx::GraphProto* gp_ = nullptr;
  const Node* node_ = nullptr;
  int counter_ = 0;
  std::map<int, std::pair<const Value*, int64_t>> sym_source_;
  std::unordered_map<std::string, std::string> i64_cache_, sym_cache_;
};

}  // namespace

std::string onnx_bytes(const Graph& g) {
  onnx::ModelProto m = Exporter(g).run();
  try {
    onnx::checker::check_model(m);
  } catch (const std::exception& e) {
    TS_ERROR("ONNX export: the ONNX checker rejects the exported model: ", e.what());
  }
  std::string bytes;
  TS_CHECK(m.SerializeToString(&bytes), "ONNX export: protobuf serialization failed (model over 2 GiB?)");
  return bytes;
}

void export_onnx(const Graph& g, const std::string& path) {
  std::string bytes = onnx_bytes(g);
  io::write_file_atomic(path, [&](io::Writer& w) { w.write(bytes); });
}

}  // namespace tessera::compile
