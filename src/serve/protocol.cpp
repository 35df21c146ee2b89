// KServe v2 inference messages (serve/protocol.h). Requests are parsed with
// simdjson: a request carries its tensors as long arrays of numbers, which
// nlohmann::json parsed at a third of the server's time under load
// (docs/serving.md); responses are small and written with nlohmann::json.
#include "tessera/serve/protocol.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include <memory>

#include <nlohmann/json.hpp>
#include <simdjson.h>

#include "tessera/core/half.h"

namespace tessera::serve {
namespace {

using json = nlohmann::json;

struct Name {
  const char* kserve;
  DType dtype;
};
constexpr Name kNames[] = {{"BOOL", DType::Bool}, {"UINT8", DType::U8}, {"INT8", DType::I8},
                           {"INT32", DType::I32}, {"INT64", DType::I64}, {"FP16", DType::F16},
                           {"BF16", DType::BF16}, {"FP32", DType::F32},  {"FP64", DType::F64}};

std::string supported_names() {
  std::string s;
  for (const Name& n : kNames) s += (s.empty() ? "" : ", ") + std::string(n.kserve);
  return s;
}

[[noreturn]] void bad(const std::string& message) { throw RequestError(400, message); }

namespace sj = simdjson;
using Value = sj::dom::element;
using Type = sj::dom::element_type;

// A value as JSON text for a message, cut short: clients' values, never internals.
std::string dump(Value v) {
  std::string s = sj::minify(v);
  return s.size() > 64 ? s.substr(0, 61) + "..." : s;
}

// The JSON header, parsed by simdjson (validated in full, UTF-8 included)
// with its nesting depth bounded. Each thread keeps a parser for bodies up
// to 1 MiB; a larger body gets one of its own, freed with the request, so
// the server's memory does not grow by the largest body every thread saw.
struct Parsed {
  std::unique_ptr<sj::dom::parser> own;
  Value root;
};
Parsed parse_header(std::string_view text, const Limits& limits) {
  static thread_local sj::dom::parser shared;
  Parsed out;
  sj::dom::parser* parser = &shared;
  if (text.size() > (size_t{1} << 20)) {
    out.own = std::make_unique<sj::dom::parser>();
    parser = out.own.get();
  }
  const size_t depth = static_cast<size_t>(limits.max_json_depth);
  if (parser->max_depth() != depth && parser->allocate(std::max<size_t>(text.size(), 4096), depth))
    throw RequestError(503, "the server has no memory to parse the request");
  const sj::simdjson_result<Value> r = parser->parse(text.data(), text.size(), true);
  if (r.error() == sj::DEPTH_ERROR)
    bad("the request JSON is nested deeper than " + std::to_string(limits.max_json_depth) + " levels");
  if (r.error() == sj::MEMALLOC) throw RequestError(503, "the server has no memory to parse the request");
  if (r.error()) bad(std::string("the request body is not valid JSON: ") + sj::error_message(r.error()));
  out.root = r.value_unsafe();
  return out;
}

std::optional<Value> member(Value obj, const char* key) {
  Value v;
  if (obj.at_key(key).get(v)) return std::nullopt;
  return v;
}

Value field(Value j, const char* key, const std::string& where) {
  std::optional<Value> v = member(j, key);
  if (!v) bad(where + " has no \"" + key + "\"");
  return *v;
}

std::string text(Value j, const char* key, const std::string& where) {
  std::string_view s;
  if (field(j, key, where).get(s)) bad(where + ": \"" + key + "\" must be a string");
  return std::string(s);
}

bool flag(Value params, const char* key, const std::string& where) {
  std::optional<Value> v = member(params, key);
  if (!v) return false;
  if (!v->is_bool()) bad(where + ": parameters." + key + " must be true or false");
  return v->get_bool().value_unsafe();
}

// The object under `key` of j (absent: nullopt), which must be an object.
std::optional<Value> parameters(Value j, const std::string& where) {
  std::optional<Value> p = member(j, "parameters");
  if (p && !p->is_object()) bad(where + ": \"parameters\" must be an object");
  return p;
}

// Stores one JSON value as element i of a T tensor, checking its type and range.
template <typename T>
void store(Value v, T* out, int64_t i, const std::string& where) {
  const Type type = v.type();
  if constexpr (std::is_same_v<T, bool>) {
    if (type != Type::BOOL) bad(where + ": BOOL data must be true or false, got " + dump(v));
    out[i] = v.get_bool().value_unsafe();
  } else if constexpr (std::is_integral_v<T>) {
    constexpr auto lo = std::numeric_limits<T>::min();
    constexpr auto hi = std::numeric_limits<T>::max();
    if (type == Type::UINT64) {  // above INT64_MAX
      if (v.get_uint64().value_unsafe() > static_cast<uint64_t>(hi))
        bad(where + ": " + dump(v) + " is out of range for " + kserve_name(dtype_v<T>));
      out[i] = static_cast<T>(v.get_uint64().value_unsafe());
    } else if (type == Type::INT64) {
      const int64_t s = v.get_int64().value_unsafe();
      if (s < static_cast<int64_t>(lo) || (s > 0 && static_cast<uint64_t>(s) > static_cast<uint64_t>(hi)))
        bad(where + ": " + dump(v) + " is out of range for " + kserve_name(dtype_v<T>));
      out[i] = static_cast<T>(s);
    } else {
      bad(where + ": integer data must be whole numbers, got " + dump(v));
    }
  } else {
    double d = 0;
    if (type == Type::DOUBLE) d = v.get_double().value_unsafe();
    else if (type == Type::INT64) d = static_cast<double>(v.get_int64().value_unsafe());
    else if (type == Type::UINT64) d = static_cast<double>(v.get_uint64().value_unsafe());
    else bad(where + ": floating-point data must be numbers, got " + dump(v));
    if constexpr (std::is_same_v<T, double>) {
      out[i] = d;
    } else {
      if (std::fabs(d) > static_cast<double>(std::numeric_limits<float>::max()))
        bad(where + ": " + dump(v) + " is out of range for " + kserve_name(dtype_v<T>));
      out[i] = T(static_cast<float>(d));
    }
  }
}

// The values of "data" (flat, or nested row-major arrays) into t, counting them.
template <typename T>
void fill(sj::dom::array data, T* out, int64_t& n, int64_t numel, const std::string& where) {
  for (Value v : data) {
    if (v.is_array()) {
      fill(v.get_array().value_unsafe(), out, n, numel, where);
      continue;
    }
    if (n >= numel) bad(where + ": \"data\" has more values than the shape's " + std::to_string(numel));
    store(v, out, n++, where);
  }
}

Shape shape_of(Value j, const std::string& where, const Limits& limits) {
  sj::dom::array s;
  if (field(j, "shape", where).get(s) || s.size() > 16) bad(where + ": \"shape\" must be a list of at most 16 sizes");
  Shape shape;
  int64_t numel = 1;
  for (Value d : s) {
    int64_t v = -1;
    if (d.type() != Type::INT64 || (v = d.get_int64().value_unsafe()) < 0)
      bad(where + ": \"shape\" sizes must be non-negative integers, got " + dump(d));
    if (v > 0 && numel > limits.max_tensor_elements / v)
      bad(where + ": shape " + dump(j["shape"].value_unsafe()) + " has more than " +
          std::to_string(limits.max_tensor_elements) + " elements, the server's limit");
    numel *= v;
    shape.push_back(v);
  }
  return shape;
}

}  // namespace

std::optional<DType> dtype_from_kserve(std::string_view name) {
  for (const Name& n : kNames)
    if (name == n.kserve) return n.dtype;
  return std::nullopt;
}

const char* kserve_name(DType t) {
  for (const Name& n : kNames)
    if (n.dtype == t) return n.kserve;
  return "?";
}

InferRequest parse_infer_request(std::string_view body, std::optional<size_t> json_length, const Limits& limits) {
  if (json_length && *json_length > body.size())
    bad("Inference-Header-Content-Length is " + std::to_string(*json_length) + " but the body has only " +
        std::to_string(body.size()) + " bytes");
  std::string_view header = json_length ? body.substr(0, *json_length) : body;
  std::string_view binary = json_length ? body.substr(*json_length) : std::string_view();
  const Parsed parsed = parse_header(header, limits);
  const Value j = parsed.root;
  if (!j.is_object()) bad("the request must be a JSON object {\"inputs\": [...]}");
  InferRequest r;
  if (std::optional<Value> id = member(j, "id")) {
    std::string_view s;
    if (id->get(s)) bad("\"id\" must be a string");
    r.id = std::string(s);
  }
  if (std::optional<Value> p = parameters(j, "the request")) r.binary_outputs = flag(*p, "binary_data_output", "the request");
  sj::dom::array inputs;
  if (field(j, "inputs", "the request").get(inputs) || inputs.size() == 0) bad("\"inputs\" must be a non-empty list");
  if (inputs.size() > static_cast<size_t>(limits.max_inputs))
    bad("the request has " + std::to_string(inputs.size()) + " inputs; the server takes at most " +
        std::to_string(limits.max_inputs));
  int64_t total = 0;
  size_t offset = 0;  // into `binary`
  size_t k = 0;
  for (Value in : inputs) {
    std::string where = "inputs[" + std::to_string(k++) + "]";
    if (!in.is_object()) bad(where + " must be an object {name, shape, datatype, data}");
    InferInput x;
    x.name = text(in, "name", where);
    where = "input '" + x.name + "'";
    for (const InferInput& seen : r.inputs)
      if (seen.name == x.name) bad(where + " is given twice");
    const std::string dt = text(in, "datatype", where);
    std::optional<DType> dtype = dtype_from_kserve(dt);
    if (!dtype) bad(where + ": datatype '" + dt + "' is not supported; use one of " + supported_names());
    Shape shape = shape_of(in, where, limits);
    x.data = empty(shape, *dtype);
    const int64_t numel = x.data.numel();
    total += numel;
    if (total > limits.max_request_elements)
      bad("the request has more than " + std::to_string(limits.max_request_elements) + " elements in all");
    const std::optional<Value> params = parameters(in, where);
    std::optional<Value> size;
    if (params) size = member(*params, "binary_data_size");
    if (size) {
      if (!json_length) bad(where + " has binary_data_size but the request has no Inference-Header-Content-Length");
      if (size->type() != Type::INT64 || size->get_int64().value_unsafe() < 0)
        bad(where + ": binary_data_size must be a non-negative integer");
      const uint64_t bytes = static_cast<uint64_t>(size->get_int64().value_unsafe());
      const uint64_t want = static_cast<uint64_t>(x.data.nbytes());
      if (bytes != want)
        bad(where + ": binary_data_size is " + std::to_string(bytes) + " bytes but shape " + shape_str(shape) +
            " of " + dt + " needs " + std::to_string(want));
      if (binary.size() - offset < bytes)
        bad(where + ": the body ends " + std::to_string(bytes - (binary.size() - offset)) +
            " bytes before its binary data does");
      if (bytes) std::memcpy(x.data.raw_data(), binary.data() + offset, bytes);
      offset += bytes;
      if (*dtype == DType::Bool)
        for (int64_t i = 0; i < numel; ++i)
          if (static_cast<const uint8_t*>(x.data.raw_data())[i] > 1) bad(where + ": BOOL bytes must be 0 or 1");
    } else {
      sj::dom::array data;
      if (field(in, "data", where).get(data))
        bad(where + ": \"data\" must be a list of values (row-major; nested lists allowed)");
      int64_t n = 0;
      visit_dtype(*dtype, [&]<typename T>() { fill(data, static_cast<T*>(x.data.raw_data()), n, numel, where); });
      if (n != numel)
        bad(where + ": \"data\" has " + std::to_string(n) + " values but shape " + shape_str(shape) + " needs " +
            std::to_string(numel));
    }
    r.inputs.push_back(std::move(x));
  }
  if (offset != binary.size())
    bad("the body has " + std::to_string(binary.size() - offset) + " bytes after the binary inputs that no input "
        "claims (check each input's binary_data_size)");
  if (std::optional<Value> outs = member(j, "outputs")) {
    sj::dom::array list;
    if (outs->get(list)) bad("\"outputs\" must be a list of {name}");
    k = 0;
    for (Value out : list) {
      std::string where = "outputs[" + std::to_string(k++) + "]";
      if (!out.is_object()) bad(where + " must be an object {name}");
      RequestedOutput o;
      o.name = text(out, "name", where);
      o.binary = r.binary_outputs;
      if (std::optional<Value> p = parameters(out, where))
        if (member(*p, "binary_data")) o.binary = flag(*p, "binary_data", where);
      r.outputs.push_back(o);
    }
  }
  return r;
}

nlohmann::json json_data(const Tensor& tensor) {
  const Tensor t = tensor.contiguous();
  json data = json::array();
  visit_dtype(t.dtype(), [&]<typename T>() {
    const T* p = static_cast<const T*>(t.raw_data());
    for (int64_t i = 0; i < t.numel(); ++i) {
      if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) data.push_back(static_cast<float>(p[i]));
      else data.push_back(p[i]);
    }
  });
  return data;
}

