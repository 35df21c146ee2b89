// The KServe v2 routes over loaded model versions (serve/service.h).
#include "tessera/serve/service.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <future>
#include <set>

#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/version.h"
#include "tessera/io/npy.h"

namespace tessera::serve {
namespace {

using json = nlohmann::json;

const std::vector<double> kSecondsBuckets{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                          0.25,   0.5,     1,      2.5,   5,      10};
const std::vector<double> kBatchBuckets{1, 2, 4, 8, 16, 32, 64, 128, 256};

HttpResponse json_response(int status, const json& j) {
  HttpResponse r;
  r.status = status;
  r.body = j.dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}
HttpResponse error_response(int status, const std::string& message) {
  HttpResponse r;
  r.status = status;
  r.body = error_body(message);
  if (status == 503) r.headers.push_back({"Retry-After", "1"});
  return r;
}

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> parts;
  size_t i = 0;
  while (i < path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    if (j > i) parts.push_back(path.substr(i, j - i));
    i = j + 1;
  }
  return parts;
}

json port_json(const Model::Port& p) {
  json shape = json::array();
  for (const auto& d : p.shape) shape.push_back(static_size(d));  // KServe: -1 for a dynamic dimension
  return {{"name", p.name}, {"datatype", kserve_name(p.dtype)}, {"shape", shape}};
}

}  // namespace

InferenceService::InferenceService(ServiceOptions options) : options_(std::move(options)) {}

InferenceService::~InferenceService() { drain(); }

void InferenceService::load(const std::string& name, int64_t version, const std::string& path,
                            const ModelConfig& config, const std::string& fingerprint) {
  TS_CHECK(valid_model_name(name), "serve: '", name, "' is not a valid model name (letters, digits, '_', '-', '.')");
  TS_CHECK(version > 0, "serve: model versions are positive integers, got ", version);
  auto v = std::make_shared<Version>();
  v->version = version;
  v->config = config;
  v->path = path;
  v->fingerprint = fingerprint;
  v->model = std::make_shared<const Model>(tessera::load(path));
  // Warm-up before ready: the first calls plan memory, pick kernels and pack weights.
  if (config.warmup_inputs.empty()) {
    for (int64_t n : {int64_t{1}, config.max_batch_size})
      for (int i = 0; i < config.warmup_runs; ++i) v->model->run(v->model->example_inputs(n));
  } else {
    // Configured inputs, checked against the signature like a request's.
    const auto ports = v->model->inputs();
    TS_CHECK(config.warmup_inputs.size() == ports.size(), "serve: model '", name, "' takes ", ports.size(),
             " input(s) but config.yaml lists ", config.warmup_inputs.size(), " warmup_inputs");
    InferRequest r;
    for (size_t i = 0; i < ports.size(); ++i) r.inputs.push_back({ports[i].name, io::load_npy(config.warmup_inputs[i])});
    TensorList xs;
    try {
      xs = match_signature(*v->model, name, r);
    } catch (const RequestError& e) {
      TS_ERROR("serve: warmup_inputs of model '", name, "' do not fit it: ", e.what());
    }
    for (int i = 0; i < config.warmup_runs; ++i) v->model->run(xs);
  }
  const std::string model_label = name;
  v->batcher = std::make_unique<Batcher>(v->model, config, [this, model_label](const BatchStats& s) {
    metrics_.observe("tessera_serve_batch_size", "Rows per model run.", kBatchBuckets, static_cast<double>(s.rows),
                     {{"model", model_label}});
    metrics_.observe("tessera_serve_queue_seconds", "Time the oldest request of a run waited.", kSecondsBuckets,
                     s.queue_us * 1e-6, {{"model", model_label}});
    metrics_.observe("tessera_serve_compute_seconds", "Time of one model run.", kSecondsBuckets, s.compute_us * 1e-6,
                     {{"model", model_label}});
  });
  std::shared_ptr<Version> old;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto& slot = models_[name][version];
    old = std::move(slot);
    slot = v;
  }
  metrics_.set("tessera_serve_model_ready", "1 when a model version serves requests.", 1,
               {{"model", name}, {"version", std::to_string(version)}});
  // `old` is released here: requests that hold it finish on it, and the last
  // one to let go drains and stops its batcher.
}

