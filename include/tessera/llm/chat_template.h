#pragma once
// Chat templates: the Jinja subset that models' tokenizer.chat_template
// strings use, rendered as Hugging Face's @huggingface/jinja renders them
// (the reference llama.cpp's tooling and transformers.js use): statements
// if/elif/else, for (with loop.*, tuple targets, an `if` filter and else),
// set (names, namespace attributes, tuples, blocks), macro, break, continue;
// expressions with Python's operators, literals, slices, filters, tests and
// the string and dict methods templates call; raise_exception, namespace,
// range and strftime_now. trim_blocks and lstrip_blocks are on, as in
// transformers.
//
// Sandboxed: a template reads only the context it is given, calls nothing
// outside the sandbox, and runs under limits on steps, nesting, time and the
// bytes it builds (strings, lists and output together); integers that leave
// 64 bits are an error, never a wrapped value.
// A construct outside the subset (an unknown statement, filter, test or
// method) is an error when the template is loaded, naming it and its line;
// never a wrong prompt.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace tessera::llm {

class Tokenizer;

struct ChatTemplateLimits {
  int64_t max_steps = 1'000'000;       // statements, loop iterations, calls and filters
  int max_depth = 100;                 // nested blocks, expressions and macro calls
  int64_t max_output = 16 << 20;       // bytes of rendered text
  int64_t max_source = 1 << 20;        // bytes of template
  // Bytes of strings, lists and output one render may build in all: this,
  int64_t max_built = 1 << 20;
  // plus this many for each byte of the context it is given.
  int64_t built_per_context_byte = 16;
  double max_seconds = 0.5;            // wall time of one render
};

class ChatTemplate {
 public:
  // Parses `source`; `what` names it in errors (a file, "tokenizer.chat_template").
  explicit ChatTemplate(const std::string& source, const std::string& what = "chat template",
                        ChatTemplateLimits limits = {});
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // Renders with `context`'s keys as variables (messages, add_generation_prompt,
  // bos_token, eos_token, tools...). Object keys keep their order.
  std::string render(const nlohmann::ordered_json& context) const;
  // Whether the template's code (not its literal text) uses `name` as a
  // variable, attribute or filter: a template that never says `tools`
  // cannot show a model its tools.
  bool uses(std::string_view name) const;
  const std::string& source() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A conversation rendered for the model: the text, and the byte ranges of it
// that came from the messages' contents (the tokenizer matches special
// tokens outside them only: a user who writes "<|im_end|>" gets those
// characters, not the control token).
struct RenderedChat {
  std::string text;
  std::vector<std::pair<size_t, size_t>> content_spans;  // [begin, end)
};
// Renders `messages` (each {"role", "content", ...}) with the tokenizer's
// BOS/EOS texts. The contents are marked while rendering (U+E000...U+E001,
// private-use code points); a template that cuts into a content is an error
// naming the message, never a prompt with a special token from user text.
// `tools` (OpenAI's [{"type": "function", "function": {...}}]) are given to
// the template as `tools` when there are any.
RenderedChat render_chat(const ChatTemplate& t, const nlohmann::ordered_json& messages, bool add_generation_prompt,
                         const Tokenizer& tokenizer, const nlohmann::ordered_json& tools = nullptr);

// For a model without a chat template (Tessera's character and byte
// models): each message on its own line after its role, then "assistant:".
// The reply ends where the model starts the user's next line: generate with
// kPlainChatStop as a stop string.
extern const char* const kPlainChatTemplate;
extern const char* const kPlainChatStop;

// The usual context for a conversation: messages (each {"role", "content"}),
// add_generation_prompt, and the tokenizer's BOS and EOS texts.
nlohmann::ordered_json chat_context(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                    const Tokenizer& tokenizer, const nlohmann::ordered_json& tools = nullptr);

}  // namespace tessera::llm