InferResponse write_infer_response(const std::string& model, const std::string& version, const std::string& id,
                                   const std::vector<InferOutput>& outputs) {
  json j = {{"model_name", model}, {"model_version", version}};
  if (!id.empty()) j["id"] = id;
  j["outputs"] = json::array();
  std::string binary;
  for (const InferOutput& o : outputs) {
    Tensor t = o.data.contiguous();
    json out = {{"name", o.name},
                {"datatype", kserve_name(t.dtype())},
                {"shape", std::vector<int64_t>(t.shape().begin(), t.shape().end())}};
    if (o.binary) {
      out["parameters"] = {{"binary_data_size", t.nbytes()}};
      binary.append(static_cast<const char*>(t.raw_data()), t.nbytes());
    } else {
      out["data"] = json_data(t);
    }
    j["outputs"].push_back(std::move(out));
  }
  InferResponse r;
  r.body = j.dump();
  if (!binary.empty()) {
    r.json_length = r.body.size();
    r.body += binary;
  }
  return r;
}

std::string client_message(const std::exception& e) {
  if (!is_internal(e)) return e.what();
  std::fprintf(stderr, "serve: %s\n", e.what());
  return "an internal error (the server's log has the details)";
}

bool is_internal(const std::exception& e) { return dynamic_cast<const InternalError*>(&e) != nullptr; }

// Messages can quote a client's bytes (a model name from the path): invalid UTF-8 is replaced, not thrown.
std::string error_body(const std::string& message) {
  return json{{"error", message}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace tessera::serve
