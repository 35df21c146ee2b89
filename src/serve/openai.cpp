// OpenAI's request bodies, parsed and checked (serve/openai.h).
#include "tessera/serve/openai.h"

#include <cctype>
#include <cmath>
#include <set>

#include "tessera/core/error.h"
#include "tessera/llm/json_schema.h"

namespace tessera::serve::openai {
namespace {

using ojson = nlohmann::ordered_json;

[[noreturn]] void bad(const std::string& message, const std::string& param) { throw ApiError(400, message, param); }

// A value as JSON text for a message, cut short: the client's own value.
std::string quote(const ojson& v) {
  std::string s = dump(v);
  return s.size() > 64 ? s.substr(0, 61) + "..." : s;
}

bool given(const ojson& body, const char* key) { return body.contains(key) && !body[key].is_null(); }

double number(const ojson& body, const char* key, double lo, double hi, double fallback) {
  if (!given(body, key)) return fallback;
  const ojson& v = body[key];
  if (!v.is_number()) bad(std::string("'") + key + "' must be a number, got " + quote(v), key);
  const double x = v.get<double>();
  if (!(x >= lo && x <= hi))
    bad(std::string("'") + key + "' must be from " + ojson(lo).dump() + " to " + ojson(hi).dump() + ", got " + quote(v),
        key);
  return x;
}

int64_t integer(const ojson& body, const char* key, int64_t lo, int64_t hi, int64_t fallback) {
  if (!given(body, key)) return fallback;
  const ojson& v = body[key];
  if (!v.is_number_integer())
    bad(std::string("'") + key + "' must be an integer, got " + quote(v), key);
  const int64_t x = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX) ? INT64_MAX : v.get<int64_t>();
  if (x < lo || x > hi)
    bad(std::string("'") + key + "' must be from " + std::to_string(lo) + " to " + std::to_string(hi) + ", got " +
            quote(v), key);
  return x;
}

bool boolean(const ojson& body, const char* key, bool fallback) {
  if (!given(body, key)) return fallback;
  if (!body[key].is_boolean()) bad(std::string("'") + key + "' must be true or false, got " + quote(body[key]), key);
  return body[key].get<bool>();
}

std::string string(const ojson& body, const char* key) {
  if (!given(body, key)) return "";
  if (!body[key].is_string()) bad(std::string("'") + key + "' must be a string, got " + quote(body[key]), key);
  return body[key].get<std::string>();
}

// Parameters every request may carry, besides its own.
const std::set<std::string> kCommon = {
    "model", "max_tokens", "n", "stream", "stream_options", "stop", "temperature", "top_p", "presence_penalty",
    "frequency_penalty", "logit_bias", "seed", "user", "logprobs",
    // Accepted and without effect on the output.
    "store", "metadata", "service_tier",
    // Extensions (llama.cpp's and vLLM's names).
    "top_k", "min_p", "repetition_penalty", "repeat_penalty", "repeat_last_n", "ignore_eos", "priority",
    "cache_salt", "grammar", "response_format"};

void check_keys(const ojson& body, const std::set<std::string>& own) {
  for (const auto& [key, _] : body.items())
    if (!kCommon.count(key) && !own.count(key))
      bad("unrecognized request argument '" + key + "' (this server does not implement it)", key);
}

// response_format (chat, and completions as vLLM takes it): text, or the
// GBNF of json_object or of a json_schema (Note [JSON schemas as grammars]).
void parse_response_format(const ojson& body, GenerationRequest& r, const Limits& limits) {
  if (!given(body, "response_format")) return;
  const ojson& f = body["response_format"];
  if (!f.is_object() || !f.contains("type") || !f["type"].is_string())
    bad("'response_format' must be an object such as {\"type\": \"text\"}", "response_format");
  const std::string type = f["type"].get<std::string>();
  if (type != "text" && !r.grammar.empty())
    bad("'response_format' and 'grammar' both constrain the output; give one", "response_format");
  if (type == "json_object") {
    r.grammar = llm::json_object_gbnf();
    r.grammar_param = "response_format";
  } else if (type == "json_schema") {
    if (!f.contains("json_schema") || !f["json_schema"].is_object() || !f["json_schema"].contains("schema"))
      bad("'response_format' of type \"json_schema\" needs \"json_schema\": {\"name\", \"schema\"}",
          "response_format");
    const ojson& schema = f["json_schema"]["schema"];
    if (static_cast<int64_t>(schema.dump().size()) > limits.max_grammar_bytes)
      bad("the JSON schema has more than " + std::to_string(limits.max_grammar_bytes) + " bytes", "response_format");
    try {
      r.grammar = llm::json_schema_to_gbnf(schema);
    } catch (const Error& e) {
      bad(std::string("'response_format': ") + e.what(), "response_format");
    }
    r.grammar_param = "response_format";
  } else if (type != "text") {
    bad("'response_format' of type " + quote(f["type"]) + " is not one of \"text\", \"json_object\", "
        "\"json_schema\"", "response_format");
  }
}

// The parameters both APIs share.
void parse_common(const ojson& body, GenerationRequest& r, int64_t vocab, const Limits& limits) {
  r.model = string(body, "model");
  if (given(body, "grammar")) {
    if (!body["grammar"].is_string()) bad("'grammar' must be a string of GBNF rules (root ::= ...)", "grammar");
    r.grammar = body["grammar"].get<std::string>();
    if (static_cast<int64_t>(r.grammar.size()) > limits.max_grammar_bytes)
      bad("'grammar' has " + std::to_string(r.grammar.size()) + " bytes; at most " +
              std::to_string(limits.max_grammar_bytes), "grammar");
    r.grammar_param = "grammar";
  }
  parse_response_format(body, r, limits);
  r.n = integer(body, "n", 1, limits.max_n, 1);
  r.stream = boolean(body, "stream", false);
  if (given(body, "stream_options")) {
    const ojson& so = body["stream_options"];
    if (!so.is_object()) bad("'stream_options' must be an object such as {\"include_usage\": true}", "stream_options");
    if (!r.stream) bad("'stream_options' is only allowed with \"stream\": true", "stream_options");
    for (const auto& [key, _] : so.items())
      if (key != "include_usage") bad("unrecognized stream option '" + key + "' (include_usage is the one)", "stream_options");
    r.include_usage = boolean(so, "include_usage", false);
  }
  if (given(body, "stop")) {
    const ojson& s = body["stop"];
    if (s.is_string()) r.stop.push_back(s.get<std::string>());
    else if (s.is_array()) {
      if (static_cast<int64_t>(s.size()) > limits.max_stop)
        bad("'stop' has " + std::to_string(s.size()) + " strings; at most " + std::to_string(limits.max_stop), "stop");
      for (const ojson& x : s) {
        if (!x.is_string()) bad("'stop' must be a string or an array of strings, got " + quote(x), "stop");
        r.stop.push_back(x.get<std::string>());
      }
    } else bad("'stop' must be a string or an array of strings, got " + quote(s), "stop");
    for (const std::string& x : r.stop) {
      if (x.empty()) bad("a stop string is empty", "stop");
      if (static_cast<int64_t>(x.size()) > limits.max_stop_bytes)
        bad("a stop string is " + std::to_string(x.size()) + " bytes; at most " + std::to_string(limits.max_stop_bytes),
            "stop");
    }
  }
  llm::SamplingParams& p = r.sampling;
  p.temperature = static_cast<float>(number(body, "temperature", 0, 2, 1));
  p.top_p = static_cast<float>(number(body, "top_p", 0, 1, 1));
  if (p.top_p == 0) bad("'top_p' must be more than 0 (use temperature 0 for greedy decoding)", "top_p");
  p.top_k = integer(body, "top_k", -1, vocab, 0);
  if (p.top_k < 0) p.top_k = 0;  // vLLM's -1: every token
  p.min_p = static_cast<float>(number(body, "min_p", 0, 1, 0));
  const char* rp = given(body, "repetition_penalty") ? "repetition_penalty" : "repeat_penalty";
  p.repeat_penalty = static_cast<float>(number(body, rp, 0, 10, 1));
  if (p.repeat_penalty <= 0) bad(std::string("'") + rp + "' must be more than 0 (1: off)", rp);
  p.repeat_last_n = integer(body, "repeat_last_n", 0, 1 << 20, 64);
  p.presence_penalty = static_cast<float>(number(body, "presence_penalty", -2, 2, 0));
  p.frequency_penalty = static_cast<float>(number(body, "frequency_penalty", -2, 2, 0));
  if (given(body, "logit_bias")) {
    const ojson& b = body["logit_bias"];
    if (!b.is_object()) bad("'logit_bias' must be an object mapping token ids to numbers", "logit_bias");
    if (static_cast<int64_t>(b.size()) > limits.max_logit_bias)
      bad("'logit_bias' has " + std::to_string(b.size()) + " entries; at most " + std::to_string(limits.max_logit_bias),
          "logit_bias");
    for (const auto& [key, v] : b.items()) {
      size_t used = 0;
      long long id = -1;
      try {
        id = std::stoll(key, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != key.size() || key.empty() || id < 0 || id >= vocab)
        bad("'logit_bias' key '" + key.substr(0, 32) + "' is not a token id in [0, " + std::to_string(vocab) + ")",
            "logit_bias");
      if (!v.is_number() || !(v.get<double>() >= -100 && v.get<double>() <= 100))
        bad("'logit_bias' values must be numbers from -100 to 100, got " + quote(v), "logit_bias");
      p.logit_bias.emplace_back(static_cast<int32_t>(id), v.get<float>());
    }
  }
  if (given(body, "seed")) {
    r.seeded = true;
    p.seed = static_cast<uint64_t>(integer(body, "seed", INT64_MIN, INT64_MAX, 0));
  }
  r.user = string(body, "user");
  r.cache_salt = string(body, "cache_salt");
  r.ignore_eos = boolean(body, "ignore_eos", false);
  r.priority = integer(body, "priority", -1000000, 1000000, 0);
}

// JSON text that must be an object; `what` names it in errors.
ojson parse_object(std::string_view text, int64_t max_depth, const std::string& what, const std::string& param) {
  // The callback sees each value's depth as it is read: text nested too
  // deep is refused before it is built.
  const ojson::parser_callback_t depth = [&](int d, ojson::parse_event_t, ojson&) {
    if (d > max_depth) bad(what + " is JSON nested deeper than " + std::to_string(max_depth) + " levels", param);
    return true;
  };
  ojson j;
  try {
    j = ojson::parse(text.begin(), text.end(), depth);
  } catch (const ojson::exception& e) {
    // nlohmann's message names the byte and what it expected: the client's own text.
    bad(what + " is not valid JSON: " + e.what(), param);
  }
  if (!j.is_object()) bad(what + " must be a JSON object", param);
  return j;
}

// A function name as OpenAI allows it.
bool function_name(const ojson& v) {
  if (!v.is_string()) return false;
  const std::string& s = v.get_ref<const std::string&>();
  if (s.empty() || s.size() > 64) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  return true;
}

// tools, tool_choice and parallel_tool_calls (chat).
void parse_tools(const ojson& body, GenerationRequest& r, const Limits& limits) {
  std::set<std::string> names;
  if (given(body, "tools")) {
    const ojson& tools = body["tools"];
    if (!tools.is_array()) bad("'tools' must be an array of {\"type\": \"function\", \"function\": {...}}", "tools");
    if (static_cast<int64_t>(tools.size()) > limits.max_tools)
      bad("'tools' has " + std::to_string(tools.size()) + " functions; at most " + std::to_string(limits.max_tools),
          "tools");
    int64_t schema_bytes = 0;
    for (size_t i = 0; i < tools.size(); ++i) {
      const ojson& t = tools[i];
      const std::string where = "tools[" + std::to_string(i) + "]";
      if (!t.is_object() || t.value("type", "") != "function" || !t.contains("function") || !t["function"].is_object())
        bad(where + " must be {\"type\": \"function\", \"function\": {\"name\", \"description\", \"parameters\"}}",
            "tools");
      for (const auto& [key, _] : t.items())
        if (key != "type" && key != "function") bad(where + " has the unrecognized key '" + key + "'", "tools");
      const ojson& f = t["function"];
      for (const auto& [key, _] : f.items())
        if (key != "name" && key != "description" && key != "parameters" && key != "strict")
          bad(where + ".function has the unrecognized key '" + key + "' (name, description, parameters, strict)",
              "tools");
      if (!f.contains("name") || !function_name(f["name"]))
        bad(where + ".function.name must be 1 to 64 letters, digits, '_' or '-'", "tools");
      if (!names.insert(f["name"].get<std::string>()).second)
        bad(where + ".function.name " + quote(f["name"]) + " is given twice", "tools");
      if (f.contains("description") && !f["description"].is_string())
        bad(where + ".function.description must be a string", "tools");
      if (f.contains("strict") && !f["strict"].is_boolean()) bad(where + ".function.strict must be true or false", "tools");
      if (f.contains("parameters")) {
        if (!f["parameters"].is_object()) bad(where + ".function.parameters must be a JSON schema object", "tools");
        schema_bytes += static_cast<int64_t>(f["parameters"].dump().size());
      }
    }
    if (schema_bytes > limits.max_grammar_bytes)
      bad("the tools' parameter schemas have " + std::to_string(schema_bytes) + " bytes; at most " +
              std::to_string(limits.max_grammar_bytes), "tools");
    r.tools = tools;
  }
  using C = GenerationRequest::ToolChoice;
  r.tool_choice = r.tools.empty() ? C::None : C::Auto;
  if (given(body, "tool_choice")) {
    const ojson& c = body["tool_choice"];
    if (c == "none") r.tool_choice = C::None;
    else if (c == "auto") r.tool_choice = r.tools.empty() ? C::None : C::Auto;
    else if (c == "required") r.tool_choice = C::Required;
    else if (c.is_object() && c.value("type", "") == "function" && c.contains("function") && c["function"].is_object() &&
             c["function"].contains("name") && c["function"]["name"].is_string()) {
      r.tool_choice = C::Function;
      r.tool_name = c["function"]["name"].get<std::string>();
      if (!names.count(r.tool_name))
        bad("'tool_choice' names the function " + quote(c["function"]["name"]) + ", which is not in 'tools'",
            "tool_choice");
    } else {
      bad("'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": "
          "{\"name\": ...}}, got " + quote(c), "tool_choice");
    }
    if (r.tool_choice == C::Required && r.tools.empty()) bad("'tool_choice' \"required\" needs 'tools'", "tool_choice");
  }
  r.parallel_tool_calls = boolean(body, "parallel_tool_calls", true);
  if ((r.tool_choice == C::Required || r.tool_choice == C::Function) && !r.grammar.empty())
    bad("'tool_choice' " + quote(body["tool_choice"]) + " forces a call, and '" + r.grammar_param +
            "' constrains the reply too; give one", "tool_choice");
}

// An assistant message's tool_calls, their arguments parsed: templates
// write them with tojson, which wants an object, not JSON text.
ojson history_tool_calls(const ojson& calls, const std::string& where, int64_t max_depth) {
  if (!calls.is_array()) bad(where + ".tool_calls must be an array of calls", "messages");
  ojson out = ojson::array();
  for (size_t j = 0; j < calls.size(); ++j) {
    const ojson& c = calls[j];
    const std::string at = where + ".tool_calls[" + std::to_string(j) + "]";
    if (!c.is_object() || !c.contains("function") || !c["function"].is_object() || !function_name(c["function"].value("name", ojson())))
      bad(at + " must be {\"id\", \"type\": \"function\", \"function\": {\"name\", \"arguments\"}}", "messages");
    if (c.contains("type") && c["type"] != "function") bad(at + ".type must be \"function\"", "messages");
    if (c.contains("id") && !c["id"].is_string()) bad(at + ".id must be a string", "messages");
    const ojson& f = c["function"];
    ojson args = ojson::object();
    if (f.contains("arguments")) {
      if (f["arguments"].is_string()) {
        args = parse_object(f["arguments"].get<std::string>(), max_depth, at + ".function.arguments", "messages");
      } else {
        args = f["arguments"];
      }
      if (!args.is_object()) bad(at + ".function.arguments must be a JSON object", "messages");
    }
    ojson call = {{"id", c.value("id", "")}, {"type", "function"},
                  {"function", {{"name", f["name"]}, {"arguments", std::move(args)}}}};
    out.push_back(std::move(call));
  }
  return out;
}

int64_t max_tokens(const ojson& body, const char* key, const Limits& limits) {
  return integer(body, key, 1, limits.max_tokens, -1);
}

// One prompt of token ids.
Prompt id_prompt(const ojson& a, int64_t vocab, const Limits& limits) {
  Prompt p;
  p.is_ids = true;
  if (static_cast<int64_t>(a.size()) > limits.max_prompt_tokens)
    bad("a prompt has " + std::to_string(a.size()) + " token ids; at most " + std::to_string(limits.max_prompt_tokens),
        "prompt");
  for (const ojson& t : a) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab)
      bad("prompt token " + quote(t) + " is not a token id in [0, " + std::to_string(vocab) + ")", "prompt");
    p.ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  if (p.ids.empty()) bad("a prompt has no tokens", "prompt");
  return p;
}

}  // namespace

