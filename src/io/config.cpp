#include "tessera/io/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdlib>
#include <limits>

#include "io/json_excerpt.h"
#include "tessera/core/numbers.h"
#include "tessera/io/file.h"

namespace tessera::io {

using nlohmann::json;

namespace {

// YAML 1.2 core-schema resolution of plain scalars; quoted scalars stay strings.
// Numbers are read with from_chars: the same in every locale, and no regex
// (libstdc++'s recursive matcher overflows the stack on a long scalar).
json scalar_to_json(const YAML::Node& n) {
  const std::string& s = n.Scalar();
  if (n.Tag() == "!") return s;  // quoted
  if (s == "~" || s == "null" || s == "Null" || s == "NULL" || s.empty()) return nullptr;
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  if (auto i = parse_int64(s)) return *i;
  if (auto d = parse_double(s)) return *d;
  if (s == ".inf" || s == ".Inf" || s == "+.inf") return std::numeric_limits<double>::infinity();
  if (s == "-.inf" || s == "-.Inf") return -std::numeric_limits<double>::infinity();
  return s;
}

// Bounds on what a document may expand to: an alias repeats the node it names,
// so a small file of nested aliases ("billion laughs") can stand for 10^9 nodes.
constexpr int64_t kMaxYamlNodes = 1'000'000;
constexpr size_t kMaxYamlBytes = size_t{16} << 20;

json to_json(const YAML::Node& n, const std::string& what, int depth, int64_t& budget) {
  TS_CHECK(depth < 64, what, ": nesting deeper than 64 levels");
  TS_CHECK(--budget >= 0, what, ": the document expands to more than ", kMaxYamlNodes,
           " values (aliases repeat what they name); a config this large is not supported");
  switch (n.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined: return nullptr;
    case YAML::NodeType::Scalar: return scalar_to_json(n);
    case YAML::NodeType::Sequence: {
      json a = json::array();
      for (const auto& e : n) a.push_back(to_json(e, what, depth + 1, budget));
      return a;
    }
    case YAML::NodeType::Map: {
      json o = json::object();
      for (const auto& kv : n) {
        TS_CHECK(kv.first.IsScalar(), what, ": mapping keys must be plain strings (line ", kv.first.Mark().line + 1,
                 ")");
        std::string k = kv.first.Scalar();
        TS_CHECK(!o.contains(k), what, ": key '", k, "' appears twice (line ", kv.first.Mark().line + 1, ")");
        o[k] = to_json(kv.second, what, depth + 1, budget);
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
  TS_CHECK(text.size() <= kMaxYamlBytes, what, ": ", text.size(), " bytes; YAML documents of at most ", kMaxYamlBytes,
           " bytes are read");
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    TS_ERROR(what, ": invalid YAML at line ", e.mark.line + 1, ", column ", e.mark.column + 1, ": ", e.msg);
  }
  int64_t budget = kMaxYamlNodes;
  return to_json(root, what, 0, budget);
}

json load_yaml(const std::string& path) {
  std::vector<char> buf = read_file(path, kMaxYamlBytes);
  return parse_yaml(std::string(buf.begin(), buf.end()), path);
}

Config::Config(nlohmann::json j, std::string path) : j_(std::move(j)), path_(std::move(path)) {
  TS_CHECK(j_.is_null() || j_.is_object(), "config: '", path_.empty() ? "(top level)" : path_,
           "' must be a mapping of keys to values, got ", io::json_excerpt(j_));
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
