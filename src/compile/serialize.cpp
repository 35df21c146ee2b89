// graph.json: the graph IR as JSON. Every field of a file is checked before
// use; errors name the file, the node and the field.
#include "io/json_excerpt.h"
#include "tessera/compile/serialize.h"

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "tessera/core/error.h"
#include "tessera/io/file.h"
#include "tessera/io/safetensors.h"

namespace tessera::compile {
namespace {

using json = nlohmann::json;
constexpr int kFormatVersion = 1;
// graph.json holds the IR only (weights are in safetensors); its DOM in memory
// is some 10-20x the text, so the text is bounded well below the memory.
constexpr size_t kMaxGraphJsonBytes = size_t{64} << 20;

json sym_json(const SymInt& s) {
  if (s.is_static()) return s.static_value();
  json terms = json::array();
  for (const auto& [mask, c] : s.terms()) terms.push_back({mask, c});
  return json{{"terms", terms}};
}

json shape_json(const SymShape& s) {
  json a = json::array();
  for (const SymInt& d : s) a.push_back(sym_json(d));
  return a;
}

json float_json(double d) {
  if (std::isfinite(d)) return d;
  return std::isnan(d) ? "nan" : (d > 0 ? "inf" : "-inf");
}

json attr_json(const ops::AttrValue& v) {
  return std::visit(
      [](const auto& x) -> json {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::monostate>) return {{"t", "none"}};
        else if constexpr (std::is_same_v<T, bool>) return {{"t", "bool"}, {"v", x}};
        else if constexpr (std::is_same_v<T, int64_t>) return {{"t", "int"}, {"v", x}};
        else if constexpr (std::is_same_v<T, double>) return {{"t", "float"}, {"v", float_json(x)}};
        else if constexpr (std::is_same_v<T, std::string>) return {{"t", "string"}, {"v", x}};
        else if constexpr (std::is_same_v<T, std::vector<int64_t>>) return {{"t", "ints"}, {"v", x}};
        else if constexpr (std::is_same_v<T, std::vector<double>>) {
          json a = json::array();
          for (double d : x) a.push_back(float_json(d));
          return {{"t", "floats"}, {"v", a}};
        } else if constexpr (std::is_same_v<T, Scalar>) {
          if (x.is_bool()) return {{"t", "scalar_bool"}, {"v", x.to_int() != 0}};
          if (x.is_integral()) return {{"t", "scalar_int"}, {"v", x.to_int()}};
          return {{"t", "scalar_float"}, {"v", float_json(x.to_double())}};
        } else {
          return {{"t", "dtype"}, {"v", dtype_name(x)}};
        }
      },
      v);
}

// ---- reading ----------------------------------------------------------------------

class Reader {
 public:
  explicit Reader(std::string what) : what_(std::move(what)) {}
  [[noreturn]] void fail(const std::string& where, const std::string& msg) const {
    TS_ERROR(what_, ": ", where, ": ", msg);
  }
  const json& field(const json& o, const char* key, const std::string& where) const {
    if (!o.is_object()) fail(where, "expected an object");
    auto it = o.find(key);
    if (it == o.end()) fail(where, std::string("missing field '") + key + "'");
    return *it;
  }
  int64_t integer(const json& v, const std::string& where) const {
    if (!v.is_number_integer()) fail(where, "expected an integer, got " + io::json_excerpt(v));
    return v.get<int64_t>();
  }
  double number(const json& v, const std::string& where) const {
    if (v.is_string()) {
      std::string s = v.get<std::string>();
      if (s == "nan") return NAN;
      if (s == "inf") return INFINITY;
      if (s == "-inf") return -INFINITY;
    }
    if (!v.is_number()) fail(where, "expected a number, got " + io::json_excerpt(v));
    return v.get<double>();
  }
  std::string string(const json& v, const std::string& where) const {
    if (!v.is_string()) fail(where, "expected a string, got " + io::json_excerpt(v));
    return v.get<std::string>();
  }
  const json& array(const json& v, const std::string& where) const {
    if (!v.is_array()) fail(where, "expected an array, got " + io::json_excerpt(v));
    return v;
  }
  DType dtype(const json& v, const std::string& where) const {
    auto t = dtype_from_name(string(v, where));
    if (!t) fail(where, "unknown dtype " + io::json_excerpt(v) + " (expected f32, f64, f16, bf16, i64, i32, i8, u8, bool)");
    return *t;
  }
  SymInt sym(const json& v, int num_symbols, const std::string& where) const {
    if (v.is_number_integer()) return SymInt(v.get<int64_t>());
    std::vector<SymInt::Term> terms;
    for (const json& t : array(field(v, "terms", where), where)) {
      if (!t.is_array() || t.size() != 2) fail(where, "a term is [mask, coefficient], got " + io::json_excerpt(t));
      int64_t mask = integer(t[0], where), c = integer(t[1], where);
      if (mask < 0 || (num_symbols < 31 && mask >= (int64_t{1} << num_symbols)))
        fail(where, "term " + io::json_excerpt(t) + " uses a dynamic dimension the graph does not declare");
      terms.push_back({static_cast<uint32_t>(mask), c});
    }
    return SymInt::from_terms(std::move(terms));
  }
  SymShape shape(const json& v, int num_symbols, const std::string& where) const {
    SymShape s;
    for (const json& d : array(v, where)) {
      s.push_back(sym(d, num_symbols, where));
      if (s.back().is_static() && s.back().static_value() < 0) fail(where, "negative size " + io::json_excerpt(d));
    }
    if (s.size() > static_cast<size_t>(kMaxDims)) fail(where, "too many dimensions");
    return s;
  }
  ops::AttrValue attr(const json& a, const std::string& where) const {
    std::string t = string(field(a, "t", where), where);
    if (t == "none") return std::monostate{};
    const json& v = field(a, "v", where);
    if (t == "bool" || t == "scalar_bool") {
      if (!v.is_boolean()) fail(where, "expected true or false");
      return t == "bool" ? ops::AttrValue(v.get<bool>()) : ops::AttrValue(Scalar(v.get<bool>()));
    }
    if (t == "int") return integer(v, where);
    if (t == "scalar_int") return Scalar(integer(v, where));
    if (t == "float") return number(v, where);
    if (t == "scalar_float") return Scalar(number(v, where));
    if (t == "string") return string(v, where);
    if (t == "dtype") return dtype(v, where);
    if (t == "ints") {
      std::vector<int64_t> out;
      for (const json& x : array(v, where)) out.push_back(integer(x, where));
      return out;
    }
    if (t == "floats") {
      std::vector<double> out;
      for (const json& x : array(v, where)) out.push_back(number(x, where));
      return out;
    }
    fail(where, "unknown attribute type '" + t + "'");
  }

