// A generation request's response as OpenAI writes it, built from the
// engine's events: the chunks of a stream as they arrive, or one body at
// the end. Streaming and non-streaming replies go through the same writer,
// so a field added to one is in the other.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/llm/scheduler.h"
#include "tessera/llm/tokenizer.h"
#include "tessera/llm/tool_calls.h"
#include "tessera/serve/openai.h"

namespace tessera::serve {

// A random 64-bit value from the OS's generator (libsodium): request ids and
// unseeded sampling seeds. Thread-safe with no per-thread state: a
// thread_local std::mt19937_64 (2.5 KB) in each caller made libtessera.so's
// static thread-local block too large for dlopen (the Python module).
uint64_t random_u64();

// One choice of a request, as its events arrive.
struct Choice {
  int64_t id = 0;      // the scheduler's
  int64_t index = 0;   // OpenAI's: prompt * n + choice
  int64_t prompt = 0;  // which prompt
  std::string text;
  nlohmann::ordered_json logprobs = nlohmann::ordered_json::array();  // chat: content entries
  std::vector<std::string> tokens;                                    // completions: filled at the end
  std::vector<float> token_logprobs;
  std::vector<nlohmann::ordered_json> top;
  std::vector<int64_t> offsets;
  std::string finish_reason;
  std::unique_ptr<llm::ToolCallParser> tool_parser;  // a chat with tools: calls found in the reply
  nlohmann::ordered_json tool_calls = nlohmann::ordered_json::array();  // their deltas joined (without streaming)
  int64_t completion_tokens = 0, cached_tokens = 0;
  bool finished = false;
  // When its last token came (its arrival before the first): TTFT and ITL.
  bool first = true;
  std::chrono::steady_clock::time_point last;
  // Streaming: this hand-off's content and log-probs not yet in a chunk
  // (Note [One chunk per step]).
  std::string pending;
  nlohmann::ordered_json pending_lp;  // null, or the chunk's logprobs object
};

class CompletionWriter {
 public:
  // `served` is the model name the response carries (the base or an adapter);
  // `echoes` the prompts' texts when the request asked for echo.
  CompletionWriter(const openai::GenerationRequest& g, const llm::Tokenizer& tok, std::string served,
                   std::vector<std::string> echoes, int64_t prompt_tokens);

  // The request's choices, added as they are submitted.
  Choice& add_choice(Choice c);
  std::vector<Choice>& choices() { return choices_; }
  const std::vector<Choice>& choices() const { return choices_; }
  Choice& choice_of(int64_t id) { return choices_[by_id_.at(id)]; }
  bool all_finished() const { return open_ == 0; }

  // A stream's opening chunks (the role, or the echoed prompts); without
  // streaming, puts the echoes in the texts and returns "".
  std::string begin();
  // One event of choice `c`. A stream's chunks collect until take().
  void add(Choice& c, llm::RequestEvent& ev);
  // The chunks of the events added since the last take() (stream only).
  std::string take();
  // A stream's end: the usage chunk when asked, then [DONE].
  std::string end_stream() const;
  // The whole response (without streaming).
  nlohmann::ordered_json body() const;

 private:
  std::string chunk(nlohmann::ordered_json choices_json) const;
  void flush(Choice& c);
  void add_logprobs(Choice& c, const llm::RequestEvent& ev);
  nlohmann::ordered_json usage() const;

  const openai::GenerationRequest& g_;
  const llm::Tokenizer& tok_;
  const bool chat_;
  const std::string served_, id_;
  const int64_t created_;
  std::vector<std::string> echoes_;
  const int64_t prompt_tokens_;
  std::vector<Choice> choices_;
  std::map<int64_t, size_t> by_id_;
  size_t open_ = 0;
  std::string out_;  // a stream's chunks not yet taken
};

}  // namespace tessera::serve
