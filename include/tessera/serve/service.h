#pragma once
// The inference service behind `tessera serve`: the KServe v2 routes over
// loaded model versions, independent of the HTTP library that carries them
// (the transport hands it a method, a path, headers and a body, and sends back
// what it returns), so every route is tested without sockets.
//
//   GET  /v2                                       server metadata
//   GET  /v2/health/live, /v2/health/ready         200 when live / when every model is ready
//   GET  /v2/models/{m}[/versions/{v}]             model metadata (inputs, outputs)
//   GET  /v2/models/{m}[/versions/{v}]/ready       200 or 400 (not ready)
//   POST /v2/models/{m}[/versions/{v}]/infer       inference (JSON or binary extension)
//   GET  /metrics                                  Prometheus text
//
// Without a version, a route uses the model's newest ready version. With an
// API key set, every route but /v2/health/* needs "Authorization: Bearer KEY".
// Errors are JSON {"error": message} with the status that fits (400 bad
// request, 401 key, 404 unknown model/version/route, 405 method, 413 body too
// large, 503 queue full or not ready, 504 timeout).
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "tessera/monitor/metrics.h"
#include "tessera/serve/batcher.h"
#include "tessera/serve/protocol.h"
#include "tessera/serve/repository.h"

namespace tessera::serve {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;
  std::map<std::string, std::string> headers;  // names lowercase
  std::string body;
};
struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
};

struct ServiceOptions {
  std::string api_key;                       // empty: no authentication
  size_t max_body_bytes = size_t{64} << 20;  // larger requests get 413
  Limits limits;
};

class InferenceService {
 public:
  explicit InferenceService(ServiceOptions options = {});
  ~InferenceService();  // drains every model
  InferenceService(const InferenceService&) = delete;
  InferenceService& operator=(const InferenceService&) = delete;

  // Loads a model version (tessera::load), warms it up (config.warmup_runs
  // runs per batch size 1 and max_batch_size, zeros of its signature), and
  // only then makes it ready. Loading a version that is loaded replaces it
  // once the new one is warm; requests in flight on the old one finish.
  void load(const std::string& name, int64_t version, const std::string& path, const ModelConfig& config);
  // Takes a version out of service: new requests get 404, queued ones finish.
  void unload(const std::string& name, int64_t version);
  // Every model of a repository (scan_repository).
  void load_repository(const std::string& dir);

  HttpResponse handle(const HttpRequest& request);
  // Stops taking requests and finishes the queued ones (graceful shutdown).
  void drain();
  const monitor::Registry& metrics() const { return metrics_; }
  size_t max_body_bytes() const { return options_.max_body_bytes; }

 private:
  struct Version {
    int64_t version = 0;
    std::shared_ptr<const Model> model;
    std::unique_ptr<Batcher> batcher;
    ModelConfig config;
  };
  HttpResponse route(const HttpRequest& request, std::string& model_label);
  HttpResponse infer(const std::string& name, std::shared_ptr<Version> v, const HttpRequest& request);
  HttpResponse metadata(const std::string& name, const Version& v) const;
  // The version a route names (newest when `version` is empty); throws RequestError(404).
  std::shared_ptr<Version> find(const std::string& name, const std::string& version) const;

  ServiceOptions options_;
  mutable std::mutex mu_;
  std::map<std::string, std::map<int64_t, std::shared_ptr<Version>>> models_;
  bool draining_ = false;
  monitor::Registry metrics_;
};

}  // namespace tessera::serve
