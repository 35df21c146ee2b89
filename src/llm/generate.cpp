// One request through the engine (include/tessera/llm/generate.h).
#include "tessera/llm/generate.h"

#include <algorithm>
#include <chrono>

#include "tessera/core/error.h"

namespace tessera::llm {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Bytes at the end of `text` that could begin one of the stop strings.
size_t held_back(std::string_view text, const std::vector<std::string>& stop) {
  size_t hold = 0;
  for (const std::string& s : stop)
    for (size_t n = std::min(s.size() - 1, text.size()); n > hold; --n)
      if (text.substr(text.size() - n) == std::string_view(s).substr(0, n)) {
        hold = n;
        break;
      }
  return hold;
}

}  // namespace

TextStream::TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop, bool special_text)
    : decoder_(tokenizer, special_text), stop_(std::move(stop)) {
  for (const std::string& st : stop_) TS_CHECK(!st.empty(), "an empty stop string");
}

std::string TextStream::push(int32_t token) {
  TS_CHECK(!stopped_, "TextStream: a token after the stop string");
  pending_ += decoder_.next(token);
  size_t cut = std::string::npos;
  for (const std::string& st : stop_) cut = std::min(cut, pending_.find(st));
  if (cut != std::string::npos) {
    std::string out = pending_.substr(0, cut);
    pending_.clear();
    stopped_ = true;
    return out;
  }
  const size_t ready = pending_.size() - held_back(pending_, stop_);
  std::string out = pending_.substr(0, ready);
  pending_.erase(0, ready);
  return out;
}

std::string TextStream::finish() {
  if (stopped_) return {};
  std::string out = std::move(pending_) + decoder_.finish();
  pending_.clear();
  return out;
}

GenerateResult generate(Engine& engine, const Tokenizer& tokenizer, const std::vector<int32_t>& prompt,
                        const GenerateOptions& opts, const TextCallback& on_text) {
  TS_CHECK(!prompt.empty(), "generate: the prompt has no tokens");
  TS_CHECK(opts.max_tokens >= 0, "generate: max_tokens ", opts.max_tokens, " must be 0 or more");
  TS_CHECK(opts.prefill_chunk >= 1, "generate: prefill_chunk ", opts.prefill_chunk, " must be positive");
  const int64_t vocab = engine.model().spec().vocab;
  // A model's vocabulary may be padded past the tokenizer's (to divide by a
  // tensor-parallel size, as Megatron pads it): the padding is never sampled.
  TS_CHECK(tokenizer.size() <= vocab, "generate: the tokenizer has ", tokenizer.size(), " tokens, the model only ",
           vocab);
  Sampler sampler(tokenizer.size(), opts.sampling);
  GenerateResult res;
  res.prompt_tokens = static_cast<int64_t>(prompt.size());
  const int64_t seq = engine.add_sequence();
  struct Remove {
    Engine& e;
    int64_t s;
    ~Remove() { e.remove_sequence(s); }
  } remove{engine, seq};

  // The prompt, chunk by chunk; logits of its last token.
  const int64_t chunk = std::min(opts.prefill_chunk, engine.options().max_batch_tokens);
  auto t0 = std::chrono::steady_clock::now();
  std::span<const float> logits;
  for (size_t i = 0; i < prompt.size(); i += static_cast<size_t>(chunk)) {
    const size_t n = std::min(prompt.size() - i, static_cast<size_t>(chunk));
    Chunk c{seq, std::span<const int32_t>(prompt.data() + i, n), i + n == prompt.size() ? 1 : 0, opts.adapter};
    logits = engine.step({&c, 1});
  }
  res.prefill_seconds = seconds_since(t0);

  res.tokens.reserve(static_cast<size_t>(opts.max_tokens));
  res.logprobs.reserve(static_cast<size_t>(opts.max_tokens));
  std::vector<int32_t> history = prompt;
  history.reserve(prompt.size() + static_cast<size_t>(opts.max_tokens));
  TextStream text(tokenizer, opts.stop);
  res.finish_reason = "length";
  t0 = std::chrono::steady_clock::now();
  const int64_t context = engine.options().context ? engine.options().context : engine.model().spec().context;
  for (int64_t i = 0; i < opts.max_tokens; ++i) {
    const uint64_t pos = history.size();
    const Sampled s = sampler.sample(logits.data(), history, opts.choice, pos);
    const bool eos = !opts.ignore_eos && tokenizer.is_end_of_generation(s.token);
    if (eos || std::find(opts.stop_tokens.begin(), opts.stop_tokens.end(), s.token) != opts.stop_tokens.end()) {
      res.finish_reason = "stop";
      break;
    }
    res.tokens.push_back(s.token);
    res.logprobs.push_back(s.logprob);
    history.push_back(s.token);
    const std::string piece = text.push(s.token);
    res.text += piece;
    if (on_text) on_text(piece, s);
    if (text.stopped()) {
      res.finish_reason = "stop";
      break;
    }
    if (i + 1 == opts.max_tokens || static_cast<int64_t>(history.size()) >= context) break;
    Chunk c{seq, std::span<const int32_t>(&history.back(), 1), 1, opts.adapter};
    logits = engine.step({&c, 1});
  }
  // What was held back as a possible stop string's start is final now
  // (nothing after a stop string, which ended the text itself).
  const std::string rest = text.finish();
  res.text += rest;
  if (on_text && !rest.empty()) on_text(rest, Sampled{});
  res.decode_seconds = seconds_since(t0);
  return res;
}

}  // namespace tessera::llm
