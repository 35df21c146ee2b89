// Chat templates: the public face of the Jinja sandbox in llm/jinja/ (lexer,
// parser, renderer, and the tables of filters, tests, methods and
// functions), and the marking of message texts for the tokenizer.
#include "tessera/llm/chat_template.h"

#include "llm/jinja/lexer.h"
#include "llm/jinja/parser.h"
#include "llm/jinja/renderer.h"
#include "tessera/core/error.h"
#include "tessera/llm/tokenizer.h"

// Note [Chat templates follow @huggingface/jinja]
// Models ship their chat template as Jinja source written for Python's
// jinja2, and llama.cpp's tooling and transformers.js render it with
// @huggingface/jinja. Where the two differ we follow @huggingface/jinja,
// whose output the compat script compares byte for byte: booleans print as
// true/false, floats with an integral value as "2.0", arrays and objects as
// JSON ({"a": 1, "b": [2, 3]}); `x is iterable` holds for strings and lists
// only; `==` on lists and dicts compares identity; filters bind tighter than
// `is`, which binds tighter than arithmetic. Strings are UTF-8 here and
// UTF-16 in JavaScript: lengths, indices and slices count code points, which
// agree for every character outside the supplementary planes.

namespace tessera::llm {

struct ChatTemplate::Impl {
  std::string what, source;
  ChatTemplateLimits limits;
  jinja::Program program;
};

ChatTemplate::ChatTemplate(const std::string& source, const std::string& what, ChatTemplateLimits limits)
    : impl_(std::make_unique<Impl>()) {
  impl_->what = what;
  impl_->limits = limits;
  TS_CHECK(static_cast<int64_t>(source.size()) <= limits.max_source, what, ": ", source.size(),
           " bytes of template, more than the ", limits.max_source, " allowed");
  impl_->source = source;
  impl_->program = jinja::parse(jinja::lex(source, what), impl_->what, limits.max_depth);
}

ChatTemplate::~ChatTemplate() = default;
bool ChatTemplate::uses(std::string_view name) const { return impl_->program.names.count(name) > 0; }
const std::string& ChatTemplate::source() const { return impl_->source; }
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::render(const nlohmann::ordered_json& context) const {
  return jinja::render(impl_->program.body, context, impl_->limits, impl_->what);
}

nlohmann::ordered_json chat_context(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                    const Tokenizer& tokenizer, const nlohmann::ordered_json& tools) {
  nlohmann::ordered_json c;
  c["messages"] = messages;
  if (tools.is_array() && !tools.empty()) c["tools"] = tools;
  c["add_generation_prompt"] = add_generation_prompt;
  c["bos_token"] = tokenizer.bos() >= 0 ? tokenizer.text(tokenizer.bos()) : "";
  c["eos_token"] = tokenizer.eos() >= 0 ? tokenizer.text(tokenizer.eos()) : "";
  return c;
}

RenderedChat render_chat(const ChatTemplate& t, const nlohmann::ordered_json& messages, bool add_generation_prompt,
                         const Tokenizer& tokenizer, const nlohmann::ordered_json& tools) {
  static const std::string open = "\xee\x80\x80", close = "\xee\x80\x81";  // U+E000, U+E001
  nlohmann::ordered_json marked = messages;
  for (auto& m : marked) {
    if (!m.is_object() || !m.contains("content") || !m["content"].is_string()) continue;
    const std::string c = m["content"].get<std::string>();
    TS_CHECK(c.find(open) == std::string::npos && c.find(close) == std::string::npos,
             "chat: a message holds U+E000 or U+E001, which Tessera reserves to mark message text");
    if (!c.empty()) m["content"] = open + c + close;
  }
  const std::string raw = t.render(chat_context(marked, add_generation_prompt, tokenizer, tools));
  RenderedChat out;
  out.text.reserve(raw.size());
  size_t begin = std::string::npos;
  for (size_t k = 0; k < raw.size();) {
    if (raw.compare(k, open.size(), open) == 0) {
      TS_CHECK(begin == std::string::npos, "chat: the template cuts a message's text (it should write each content "
               "whole)");
      begin = out.text.size();
      k += open.size();
    } else if (raw.compare(k, close.size(), close) == 0) {
      TS_CHECK(begin != std::string::npos, "chat: the template cuts a message's text (it should write each content "
               "whole)");
      out.content_spans.emplace_back(begin, out.text.size());
      begin = std::string::npos;
      k += close.size();
    } else {
      out.text += raw[k++];
    }
  }
  TS_CHECK(begin == std::string::npos, "chat: the template cuts a message's text (it should write each content whole)");
  return out;
}

const char* const kPlainChatTemplate =
    "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}";
const char* const kPlainChatStop = "\nuser:";

}  // namespace tessera::llm
