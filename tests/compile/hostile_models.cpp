#include "compile/hostile_models.h"

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "tessera/io/safetensors.h"
#include "tessera/ops/ops.h"

namespace tessera::testing {
namespace {

using json = nlohmann::json;
using P = onnx::TensorProto;
constexpr int64_t kBig = int64_t{1} << 40;
constexpr int64_t kHuge = int64_t{1} << 62;

// ---- ONNX --------------------------------------------------------------------------

onnx::ModelProto model(int opset = 17) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  auto* o = m.add_opset_import();
  o->set_domain("");
  o->set_version(opset);
  m.mutable_graph()->set_name("hostile");
  return m;
}

void input(onnx::GraphProto* g, const std::string& name, std::vector<int64_t> dims, int type = P::FLOAT) {
  auto* v = g->add_input();
  v->set_name(name);
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(type);
  auto* s = t->mutable_shape();
  for (int64_t d : dims) s->add_dim()->set_dim_value(d);
}

void output(onnx::GraphProto* g, const std::string& name) {
  auto* v = g->add_output();
  v->set_name(name);
  v->mutable_type()->mutable_tensor_type()->set_elem_type(P::FLOAT);
}

onnx::NodeProto* node(onnx::GraphProto* g, const std::string& op, std::vector<std::string> ins,
                      std::vector<std::string> outs) {
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(op + "_" + std::to_string(g->node_size()));
  for (auto& i : ins) n->add_input(i);
  for (auto& o : outs) n->add_output(o);
  return n;
}

void attr_i(onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}
void attr_ints(onnx::NodeProto* n, const std::string& name, std::vector<int64_t> v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}
void attr_f(onnx::NodeProto* n, const std::string& name, float v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}
void attr_s(onnx::NodeProto* n, const std::string& name, const std::string& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(v);
}

P* i64_init(onnx::GraphProto* g, const std::string& name, std::vector<int64_t> values, bool scalar = false) {
  P* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(P::INT64);
  if (!scalar) t->add_dims(static_cast<int64_t>(values.size()));
  for (int64_t v : values) t->add_int64_data(v);
  return t;
}

P* f32_init(onnx::GraphProto* g, const std::string& name, std::vector<int64_t> dims, size_t raw_bytes) {
  P* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(P::FLOAT);
  for (int64_t d : dims) t->add_dims(d);
  t->set_raw_data(std::string(raw_bytes, '\0'));
  return t;
}

std::string bytes(const onnx::ModelProto& m) {
  std::string s;
  m.SerializeToString(&s);
  return s;
}

// x[1, 4] -> op -> y: a graph around one node.
onnx::ModelProto one_node(const std::string& op, std::vector<std::string> ins,
                          const std::function<void(onnx::GraphProto*, onnx::NodeProto*)>& edit = {}) {
  onnx::ModelProto m = model();
  auto* g = m.mutable_graph();
  input(g, "x", {1, 4});
  auto* n = node(g, op, std::move(ins), {"y"});
  output(g, "y");
  if (edit) edit(g, n);
  return m;
}

// A 4-D image input and a Conv/pool node over it.
onnx::ModelProto conv(const std::function<void(onnx::GraphProto*, onnx::NodeProto*)>& edit,
                      std::vector<int64_t> weight = {2, 1, 3, 3}, const std::string& op = "Conv") {
  onnx::ModelProto m = model();
  auto* g = m.mutable_graph();
  input(g, "x", {1, 1, 8, 8});
  int64_t n = 1;
  for (int64_t d : weight) n *= d;
  if (op == "Conv") f32_init(g, "w", weight, static_cast<size_t>(n) * 4);
  auto* c = node(g, op, op == "Conv" ? std::vector<std::string>{"x", "w"} : std::vector<std::string>{"x"}, {"y"});
  output(g, "y");
  edit(g, c);
  return m;
}

// Shape-valued inputs: `shape` (host int64 values) -> op(shape...) -> y.
onnx::ModelProto shaped(const std::string& op, std::vector<int64_t> shape) {
  onnx::ModelProto m = model();
  auto* g = m.mutable_graph();
  input(g, "x", {1});
  i64_init(g, "shape", std::move(shape));
  if (op == "ConstantOfShape") {
    node(g, "ConstantOfShape", {"shape"}, {"c"});
    node(g, "Add", {"c", "x"}, {"y"});
  } else {  // Expand, then an op that computes on every element
    node(g, "Expand", {"x", "shape"}, {"e"});
    node(g, "Relu", {"e"}, {"y"});
  }
  output(g, "y");
  return m;
}

// host(a) op host(b) -> ConstantOfShape: integer arithmetic on sizes.
onnx::ModelProto host_arith(const std::string& op, int64_t a, int64_t b) {
  onnx::ModelProto m = model();
  auto* g = m.mutable_graph();
  input(g, "x", {1});
  i64_init(g, "a", {a});
  i64_init(g, "b", {b});
  node(g, op, {"a", "b"}, {"s"});
  node(g, "ConstantOfShape", {"s"}, {"c"});
  node(g, "Add", {"c", "x"}, {"y"});
  output(g, "y");
  return m;
}

onnx::ModelProto range(int64_t start, int64_t limit, int64_t delta) {
  onnx::ModelProto m = model();
  auto* g = m.mutable_graph();
  input(g, "x", {1});
  i64_init(g, "s", {start}, true);
  i64_init(g, "l", {limit}, true);
  i64_init(g, "d", {delta}, true);
  node(g, "Range", {"s", "l", "d"}, {"r"});
  attr_i(node(g, "Cast", {"r"}, {"rf"}), "to", P::FLOAT);
  node(g, "Add", {"rf", "x"}, {"y"});
  output(g, "y");
  return m;
}

// ---- compiled graphs ----------------------------------------------------------------------

// A valid graph: x[B, 4] -> relu -> y, with a parameter w[4] added.
json graph() {
  return json::parse(R"({"format": "tessera-graph", "version": 1, "symbols": ["B"],
    "inputs": [{"id": 0, "name": "x", "dtype": "f32", "shape": [{"terms": [[1, 1]]}, 4]}],
    "parameters": [{"id": 1, "name": "w"}], "constants": [],
    "nodes": [
      {"op": "add", "inputs": [0, 1], "attrs": [{"name": "alpha", "value": {"t": "scalar_int", "v": 1}}],
       "outputs": [{"id": 2, "dtype": "f32", "shape": [{"terms": [[1, 1]]}, 4]}]},
      {"op": "relu", "inputs": [2], "attrs": [],
       "outputs": [{"id": 3, "dtype": "f32", "shape": [{"terms": [[1, 1]]}, 4]}]}],
    "outputs": [3]})");
}