 private:
  std::string what_;
};

}  // namespace

std::string graph_json(const Graph& g) {
  json j;
  j["format"] = "tessera-graph";
  j["version"] = kFormatVersion;
  j["symbols"] = g.symbols();
  j["inputs"] = json::array();
  for (const Value* v : g.inputs())
    j["inputs"].push_back({{"id", v->id}, {"name", v->name}, {"dtype", dtype_name(v->dtype)}, {"shape", shape_json(v->shape)}});
  j["parameters"] = json::array();
  for (const Value* v : g.parameters()) j["parameters"].push_back({{"id", v->id}, {"name", v->name}});
  j["constants"] = json::array();
  for (const Value* v : g.constants()) j["constants"].push_back({{"id", v->id}});
  j["nodes"] = json::array();
  for (const Node* n : g.nodes()) {
    json node;
    node["op"] = std::string(n->op_name());
    node["inputs"] = json::array();
    for (const Value* v : n->inputs) node["inputs"].push_back(v ? json(v->id) : json(nullptr));
    node["outputs"] = json::array();
    for (const Value* v : n->outputs) {
      json o = {{"id", v->id}, {"dtype", dtype_name(v->dtype)}, {"shape", shape_json(v->shape)}};
      if (v->data_dependent_shape) o["data_dependent_shape"] = true;
      node["outputs"].push_back(o);
    }
    node["attrs"] = json::array();
    for (const ops::Attr& a : n->attrs.items()) node["attrs"].push_back({{"name", a.name}, {"value", attr_json(a.value)}});
    if (!n->sym_attrs.empty()) {
      node["sym_attrs"] = json::array();
      for (const Node::SymAttr& s : n->sym_attrs) {
        json vals = json::array();
        for (const SymInt& x : s.values) vals.push_back(sym_json(x));
        node["sym_attrs"].push_back({{"name", s.name}, {"list", s.is_list}, {"values", vals}});
      }
    }
    if (!n->scope.empty()) node["scope"] = n->scope;
    j["nodes"].push_back(node);
  }
  j["outputs"] = json::array();
  for (const Value* v : g.outputs()) j["outputs"].push_back(v->id);
  return j.dump(1);
}