void InferenceService::unload(const std::string& name, int64_t version) {
  std::shared_ptr<Version> old;
  bool last = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = models_.find(name);
    TS_CHECK(it != models_.end() && it->second.count(version), "serve: model '", name, "' has no version ", version);
    old = it->second[version];
    it->second.erase(version);
    last = it->second.empty();
    if (last) models_.erase(it);
  }
  metrics_.set("tessera_serve_model_ready", "1 when a model version serves requests.", 0,
               {{"model", name}, {"version", std::to_string(version)}});
  if (last) metrics_.set("tessera_serve_queue_depth", "Requests waiting for a model run.", 0, {{"model", name}});
}

SyncReport InferenceService::load_repository(const std::string& dir) {
  repository_folders(dir);  // the repository itself must be readable; its model folders may fail one by one
  options_.repository = dir;
  return sync_repository();
}

SyncReport InferenceService::sync_repository(const std::string& model) {
  TS_CHECK(!options_.repository.empty(), "serve: no model repository to read (the server serves a single model)");
  std::lock_guard<std::mutex> lock(sync_mu_);
  SyncReport report;
  std::vector<std::string> folders;
  try {
    folders = repository_folders(options_.repository);
  } catch (const Error& e) {
    report.errors.push_back(e.what());
    return report;
  }
  std::set<std::string> on_disk;
  for (const std::string& f : folders) {
    const std::string name = std::filesystem::path(f).filename().string();
    on_disk.insert(name);
    if (model.empty() || model == name) sync_model(f, name, report);
  }
  // Models whose folders are gone.
  std::vector<std::pair<std::string, int64_t>> gone;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [name, versions] : models_)
      if (!on_disk.count(name) && (model.empty() || model == name))
        for (auto& [n, v] : versions) gone.push_back({name, n});
  }
  for (auto& [name, n] : gone) {
    unload(name, n);
    report.changes.push_back("unloaded " + name + " version " + std::to_string(n) + " (its folder is gone)");
  }
  if (!model.empty() && !on_disk.count(model) && gone.empty())
    report.errors.push_back("the repository has no model folder '" + model + "'");
  return report;
}

void InferenceService::sync_model(const std::string& folder, const std::string& name, SyncReport& report) {
  RepositoryEntry e;
  try {
    e = scan_model(folder);
  } catch (const Error& err) {
    report.errors.push_back(err.what());
    std::lock_guard<std::mutex> l(mu_);
    load_errors_[name] = err.what();
    return;
  }
  const ModelConfig config = options_.adjust_config ? options_.adjust_config(e.config) : e.config;
  std::map<int64_t, std::shared_ptr<Version>> loaded;
  {
    std::lock_guard<std::mutex> l(mu_);
    load_errors_.erase(name);
    if (auto it = models_.find(name); it != models_.end()) loaded = it->second;
  }
  std::set<int64_t> present;
  for (const ModelVersion& mv : e.versions) {
    present.insert(mv.version);
    auto it = loaded.find(mv.version);
    if (it != loaded.end() && it->second->path == mv.path && it->second->fingerprint == mv.fingerprint &&
        it->second->config == config)
      continue;
    try {
      load(name, mv.version, mv.path, config, mv.fingerprint);
      report.changes.push_back((it == loaded.end() ? "loaded " : "reloaded ") + name + " version " +
                               std::to_string(mv.version));
    } catch (const Error& err) {
      // A half-written or broken version: what was serving keeps serving.
      report.errors.push_back("model '" + name + "' version " + std::to_string(mv.version) + ": " + err.what());
      std::lock_guard<std::mutex> l(mu_);
      load_errors_[name] = err.what();
    }
  }
  for (auto& [n, v] : loaded)
    if (!present.count(n)) {
      unload(name, n);
      report.changes.push_back("unloaded " + name + " version " + std::to_string(n) + " (its folder is gone)");
    }
}

void InferenceService::drain() {
  std::vector<std::shared_ptr<Version>> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    draining_ = true;
    for (auto& [name, versions] : models_)
      for (auto& [n, v] : versions) all.push_back(v);
  }
  for (auto& v : all) v->batcher->drain();
}

