#pragma once
// JSON texts drawn from grammars, and the JSON-schema subset's validation
// written independently of the grammar: for tests of structured output.
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/llm/grammar.h"

namespace tessera::testing {

using json = nlohmann::ordered_json;

// The subset's validation (Note [JSON schemas as grammars]), independent of the grammar.
inline bool valid(const json& v, const json& s, const json& root) {
  if (s.is_boolean()) return s.get<bool>();
  if (s.contains("$ref")) {
    const std::string r = s["$ref"];
    if (r == "#") return valid(v, root, root);
    const size_t slash = r.rfind('/');
    const std::string kind = r.substr(2, slash - 2), name = r.substr(slash + 1);
    return valid(v, root[kind][name], root);
  }
  if (s.contains("const") && v != s["const"]) return false;
  if (s.contains("enum") && std::find(s["enum"].begin(), s["enum"].end(), v) == s["enum"].end()) return false;
  if (s.contains("anyOf")) {
    bool any = false;
    for (const json& a : s["anyOf"]) any = any || valid(v, a, root);
    if (!any) return false;
  }
  if (s.contains("type")) {
    std::vector<std::string> types;
    if (s["type"].is_array()) for (const json& t : s["type"]) types.push_back(t);
    else types.push_back(s["type"]);
    bool any = false;
    for (const std::string& t : types) {
      any = any || (t == "string" && v.is_string()) || (t == "number" && v.is_number()) ||
            (t == "integer" && v.is_number_integer()) || (t == "boolean" && v.is_boolean()) ||
            (t == "null" && v.is_null()) || (t == "array" && v.is_array()) || (t == "object" && v.is_object());
    }
    if (!any) return false;
  }
  if (v.is_string()) {
    // Length in code points.
    int64_t n = 0;
    for (unsigned char c : v.get<std::string>()) n += (c & 0xC0) != 0x80;
    if (s.contains("minLength") && n < s["minLength"].get<int64_t>()) return false;
    if (s.contains("maxLength") && n > s["maxLength"].get<int64_t>()) return false;
  }
  if (v.is_array()) {
    const auto n = static_cast<int64_t>(v.size());
    if (s.contains("minItems") && n < s["minItems"].get<int64_t>()) return false;
    if (s.contains("maxItems") && n > s["maxItems"].get<int64_t>()) return false;
    if (s.contains("items"))
      for (const json& x : v)
        if (!valid(x, s["items"], root)) return false;
  }
  if (v.is_object() && s.contains("properties")) {
    for (const json& r : s.value("required", json::array()))
      if (!v.contains(r.get<std::string>())) return false;
    for (const auto& [k, x] : v.items()) {
      if (!s["properties"].contains(k)) {
        if (s.contains("additionalProperties") && !s["additionalProperties"].get<bool>()) return false;
        continue;
      }
      if (!valid(x, s["properties"][k], root)) return false;
    }
  }
  return true;
}

// A text drawn from the grammar: a random allowed byte at a time, ending
// where it may with probability 1/3 (or when it must); "" if it grew too long.
inline std::string draw(const std::shared_ptr<const llm::Grammar>& g, std::mt19937& rng) {
  llm::GrammarMatcher m(g);
  std::string out;
  while (out.size() < 3000) {
    if (m.must_end() || (m.can_end() && rng() % 3 == 0)) return out;
    std::vector<uint8_t> next;
    for (int b = 0; b < 256; ++b) {
      llm::GrammarMatcher probe = m;
      if (probe.accept(std::string(1, static_cast<char>(b)))) next.push_back(static_cast<uint8_t>(b));
    }
    if (next.empty()) return out;  // a dead end would be a bug: the caller's parse fails
    // Favour ASCII (so that strings end and numbers stay short) but reach the rest too.
    std::vector<uint8_t> ascii;
    for (uint8_t b : next)
      if (b < 0x80) ascii.push_back(b);
    const std::vector<uint8_t>& from = !ascii.empty() && rng() % 8 ? ascii : next;
    const char c = static_cast<char>(from[rng() % from.size()]);
    out += c;
    m.accept(std::string(1, c));
  }
  return "";
}

}  // namespace tessera::testing
