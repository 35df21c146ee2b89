// The model repository and request-to-signature matching (serve/repository.h).
#include "tessera/serve/repository.h"

#include <algorithm>
#include <filesystem>
#include <map>

#include "io/json_excerpt.h"
#include "tessera/core/error.h"
#include "tessera/io/config.h"

namespace tessera::serve {
namespace fs = std::filesystem;

namespace {

int64_t ranged(const nlohmann::json& v, const std::string& key, int64_t lo, int64_t hi, const std::string& what) {
  TS_CHECK(v.is_number_integer() && v.get<int64_t>() >= lo && v.get<int64_t>() <= hi, what, ": ", key,
           " must be an integer in [", lo, ", ", hi, "], got ", io::json_excerpt(v));
  return v.get<int64_t>();
}

std::string shape_text(const std::vector<std::string>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + s[i];
  return out + "]";
}

}  // namespace

ModelConfig model_config_from_json(const nlohmann::json& j, const std::string& what) {
  ModelConfig c;
  if (j.is_null()) return c;
  TS_CHECK(j.is_object(), what, ": expected a mapping of settings, got ", io::json_excerpt(j));
  for (const auto& [k, v] : j.items()) {
    if (k == "max_batch_size") c.max_batch_size = ranged(v, k, 1, 1 << 16, what);
    else if (k == "max_queue_delay_us") c.max_queue_delay_us = ranged(v, k, 0, 10'000'000, what);
    else if (k == "instances") c.instances = static_cast<int>(ranged(v, k, 1, 64, what));
    else if (k == "max_queue") c.max_queue = ranged(v, k, 1, 1 << 20, what);
    else if (k == "timeout_ms") c.timeout_ms = ranged(v, k, 1, 3'600'000, what);
    else if (k == "warmup_runs") c.warmup_runs = static_cast<int>(ranged(v, k, 0, 1000, what));
    else if (k == "warmup_inputs") {
      TS_CHECK(v.is_array() && !v.empty(), what, ": warmup_inputs must be a list of .npy files, one per model input, "
               "got ", io::json_excerpt(v));
      for (const auto& f : v) {
        TS_CHECK(f.is_string() && !f.get<std::string>().empty(), what, ": warmup_inputs entries must be file names, got ",
                 io::json_excerpt(f));
        c.warmup_inputs.push_back(f.get<std::string>());
      }
    }
    else if (k == "preferred_batch_sizes") {
      TS_CHECK(v.is_array(), what, ": preferred_batch_sizes must be a list of batch sizes, got ", io::json_excerpt(v));
      for (const auto& b : v) c.preferred_batch_sizes.push_back(ranged(b, k, 1, 1 << 16, what));
    } else {
      TS_ERROR(what, ": unknown key '", k, "' (expected max_batch_size, max_queue_delay_us, preferred_batch_sizes, "
               "instances, max_queue, timeout_ms, warmup_runs, warmup_inputs)");
    }
  }
  for (int64_t b : c.preferred_batch_sizes)
    TS_CHECK(b <= c.max_batch_size, what, ": preferred batch size ", b, " exceeds max_batch_size ", c.max_batch_size);
  std::sort(c.preferred_batch_sizes.begin(), c.preferred_batch_sizes.end());
  return c;
}

bool valid_model_name(const std::string& name) {
  if (name.empty() || name.size() > 128 || name == "." || name.find("..") != std::string::npos) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' || ch == '.'; });
}

namespace {

// Every file under a version's model (name, size, modification time): a
// version whose fingerprint changed was rewritten and is loaded again.
std::string fingerprint(const fs::path& p) {
  std::vector<std::string> files;
  auto add = [&](const fs::path& f) {
    std::error_code ec;
    const auto size = fs::file_size(f, ec);
    const auto time = fs::last_write_time(f, ec).time_since_epoch().count();
    files.push_back(f.lexically_relative(p).string() + ":" + std::to_string(size) + ":" + std::to_string(time));
  };
  if (fs::is_directory(p)) {
    for (const auto& e : fs::recursive_directory_iterator(p))
      if (e.is_regular_file()) add(e.path());
  } else {
    add(p);
  }
  std::sort(files.begin(), files.end());
  std::string out;
  for (const auto& f : files) out += f + ";";
  return out;
}

}  // namespace

RepositoryEntry scan_model(const std::string& dir) {
  const fs::path path(dir);
  RepositoryEntry m;
  m.name = path.filename().string();
  m.dir = dir;
  TS_CHECK(valid_model_name(m.name), "model repository: folder '", m.name, "' is not a valid model name (letters, "
           "digits, '_', '-', '.')");
  const fs::path cfg = path / "config.yaml";
  if (fs::exists(cfg)) m.config = model_config_from_json(io::load_yaml(cfg.string()), cfg.string());
  // Warm-up inputs are files of the model's folder: relative names, no way out of it.
  for (std::string& f : m.config.warmup_inputs) {
    const fs::path rel(f);
    TS_CHECK(rel.is_relative() && std::none_of(rel.begin(), rel.end(), [](const fs::path& p) { return p == ".."; }),
             cfg.string(), ": warmup input '", f, "' must be a file name inside the model's folder");
    TS_CHECK(fs::is_regular_file(path / rel), cfg.string(), ": warmup input '", f, "' is not a file in ", dir);
    f = (path / rel).string();
  }
  for (const auto& v : fs::directory_iterator(path)) {
    if (!v.is_directory()) continue;
    const std::string name = v.path().filename().string();
    TS_CHECK(!name.empty() && name.size() <= 9 && std::all_of(name.begin(), name.end(), ::isdigit) && name != "0" &&
                 name[0] != '0',
             "model repository: '", v.path().string(), "' is not a version folder (a positive integer such as 1)");
    ModelVersion mv;
    mv.version = std::stoll(name);
    if (fs::is_directory(v.path() / "model.tsr")) mv.path = (v.path() / "model.tsr").string();
    else if (fs::exists(v.path() / "model.onnx")) mv.path = (v.path() / "model.onnx").string();
    TS_CHECK(!mv.path.empty(), "model repository: version folder '", v.path().string(), "' holds neither model.tsr/ "
             "(tessera export --format tessera) nor model.onnx");
    mv.fingerprint = fingerprint(mv.path);
    m.versions.push_back(mv);
  }
  TS_CHECK(!m.versions.empty(), "model repository: model '", m.name, "' has no version folder (1/, 2/, ...)");
  std::sort(m.versions.begin(), m.versions.end(),
            [](const ModelVersion& a, const ModelVersion& b) { return a.version < b.version; });
  return m;
}

std::vector<std::string> repository_folders(const std::string& dir) {
  TS_CHECK(fs::is_directory(dir), "model repository '", dir, "' is not a directory (expected one folder per model, "
           "each with version folders 1/, 2/, ... holding model.tsr/ or model.onnx)");
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory()) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<RepositoryEntry> scan_repository(const std::string& dir) {
  std::vector<RepositoryEntry> out;
  for (const std::string& folder : repository_folders(dir)) out.push_back(scan_model(folder));
  return out;
}

int64_t static_size(const std::string& dim) {
  const bool digits = !dim.empty() && dim.size() <= 18 && std::all_of(dim.begin(), dim.end(), ::isdigit);
  return digits ? std::stoll(dim) : -1;
}

TensorList match_signature(const Model& model, const std::string& model_name, const InferRequest& request) {
  const auto ports = model.inputs();
  std::string expected;
  for (const auto& p : ports)
    expected += (expected.empty() ? "" : ", ") + p.name + " (" + kserve_name(p.dtype) + " " + shape_text(p.shape) + ")";
  auto bad = [&](const std::string& m) { throw RequestError(400, "model '" + model_name + "': " + m); };
  if (request.inputs.size() != ports.size())
    bad("expected " + std::to_string(ports.size()) + " input(s): " + expected + "; got " +
        std::to_string(request.inputs.size()));
  TensorList ordered;
  std::map<std::string, int64_t> dims;  // dynamic dimension -> size, across inputs
  for (const auto& p : ports) {
    const InferInput* in = nullptr;
    for (const auto& x : request.inputs)
      if (x.name == p.name) in = &x;
    if (!in) bad("input '" + p.name + "' is missing; the model takes " + expected);
    const Tensor& t = in->data;
    const std::string want = std::string(kserve_name(p.dtype)) + " " + shape_text(p.shape);
    if (t.dtype() != p.dtype) bad("input '" + p.name + "' must be " + want + ", got datatype " + kserve_name(t.dtype()));
    if (t.dim() != static_cast<int64_t>(p.shape.size()))
      bad("input '" + p.name + "' must be " + want + ", got shape " + shape_str(t.shape()));
    for (size_t d = 0; d < p.shape.size(); ++d) {
      const std::string& s = p.shape[d];
      const int64_t size = static_size(s), got = t.shape()[d];
      if (size >= 0 && size != got)
        bad("input '" + p.name + "' must be " + want + ", got shape " + shape_str(t.shape()));
      if (size < 0) {
        auto [it, fresh] = dims.emplace(s, got);
        if (!fresh && it->second != got)
          bad("inputs disagree on dimension " + s + ": " + std::to_string(it->second) + " and " + std::to_string(got));
      }
    }
    ordered.push_back(t);
  }
  for (const auto& x : request.inputs) {
    bool known = false;
    for (const auto& p : ports) known = known || p.name == x.name;
    if (!known) bad("the model has no input '" + x.name + "'; it takes " + expected);
  }
  const auto outs = model.outputs();
  for (const auto& o : request.outputs) {
    bool known = false;
    std::string names;
    for (const auto& p : outs) {
      known = known || p.name == o.name;
      names += (names.empty() ? "" : ", ") + p.name;
    }
    if (!known) bad("the model has no output '" + o.name + "'; its outputs are " + names);
  }
  return ordered;
}

}  // namespace tessera::serve