namespace {
Graph graph_from_document(const json& j, const std::function<Tensor(const std::string&)>& weight,
                          const std::string& what);
}  // namespace

Graph graph_from_json(const std::string& text, const std::function<Tensor(const std::string&)>& weight,
                      const std::string& what) {
  TS_CHECK(text.size() <= kMaxGraphJsonBytes, what, ": ", text.size(), " bytes; graph.json files of at most ",
           kMaxGraphJsonBytes, " bytes are read");
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    TS_ERROR(what, ": not valid JSON (", e.what(), ")");
  }
  try {
    return graph_from_document(j, weight, what);
  } catch (const json::exception& e) {  // a field of the wrong JSON type that a check did not foresee
    TS_ERROR(what, ": ", e.what());
  }
}

namespace {

Graph graph_from_document(const json& j, const std::function<Tensor(const std::string&)>& weight,
                          const std::string& what) {
  Reader r(what);
  if (!j.is_object() || !j.contains("format") || j["format"] != "tessera-graph")
    r.fail("top level", "not a Tessera graph (expected \"format\": \"tessera-graph\")");
  int64_t version = r.integer(r.field(j, "version", "top level"), "version");
  if (version != kFormatVersion)
    r.fail("version", "format version " + std::to_string(version) + " is not supported (this build reads version " +
                          std::to_string(kFormatVersion) + ")");
  Graph g;
  for (const json& s : r.array(r.field(j, "symbols", "top level"), "symbols")) g.symbols().push_back(r.string(s, "symbols"));
  if (g.symbols().size() > 8) r.fail("symbols", "at most 8 dynamic dimensions are supported");
  int nsym = static_cast<int>(g.symbols().size());
  std::unordered_map<int64_t, Value*> ids;
  auto define = [&](int64_t id, Value* v, const std::string& where) {
    if (id < 0 || !ids.emplace(id, v).second) r.fail(where, "value id " + std::to_string(id) + " is defined twice or negative");
  };
  for (const json& in : r.array(r.field(j, "inputs", "top level"), "inputs")) {
    std::string name = r.string(r.field(in, "name", "inputs"), "inputs");
    Value* v = g.add_input(name, r.dtype(r.field(in, "dtype", "input '" + name + "'"), "input '" + name + "'"),
                           r.shape(r.field(in, "shape", "input '" + name + "'"), nsym, "input '" + name + "'"));
    define(r.integer(r.field(in, "id", "input '" + name + "'"), "input"), v, "input '" + name + "'");
  }
  for (const json& p : r.array(r.field(j, "parameters", "top level"), "parameters")) {
    std::string name = r.string(r.field(p, "name", "parameters"), "parameters");
    define(r.integer(r.field(p, "id", "parameter '" + name + "'"), "parameter"),
           g.add_parameter(name, weight("param/" + name)), "parameter '" + name + "'");
  }
  for (const json& c : r.array(r.field(j, "constants", "top level"), "constants")) {
    int64_t id = r.integer(r.field(c, "id", "constants"), "constants");
    define(id, g.add_constant(weight("const/" + std::to_string(id))), "constant " + std::to_string(id));
  }
  int index = 0;
  for (const json& n : r.array(r.field(j, "nodes", "top level"), "nodes")) {
    std::string where = "node " + std::to_string(index++);
    std::string opname = r.string(r.field(n, "op", where), where);
    auto op = ops::op_id(opname);
    if (!op) r.fail(where, "unknown op '" + opname + "' (not an op of this build's ops.def)");
    where += " (" + opname + ")";
    std::vector<Value*> ins;
    for (const json& x : r.array(r.field(n, "inputs", where), where)) {
      if (x.is_null()) {
        ins.push_back(nullptr);
        continue;
      }
      auto it = ids.find(r.integer(x, where));
      if (it == ids.end()) r.fail(where, "input " + io::json_excerpt(x) + " is not defined before the node");
      ins.push_back(it->second);
    }
    ops::Attrs attrs;
    for (const json& a : r.array(r.field(n, "attrs", where), where)) {
      std::string name = r.string(r.field(a, "name", where), where);
      attrs.items().emplace_back(name, r.attr(r.field(a, "value", where + " attribute '" + name + "'"),
                                              where + " attribute '" + name + "'"));
    }
    std::vector<std::pair<DType, SymShape>> types;
    std::vector<int64_t> out_ids;
    std::vector<bool> data_shape;
    for (const json& o : r.array(r.field(n, "outputs", where), where)) {
      types.push_back({r.dtype(r.field(o, "dtype", where), where), r.shape(r.field(o, "shape", where), nsym, where)});
      out_ids.push_back(r.integer(r.field(o, "id", where), where));
      const bool dd = o.contains("data_dependent_shape");
      if (dd && !o["data_dependent_shape"].is_boolean()) r.fail(where, "'data_dependent_shape' must be true or false");
      data_shape.push_back(dd && o["data_dependent_shape"].get<bool>());
    }
    if (types.empty()) r.fail(where, "a node needs at least one output");
    Node* node = g.add_node(*op, std::move(ins), std::move(attrs), types);
    for (size_t k = 0; k < out_ids.size(); ++k) {
      define(out_ids[k], node->outputs[k], where);
      node->outputs[k]->data_dependent_shape = data_shape[k];
    }
    if (n.contains("sym_attrs"))
      for (const json& s : r.array(n["sym_attrs"], where)) {
        Node::SymAttr sa;
        sa.name = r.string(r.field(s, "name", where), where);
        const json& list = r.field(s, "list", where);
        if (!list.is_boolean()) r.fail(where, "'list' must be true or false");
        sa.is_list = list.get<bool>();
        for (const json& x : r.array(r.field(s, "values", where), where)) sa.values.push_back(r.sym(x, nsym, where));
        node->sym_attrs.push_back(std::move(sa));
      }
    if (n.contains("scope")) node->scope = r.string(n["scope"], where);
  }
  std::vector<Value*> outs;
  for (const json& o : r.array(r.field(j, "outputs", "top level"), "outputs")) {
    auto it = ids.find(r.integer(o, "outputs"));
    if (it == ids.end()) r.fail("outputs", "output " + io::json_excerpt(o) + " is not a defined value");
    outs.push_back(it->second);
  }
  g.set_outputs(std::move(outs));
  g.renumber();
  verify(g, "load");
  return g;
}

}  // namespace

