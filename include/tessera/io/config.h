#pragma once
// Configuration files: YAML (or JSON, a subset of YAML) read into a JSON tree,
// and a reader that validates it. Every get() records the key as valid; finish()
// then rejects any key nobody asked for, naming it, the closest valid key, and
// the full list. Type errors name the key's full path and the expected type.
//
//   Config c = Config::load("train.yaml");
//   int64_t bs = c.get<int64_t>("batch_size", 64);
//   Config model = c.section("model");
//   ...
//   c.finish();
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/core/error.h"

namespace tessera::io {

nlohmann::json parse_yaml(const std::string& text, const std::string& what = "config");
nlohmann::json load_yaml(const std::string& path);

class Config {
 public:
  Config(nlohmann::json j, std::string path = "");
  static Config load(const std::string& file);

  bool has(const std::string& key) const;
  // The value at key, or `fallback` when absent. Integers convert to double;
  // nothing else converts.
  template <typename T>
  T get(const std::string& key, const T& fallback);
  template <typename T>
  T require(const std::string& key);
  // A nested mapping (empty when absent). Its keys are checked by its own finish().
  Config section(const std::string& key);
  // Marks a key as valid without reading it (e.g. read elsewhere).
  void allow(const std::string& key) { known_.insert(key); }
  // Throws on keys that were never asked for.
  void finish() const;

  const nlohmann::json& json() const { return j_; }
  std::string key_path(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  std::vector<std::string> keys() const;

 private:
  template <typename T>
  T convert(const std::string& key, const nlohmann::json& v) const;
  nlohmann::json j_;
  std::string path_;
  std::set<std::string> known_;
};

// ---- inline definitions -------------------------------------------------------------
namespace detail {
template <typename T> constexpr const char* type_name_of();
template <> constexpr const char* type_name_of<bool>() { return "a boolean (true/false)"; }
template <> constexpr const char* type_name_of<int64_t>() { return "an integer"; }
template <> constexpr const char* type_name_of<int>() { return "an integer"; }
template <> constexpr const char* type_name_of<double>() { return "a number"; }
template <> constexpr const char* type_name_of<std::string>() { return "a string"; }
template <> constexpr const char* type_name_of<std::vector<int64_t>>() { return "a list of integers"; }
template <> constexpr const char* type_name_of<std::vector<double>>() { return "a list of numbers"; }
template <> constexpr const char* type_name_of<std::vector<std::string>>() { return "a list of strings"; }
}  // namespace detail

template <typename T>
T Config::convert(const std::string& key, const nlohmann::json& v) const {
  bool ok;
  if constexpr (std::is_same_v<T, bool>) ok = v.is_boolean();
  else if constexpr (std::is_integral_v<T>) ok = v.is_number_integer();
  else if constexpr (std::is_floating_point_v<T>) ok = v.is_number();
  else if constexpr (std::is_same_v<T, std::string>) ok = v.is_string();
  else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
    ok = v.is_array();
    if (ok) for (auto& e : v) ok = ok && e.is_number_integer();
  } else if constexpr (std::is_same_v<T, std::vector<double>>) {
    ok = v.is_array();
    if (ok) for (auto& e : v) ok = ok && e.is_number();
  } else {
    ok = v.is_array();
    if (ok) for (auto& e : v) ok = ok && e.is_string();
  }
  TS_CHECK(ok, "config: '", key_path(key), "' must be ", detail::type_name_of<T>(), ", got ", v.dump());
  return v.get<T>();
}

template <typename T>
T Config::get(const std::string& key, const T& fallback) {
  known_.insert(key);
  if (!j_.is_object() || !j_.contains(key) || j_[key].is_null()) return fallback;
  return convert<T>(key, j_[key]);
}

template <typename T>
T Config::require(const std::string& key) {
  known_.insert(key);
  TS_CHECK(j_.is_object() && j_.contains(key) && !j_[key].is_null(), "config: '", key_path(key),
           "' is required (", detail::type_name_of<T>(), ")");
  return convert<T>(key, j_[key]);
}

}  // namespace tessera::io
