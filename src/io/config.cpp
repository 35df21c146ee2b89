#include "tessera/io/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdlib>
#include <regex>

#include "tessera/io/file.h"

namespace tessera::io {

using nlohmann::json;

namespace {

// YAML 1.2 core-schema resolution of plain scalars; quoted scalars stay strings.
json scalar_to_json(const YAML::Node& n) {
  const std::string& s = n.Scalar();
  if (n.Tag() == "!") return s;  // quoted
  static const std::regex int_re("[-+]?[0-9]+");
  static const std::regex float_re("[-+]?(\\.[0-9]+|[0-9]+(\\.[0-9]*)?)([eE][-+]?[0-9]+)?");
  if (s == "~" || s == "null" || s == "Null" || s == "NULL" || s.empty()) return nullptr;
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  if (std::regex_match(s, int_re)) {
    errno = 0;
    long long v = std::strtoll(s.c_str(), nullptr, 10);
    if (errno != ERANGE) return static_cast<int64_t>(v);
  }
  if (std::regex_match(s, float_re)) return std::strtod(s.c_str(), nullptr);
  if (s == ".inf" || s == ".Inf" || s == "+.inf") return std::numeric_limits<double>::infinity();
  if (s == "-.inf" || s == "-.Inf") return -std::numeric_limits<double>::infinity();
  return s;
}

json to_json(const YAML::Node& n, const std::string& what, int depth) {
  TS_CHECK(depth < 64, what, ": nesting deeper than 64 levels");
  switch (n.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined: return nullptr;
    case YAML::NodeType::Scalar: return scalar_to_json(n);
    case YAML::NodeType::Sequence: {
      json a = json::array();
      for (const auto& e : n) a.push_back(to_json(e, what, depth + 1));
      return a;
    }
    case YAML::NodeType::Map: {
      json o = json::object();
      for (const auto& kv : n) {
        TS_CHECK(kv.first.IsScalar(), what, ": mapping keys must be plain strings (line ", kv.first.Mark().line + 1,
                 ")");
        std::string k = kv.first.Scalar();
        TS_CHECK(!o.contains(k), what, ": key '", k, "' appears twice (line ", kv.first.Mark().line + 1, ")");
        o[k] = to_json(kv.second, what, depth + 1);
      }
      return o;
    }
  }
  return nullptr;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t prev = row[0]++;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cur = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, prev + (a[i - 1] != b[j - 1])});
      prev = cur;
    }
  }
  return row[b.size()];
}

}  // namespace

json parse_yaml(const std::string& text, const std::string& what) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    TS_ERROR(what, ": invalid YAML at line ", e.mark.line + 1, ", column ", e.mark.column + 1, ": ", e.msg);
  }
  return to_json(root, what, 0);
}

json load_yaml(const std::string& path) {
  std::vector<char> buf = read_file(path, 16u << 20);
  return parse_yaml(std::string(buf.begin(), buf.end()), path);
}

Config::Config(nlohmann::json j, std::string path) : j_(std::move(j)), path_(std::move(path)) {
  TS_CHECK(j_.is_null() || j_.is_object(), "config: '", path_.empty() ? "(top level)" : path_,
           "' must be a mapping of keys to values, got ", j_.dump());
  if (j_.is_null()) j_ = nlohmann::json::object();
}

Config Config::load(const std::string& file) { return Config(load_yaml(file)); }

bool Config::has(const std::string& key) const { return j_.contains(key) && !j_[key].is_null(); }

Config Config::section(const std::string& key) {
  known_.insert(key);
  return Config(j_.contains(key) ? j_[key] : nlohmann::json(), key_path(key));
}

std::vector<std::string> Config::keys() const {
  std::vector<std::string> out;
  for (auto& [k, v] : j_.items()) out.push_back(k);
  return out;
}

void Config::finish() const {
  for (auto& [k, v] : j_.items()) {
    if (known_.count(k)) continue;
    std::string valid, closest;
    size_t best = SIZE_MAX;
    for (auto& kk : known_) {
      valid += (valid.empty() ? "" : ", ") + kk;
      size_t d = edit_distance(k, kk);
      if (d < best) best = d, closest = kk;
    }
    std::string hint = best <= 3 ? " (did you mean '" + closest + "'?)" : "";
    TS_ERROR("config: unknown key '", key_path(k), "'", hint, "; valid keys",
             path_.empty() ? "" : " in '" + path_ + "'", ": ", valid.empty() ? "none" : valid);
  }
}

}  // namespace tessera::io
