#pragma once
// JSON schemas as grammars (llm/grammar.h): structured output for
// response_format json_schema and json_object.
//
// Note [JSON schemas as grammars]
// A schema becomes GBNF whose language is the JSON texts that validate
// against it, written the way the rules read: an object's properties in
// the schema's order, each required one present, each optional one present
// or not (with the commas between those present); arrays within minItems
// and maxItems; strings within minLength and maxLength; enum and const as
// their JSON texts; anyOf as alternatives; $ref to #/$defs/NAME (or
// #/definitions/NAME, or # itself) as a rule, so recursive schemas work.
// Whitespace between tokens is at most one space, or a newline and up to 20
// spaces or tabs, so a model cannot spin in whitespace forever; a \u escape
// is never a surrogate (many JSON parsers refuse a lone one; characters
// beyond U+FFFF are written as themselves); numbers have at most 16 digits
// before and after the point and a two-digit exponent (so they fit a double). A keyword
// outside this subset (pattern, format, minimum, oneOf, ...) is an error
// that names it and where it is: better refused than silently not enforced.
// Annotations (title, description, $schema, $id, $comment, examples,
// default) are allowed and ignored.
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace tessera::llm {

// GBNF for the JSON texts that validate against `schema` (rule "root").
std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema);
// GBNF for any JSON object (response_format json_object).
std::string json_object_gbnf();

// Several schemas in one grammar (a tool call: one rule per function's
// parameters), with rules of one's own around them.
class JsonSchemaGrammar {
 public:
  // compact: at most one space between JSON's tokens (no newlines or indents).
  explicit JsonSchemaGrammar(bool compact = false);
  ~JsonSchemaGrammar();
  // A rule for the texts valid against `schema`, whose "#" and "#/$defs/..."
  // refer to itself; `name` suggests the rule's name and `path` names the
  // schema in errors.
  std::string add(const nlohmann::ordered_json& schema, const std::string& name, const std::string& path);
  // "root ::= root_expression", then the rules added and JSON's own
  // (ws, string, number, value, object, ...).
  std::string gbnf(const std::string& root_expression) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// `text` as a GBNF string literal.
std::string gbnf_literal(const std::string& text);

}  // namespace tessera::llm
