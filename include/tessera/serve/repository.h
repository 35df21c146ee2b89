#pragma once
// The model repository `tessera serve` reads: one folder per model, one
// subfolder per version, each holding the model as Tessera's compiled graph
// (model.tsr/, from `tessera export --format tessera` or `tessera quantize`)
// or an ONNX file (model.onnx), and an optional config.yaml per model:
//
//   models/
//     cnn/
//       config.yaml          # optional, the defaults below
//       1/model.tsr/
//       2/model.onnx
//
//   config.yaml:
//     max_batch_size: 64          # dynamic batching merges requests up to this many rows
//     max_queue_delay_us: 500     # ... or until the oldest waited this long
//     preferred_batch_sizes: []   # sizes to run as soon as they are reached
//     instances: 1                # executors per version
//     max_queue: 1024             # requests waiting; over it: 503 Retry-After
//     timeout_ms: 10000           # a request not done by then: 504
//     warmup_runs: 3              # warm-up runs before the version is ready
//     warmup_inputs: [x.npy]      # .npy files in the model folder, one per input (default: zeros
//                                 # of the signature at batch 1 and max_batch_size)
//
// Model names are [A-Za-z0-9_.-]+ (no "..", which also keeps URLs and paths
// apart); versions are positive integers.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/compile/model.h"
#include "tessera/serve/protocol.h"

namespace tessera::serve {

struct ModelConfig {
  int64_t max_batch_size = 64;
  int64_t max_queue_delay_us = 500;
  std::vector<int64_t> preferred_batch_sizes;
  int instances = 1;
  int64_t max_queue = 1024;
  int64_t timeout_ms = 10000;
  int warmup_runs = 3;
  std::vector<std::string> warmup_inputs;  // paths, one per model input; empty: synthetic zeros
  bool operator==(const ModelConfig&) const = default;
};
// Unknown keys and out-of-range values are errors naming the key, the value
// and what is allowed.
ModelConfig model_config_from_json(const nlohmann::json& j, const std::string& what = "config.yaml");

struct ModelVersion {
  int64_t version = 0;
  std::string path;         // the model.tsr directory or model.onnx file
  std::string fingerprint;  // its files' names, sizes and times: changes when it is rewritten
};
struct RepositoryEntry {
  std::string name;
  std::string dir;
  ModelConfig config;
  std::vector<ModelVersion> versions;  // ascending
};
// Every model folder of a repository, checked (names, versions, files,
// configs); an error names the folder and what it should hold.
std::vector<RepositoryEntry> scan_repository(const std::string& dir);
// The model folders of a repository, and one of them checked: hot reload
// scans model by model, so one half-written model does not stop the others.
std::vector<std::string> repository_folders(const std::string& dir);
RepositoryEntry scan_model(const std::string& dir);
bool valid_model_name(const std::string& name);

// A signature dimension's size ("784" -> 784), or -1 for one the model leaves
// dynamic ("N"): the one reading of Model::Port shapes the server uses.
int64_t static_size(const std::string& dim);

// An infer request's inputs in the model's input order, each checked against
// the model's signature: the names it has (an unknown or missing name is an
// error listing the expected ones), the datatype, the rank and every static
// size; dimensions the model left dynamic ("N") take any size, and inputs
// sharing a dynamic dimension must agree on it. Requested outputs must be
// outputs of the model. Errors are RequestError(400).
TensorList match_signature(const Model& model, const std::string& model_name, const InferRequest& request);

}  // namespace tessera::serve
