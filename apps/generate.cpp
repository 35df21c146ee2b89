// `tessera generate MODEL -p TEXT`: text from a language model (a GGUF file,
// or a Llama or GPT that `tessera train` made), streamed to stdout, with
// prefill and decode speeds on stderr.
#include "generate.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tessera/core/error.h"
#include "tessera/core/parallel.h"
#include <iostream>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "tessera/io/file.h"
#include "tessera/llm/chat_template.h"
#include "tessera/llm/lora_adapter.h"
#include "tessera/llm/engine.h"
#include "tessera/llm/generate.h"
#include "tessera/llm/perplexity.h"
#include "tessera/llm/tokenizer.h"

namespace tessera::cli {

int64_t byte_count(const std::string& text) {
  size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  int shift = 0;
  const std::string suffix = text.substr(used);
  if (suffix == "K" || suffix == "k") shift = 10;
  else if (suffix == "M" || suffix == "m") shift = 20;
  else if (suffix == "G" || suffix == "g") shift = 30;
  else if (!suffix.empty()) shift = -1;
  TS_CHECK(used > 0 && v > 0 && shift >= 0 && v < (1LL << (60 - shift)), "--kv-memory '", text,
           "' is not a positive byte count (examples: 268435456, 256M, 2G)");
  return static_cast<int64_t>(v) << shift;
}

namespace {


}  // namespace

// The flags `generate` and `chat` share: the model, sampling, the engine.
void add_model_options(CLI::App* c, GenerateFlags& f) {
  c->add_option("model", f.model, "the .gguf file, or a training run or checkpoint directory")->required();
  c->add_option("--weights", f.weights, "a training run's weights in the engine: f32, f16, bf16, q8_0 or q4_0")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0"}));
  c->add_option("-n,--max-tokens", f.max_tokens, "tokens to generate at most")->check(CLI::Range(0, 1 << 20));
  c->add_option("--temp", f.sampling.temperature, "temperature (0: greedy)")->check(CLI::Range(0.0, 100.0));
  c->add_option("--top-k", f.sampling.top_k, "keep the k most likely tokens (0: all)")->check(CLI::Range(0, 1 << 24));
  c->add_option("--top-p", f.sampling.top_p, "keep the most likely tokens up to this probability (1: off)")
      ->check(CLI::Range(0.0, 1.0));
  c->add_option("--min-p", f.sampling.min_p, "drop tokens less likely than this times the most likely (0: off)")
      ->check(CLI::Range(0.0, 1.0));
  c->add_option("--repeat-penalty", f.sampling.repeat_penalty, "divide the logits of recent tokens (1: off)");
  c->add_option("--repeat-last-n", f.sampling.repeat_last_n, "how many recent tokens the penalties see")
      ->check(CLI::Range(0, 1 << 20));
  c->add_option("--presence-penalty", f.sampling.presence_penalty, "subtracted from recent tokens' logits")
      ->check(CLI::Range(-2.0, 2.0));
  c->add_option("--frequency-penalty", f.sampling.frequency_penalty, "subtracted per occurrence in recent tokens")
      ->check(CLI::Range(-2.0, 2.0));
  c->add_option("--seed", f.sampling.seed, "the request's seed (the same seed gives the same text)");
  c->add_option("--stop", f.stop, "end the text before this string (repeatable)");
  c->add_flag("--ignore-eos", f.ignore_eos, "keep generating past the end-of-text token");
  c->add_option("-t,--threads", f.threads, "threads (0: OMP_NUM_THREADS or all cores)")->check(CLI::Range(0, 1024));
  c->add_option("--ctx", f.context, "positions per sequence (0: the model's)")->check(CLI::Range(0, 1 << 18));
  c->add_option("--kv-memory", f.kv_memory, "bytes of KV cache, e.g. 256M (default: the context's tokens, at most 4096)");
  c->add_option("--kv-block", f.kv_block, "tokens per KV cache block: a multiple of 16 up to 1024")
      ->check(CLI::Range(16, 1024));
  c->add_option("--kv-type", f.kv_type, "KV cache type for keys and values: f16 or q8_0")
      ->check(CLI::IsMember({"f16", "q8_0"}));
  c->add_option("--batch", f.batch, "prompt tokens per step")->check(CLI::Range(1, 65536));
  c->add_option("--lora", f.lora, "a LoRA adapter for the model: a GGUF adapter or PEFT's adapter_model.safetensors");
}

void add_generate_command(CLI::App& app, GenerateFlags& f) {
  f.cmd = app.add_subcommand("generate", "generate text with a language model (a llama or gpt2 GGUF file, or a run "
                             "or checkpoint of `tessera train`): the text streams to stdout, speeds go to stderr");
  add_model_options(f.cmd, f);
  f.cmd->add_option("-p,--prompt", f.prompt, "the prompt text")->required();
}

void add_chat_command(CLI::App& app, GenerateFlags& f) {
  f.cmd = app.add_subcommand("chat", "talk with a language model: each line on stdin is your message, the reply "
                             "streams to stdout; the model's chat template (tokenizer.chat_template) makes the prompt");
  add_model_options(f.cmd, f);
  f.cmd->add_option("--chat-template", f.chat_template, "a Jinja chat template file to use instead of the model's");
  f.cmd->add_option("--system", f.system, "a system message to open the conversation");
}

void add_perplexity_command(CLI::App& app, PerplexityFlags& f) {
  f.cmd = app.add_subcommand("perplexity", "the perplexity of a text file under a language model, computed as "
                             "llama.cpp's llama-perplexity computes it: chunks of -c tokens, the second half of each "
                             "scored");
  f.cmd->add_option("model", f.model, "the .gguf file, or a training run or checkpoint directory")->required();
  f.cmd->add_option("-f,--file", f.file, "the text file")->required();
  f.cmd->add_option("-c,--ctx", f.context, "tokens per chunk")->check(CLI::Range(2, 1 << 18));
  f.cmd->add_option("--chunks", f.chunks, "at most this many chunks (-1: all the text holds)")
      ->check(CLI::Range(-1, 1 << 30));
  f.cmd->add_option("--batch", f.batch, "tokens per step")->check(CLI::Range(1, 65536));
  f.cmd->add_option("-t,--threads", f.threads, "threads (0: OMP_NUM_THREADS or all cores)")->check(CLI::Range(0, 1024));
  f.cmd->add_option("--weights", f.weights, "a training run's weights in the engine: f32, f16, bf16, q8_0 or q4_0")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0"}));
}

int cmd_perplexity(const PerplexityFlags& f, const LanguageModel& lm) {
  if (f.threads > 0) set_num_threads(f.threads);
  const std::vector<char> bytes = io::read_file(f.file);
  const std::vector<int32_t> tokens = lm.tokenizer.encode(std::string_view(bytes.data(), bytes.size()), true, false);
  llm::EngineOptions eo;
  eo.context = f.context;
  eo.max_sequences = 1;
  eo.max_batch_tokens = std::min(f.batch, f.context);
  eo.max_logit_rows = eo.max_batch_tokens;
  llm::Engine engine(lm.model, eo);
  llm::PerplexityOptions po;
  po.context = f.context;
  po.chunks = f.chunks;
  po.bos = lm.tokenizer.add_bos() ? lm.tokenizer.bos() : -1;
  std::fprintf(stderr, "perplexity: %s, %zu tokens of %s; chunks of %lld, %d threads\n", lm.what.c_str(),
               tokens.size(), f.file.c_str(), static_cast<long long>(f.context), get_num_threads());
  const llm::PerplexityResult r = llm::perplexity(engine, tokens, po, [](int64_t c, double estimate) {
    std::printf("[%lld]%.4f,", static_cast<long long>(c + 1), estimate);
    std::fflush(stdout);
  });
  std::printf("\nFinal estimate: PPL = %.4f +/- %.5f\n", r.perplexity, r.error);
  std::fprintf(stderr, "%lld chunks, %lld tokens scored in %.2f s (%.1f tokens/s evaluated)\n",
               static_cast<long long>(r.chunks), static_cast<long long>(r.scored), r.seconds,
               static_cast<double>(r.chunks * f.context) / r.seconds);
  return 0;
}

namespace {

std::unique_ptr<llm::Engine> make_engine(const GenerateFlags& f, std::shared_ptr<llm::Model> model, const std::string& what,
                        double load_s) {
  if (f.threads > 0) set_num_threads(f.threads);
  const auto t0 = std::chrono::steady_clock::now();
  llm::EngineOptions eo;
  eo.context = f.context;
  eo.max_sequences = 1;
  eo.max_batch_tokens = f.batch;
  eo.k_type = eo.v_type = llm::kv_type_from_name(f.kv_type);
  eo.block_tokens = f.kv_block;
  if (!f.kv_memory.empty()) eo.kv_memory = byte_count(f.kv_memory);
  auto engine = std::make_unique<llm::Engine>(model, eo);
  load_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const llm::ModelSpec& s = model->spec();
  std::fprintf(stderr, "model: %s (%s), %lld layers, width %lld, vocabulary %lld, %s weights; loaded in %.2f s\n",
               what.c_str(), s.arch.c_str(), static_cast<long long>(s.n_layers), static_cast<long long>(s.dim),
               static_cast<long long>(s.vocab), llm::ggml_type_name(model->weight_type()), load_s);
  std::fprintf(stderr, "KV cache: %s, %lld bytes per token, %lld blocks of %lld tokens; %d threads\n",
               llm::kv_type_name(eo.k_type), static_cast<long long>(engine->kv_bytes_per_token()),
               static_cast<long long>(engine->total_blocks()), static_cast<long long>(eo.block_tokens),
               get_num_threads());
  return engine;
}

// The options; `adapter` (--lora) must outlive them.
llm::GenerateOptions generate_options(const GenerateFlags& f, const llm::Adapter* adapter) {
  llm::GenerateOptions go;
  go.adapter = adapter;
  go.sampling = f.sampling;
  go.max_tokens = f.max_tokens;
  go.stop = f.stop;
  go.ignore_eos = f.ignore_eos;
  go.prefill_chunk = f.batch;
  return go;
}

void print_speeds(const llm::GenerateResult& r) {
  const auto n = static_cast<double>(r.tokens.size());
  std::fprintf(stderr, "prefill: %lld tokens in %.3f s (%.1f tokens/s); decode: %lld tokens in %.3f s (%.1f tokens/s); "
               "finished: %s\n",
               static_cast<long long>(r.prompt_tokens), r.prefill_seconds,
               r.prefill_seconds > 0 ? static_cast<double>(r.prompt_tokens) / r.prefill_seconds : 0.0,
               static_cast<long long>(r.tokens.size()), r.decode_seconds,
               r.decode_seconds > 0 && n > 1 ? (n - 1) / r.decode_seconds : 0.0, r.finish_reason.c_str());
}

void stream(std::string_view text, const llm::Sampled&) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

// A reply as the conversation keeps it: without the spaces and newlines around it.
std::string trim_reply(const std::string& s) {
  const size_t b = s.find_first_not_of(" \n"), e = s.find_last_not_of(" \n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

}  // namespace

int cmd_generate(const GenerateFlags& f, std::shared_ptr<llm::Model> model, const llm::Tokenizer& tok,
                 const std::string& what, double load_s) {
  std::unique_ptr<llm::Engine> engine = make_engine(f, model, what, load_s);
  const std::shared_ptr<const llm::LoraAdapter> adapter =
      f.lora.empty() ? nullptr : llm::LoraAdapter::load(f.lora, model->spec());
  const std::vector<int32_t> prompt = tok.encode(f.prompt, true, false);
  std::fputs(f.prompt.c_str(), stdout);
  const llm::GenerateResult r = llm::generate(*engine, tok, prompt, generate_options(f, adapter.get()), stream);
  std::fputs("\n", stdout);
  std::fflush(stdout);
  print_speeds(r);
  return 0;
}

int cmd_chat(const GenerateFlags& f, std::shared_ptr<llm::Model> model, const llm::Tokenizer& tok,
             const std::string& what, double load_s, const std::string& model_template) {
  std::string source = model_template, source_name = "tokenizer.chat_template";
  if (!f.chat_template.empty()) {
    const std::vector<char> bytes = io::read_file(f.chat_template);
    source.assign(bytes.begin(), bytes.end());
    source_name = f.chat_template;
  }
  const std::shared_ptr<const llm::LoraAdapter> adapter =
      f.lora.empty() ? nullptr : llm::LoraAdapter::load(f.lora, model->spec());
  llm::GenerateOptions go = generate_options(f, adapter.get());
  if (source.empty()) {
    source = llm::kPlainChatTemplate;
    source_name = "the plain template (role: text lines)";
    go.stop.push_back(llm::kPlainChatStop);  // the model writing the user's next line
  }
  const llm::ChatTemplate tmpl(source, source_name);  // a construct outside the subset stops here
  std::unique_ptr<llm::Engine> engine = make_engine(f, model, what, load_s);
  std::fprintf(stderr, "chat template: %s; one message per line, end with Ctrl-D\n", source_name.c_str());
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (!f.system.empty()) messages.push_back({{"role", "system"}, {"content", f.system}});
  const bool interactive = isatty(STDIN_FILENO);
  for (std::string line;;) {
    if (interactive) std::fputs("> ", stderr);
    if (!std::getline(std::cin, line)) break;
    if (line.empty()) continue;
    messages.push_back({{"role", "user"}, {"content", line}});
    // Special tokens count in the template's own text, never in a message's.
    const llm::RenderedChat chat = llm::render_chat(tmpl, messages, true, tok);
    const std::vector<int32_t> prompt = tok.encode(chat.text, true, true, chat.content_spans);
    const int64_t context = f.context ? f.context : std::min<int64_t>(model->spec().context, int64_t{1} << 18);
    if (static_cast<int64_t>(prompt.size()) >= context) {
      std::fprintf(stderr, "the conversation is %zu tokens, the context %lld: it no longer fits (start over, or give "
                   "a larger --ctx if the model allows)\n", prompt.size(), static_cast<long long>(context));
      return 1;
    }
    go.max_tokens = std::min<int64_t>(f.max_tokens, context - static_cast<int64_t>(prompt.size()));
    const llm::GenerateResult r = llm::generate(*engine, tok, prompt, go, stream);
    std::fputs("\n", stdout);
    std::fflush(stdout);
    print_speeds(r);
    messages.push_back({{"role", "assistant"}, {"content", trim_reply(r.text)}});
  }
  return 0;
}

}  // namespace tessera::cli
