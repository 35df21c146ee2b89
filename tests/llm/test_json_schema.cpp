// JSON schemas as grammars (llm/json_schema.h): texts drawn at random from
// each schema's grammar all parse and validate against the schema (by a
// validator of the subset written here), valid documents are in the grammar
// and invalid ones are not, and what the subset does not cover is an error
// naming the keyword and where it is.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "json_draw.h"
#include "tessera/llm/grammar.h"
#include "tessera/llm/json_schema.h"
#include "test_util.h"

namespace tessera {
namespace {

using json = nlohmann::ordered_json;
using testing::draw;
using testing::valid;

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