std::string weights(const io::NamedTensors& t = {{"param/w", full({4}, 1.0)}}) { return io::safetensors_bytes(t); }

HostileModel onnx_case(std::string name, const onnx::ModelProto& m, std::string expected) {
  return {std::move(name), true, bytes(m), "", "", std::move(expected)};
}
HostileModel raw_onnx(std::string name, std::string b, std::string expected) {
  return {std::move(name), true, std::move(b), "", "", std::move(expected)};
}
HostileModel graph_case(std::string name, const json& g, std::string expected, std::string w = weights()) {
  return {std::move(name), false, "", g.dump(), std::move(w), std::move(expected)};
}
HostileModel text_case(std::string name, std::string text, std::string expected) {
  return {std::move(name), false, "", std::move(text), weights(), std::move(expected)};
}
json edited(const std::function<void(json&)>& f) {
  json g = graph();
  f(g);
  return g;
}

}  // namespace

std::vector<HostileModel> hostile_models() {
  std::vector<HostileModel> v;
  // -- ONNX: the file itself
  v.push_back(raw_onnx("not_protobuf", "this is not a model\n", "not a valid ONNX file"));
  v.push_back(raw_onnx("truncated", bytes(one_node("Relu", {"x"})).substr(0, 20), "ONNX"));
  v.push_back(onnx_case("no_graph", [] {
    onnx::ModelProto m = model();
    m.clear_graph();
    return m;
  }(), "has no graph"));
  v.push_back(onnx_case("opset_too_old", [] {
    onnx::ModelProto m = one_node("Relu", {"x"});
    m.mutable_opset_import(0)->set_version(9);
    return m;
  }(), "opset 9 is not supported"));
  // -- declared inputs
  v.push_back(onnx_case("input_numel_overflows", [] {
    onnx::ModelProto m = model();
    input(m.mutable_graph(), "x", {4294967295, 4294967295, 4294967295});
    node(m.mutable_graph(), "Relu", {"x"}, {"y"});
    output(m.mutable_graph(), "y");
    return m;
  }(), "more elements than a 64-bit count holds"));
  v.push_back(onnx_case("input_too_large", [] {
    onnx::ModelProto m = model();
    input(m.mutable_graph(), "x", {100000, 100000});
    node(m.mutable_graph(), "Relu", {"x"}, {"y"});
    output(m.mutable_graph(), "y");
    return m;
  }(), "largest single allocation"));
  v.push_back(onnx_case("input_negative_dim", [] {
    onnx::ModelProto m = model();
    input(m.mutable_graph(), "x", {1, -3});
    node(m.mutable_graph(), "Relu", {"x"}, {"y"});
    output(m.mutable_graph(), "y");
    return m;
  }(), "bad size -3"));
  v.push_back(onnx_case("input_without_shape", [] {
    onnx::ModelProto m = one_node("Relu", {"x"});
    m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->clear_shape();
    return m;
  }(), "has no shape"));
  v.push_back(onnx_case("input_string_type", [] {
    onnx::ModelProto m = model();
    input(m.mutable_graph(), "x", {2}, P::STRING);
    node(m.mutable_graph(), "Identity", {"x"}, {"y"});
    output(m.mutable_graph(), "y");
    return m;
  }(), "element type 8 is not supported"));
  // -- graph structure
  v.push_back(onnx_case("dangling_input", one_node("Add", {"x", "nothere"}), "'nothere'"));
  v.push_back(onnx_case("cycle", [] {
    onnx::ModelProto m = model();
    auto* g = m.mutable_graph();
    input(g, "x", {1, 4});
    node(g, "Add", {"x", "b"}, {"a"});
    node(g, "Relu", {"a"}, {"b"});
    output(g, "b");
    return m;
  }(), "'b'"));
  v.push_back(onnx_case("output_not_computed", [] {
    onnx::ModelProto m = one_node("Relu", {"x"});
    output(m.mutable_graph(), "ghost");
    return m;
  }(), "graph output 'ghost' is not computed"));
  v.push_back(onnx_case("no_outputs", [] {
    onnx::ModelProto m = one_node("Relu", {"x"});
    m.mutable_graph()->clear_output();
    return m;
  }(), "has no outputs"));
  v.push_back(onnx_case("unknown_op", one_node("FrobnicateV9", {"x"}), "not supported by Tessera's importer"));
  v.push_back(onnx_case("unknown_domain", one_node("Relu", {"x"}, [](auto*, onnx::NodeProto* n) {
    n->set_domain("com.example.custom");
  }), "domain 'com.example.custom'"));
  v.push_back(onnx_case("identity_without_input", one_node("Identity", {}), "input 0 is missing"));
  v.push_back(onnx_case("constant_without_output", [] {
    onnx::ModelProto m = one_node("Relu", {"x"});
    auto* n = node(m.mutable_graph(), "Constant", {}, {});
    auto* a = n->add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    a->mutable_t()->set_data_type(P::FLOAT);
    a->mutable_t()->add_float_data(1);
    return m;
  }(), "output 0 is missing"));
  // -- initializers
  v.push_back(onnx_case("initializer_short_data", [] {
    onnx::ModelProto m = one_node("Add", {"x", "w"});
    f32_init(m.mutable_graph(), "w", {4}, 3);
    return m;
  }(), "3 bytes of data for shape [4]"));
  v.push_back(onnx_case("initializer_value_count", [] {
    onnx::ModelProto m = one_node("Add", {"x", "w"});
    P* t = m.mutable_graph()->add_initializer();
    t->set_name("w");
    t->set_data_type(P::FLOAT);
    t->add_dims(3);
    t->add_float_data(1);
    t->add_float_data(2);
    return m;
  }(), "has 2 values for shape [3]"));
  v.push_back(onnx_case("initializer_external_data", [] {
    onnx::ModelProto m = one_node("Add", {"x", "w"});
    P* t = f32_init(m.mutable_graph(), "w", {4}, 0);
    t->clear_raw_data();
    t->set_data_location(P::EXTERNAL);
    auto* e = t->add_external_data();
    e->set_key("location");
    e->set_value("../../../etc/passwd");
    return m;
  }(), "external file, which is not supported"));
  v.push_back(onnx_case("initializer_huge_dims", [] {
    onnx::ModelProto m = one_node("Add", {"x", "w"});
    f32_init(m.mutable_graph(), "w", {kBig, kBig}, 0);
    return m;
  }(), "bad size"));
  v.push_back(onnx_case("initializer_twice", [] {
    onnx::ModelProto m = one_node("Add", {"x", "w"});
    f32_init(m.mutable_graph(), "w", {4}, 16);
    f32_init(m.mutable_graph(), "w", {4}, 16);
    return m;
  }(), "must be unique"));
  // -- shape-valued inputs
  v.push_back(onnx_case("constant_of_shape_bytes_overflow", shaped("ConstantOfShape", {kHuge}), "64-bit"));
  v.push_back(onnx_case("constant_of_shape_too_large", shaped("ConstantOfShape", {kBig}), "largest single allocation"));
  v.push_back(onnx_case("constant_of_shape_negative", shaped("ConstantOfShape", {4, -1}), "negative dimension -1"));
  v.push_back(onnx_case("expand_too_large", shaped("Expand", {1 << 20, 1 << 20}), "largest single allocation"));
  v.push_back(onnx_case("expand_numel_overflows", shaped("Expand", {kHuge, kHuge}), "64-bit"));
  v.push_back(onnx_case("expand_negative", shaped("Expand", {-5}), "negative size -5"));
  v.push_back(onnx_case("range_too_long", range(0, int64_t{1} << 62, 1), "more than a tensor can hold"));
  v.push_back(onnx_case("range_too_large", range(0, kBig, 1), "largest single allocation"));
  v.push_back(onnx_case("range_zero_step", range(0, 10, 0), "step must be finite and nonzero"));
  v.push_back(onnx_case("reshape_numel_overflows", [] {
    onnx::ModelProto m = one_node("Reshape", {"x", "s"});
    i64_init(m.mutable_graph(), "s", {-1, 4611686018427387905, 4});
    return m;
  }(), "64-bit"));
  v.push_back(onnx_case("reshape_wrong_size", [] {
    onnx::ModelProto m = one_node("Reshape", {"x", "s"});
    i64_init(m.mutable_graph(), "s", {3, -1});
    return m;
  }(), "is invalid for input of size 4"));
  v.push_back(onnx_case("host_mul_overflows", host_arith("Mul", kHuge, 4), "does not fit in a 64-bit integer"));
  v.push_back(onnx_case("host_div_overflows", host_arith("Div", INT64_MIN, -1), "does not fit in a 64-bit integer"));
  v.push_back(onnx_case("host_div_by_zero", host_arith("Div", 8, 0), "division by zero"));
  v.push_back(onnx_case("host_values_explode", [] {
    onnx::ModelProto m = model();
    auto* g = m.mutable_graph();
    input(g, "x", {1});
    i64_init(g, "s0", {1, 1});
    for (int i = 0; i < 16; ++i)  // each Concat doubles: 2^17 values
      node(g, "Concat", {"s" + std::to_string(i), "s" + std::to_string(i)}, {"s" + std::to_string(i + 1)});
    node(g, "ConstantOfShape", {"s16"}, {"c"});
    output(g, "c");
    return m;
  }(), "at most 4096 are supported"));
  // -- attributes out of range
  v.push_back(onnx_case("split_without_outputs", one_node("Split", {"x"}, [](auto*, onnx::NodeProto* n) {
    n->clear_output();
    attr_i(n, "axis", 1);
  }), "at least one output"));
  v.push_back(onnx_case("conv_zero_stride", conv([](auto*, onnx::NodeProto* n) { attr_ints(n, "strides", {0, 0}); }),
                        "must be positive"));
  v.push_back(onnx_case("conv_same_zero_stride", conv([](auto*, onnx::NodeProto* n) {
    attr_s(n, "auto_pad", "SAME_UPPER");
    attr_ints(n, "strides", {0, 0});
  }), "must be positive"));
  v.push_back(onnx_case("conv_short_pads", conv([](auto*, onnx::NodeProto* n) {
    attr_s(n, "auto_pad", "SAME_LOWER");
    attr_ints(n, "pads", {1});
  }), "do not match the input's rank"));
  v.push_back(onnx_case("conv_huge_dilation", conv([](auto*, onnx::NodeProto* n) {
    attr_ints(n, "dilations", {4611686018427387905, 1});
  }), "64-bit"));
  v.push_back(onnx_case("conv_weight_rank", conv([](auto*, onnx::NodeProto*) {}, {4}), "the weight must have the input's rank"));
  v.push_back(onnx_case("conv_kernel_too_large", conv([](auto*, onnx::NodeProto* n) { attr_ints(n, "strides", {2, 2}); },
                                                      {2, 1, 9, 9}),
                        "too small"));
  v.push_back(onnx_case("conv_huge_padding", conv([](auto*, onnx::NodeProto* n) {
    attr_ints(n, "pads", {0, 0, kHuge, 0});
  }), "64-bit"));
  v.push_back(onnx_case("maxpool_huge_stride", conv([](auto*, onnx::NodeProto* n) {
    attr_ints(n, "kernel_shape", {2, 2});
    attr_ints(n, "strides", {INT64_MAX, INT64_MAX});
    attr_i(n, "ceil_mode", 1);
    attr_ints(n, "pads", {0, 0, kHuge, 1});
  }, {}, "MaxPool"), "64-bit"));
  v.push_back(onnx_case("gather_index_out_of_range", [] {
    onnx::ModelProto m = one_node("Gather", {"x", "i"}, [](auto*, onnx::NodeProto* n) { attr_i(n, "axis", 1); });
    i64_init(m.mutable_graph(), "i", {10});
    return m;
  }(), "index 10 is out of bounds"));
  v.push_back(onnx_case("softmax_axis_out_of_range", one_node("Softmax", {"x"}, [](auto*, onnx::NodeProto* n) {
    attr_i(n, "axis", 5);
  }), "axis 5 is out of range"));
  v.push_back(onnx_case("attribute_wrong_type", one_node("Softmax", {"x"}, [](auto*, onnx::NodeProto* n) {
    attr_f(n, "axis", 1.5f);
  }), "attribute 'axis' must be an int"));
  v.push_back(onnx_case("cast_to_string", one_node("Cast", {"x"}, [](auto*, onnx::NodeProto* n) {
    attr_i(n, "to", P::STRING);
  }), "element type 8 is not supported"));

  // -- compiled graphs (.tsr)
  v.push_back(text_case("graph_not_json", "{\"format\": \"tessera-graph\", ", "not valid JSON"));
  v.push_back(graph_case("graph_wrong_format", edited([](json& g) { g["format"] = 7; }), "not a Tessera graph"));
  v.push_back(graph_case("graph_future_version", edited([](json& g) { g["version"] = 99; }),
                         "format version 99 is not supported"));
  v.push_back(text_case("graph_deep_nesting",
                        "{\"format\": \"tessera-graph\", \"version\": " + std::string(100000, '[') +
                            std::string(100000, ']') + "}",
                        "expected an integer, got an array"));
  v.push_back(graph_case("graph_unknown_op", edited([](json& g) { g["nodes"][1]["op"] = "frobnicate"; }),
                         "unknown op 'frobnicate'"));
  v.push_back(graph_case("graph_dangling_value", edited([](json& g) { g["nodes"][1]["inputs"][0] = 1000000000; }),
                         "input 1000000000 is not defined before the node"));
  v.push_back(graph_case("graph_cycle", edited([](json& g) { g["nodes"][0]["inputs"][0] = 3; }),
                         "input 3 is not defined before the node"));
  v.push_back(graph_case("graph_negative_dim", edited([](json& g) { g["inputs"][0]["shape"][1] = -4; }),
                         "negative size -4"));
  v.push_back(graph_case("graph_input_numel_overflows",
                         edited([](json& g) { g["inputs"][0]["shape"] = json::array({kBig, kBig, kBig}); }),
                         "64-bit"));
  v.push_back(graph_case("graph_missing_weight", graph(), "tensor 'param/w' named by graph.json is missing",
                         weights({{"param/v", full({4}, 1.0)}})));
  v.push_back(graph_case("graph_truncated_weights", graph(), "truncated?", weights().substr(0, 12)));
  v.push_back(graph_case("graph_too_few_inputs", edited([](json& g) { g["nodes"][0]["inputs"] = json::array({0}); }),
                         "takes"));
  v.push_back(graph_case("graph_null_input", edited([](json& g) { g["nodes"][1]["inputs"][0] = nullptr; }),
                         "must not be null"));
  v.push_back(graph_case("graph_output_count", edited([](json& g) {
    g["nodes"][1] = json::parse(R"({"op": "split", "inputs": [2], "attrs": [
      {"name": "split_size", "value": {"t": "int", "v": 1}}, {"name": "dim", "value": {"t": "int", "v": 1}}],
      "outputs": [{"id": 3, "dtype": "f32", "shape": [{"terms": [[1, 1]]}, 1]}]})");
  }), "outputs"));
  v.push_back(graph_case("graph_full_too_large", edited([](json& g) {
    g["nodes"][1] = json::parse(R"({"op": "full", "inputs": [], "attrs": [
      {"name": "shape", "value": {"t": "ints", "v": [1099511627776, 4]}},
      {"name": "value", "value": {"t": "scalar_float", "v": 1.0}}, {"name": "dtype", "value": {"t": "dtype", "v": "f32"}}],
      "outputs": [{"id": 3, "dtype": "f32", "shape": [{"terms": [[1, 1]]}, 4]}]})");
  }), "largest single allocation"));
  v.push_back(graph_case("graph_blocked_plain_op", edited([](json& g) {
    g["nodes"][1]["attrs"].push_back(json::parse(R"({"name": "output_block", "value": {"t": "int", "v": 8}})"));
  }), "declares no blocked layout"));
  v.push_back(graph_case("graph_sym_attr_not_a_list", edited([](json& g) {
    g["nodes"][0]["sym_attrs"] = json::parse(R"([{"name": "alpha", "list": true, "values": []}])");
  }), "must be a list of ints"));
  v.push_back(graph_case("graph_fused_program_registers", edited([](json& g) {
    g["nodes"][1] = json::parse(R"({"op": "fused_elementwise", "inputs": [2], "attrs": [
      {"name": "program", "value": {"t": "string", "v": "r999999 = in0; out0 = r999999"}}],
      "outputs": [{"id": 3, "dtype": "f32", "shape": [{"terms": [[1, 1]]}, 4]}]})");
  }), "registers are numbered in the order they are written"));
  v.push_back(graph_case("graph_strided_scatter_overflow", edited([](json& g) {
    g["nodes"][1] = json::parse(R"({"op": "strided_scatter", "inputs": [2], "attrs": [
      {"name": "base_shape", "value": {"t": "ints", "v": [8]}}, {"name": "sizes", "value": {"t": "ints", "v": [2, 4]}},
      {"name": "strides", "value": {"t": "ints", "v": [9223372036854775807, 1]}},
      {"name": "offset", "value": {"t": "int", "v": 0}}],
      "outputs": [{"id": 3, "dtype": "f32", "shape": [8]}]})");
    g["inputs"][0]["shape"] = json::array({2, 4});
    g["nodes"][0]["outputs"][0]["shape"] = json::array({2, 4});
    g["symbols"] = json::array();
  }), "64-bit"));
  return v;
}

std::vector<HostileModel> valid_models() {
  return {onnx_case("valid_relu", one_node("Relu", {"x"}), ""), onnx_case("valid_conv", conv([](auto*, auto*) {}), ""),
          graph_case("valid_graph", graph(), "")};
}

std::string write_model(const HostileModel& m, const std::string& dir) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  if (m.onnx) {
    std::string path = dir + "/" + m.name + ".onnx";
    std::ofstream(path, std::ios::binary) << m.bytes;
    return path;
  }
  std::string path = dir + "/" + m.name + ".tsr";
  fs::create_directories(path);
  std::ofstream(path + "/graph.json", std::ios::binary) << m.graph;
  std::ofstream(path + "/weights.safetensors", std::ios::binary) << m.weights;
  return path;
}

std::string fuzz_input(const HostileModel& m) {
  if (m.onnx) return std::string(1, '\0') + m.bytes;
  const auto len = static_cast<uint32_t>(m.graph.size());
  std::string s(1, '\1');
  s.append(reinterpret_cast<const char*>(&len), 4);
  return s + m.graph + m.weights;
}

}  // namespace tessera::testing
