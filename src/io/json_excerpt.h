#pragma once
// A short, bounded description of a JSON value for error messages. Values
// come from files and requests: dumping one whole can print megabytes, and
// dump() recurses, so a deeply nested value would overflow the stack.
#include <nlohmann/json.hpp>
#include <string>

namespace tessera::io {

inline std::string json_excerpt(const nlohmann::json& v) {
  if (v.is_array()) return "an array of " + std::to_string(v.size()) + " values";
  if (v.is_object()) return "an object with " + std::to_string(v.size()) + " keys";
  std::string s = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);  // a scalar: no recursion
  return s.size() <= 80 ? s : s.substr(0, 77) + "...";
}

}  // namespace tessera::io