ApiError::ApiError(int status, const std::string& message, std::string param, std::string code, std::string type)
    : std::runtime_error(message), status_(status), type_(std::move(type)), param_(std::move(param)),
      code_(std::move(code)) {
  if (type_.empty())
    type_ = status == 401 ? "authentication_error" : status == 404 ? "not_found_error"
            : status >= 500 ? "server_error" : "invalid_request_error";
}

std::string dump(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

std::string error_body(const ApiError& e) {
  ojson err = {{"message", e.what()}, {"type", e.type()}, {"param", nullptr}, {"code", nullptr}};
  if (!e.param().empty()) err["param"] = e.param();
  if (!e.code().empty()) err["code"] = e.code();
  return dump(ojson{{"error", err}});
}

ojson parse_body(std::string_view body, int64_t max_depth) { return parse_object(body, max_depth, "the request body", ""); }

GenerationRequest parse_completion_request(std::string_view text, int64_t vocab, const Limits& limits) {
  const ojson body = parse_body(text, limits.max_json_depth);
  check_keys(body, {"prompt", "echo", "best_of", "suffix"});
  GenerationRequest r;
  r.kind = GenerationRequest::Kind::Completion;
  parse_common(body, r, vocab, limits);
  r.max_tokens = max_tokens(body, "max_tokens", limits);
  if (!given(body, "prompt")) bad("'prompt' is required (a string, an array of strings, or token ids)", "prompt");
  const ojson& p = body["prompt"];
  if (p.is_string()) r.prompts.push_back({p.get<std::string>(), {}, false});
  else if (p.is_array() && !p.empty() && p[0].is_number_integer()) r.prompts.push_back(id_prompt(p, vocab, limits));
  else if (p.is_array() && !p.empty()) {
    if (static_cast<int64_t>(p.size()) > limits.max_prompts)
      bad("'prompt' has " + std::to_string(p.size()) + " prompts; at most " + std::to_string(limits.max_prompts), "prompt");
    for (const ojson& x : p) {
      if (x.is_string()) r.prompts.push_back({x.get<std::string>(), {}, false});
      else if (x.is_array()) r.prompts.push_back(id_prompt(x, vocab, limits));
      else bad("'prompt' must be a string, an array of strings, an array of token ids or an array of those; got an "
               "element " + quote(x), "prompt");
    }
  } else bad("'prompt' must be a string, an array of strings, or token ids; got " + quote(p), "prompt");
  if (r.n * static_cast<int64_t>(r.prompts.size()) > limits.max_prompts)
    bad("'n' times the prompts is " + std::to_string(r.n * static_cast<int64_t>(r.prompts.size())) + " choices; at most " +
        std::to_string(limits.max_prompts), "n");
  r.echo = boolean(body, "echo", false);
  if (given(body, "logprobs")) {
    r.logprobs = true;
    r.sampling.top_logprobs = integer(body, "logprobs", 0, 5, 0);
  }
  if (r.echo && r.logprobs) bad("'echo' with 'logprobs' (the prompt's own log-probabilities) is not supported", "echo");
  if (given(body, "best_of") && integer(body, "best_of", 1, limits.max_n, 1) != r.n)
    bad("'best_of' other than n is not supported", "best_of");
  if (!string(body, "suffix").empty()) bad("'suffix' (insertion) is not supported", "suffix");
  return r;
}

EmbeddingRequest parse_embedding_request(std::string_view text, int64_t vocab, const Limits& limits) {
  const ojson body = parse_body(text, limits.max_json_depth);
  for (const auto& [key, _] : body.items())
    if (key != "model" && key != "input" && key != "encoding_format" && key != "user" && key != "pooling")
      bad("unrecognized request argument '" + key + "' (this server does not implement it)", key);
  EmbeddingRequest r;
  r.model = string(body, "model");
  r.user = string(body, "user");
  const std::string format = string(body, "encoding_format");
  if (!format.empty() && format != "float" && format != "base64")
    bad("'encoding_format' must be \"float\" or \"base64\"", "encoding_format");
  r.base64 = format == "base64";
  r.pooling = string(body, "pooling");
  if (!r.pooling.empty() && r.pooling != "mean" && r.pooling != "last" && r.pooling != "cls")
    bad("'pooling' must be \"mean\", \"last\" or \"cls\"", "pooling");
  if (!given(body, "input")) bad("'input' is required (a string, an array of strings, or token ids)", "input");
  const ojson& in = body["input"];
  auto ids = [&](const ojson& a) {
    Prompt p = id_prompt(a, vocab, limits);
    return p;
  };
  if (in.is_string()) r.inputs.push_back({in.get<std::string>(), {}, false});
  else if (in.is_array() && !in.empty() && in[0].is_number_integer()) r.inputs.push_back(ids(in));
  else if (in.is_array() && !in.empty()) {
    if (static_cast<int64_t>(in.size()) > limits.max_prompts)
      bad("'input' has " + std::to_string(in.size()) + " inputs; at most " + std::to_string(limits.max_prompts), "input");
    for (const ojson& x : in) {
      if (x.is_string()) r.inputs.push_back({x.get<std::string>(), {}, false});
      else if (x.is_array()) r.inputs.push_back(ids(x));
      else bad("'input' must be a string, an array of strings, token ids or an array of those; got an element " +
               quote(x), "input");
    }
  } else bad("'input' must be a string, an array of strings, or token ids; got " + quote(in), "input");
  for (const Prompt& p : r.inputs)
    if (!p.is_ids && p.text.empty()) bad("an input is empty", "input");
  return r;
}

std::string base64(std::string_view bytes) {
  static const char* abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const uint32_t b0 = static_cast<uint8_t>(bytes[i]);
    const uint32_t b1 = i + 1 < bytes.size() ? static_cast<uint8_t>(bytes[i + 1]) : 0;
    const uint32_t b2 = i + 2 < bytes.size() ? static_cast<uint8_t>(bytes[i + 2]) : 0;
    const uint32_t v = b0 << 16 | b1 << 8 | b2;
    out += abc[v >> 18 & 63];
    out += abc[v >> 12 & 63];
    out += i + 1 < bytes.size() ? abc[v >> 6 & 63] : '=';
    out += i + 2 < bytes.size() ? abc[v & 63] : '=';
  }
  return out;
}