std::shared_ptr<InferenceService::Version> InferenceService::find(const std::string& name,
                                                                 const std::string& version) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = models_.find(name);
  if (it == models_.end() || it->second.empty()) {
    if (auto e = load_errors_.find(name); e != load_errors_.end())
      throw RequestError(503, "model '" + name + "' is not ready: " + e->second);
    throw RequestError(404, "unknown model '" + name + "'");
  }
  if (version.empty()) return it->second.rbegin()->second;
  const bool numeric = !version.empty() && version.size() <= 18 && std::all_of(version.begin(), version.end(), ::isdigit);
  auto v = numeric ? it->second.find(std::stoll(version)) : it->second.end();
  if (v == it->second.end()) {
    std::string have;
    for (auto& [n, x] : it->second) have += (have.empty() ? "" : ", ") + std::to_string(n);
    throw RequestError(404, "model '" + name + "' has no version '" + version + "' (it has " + have + ")");
  }
  return v->second;
}

HttpResponse InferenceService::metadata(const std::string& name, const Version& v) const {
  json versions = json::array();
  std::string error;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = models_.find(name);
    if (it != models_.end())
      for (auto& [n, x] : it->second) versions.push_back(std::to_string(n));
    if (auto e = load_errors_.find(name); e != load_errors_.end()) error = e->second;
  }
  json ins = json::array(), outs = json::array();
  for (const auto& p : v.model->inputs()) ins.push_back(port_json(p));
  for (const auto& p : v.model->outputs()) outs.push_back(port_json(p));
  json body = {{"name", name}, {"versions", versions}, {"platform", "tessera"}, {"inputs", ins}, {"outputs", outs}};
  // A folder or version that failed to load while older versions serve.
  if (!error.empty()) body["load_error"] = error;
  return json_response(200, body);
}

void InferenceService::infer(const std::string& name, const std::shared_ptr<Version>& v, HttpRequest& req,
                             const std::shared_ptr<Call>& call) {
  std::optional<size_t> json_length;
  if (auto h = req.headers.find("inference-header-content-length"); h != req.headers.end()) {
    const std::string& s = h->second;
    if (s.empty() || s.size() > 18 || !std::all_of(s.begin(), s.end(), ::isdigit))
      throw RequestError(400, "Inference-Header-Content-Length must be a byte count, got '" + s.substr(0, 32) + "'");
    json_length = static_cast<size_t>(std::stoull(s));
  }
  InferRequest r = parse_infer_request(req.body, json_length, options_.limits);
  req.body = std::string();  // the tensors hold the data now
  TensorList inputs = match_signature(*v->model, name, r);
  // The reply is written on the worker that ran the batch; it keeps no
  // reference to the version (a version lives until its queue is drained).
  std::vector<std::string> ports;
  for (const auto& p : v->model->outputs()) ports.push_back(p.name);
  const std::string version = std::to_string(v->version);
  v->batcher->submit(std::move(inputs), [this, call, name, version, ports = std::move(ports), id = std::move(r.id),
                                          wanted = std::move(r.outputs), binary = r.binary_outputs](
                                             std::exception_ptr error, TensorList outs) {
    HttpResponse res;
    try {
      if (error) std::rethrow_exception(error);
      std::vector<InferOutput> chosen;
      for (size_t i = 0; i < ports.size(); ++i) {
        if (wanted.empty()) chosen.push_back({ports[i], outs[i], binary});
        for (const auto& o : wanted)
          if (o.name == ports[i]) chosen.push_back({ports[i], outs[i], o.binary});
      }
      InferResponse w = write_infer_response(name, version, id, chosen);
      res.body = std::move(w.body);
      if (w.json_length) {
        res.content_type = "application/octet-stream";
        res.headers.push_back({"Inference-Header-Content-Length", std::to_string(*w.json_length)});
      }
    } catch (const RequestError& e) {
      res = error_response(e.status(), e.what());
    } catch (const std::exception& e) {
      res = error_response(500, "the server failed to answer the request: " + client_message(e));
    }
    finish(*call, std::move(res));
  });
}

