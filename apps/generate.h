#pragma once
// `tessera generate`: its flags and the command (apps/generate.cpp).
#include <CLI/CLI.hpp>

#include <memory>
#include <string>
#include <vector>

#include "tessera/llm/engine.h"
#include "tessera/llm/sampler.h"
#include "tessera/llm/tokenizer.h"
#include "tessera/train/run.h"

namespace tessera::cli {

struct GenerateFlags {
  CLI::App* cmd = nullptr;
  std::string model, prompt, kv_memory, kv_type = "f16", weights = "f32";
  std::string chat_template, system;  // `tessera chat` only
  std::string lora;                   // a LoRA adapter file
  int64_t max_tokens = 128, context = 0, batch = 512, kv_block = 16;
  int threads = 0;
  llm::SamplingParams sampling;
  std::vector<std::string> stop;
  bool ignore_eos = false;
};

// A language model ready for the engine, with its tokenizer and chat
// template (empty where it has none), and what to call it in messages.
using LanguageModel = train::LanguageModel;  // a GGUF file's or a training run's (train/run.h)

// `tessera perplexity MODEL -f TEXT`: llama-perplexity's measure (llm/perplexity.h).
struct PerplexityFlags {
  CLI::App* cmd = nullptr;
  std::string model, file, weights = "f32";
  int64_t context = 512, chunks = -1, batch = 512;
  int threads = 0;
};
void add_perplexity_command(CLI::App& app, PerplexityFlags& f);
int cmd_perplexity(const PerplexityFlags& f, const LanguageModel& lm);

// "256M", "2G", "1048576" -> bytes (--kv-memory); an error naming the text otherwise.
int64_t byte_count(const std::string& text);

void add_generate_command(CLI::App& app, GenerateFlags& f);
// `tessera chat`: the same model and sampling flags, a conversation on stdin.
void add_chat_command(CLI::App& app, GenerateFlags& f);
// Generates with a loaded model: a GGUF file's, or a training run's (the
// caller builds it and its tokenizer; `what` names it).
int cmd_generate(const GenerateFlags& f, std::shared_ptr<llm::Model> model, const llm::Tokenizer& tok,
                 const std::string& what, double load_seconds);
// A conversation: each line of stdin is a user's message, each reply is
// streamed to stdout; the prompt is the chat template's rendering of the
// whole conversation (`model_template`: the GGUF's tokenizer.chat_template,
// or empty; --chat-template overrides it).
int cmd_chat(const GenerateFlags& f, std::shared_ptr<llm::Model> model, const llm::Tokenizer& tok,
             const std::string& what, double load_seconds, const std::string& model_template);

}  // namespace tessera::cli
