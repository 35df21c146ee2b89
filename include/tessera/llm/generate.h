#pragma once
// One request through the engine: the prompt in chunks, then token by token
// until a stop condition, the text streamed as it is made.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/llm/engine.h"
#include "tessera/llm/sampler.h"
#include "tessera/llm/tokenizer.h"

namespace tessera::llm {

struct GenerateOptions {
  SamplingParams sampling;
  int64_t max_tokens = 256;             // tokens to generate at most
  std::vector<std::string> stop;        // the text ends before the first of these
  std::vector<int32_t> stop_tokens;     // besides the tokenizer's EOS
  bool ignore_eos = false;
  int64_t prefill_chunk = 512;          // prompt tokens per engine step
  uint64_t choice = 0;                  // which of a request's choices (Note [Counter-based sampling])
  const Adapter* adapter = nullptr;     // a LoRA adapter (llm/lora.h) on every step
};

struct GenerateResult {
  std::vector<int32_t> tokens;          // generated, stop token excluded
  std::vector<float> logprobs;          // of each generated token
  std::string text;                     // the streamed text, up to a stop string
  std::string finish_reason;            // "stop" (EOS, stop token or string) or "length"
  int64_t prompt_tokens = 0;
  double prefill_seconds = 0, decode_seconds = 0;
};

// A request's text as its tokens come: decoded without splitting a UTF-8
// character, and held back where it could be the start of a stop string
// until the next tokens settle it, so no stop string's text ever leaks.
class TextStream {
 public:
  // special_text: control tokens write their text (otherwise nothing).
  TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop, bool special_text = false);
  // The text that is final once `token` is added. After a stop string
  // completes it returns the text before it and stopped() turns true.
  std::string push(int32_t token);
  // The text still held (at the end of a request that did not stop).
  std::string finish();
  bool stopped() const { return stopped_; }

 private:
  StreamDecoder decoder_;
  std::vector<std::string> stop_;
  std::string pending_;
  bool stopped_ = false;
};

// Called with each piece of text as it becomes final (never inside a UTF-8
// character or a possible stop string) and the token that completed it.
using TextCallback = std::function<void(std::string_view text, const Sampled& token)>;

// Runs the prompt's ids (already tokenized, BOS included) on a new sequence
// of `engine` and generates; the sequence is removed at the end.
GenerateResult generate(Engine& engine, const Tokenizer& tokenizer, const std::vector<int32_t>& prompt,
                        const GenerateOptions& opts, const TextCallback& on_text = {});

}  // namespace tessera::llm