HttpResponse InferenceService::repository_route(const HttpRequest& req, const std::vector<std::string>& p) {
  if (req.method != "POST")
    return error_response(405, "method " + req.method + " is not allowed on " + req.path + " (use POST)");
  if (p.size() == 3 && p[2] == "index") {
    json index = json::array();
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [name, versions] : models_)
      for (auto& [n, v] : versions) index.push_back({{"name", name}, {"version", std::to_string(n)}, {"state", "READY"}});
    for (auto& [name, why] : load_errors_)
      index.push_back({{"name", name}, {"state", "UNAVAILABLE"}, {"reason", why}});
    return json_response(200, index);
  }
  if (p.size() == 5 && p[2] == "models" && (p[4] == "load" || p[4] == "unload")) {
    const std::string& name = p[3];
    if (!valid_model_name(name)) return error_response(400, "'" + name + "' is not a valid model name");
    if (p[4] == "load") {
      if (!std::filesystem::is_directory(std::filesystem::path(options_.repository) / name))
        return error_response(404, "the model repository has no folder '" + name + "'");
      SyncReport r = sync_repository(name);
      if (!r.errors.empty()) return error_response(400, "model '" + name + "' did not load: " + r.errors.front());
      return json_response(200, {{"name", name}, {"changes", r.changes}});
    }
    std::vector<int64_t> versions;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = models_.find(name);
      if (it == models_.end()) return error_response(404, "unknown model '" + name + "'");
      for (auto& [n, v] : it->second) versions.push_back(n);
    }
    for (int64_t n : versions) unload(name, n);
    return json_response(200, {{"name", name}, {"unloaded", versions}});
  }
  return error_response(404, "no route " + req.path + " (POST /v2/repository/index, /v2/repository/models/{name}/load "
                             "or /unload)");
}

std::optional<HttpResponse> InferenceService::route(HttpRequest& req, const std::shared_ptr<Call>& call) {
  Reached& reached = call->reached;
  const std::vector<std::string> p = split_path(req.path);
  const bool get = req.method == "GET", post = req.method == "POST";
  auto method_not_allowed = [&](const char* allowed) {
    return error_response(405, "method " + req.method + " is not allowed on " + req.path + " (use " + allowed + ")");
  };
  if (p.size() == 1 && p[0] == "metrics") {
    if (!get) return method_not_allowed("GET");
    HttpResponse r;
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    // Gauges of the present moment are read when scraped, not kept up to date per request.
    metrics_.set("tessera_serve_requests_in_flight", "Requests being handled (this scrape included).",
                 static_cast<double>(in_flight_.load()));
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [model, versions] : models_) {
        int64_t queued = 0;
        for (auto& [n, v] : versions) queued += v->batcher->queued();
        metrics_.set("tessera_serve_queue_depth", "Requests waiting for a model run.", static_cast<double>(queued),
                     {{"model", model}});
      }
    }
    r.body = metrics_.render();
    return r;
  }
  if (p.empty() || p[0] != "v2") return error_response(404, "no route " + req.path + " (the API is under /v2)");
  if (p.size() == 1) {
    if (!get) return method_not_allowed("GET");
    return json_response(200, {{"name", "tessera"}, {"version", tessera::version()}, {"extensions", {"binary_tensor_data"}}});
  }
  if (p[1] == "health" && p.size() == 3 && (p[2] == "live" || p[2] == "ready")) {
    if (!get) return method_not_allowed("GET");
    std::lock_guard<std::mutex> lock(mu_);
    // Ready: serving, and every model has a version that serves (a model
    // whose folder failed to load is not; a failed new version beside a
    // serving one is reported on its metadata only).
    bool every_model = !models_.empty();
    for (auto& [name, why] : load_errors_) every_model = every_model && models_.count(name);
    const bool ok = p[2] == "live" || (!draining_ && every_model);
    return json_response(ok ? 200 : 503, {{p[2], ok}});
  }
  if (p[1] == "repository" && options_.repository_routes) return repository_route(req, p);
  if (p[1] != "models" || p.size() < 3) return error_response(404, "no route " + req.path);
  const std::string& name = p[2];
  size_t at = 3;
  std::string version;
  if (p.size() >= 5 && p[3] == "versions") {
    version = p[4];
    at = 5;
  }
  const std::string action = p.size() > at ? p[at] : "";
  if (p.size() > at + 1 || (action != "" && action != "ready" && action != "infer"))
    return error_response(404, "no route " + req.path);
  std::shared_ptr<Version> v = find(name, version);
  // Labelled only once the model is known: client paths cannot grow the metric series.
  reached.model = name;
  reached.version = std::to_string(v->version);
  if (action == "infer") {
    if (!post) return method_not_allowed("POST");
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (draining_) return error_response(503, "the server is shutting down");
    }
    infer(name, v, req, call);
    return std::nullopt;
  }
  if (!get) return method_not_allowed("GET");
  if (action == "ready") return json_response(200, {{"name", name}, {"ready", true}});
  return metadata(name, *v);
}