GenerationRequest parse_chat_request(std::string_view text, int64_t vocab, const Limits& limits) {
  const ojson body = parse_body(text, limits.max_json_depth);
  check_keys(body, {"messages", "max_completion_tokens", "top_logprobs", "tools", "tool_choice",
                    "parallel_tool_calls"});
  GenerationRequest r;
  r.kind = GenerationRequest::Kind::Chat;
  parse_common(body, r, vocab, limits);
  r.max_tokens = max_tokens(body, given(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens", limits);
  r.logprobs = boolean(body, "logprobs", false);
  r.sampling.top_logprobs = integer(body, "top_logprobs", 0, 20, 0);
  if (r.sampling.top_logprobs > 0 && !r.logprobs)
    bad("'top_logprobs' needs \"logprobs\": true", "top_logprobs");
  parse_tools(body, r, limits);
  if (!given(body, "messages") || !body["messages"].is_array() || body["messages"].empty())
    bad("'messages' is required: a non-empty array of {\"role\", \"content\"}", "messages");
  const ojson& ms = body["messages"];
  if (static_cast<int64_t>(ms.size()) > limits.max_messages)
    bad("'messages' has " + std::to_string(ms.size()) + " messages; at most " + std::to_string(limits.max_messages),
        "messages");
  static const std::set<std::string> roles = {"system", "developer", "user", "assistant", "tool"};
  r.messages = ojson::array();
  for (size_t i = 0; i < ms.size(); ++i) {
    const ojson& m = ms[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) bad(where + " must be an object {\"role\", \"content\"}", "messages");
    if (!m.contains("role") || !m["role"].is_string() || !roles.count(m["role"].get<std::string>()))
      bad(where + ".role must be one of system, developer, user, assistant, tool", "messages");
    std::string content;
    if (m.contains("content") && m["content"].is_string()) content = m["content"].get<std::string>();
    else if (m.contains("content") && m["content"].is_array()) {
      // Text parts, joined by newlines as vLLM does.
      for (const ojson& part : m["content"]) {
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
          bad(where + ".content: only text parts {\"type\": \"text\", \"text\": ...} are supported, got " + quote(part),
              "messages");
        if (!content.empty()) content += "\n";
        content += part["text"].get<std::string>();
      }
    } else if (!(m["role"] == "assistant" && (!m.contains("content") || m["content"].is_null()) &&
                 (m.contains("content") || given(m, "tool_calls"))))
      bad(where + ".content must be a string or an array of text parts", "messages");
    ojson out = {{"role", m["role"]}, {"content", content}};
    if (m.contains("name") && m["name"].is_string()) out["name"] = m["name"];
    if (m["role"] == "assistant" && given(m, "tool_calls")) out["tool_calls"] = history_tool_calls(m["tool_calls"], where, limits.max_json_depth);
    if (m["role"] == "tool") {
      if (!m.contains("tool_call_id") || !m["tool_call_id"].is_string())
        bad(where + ".tool_call_id must be the id of the call this message answers", "messages");
      out["tool_call_id"] = m["tool_call_id"];
    }
    r.messages.push_back(std::move(out));
  }
  return r;
}

}  // namespace tessera::serve::openai
