#pragma once
// OpenAI's completions and chat completions API: request bodies parsed and
// checked into what the LLM service runs, and its error bodies.
//
// Everything a client sends is checked here, before a model sees it: the
// JSON (its size, nesting and UTF-8), each parameter's type and range, and
// the limits on prompts, messages, n, max_tokens, stops and logit bias. A bad
// request is an ApiError that names the parameter and says what would be
// right. Parameters this server does not implement are refused by name,
// never silently ignored (a client asking for JSON output must not get prose).
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/llm/sampler.h"

namespace tessera::serve::openai {

// {"error": {"message", "type", "param", "code"}} with an HTTP status.
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, const std::string& message, std::string param = "", std::string code = "",
           std::string type = "");
  int status() const { return status_; }
  const std::string& type() const { return type_; }  // "invalid_request_error", "server_error", ...
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }

 private:
  int status_;
  std::string type_, param_, code_;
};
std::string error_body(const ApiError& e);
// JSON text on one line; invalid UTF-8 in strings becomes U+FFFD, never an exception.
std::string dump(const nlohmann::ordered_json& j);

struct Limits {
  int64_t max_json_depth = 64;
  int64_t max_n = 8;               // choices per prompt
  int64_t max_prompts = 64;        // prompts in one completions request
  int64_t max_prompt_tokens = 1 << 20;  // token ids in a prompt given as ids
  int64_t max_messages = 1024;
  int64_t max_stop = 4;            // stop strings, as OpenAI allows
  int64_t max_stop_bytes = 256;    // each
  int64_t max_logit_bias = 1024;   // entries
  int64_t max_tokens = 1 << 20;    // the most a request may ask for (the context bounds it further)
  int64_t max_grammar_bytes = 1 << 16;  // a GBNF grammar, or a JSON schema as JSON text
  int64_t max_tools = 128;              // functions in "tools" (their schemas count toward max_grammar_bytes)
};

// A prompt as the client gave it: text, or token ids.
struct Prompt {
  std::string text;
  std::vector<int32_t> ids;
  bool is_ids = false;
};

struct GenerationRequest {
  enum class Kind { Completion, Chat } kind = Kind::Completion;
  std::string model;  // empty: not given
  std::vector<Prompt> prompts;        // completions
  nlohmann::ordered_json messages;    // chat: [{"role", "content"}], contents as text
  int64_t max_tokens = -1;            // -1: not given (completions: 16; chat: up to the context)
  int64_t n = 1;
  bool stream = false, include_usage = false;
  std::vector<std::string> stop;
  llm::SamplingParams sampling;       // OpenAI's defaults: temperature 1, top_p 1, no top_k or min_p
  bool seeded = false;                // "seed" given (else the service draws one)
  bool logprobs = false;              // report each token's log-probability
  bool echo = false;                  // completions: the prompt's text before the completion
  bool ignore_eos = false;
  int64_t priority = 0;
  std::string user;
  std::string cache_salt;             // vLLM's: prompts are shared from the cache only with equal salts
  // Structured output: GBNF from response_format (json_object, json_schema)
  // or the "grammar" extension (llama.cpp's name); "" for none. `grammar_param`
  // names where it came from, for errors found when it is compiled.
  std::string grammar, grammar_param;
  // Tools (chat): [{"type": "function", "function": {"name", "description",
  // "parameters"}}] as given, checked; assistant messages' tool_calls carry
  // their arguments as JSON objects (as templates expect them).
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();
  enum class ToolChoice { None, Auto, Required, Function } tool_choice = ToolChoice::None;
  std::string tool_name;  // ToolChoice::Function: the one to call
  bool parallel_tool_calls = true;
};

struct EmbeddingRequest {
  std::string model;
  std::vector<Prompt> inputs;
  bool base64 = false;       // encoding_format "base64": little-endian float32, base64-encoded
  std::string pooling;       // extension: "mean", "last" or "cls" ("" : the server's)
  std::string user;
};

// The bodies of POST /v1/completions and /v1/chat/completions. `vocab`
// bounds token ids (prompts, logit_bias).
GenerationRequest parse_completion_request(std::string_view body, int64_t vocab, const Limits& limits = {});
GenerationRequest parse_chat_request(std::string_view body, int64_t vocab, const Limits& limits = {});
// The body of POST /v1/embeddings: input as text, token ids, or a list of either.
EmbeddingRequest parse_embedding_request(std::string_view body, int64_t vocab, const Limits& limits = {});
// Base64 of bytes (RFC 4648, with padding).
std::string base64(std::string_view bytes);

// A body as JSON, its nesting bounded (an ApiError naming what is wrong).
nlohmann::ordered_json parse_body(std::string_view body, int64_t max_depth);

}  // namespace tessera::serve::openai