void InferenceService::handle_async(HttpRequest req, Reply reply) {
  auto call = std::make_shared<Call>();
  call->method = req.method;
  call->path = req.path;
  call->remote = req.remote;
  call->bytes_in = req.body.size();
  call->start = std::chrono::steady_clock::now();
  call->reply = std::move(reply);
  ++in_flight_;
  const bool health = req.path.rfind("/v2/health/", 0) == 0;
  auto h = req.headers.find("authorization");
  if (!options_.api_key.empty() && !health &&
      (h == req.headers.end() || !same_secret(h->second, "Bearer " + options_.api_key))) {
    HttpResponse res = error_response(401, "missing or wrong API key (send the header Authorization: Bearer <key>)");
    res.headers.push_back({"WWW-Authenticate", "Bearer"});
    return finish(*call, std::move(res));
  }
  if (req.body.size() > options_.max_body_bytes)
    return finish(*call, error_response(413, "the request body has " + std::to_string(req.body.size()) +
                                                 " bytes; the server takes at most " +
                                                 std::to_string(options_.max_body_bytes)));
  std::optional<HttpResponse> res;
  try {
    res = route(req, call);
  } catch (const RequestError& e) {
    res = error_response(e.status(), e.what());
  } catch (const Error& e) {
    // A failure inside the server (a model that cannot load): the message, not the internals.
    res = error_response(500, "the server failed to run the request: " + client_message(e));
  } catch (const std::exception&) {
    res = error_response(500, "the server failed to run the request");
  }
  if (res) finish(*call, std::move(*res));
}

HttpResponse InferenceService::handle(HttpRequest req) {
  // Shared with the reply, which may still be returning from set_value on a worker when get() wakes.
  auto answer = std::make_shared<std::promise<HttpResponse>>();
  std::future<HttpResponse> f = answer->get_future();
  handle_async(std::move(req), [answer](HttpResponse r) { answer->set_value(std::move(r)); });
  return f.get();
}

void InferenceService::finish(Call& call, HttpResponse res) {
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - call.start).count();
  metrics_.add("tessera_serve_requests_total", "Requests by model and HTTP status.", 1,
               {{"model", call.reached.model}, {"status", std::to_string(res.status)}});
  if (!call.reached.model.empty())
    metrics_.observe("tessera_serve_request_seconds", "Time from request to response.", kSecondsBuckets, secs,
                     {{"model", call.reached.model}});
  --in_flight_;
  if (options_.access_log) log_access(call, res, secs);
  Reply reply = std::move(call.reply);
  reply(std::move(res));
}

void InferenceService::log_access(const Call& call, const HttpResponse& res, double seconds) {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const int ms = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm utc{};
  gmtime_r(&t, &utc);
  char stamp[64];
  std::snprintf(stamp, sizeof stamp, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", utc.tm_year + 1900, utc.tm_mon + 1,
                utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, ms);
  json line = {{"time", stamp},
               {"remote", call.remote},
               {"method", call.method},
               {"path", call.path},
               {"status", res.status},
               {"model", call.reached.model},
               {"version", call.reached.version},
               {"bytes_in", call.bytes_in},
               {"bytes_out", res.body.size()},
               {"ms", std::round(seconds * 1e6) / 1e3}};
  // Paths come from clients: dump() escapes them, and replaces invalid UTF-8.
  options_.access_log(line.dump(-1, ' ', false, json::error_handler_t::replace));
}

}  // namespace tessera::serve
