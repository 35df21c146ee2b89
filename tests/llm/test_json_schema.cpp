// JSON schemas as grammars (llm/json_schema.h): texts drawn at random from
// each schema's grammar all parse and validate against the schema (by a
// validator of the subset written here), valid documents are in the grammar
// and invalid ones are not, and what the subset does not cover is an error
// naming the keyword and where it is.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "tessera/llm/grammar.h"
#include "tessera/llm/json_schema.h"
#include "test_util.h"

namespace tessera {
namespace {

using json = nlohmann::ordered_json;

// The subset's validation (Note [JSON schemas as grammars]), independent of the grammar.
bool valid(const json& v, const json& s, const json& root) {
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
std::string draw(const std::shared_ptr<const llm::Grammar>& g, std::mt19937& rng) {
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

const char* kSchemas[] = {
    R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"], "additionalProperties": false})",
    R"({"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"type": "null"}, "c": {"type": "number"}},
        "required": ["b"]})",
    R"({"type": "array", "items": {"type": "string", "enum": ["red", "green", "blue"]}, "minItems": 1, "maxItems": 3})",
    R"({"type": "array", "items": {"type": "integer"}, "minItems": 2})",
    R"({"anyOf": [{"type": "string", "maxLength": 4}, {"type": "array", "items": {"$ref": "#"}, "maxItems": 2}]})",
    R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
        "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}}, "required": ["v", "next"],
        "additionalProperties": false}}, "$ref": "#/$defs/node"})",
    R"({"type": ["string", "null"], "minLength": 2, "maxLength": 5, "description": "a short name or none"})",
    R"({"const": {"k": [1, "two", null]}})",
    R"({"type": "object", "properties": {"x": {"type": "string"}, "y": {"type": "string"}, "z": {"type": "string"}}})",
    R"({"type": "object"})",
    R"({})",
    R"({"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}, "maxItems": 0}},
        "required": ["tags"], "additionalProperties": false})",
};

TEST(JsonSchema, EveryDrawnTextParsesAndValidates) {
  std::mt19937 rng(7);
  for (const char* text : kSchemas) {
    const json schema = json::parse(text);
    SCOPED_TRACE(schema.dump());
    const auto g = llm::Grammar::parse(llm::json_schema_to_gbnf(schema));
    int drawn = 0;
    for (int i = 0; i < 60; ++i) {
      const std::string out = draw(g, rng);
      if (out.empty()) continue;  // grew too long (a deep random tree)
      ++drawn;
      json v;
      ASSERT_NO_THROW(v = json::parse(out)) << out;
      EXPECT_TRUE(valid(v, schema, schema)) << out;
    }
    EXPECT_GT(drawn, 30);
  }
}

TEST(JsonSchema, ValidDocumentsAreInTheGrammarAndInvalidOnesAreNot) {
  auto in = [](const char* schema, const std::string& doc) {
    llm::GrammarMatcher m(llm::Grammar::parse(llm::json_schema_to_gbnf(json::parse(schema))));
    return m.accept(doc) && m.can_end();
  };
  const char* person = kSchemas[0];
  EXPECT_TRUE(in(person, R"({"name": "Ada", "age": 36})"));
  EXPECT_TRUE(in(person, "{\n  \"name\": \"A\\\"da\\u00e9\",\n  \"age\": -7\n}"));
  EXPECT_FALSE(in(person, R"({"age": 36, "name": "Ada"})"));  // the schema's order
  EXPECT_FALSE(in(person, R"({"name": "Ada"})"));
  EXPECT_FALSE(in(person, R"({"name": "Ada", "age": 36.5})"));
  EXPECT_FALSE(in(person, R"({"name": "Ada", "age": 36, "x": 1})"));
  EXPECT_FALSE(in(person, R"({"name": "Ada", "age": 036})"));
  const char* optional = kSchemas[8];
  for (const char* ok : {"{}", R"({"x": "1"})", R"({"y": "1"})", R"({"x": "1", "z": "3"})", R"({"x":"1","y":"2","z":"3"})"})
    EXPECT_TRUE(in(optional, ok)) << ok;
  for (const char* bad : {R"({,"y": "1"})", R"({"x": "1",})", R"({"y": "1", "x": "1"})"}) EXPECT_FALSE(in(optional, bad)) << bad;
  EXPECT_TRUE(in(kSchemas[2], R"(["red", "blue"])"));
  EXPECT_FALSE(in(kSchemas[2], "[]"));
  EXPECT_FALSE(in(kSchemas[2], R"(["red", "red", "red", "red"])"));
  EXPECT_FALSE(in(kSchemas[2], R"(["pink"])"));
  EXPECT_TRUE(in(kSchemas[5], R"({"v": 1, "next": {"v": 2, "next": null}})"));
  EXPECT_TRUE(in(kSchemas[9], R"({"a": [1, {"b": []}], "c": "d"})"));
  EXPECT_FALSE(in(kSchemas[9], "[1]"));
  // Whitespace is bounded: a model cannot spin in it.
  EXPECT_FALSE(in(kSchemas[9], "{" + std::string(2, ' ') + "}"));
  // json_object: any object.
  llm::GrammarMatcher m(llm::Grammar::parse(llm::json_object_gbnf()));
  EXPECT_TRUE(m.accept(R"({"k": [true, false, null, 1.5e3, "s"]})") && m.can_end());
}

TEST(JsonSchema, WhatIsNotSupportedIsNamed) {
  auto err = [](const char* schema) {
    return testing::error_of([&] { llm::json_schema_to_gbnf(json::parse(schema)); });
  };
  EXPECT_NE(err(R"({"type": "string", "pattern": "^a+$"})").find("the keyword 'pattern' is not supported"),
            std::string::npos);
  EXPECT_NE(err(R"({"type": "object", "properties": {"n": {"type": "integer", "minimum": 3}}})")
                .find("'minimum' is not supported (supported: type, properties"),
            std::string::npos);
  EXPECT_NE(err(R"({"type": "object", "properties": {"n": {"type": "integer", "minimum": 3}}})").find("at #/properties/n"),
            std::string::npos);
  EXPECT_NE(err(R"({"oneOf": [{"type": "string"}]})").find("'oneOf'"), std::string::npos);
  EXPECT_NE(err(R"({"$ref": "#/$defs/missing"})").find("names no schema in the root's '$defs'"), std::string::npos);
  EXPECT_NE(err(R"({"$ref": "http://example.com/s.json"})").find("is not supported (#, #/$defs/NAME"),
            std::string::npos);
  EXPECT_NE(err(R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})").find("'required' names \"b\""),
            std::string::npos);
  EXPECT_NE(err(R"({"type": "array", "minItems": 3, "maxItems": 2})").find("'maxItems' is below 'minItems'"),
            std::string::npos);
  EXPECT_NE(err(R"({"type": "tuple"})").find("is not one of string"), std::string::npos);
  EXPECT_NE(err(R"({"type": "object", "properties": {"a": {}}, "additionalProperties": {"type": "string"}})")
                .find("'additionalProperties' other than false"),
            std::string::npos);
  EXPECT_NE(err("false").find("the schema false"), std::string::npos);
}

}  // namespace
}  // namespace tessera