void save(const Graph& g, const std::string& dir) {
  std::filesystem::create_directories(dir);
  io::NamedTensors weights;
  for (const Value* v : g.parameters()) weights.push_back({"param/" + v->name, v->data.contiguous()});
  for (const Value* v : g.constants()) weights.push_back({"const/" + std::to_string(v->id), v->data.contiguous()});
  io::save_safetensors(dir + "/weights.safetensors", weights, {{"format", "tessera-graph-weights"}});
  std::string text = graph_json(g);
  io::write_file_atomic(dir + "/graph.json", [&](io::Writer& w) { w.write(text); });
}

Graph load_graph(const std::string& dir) {
  TS_CHECK(std::filesystem::is_directory(dir), "load: '", dir,
           "' is not a directory; a saved Tessera graph is a directory with graph.json and weights.safetensors");
  std::vector<char> text = io::read_file(dir + "/graph.json", kMaxGraphJsonBytes);
  io::SafetensorsFile weights = io::SafetensorsFile::open(dir + "/weights.safetensors");
  return graph_from_parts(std::string(text.begin(), text.end()), weights, dir);
}

Graph graph_from_parts(const std::string& text, const io::SafetensorsFile& weights, const std::string& what) {
  return graph_from_json(text, [&](const std::string& name) {
    TS_CHECK(weights.contains(name), what, "/weights.safetensors: tensor '", name, "' named by graph.json is missing");
    return weights.get(name).contiguous().clone();
  }, what + "/graph.json");
}

}  // namespace tessera::compile
