#pragma once
// The KServe v2 / Open Inference Protocol's inference messages: parsing a
// request body into tensors, and writing a response, in JSON or with the
// binary tensor data extension (Inference-Header-Content-Length: the JSON
// header comes first, then each binary tensor's raw little-endian bytes in
// order).
//
// Everything in a request is checked here, before any model sees it: the
// JSON's size and nesting depth, each input's name, datatype, shape and
// element count, every value against its datatype's range, and the binary
// sections' sizes. A bad request is a RequestError whose message says what
// was wrong and what would be right, and never quotes internals.
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/core/tensor.h"

namespace tessera::serve {

// A request the server rejects: the HTTP status (400, 404, ...) and a message for the client.
class RequestError : public std::runtime_error {
 public:
  RequestError(int status, const std::string& message) : std::runtime_error(message), status_(status) {}
  int status() const { return status_; }

 private:
  int status_;
};

// KServe datatype names ("FP32", "INT64", "BOOL", ...) and Tessera dtypes.
std::optional<DType> dtype_from_kserve(std::string_view name);
const char* kserve_name(DType t);

struct Limits {
  int64_t max_json_depth = 32;        // nesting of the JSON header
  int64_t max_tensor_elements = int64_t{1} << 26;
  int64_t max_request_elements = int64_t{1} << 27;  // over all inputs
  int max_inputs = 64;
};

struct InferInput {
  std::string name;
  Tensor data;  // contiguous, of the declared datatype and shape
};
struct RequestedOutput {
  std::string name;
  bool binary = false;  // return its data in the binary extension
};
struct InferRequest {
  std::string id;                        // echoed in the response ("" when absent)
  std::vector<InferInput> inputs;
  std::vector<RequestedOutput> outputs;  // empty: every output of the model
  bool binary_outputs = false;           // parameters.binary_data_output: the default for outputs
};

// Parses an infer request body. `json_length`: the Inference-Header-Content-
// Length header's value when the request uses the binary extension (the JSON
// header is body[0, json_length), binary sections follow), else nullopt.
InferRequest parse_infer_request(std::string_view body, std::optional<size_t> json_length, const Limits& limits = {});

struct InferOutput {
  std::string name;
  Tensor data;
  bool binary = false;
};
struct InferResponse {
  std::string body;
  std::optional<size_t> json_length;  // set when binary sections follow the JSON (send the header)
};
// {"model_name", "model_version", "id", "outputs": [{"name", "datatype", "shape", "data" | parameters.binary_data_size}]}
InferResponse write_infer_response(const std::string& model, const std::string& version, const std::string& id,
                                   const std::vector<InferOutput>& outputs);

// A tensor's values as the flat JSON array of a request's or response's "data" (f16/bf16 as numbers).
nlohmann::json json_data(const Tensor& t);

// What a client may read of a server-side failure: the message of an Error
// that describes its input (a shape the model cannot take), but never an
// internal assertion's (source file and line): that one is printed to stderr
// and the client reads "an internal error".
std::string client_message(const std::exception& e);
// Whether e is Tessera's own bug (tessera::InternalError): answered with 500, not 400.
bool is_internal(const std::exception& e);

// {"error": message}: the body of every error response.
std::string error_body(const std::string& message);

}  // namespace tessera::serve
