// JSON schemas as GBNF (include/tessera/llm/json_schema.h, Note [JSON schemas as grammars]).
#include "tessera/llm/json_schema.h"

#include <cctype>
#include <functional>
#include <map>
#include <set>
#include <vector>

#include "tessera/core/error.h"

namespace tessera::llm {

namespace {

using ojson = nlohmann::ordered_json;

// The rules every schema's grammar may use.
constexpr const char* kWhitespace = R"(ws ::= ( " " | "\n" [ \t]{0,20} )?
)";
constexpr const char* kCompactWhitespace = R"(ws ::= " "?
)";
constexpr const char* kJsonRules = R"(string ::= "\"" char* "\""
char ::= [^"\\\x7F\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" ( [0-9a-cA-CefEF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} ) )
integer ::= "-"? ( "0" | [1-9] [0-9]{0,15} )
number ::= integer ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?
boolean ::= "true" | "false"
null ::= "null"
value ::= object | array | string | number | boolean | null
object ::= "{" ws ( string ws ":" ws value ( ws "," ws string ws ":" ws value )* ws )? "}"
array ::= "[" ws ( value ( ws "," ws value )* ws )? "]"
)";

// `text` as a GBNF string literal.
std::string literal(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7F) {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

const std::set<std::string> kAnnotations = {"title", "description", "$schema", "$id", "$comment", "examples", "default"};
const std::set<std::string> kKeywords = {"type", "properties", "required", "additionalProperties", "items",
                                         "minItems", "maxItems", "enum", "const", "anyOf", "$ref", "$defs",
                                         "definitions", "minLength", "maxLength"};

class Converter {
 public:
  explicit Converter(bool compact = false) : compact_(compact) {
    for (const char* n : {"root", "ws", "string", "char", "integer", "number", "boolean", "null", "value", "object",
                          "array"})
      names_.insert(n);
  }

  // A rule for `schema`; its "#" and "#/$defs/..." refer to itself.
  std::string add(const ojson& schema, const std::string& want, const std::string& path) {
    root_ = &schema;
    root_path_ = path;
    refs_.clear();
    root_rule_ = fresh(want);
    const size_t at = rules_.size();
    rules_.emplace_back(root_rule_, "");
    const std::string body = visit(schema, root_rule_, path);
    rules_[at].second = body;
    return root_rule_;
  }

  std::string gbnf(const std::string& root) const {
    std::string out = "root ::= " + root + "\n";
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    return out + (compact_ ? kCompactWhitespace : kWhitespace) + kJsonRules;
  }

 private:
  bool compact_;
  const ojson* root_ = nullptr;
  std::string root_path_, root_rule_;
  std::vector<std::pair<std::string, std::string>> rules_;
  std::map<std::string, std::string> refs_;  // $ref -> its rule
  std::set<std::string> names_;

  [[noreturn]] static void bad(const std::string& path, const std::string& what) {
    TS_ERROR("json_schema: ", what, " at ", path);
  }
  std::string fresh(const std::string& want) {
    std::string base;
    for (char c : want) base += std::isalnum(static_cast<unsigned char>(c)) || c == '-' ? c : '-';
    std::string n = base;
    for (int k = 2; names_.count(n); ++k) n = base + "-" + std::to_string(k);
    names_.insert(n);
    return n;
  }
  std::string rule(const std::string& want, const std::string& body) {
    const std::string n = fresh(want);
    rules_.emplace_back(n, body);
    return n;
  }
  static int64_t count(const ojson& s, const char* key, const std::string& path) {
    if (!s.contains(key)) return -1;
    const ojson& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 100000)
      bad(path, std::string("'") + key + "' must be a whole number from 0 to 100000");
    return v.get<int64_t>();
  }
  std::string ref(const std::string& to, const std::string& path) {
    if (to == "#") return root_rule_;
    auto it = refs_.find(to);
    if (it != refs_.end()) return it->second;
    std::string kind, name;
    for (const char* prefix : {"#/$defs/", "#/definitions/"})
      if (to.rfind(prefix, 0) == 0) {
        kind = std::string(prefix).substr(2, std::string(prefix).size() - 3);
        name = to.substr(std::string(prefix).size());
      }
    if (name.empty() || name.find('/') != std::string::npos || name.find('~') != std::string::npos)
      bad(path, "'$ref' " + ojson(to).dump() + " is not supported (#, #/$defs/NAME or #/definitions/NAME are)");
    const ojson& root = *root_;
    if (!root.is_object() || !root.contains(kind) || !root[kind].is_object() || !root[kind].contains(name))
      bad(path, "'$ref' " + ojson(to).dump() + " names no schema in the root's '" + kind + "'");
    // The rule's name is known before its body is: a recursive reference finds it.
    const std::string n = fresh("def-" + name);
    refs_[to] = n;
    const size_t at = rules_.size();
    rules_.emplace_back(n, "");
    const std::string body = visit(root[kind][name], n, root_path_ + "/" + kind + "/" + name);
    rules_[at].second = body;
    return n;
  }

  // A GBNF expression for the texts that validate against schema s.
  std::string visit(const ojson& s, const std::string& name, const std::string& path) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) bad(path, "the schema false (nothing validates)");
      return "value";
    }
    if (!s.is_object()) bad(path, "a schema must be an object or a boolean");
    for (const auto& [k, v] : s.items()) {
      if (kKeywords.count(k) || kAnnotations.count(k)) continue;
      bad(path, "the keyword '" + k + "' is not supported (supported: type, properties, required, "
                "additionalProperties false, items, minItems, maxItems, enum, const, anyOf, $ref, $defs, "
                "minLength, maxLength)");
    }
    if ((s.contains("$defs") || s.contains("definitions")) && &s != root_)
      bad(path, "'$defs' is supported in the root schema only");
    if (s.contains("$ref")) {
      if (!s["$ref"].is_string()) bad(path, "'$ref' must be a string");
      return ref(s["$ref"].get<std::string>(), path);
    }
    if (s.contains("const")) return literal(s["const"].dump());
    if (s.contains("enum")) {
      const ojson& e = s["enum"];
      if (!e.is_array() || e.empty()) bad(path, "'enum' must be a non-empty array");
      std::string alts;
      for (const ojson& v : e) alts += (alts.empty() ? "" : " | ") + literal(v.dump());
      return "( " + alts + " )";
    }
    if (s.contains("anyOf")) {
      const ojson& a = s["anyOf"];
      if (!a.is_array() || a.empty()) bad(path, "'anyOf' must be a non-empty array of schemas");
      std::string alts;
      for (size_t i = 0; i < a.size(); ++i)
        alts += (i ? " | " : "") + visit(a[i], name + "-" + std::to_string(i), path + "/anyOf/" + std::to_string(i));
      return "( " + alts + " )";
    }
    if (!s.contains("type")) return "value";
    const ojson& t = s["type"];
    if (t.is_array()) {
      if (t.empty()) bad(path, "'type' must name at least one type");
      std::string alts;
      for (const ojson& one : t) {
        if (!one.is_string()) bad(path, "'type' must be a string or an array of strings");
        alts += (alts.empty() ? "" : " | ") + typed(s, one.get<std::string>(), name, path);
      }
      return "( " + alts + " )";
    }
    if (!t.is_string()) bad(path, "'type' must be a string or an array of strings");
    return typed(s, t.get<std::string>(), name, path);
  }

  std::string typed(const ojson& s, const std::string& type, const std::string& name, const std::string& path) {
    if (type == "string") {
      const int64_t lo = count(s, "minLength", path), hi = count(s, "maxLength", path);
      if (lo < 0 && hi < 0) return "string";
      if (hi >= 0 && hi < std::max<int64_t>(lo, 0)) bad(path, "'maxLength' is below 'minLength'");
      return "\"\\\"\" char{" + std::to_string(std::max<int64_t>(lo, 0)) + "," + (hi >= 0 ? std::to_string(hi) : "") +
             "} \"\\\"\"";
    }
    if (type == "integer" || type == "number" || type == "boolean" || type == "null") return type;
    if (type == "array") {
      std::string item = "value";
      if (s.contains("items")) {
        if (s["items"].is_array()) bad(path, "'items' as an array (tuples) is not supported; give one schema");
        item = rule(name + "-item", visit(s["items"], name + "-item", path + "/items"));
      }
      const int64_t lo = std::max<int64_t>(count(s, "minItems", path), 0), hi = count(s, "maxItems", path);
      if (hi >= 0 && hi < lo) bad(path, "'maxItems' is below 'minItems'");
      if (hi == 0) return "\"[\" ws \"]\"";
      const std::string more = "( ws \",\" ws " + item + " ){" + std::to_string(std::max<int64_t>(lo - 1, 0)) + "," +
                               (hi > 0 ? std::to_string(hi - 1) : "") + "}";
      if (lo == 0) return "\"[\" ws ( " + item + " " + more + " ws )? \"]\"";
      return "\"[\" ws " + item + " " + more + " ws \"]\"";
    }
    if (type == "object") return object(s, name, path);
    bad(path, "'type' " + ojson(type).dump() + " is not one of string, number, integer, boolean, null, array, object");
  }

  std::string object(const ojson& s, const std::string& name, const std::string& path) {
    if (s.contains("additionalProperties")) {
      const ojson& a = s["additionalProperties"];
      if (!a.is_boolean() || (a.get<bool>() && s.contains("properties")))
        bad(path, "'additionalProperties' other than false is not supported with 'properties' (give each one)");
    }
    if (!s.contains("properties")) {
      if (s.contains("required") && !s["required"].empty()) bad(path, "'required' names properties not in 'properties'");
      const bool none = s.contains("additionalProperties") && !s["additionalProperties"].get<bool>();
      return none ? "\"{\" ws \"}\"" : "object";
    }
    const ojson& props = s["properties"];
    if (!props.is_object()) bad(path, "'properties' must be an object");
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) bad(path, "'required' must be an array of property names");
      for (const ojson& r : s["required"]) {
        if (!r.is_string() || !props.contains(r.get<std::string>()))
          bad(path, "'required' names " + r.dump() + ", which is not in 'properties'");
        required.insert(r.get<std::string>());
      }
    }
    // Each property as `"key" ws ":" ws value`, in the schema's order.
    std::vector<std::pair<std::string, bool>> kv;  // (expression, required)
    for (const auto& [key, sub] : props.items()) {
      const std::string v = rule(name + "-" + key, visit(sub, name + "-" + key, path + "/properties/" + key));
      kv.emplace_back(literal(ojson(key).dump()) + " ws \":\" ws " + v, required.count(key) > 0);
    }
    // rest(i, comma): properties i.. with a comma before the first present one when `comma`.
    std::map<std::pair<size_t, bool>, std::string> memo;
    std::function<std::string(size_t, bool)> rest = [&](size_t i, bool comma) -> std::string {
      if (i == kv.size()) return "";
      auto it = memo.find({i, comma});
      if (it != memo.end()) return it->second;
      const std::string sep = comma ? "ws \",\" ws " : "";
      const std::string tail = rest(i + 1, true);
      std::string body = sep + kv[i].first + (tail.empty() ? "" : " " + tail);
      if (!kv[i].second) {
        const std::string skip = rest(i + 1, comma);
        body = "( " + body + " )" + (skip.empty() ? "?" : " | " + skip);
      }
      const std::string r = rule(name + "-after-" + std::to_string(i) + (comma ? "c" : ""), body);
      memo[{i, comma}] = r;
      return r;
    };
    const std::string inside = rest(0, false);
    return "\"{\" ws " + (inside.empty() ? "" : inside + " ws ") + "\"}\"";
  }
};

}  // namespace

std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema) {
  Converter c;
  return c.gbnf(c.add(schema, "schema", "#"));
}

struct JsonSchemaGrammar::Impl {
  Converter converter;
};
JsonSchemaGrammar::JsonSchemaGrammar(bool compact) : impl_(std::make_unique<Impl>(Impl{Converter(compact)})) {}
JsonSchemaGrammar::~JsonSchemaGrammar() = default;
std::string JsonSchemaGrammar::add(const nlohmann::ordered_json& schema, const std::string& name,
                                   const std::string& path) {
  return impl_->converter.add(schema, name, path);
}
std::string JsonSchemaGrammar::gbnf(const std::string& root) const { return impl_->converter.gbnf(root); }
std::string gbnf_literal(const std::string& text) { return literal(text); }

std::string json_object_gbnf() { return std::string("root ::= object\n") + kWhitespace + kJsonRules; }

}  // namespace tessera::llm
