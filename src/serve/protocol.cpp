// KServe v2 inference messages (serve/protocol.h).
#include "tessera/serve/protocol.h"

#include <cmath>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

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

// The JSON header, parsed with its nesting depth bounded (a deep document
// would otherwise recurse without limit).
json parse_header(std::string_view text, const Limits& limits) {
  try {
    return json::parse(text, [&](int depth, json::parse_event_t, json&) {
      if (depth > limits.max_json_depth)
        bad("the request JSON is nested deeper than " + std::to_string(limits.max_json_depth) + " levels");
      return true;
    });
  } catch (const json::parse_error& e) {
    // nlohmann's message names the byte and the token, not our internals.
    bad(std::string("the request body is not valid JSON: ") + e.what());
  }
}

const json& field(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end()) bad(where + " has no \"" + key + "\"");
  return *it;
}

std::string text(const json& j, const char* key, const std::string& where) {
  const json& v = field(j, key, where);
  if (!v.is_string()) bad(where + ": \"" + key + "\" must be a string");
  return v.get<std::string>();
}

bool flag(const json& params, const char* key, const std::string& where) {
  if (!params.is_object() || !params.contains(key)) return false;
  const json& v = params[key];
  if (!v.is_boolean()) bad(where + ": parameters." + key + " must be true or false");
  return v.get<bool>();
}

// Stores one JSON value as element i of a T tensor, checking its type and range.
template <typename T>
void store(const json& v, T* out, int64_t i, const std::string& where) {
  if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) bad(where + ": BOOL data must be true or false, got " + v.dump());
    out[i] = v.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    if (!v.is_number_integer()) bad(where + ": integer data must be whole numbers, got " + v.dump());
    constexpr auto lo = std::numeric_limits<T>::min();
    constexpr auto hi = std::numeric_limits<T>::max();
    if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(hi)) bad(where + ": " + v.dump() + " is out of range for " + kserve_name(dtype_v<T>));
      out[i] = static_cast<T>(u);
    } else {
      const int64_t s = v.get<int64_t>();
      if (s < static_cast<int64_t>(lo) || (s > 0 && static_cast<uint64_t>(s) > static_cast<uint64_t>(hi)))
        bad(where + ": " + v.dump() + " is out of range for " + kserve_name(dtype_v<T>));
      out[i] = static_cast<T>(s);
    }
  } else {
    if (!v.is_number()) bad(where + ": floating-point data must be numbers, got " + v.dump());
    const double d = v.get<double>();
    if constexpr (std::is_same_v<T, double>) {
      out[i] = d;
    } else {
      if (std::fabs(d) > static_cast<double>(std::numeric_limits<float>::max()))
        bad(where + ": " + v.dump() + " is out of range for " + kserve_name(dtype_v<T>));
      out[i] = T(static_cast<float>(d));
    }
  }
}

// The values of "data" (flat, or nested row-major arrays) into t, counting them.
template <typename T>
void fill(const json& data, T* out, int64_t& n, int64_t numel, const std::string& where) {
  for (const json& v : data) {
    if (v.is_array()) {
      fill(v, out, n, numel, where);
      continue;
    }
    if (n >= numel) bad(where + ": \"data\" has more values than the shape's " + std::to_string(numel));
    store(v, out, n++, where);
  }
}

Shape shape_of(const json& j, const std::string& where, const Limits& limits) {
  const json& s = field(j, "shape", where);
  if (!s.is_array() || s.size() > 16) bad(where + ": \"shape\" must be a list of at most 16 sizes");
  Shape shape;
  int64_t numel = 1;
  for (const json& d : s) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0)
      bad(where + ": \"shape\" sizes must be non-negative integers, got " + d.dump());
    const int64_t v = d.get<int64_t>();
    if (v > 0 && numel > limits.max_tensor_elements / v)
      bad(where + ": shape " + s.dump() + " has more than " + std::to_string(limits.max_tensor_elements) +
          " elements, the server's limit");
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
  json j = parse_header(header, limits);
  if (!j.is_object()) bad("the request must be a JSON object {\"inputs\": [...]}");
  InferRequest r;
  if (j.contains("id")) {
    if (!j["id"].is_string()) bad("\"id\" must be a string");
    r.id = j["id"].get<std::string>();
  }
  if (j.contains("parameters")) {
    if (!j["parameters"].is_object()) bad("\"parameters\" must be an object");
    r.binary_outputs = flag(j["parameters"], "binary_data_output", "the request");
  }
  const json& inputs = field(j, "inputs", "the request");
  if (!inputs.is_array() || inputs.empty()) bad("\"inputs\" must be a non-empty list");
  if (static_cast<int>(inputs.size()) > limits.max_inputs)
    bad("the request has " + std::to_string(inputs.size()) + " inputs; the server takes at most " +
        std::to_string(limits.max_inputs));
  int64_t total = 0;
  size_t offset = 0;  // into `binary`
  for (size_t k = 0; k < inputs.size(); ++k) {
    const json& in = inputs[k];
    std::string where = "inputs[" + std::to_string(k) + "]";
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
    const json* params = in.contains("parameters") ? &in["parameters"] : nullptr;
    if (params && !params->is_object()) bad(where + ": \"parameters\" must be an object");
    if (params && params->contains("binary_data_size")) {
      const json& size = (*params)["binary_data_size"];
      if (!json_length) bad(where + " has binary_data_size but the request has no Inference-Header-Content-Length");
      if (!size.is_number_unsigned()) bad(where + ": binary_data_size must be a non-negative integer");
      const uint64_t bytes = size.get<uint64_t>(), want = static_cast<uint64_t>(x.data.nbytes());
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
      const json& data = field(in, "data", where);
      if (!data.is_array()) bad(where + ": \"data\" must be a list of values (row-major; nested lists allowed)");
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
  if (j.contains("outputs")) {
    const json& outs = j["outputs"];
    if (!outs.is_array()) bad("\"outputs\" must be a list of {name}");
    for (size_t k = 0; k < outs.size(); ++k) {
      std::string where = "outputs[" + std::to_string(k) + "]";
      if (!outs[k].is_object()) bad(where + " must be an object {name}");
      RequestedOutput o;
      o.name = text(outs[k], "name", where);
      o.binary = r.binary_outputs;
      if (outs[k].contains("parameters")) {
        if (!outs[k]["parameters"].is_object()) bad(where + ": \"parameters\" must be an object");
        if (outs[k]["parameters"].contains("binary_data"))
          o.binary = flag(outs[k]["parameters"], "binary_data", where);
      }
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

// Messages can quote a client's bytes (a model name from the path): invalid UTF-8 is replaced, not thrown.
std::string error_body(const std::string& message) {
  return json{{"error", message}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace tessera::serve
