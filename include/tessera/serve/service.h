#pragma once
// The inference service behind `tessera serve`: the KServe v2 routes over
// loaded model versions, independent of the HTTP library that carries them
// (the transport hands it a method, a path, headers and a body, and sends back
// what it returns), so every route is tested without sockets.
//
//   GET  /v2                                       server metadata
//   GET  /v2/health/live, /v2/health/ready         200 when live / when every model is ready (503 while a model
//                                                  folder fails to load)
//   GET  /v2/models/{m}[/versions/{v}]             model metadata (inputs, outputs)
//   GET  /v2/models/{m}[/versions/{v}]/ready       200 or 400 (not ready)
//   POST /v2/models/{m}[/versions/{v}]/infer       inference (JSON or binary extension)
//   GET  /metrics                                  Prometheus text
//
// With ServiceOptions::repository_routes (the model repository extension):
//   POST /v2/repository/index                      every model version and its state
//   POST /v2/repository/models/{m}/load            read model m's folder again (sync_repository)
//   POST /v2/repository/models/{m}/unload          take every version of m out of service
//
// Without a version, a route uses the model's newest ready version. With an
// API key set, every route but /v2/health/* needs "Authorization: Bearer KEY".
// Errors are JSON {"error": message} with the status that fits (400 bad
// request, 401 key, 404 unknown model/version/route, 405 method, 413 body too
// large, 503 queue full or not ready, 504 timeout).
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "tessera/monitor/metrics.h"
#include "tessera/serve/batcher.h"
#include "tessera/serve/http.h"
#include "tessera/serve/protocol.h"
#include "tessera/serve/repository.h"

namespace tessera::serve {

struct ServiceOptions {
  std::string api_key;                       // empty: no authentication
  size_t max_body_bytes = size_t{64} << 20;  // larger requests get 413
  Limits limits;
  // The model repository load_repository() and sync_repository() read, and
  // the command-line overrides of its config.yaml files.
  std::string repository;
  std::function<ModelConfig(ModelConfig)> adjust_config;
  bool repository_routes = false;  // POST /v2/repository/... (off: those paths are 404)
  // Called with one JSON line per request (time, remote, method, path,
  // status, model, version, bytes in and out, milliseconds); empty: no log.
  std::function<void(const std::string&)> access_log;
};

// What a sync_repository() call changed: lines such as "loaded cnn version 2",
// and the models it could not read (they keep serving what they had).
struct SyncReport {
  std::vector<std::string> changes;
  std::vector<std::string> errors;
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
  // once the new one is warm; requests that reached the old one finish on
  // it (a version lives until its last request is answered).
  void load(const std::string& name, int64_t version, const std::string& path, const ModelConfig& config,
            const std::string& fingerprint = "");
  // Takes a version out of service: new requests get 404, queued ones finish.
  void unload(const std::string& name, int64_t version);
  // Every model of a repository (sync_repository). A model folder or version
  // that fails to load, or to warm up, is reported in the result and left
  // out: it is not ready (503 with its error on its routes) while the others
  // serve. Throws only when the repository itself cannot be read.
  SyncReport load_repository(const std::string& dir);
  // Brings the loaded versions in line with options.repository (hot reload):
  // loads new versions and those whose files or config changed, unloads
  // versions and models whose folders are gone. `model` limits it to one
  // model. A model whose folder cannot be read, or a version that fails to
  // load, keeps serving what it had and is reported in errors.
  SyncReport sync_repository(const std::string& model = "");

  // Answers a request by calling `reply` exactly once: at once for most
  // routes, and for an infer request from the model worker that ran it (the
  // transport's thread does not wait for the batch).
  using Reply = std::function<void(HttpResponse)>;
  void handle_async(HttpRequest request, Reply reply);
  // handle_async, waited for.
  HttpResponse handle(HttpRequest request);
  // Stops taking requests and finishes the queued ones (graceful shutdown).
  void drain();
  const monitor::Registry& metrics() const { return metrics_; }
  size_t max_body_bytes() const { return options_.max_body_bytes; }

 private:
  struct Version {
    int64_t version = 0;
    std::shared_ptr<const Model> model;
    std::unique_ptr<Batcher> batcher;  // drains and stops when the last request lets go of the version
    ModelConfig config;
    std::string path, fingerprint;
  };
  // Which model and version a request reached (for metrics and the access log).
  struct Reached {
    std::string model, version;
  };
  // One request on its way: what the access log and metrics need once it is answered.
  struct Call {
    std::string method, path, remote;
    size_t bytes_in = 0;
    Reached reached;
    std::chrono::steady_clock::time_point start;
    Reply reply;
  };
  // The answer, or nullopt when an infer request was queued (its reply comes from the batcher).
  std::optional<HttpResponse> route(HttpRequest& request, const std::shared_ptr<Call>& call);
  void infer(const std::string& name, const std::shared_ptr<Version>& v, HttpRequest& request,
             const std::shared_ptr<Call>& call);
  void finish(Call& call, HttpResponse response);
  HttpResponse repository_route(const HttpRequest& request, const std::vector<std::string>& parts);
  void sync_model(const std::string& folder, const std::string& name, SyncReport& report);
  void log_access(const Call& call, const HttpResponse& response, double seconds);
  HttpResponse metadata(const std::string& name, const Version& v) const;
  // The version a route names (newest when `version` is empty); throws RequestError(404).
  std::shared_ptr<Version> find(const std::string& name, const std::string& version) const;

  ServiceOptions options_;
  mutable std::mutex mu_;
  std::map<std::string, std::map<int64_t, std::shared_ptr<Version>>> models_;
  bool draining_ = false;
  std::mutex sync_mu_;                             // one sync_repository at a time
  std::map<std::string, std::string> load_errors_;  // model -> why its folder did not load (last sync)
  std::atomic<int64_t> in_flight_{0};
  monitor::Registry metrics_;
};

}  // namespace tessera::serve
