// A generation request's OpenAI response (completion_writer.h).
#include "completion_writer.h"

#include <cstdio>
#include <ctime>
#include <sodium.h>

namespace tessera::serve {

uint64_t random_u64() {
  static const bool ready = sodium_init() >= 0;
  TS_CHECK(ready, "libsodium failed to initialize (no source of random numbers)");
  uint64_t v;
  randombytes_buf(&v, sizeof v);
  return v;
}

namespace {

using ojson = nlohmann::ordered_json;
using openai::dump;

// A 64-bit id's hex: request ids ("cmpl-...", "chatcmpl-...").
std::string random_hex() {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(random_u64()));
  return buf;
}

ojson byte_list(const std::string& s) {
  ojson b = ojson::array();
  for (unsigned char c : s) b.push_back(c);
  return b;
}

// Streamed tool-call deltas as OpenAI's: the first for an index with its id,
// type and name.
ojson tool_call_deltas(const std::vector<llm::ToolCallDelta>& calls) {
  ojson out = ojson::array();
  for (const llm::ToolCallDelta& d : calls) {
    if (!d.id.empty())
      out.push_back({{"index", d.index}, {"id", d.id}, {"type", "function"},
                     {"function", {{"name", d.name}, {"arguments", d.arguments}}}});
    else
      out.push_back({{"index", d.index}, {"function", {{"arguments", d.arguments}}}});
  }
  return out;
}

// The deltas joined into message.tool_calls (without streaming).
void join_tool_call_deltas(ojson& calls, const std::vector<llm::ToolCallDelta>& deltas) {
  for (const llm::ToolCallDelta& d : deltas) {
    if (!d.id.empty())
      calls.push_back({{"id", d.id}, {"type", "function"}, {"function", {{"name", d.name}, {"arguments", ""}}}});
    std::string& args = calls[static_cast<size_t>(d.index)]["function"]["arguments"].get_ref<std::string&>();
    args += d.arguments;
  }
}

}  // namespace

CompletionWriter::CompletionWriter(const openai::GenerationRequest& g, const llm::Tokenizer& tok, std::string served,
                                   std::vector<std::string> echoes, int64_t prompt_tokens)
    : g_(g),
      tok_(tok),
      chat_(g.kind == openai::GenerationRequest::Kind::Chat),
      served_(std::move(served)),
      id_((chat_ ? "chatcmpl-" : "cmpl-") + random_hex()),
      created_(static_cast<int64_t>(std::time(nullptr))),
      echoes_(std::move(echoes)),
      prompt_tokens_(prompt_tokens) {}

Choice& CompletionWriter::add_choice(Choice c) {
  by_id_[c.id] = choices_.size();
  choices_.push_back(std::move(c));
  ++open_;
  return choices_.back();
}

std::string CompletionWriter::chunk(ojson choices_json) const {
  ojson j = {{"id", id_}, {"object", chat_ ? "chat.completion.chunk" : "text_completion"}, {"created", created_},
             {"model", served_}, {"choices", std::move(choices_json)}};
  if (g_.include_usage) j["usage"] = nullptr;
  return "data: " + dump(j) + "\n\n";
}

// Each prompt counted once, as its first choice computed it.
ojson CompletionWriter::usage() const {
  int64_t completion = 0, cached = 0;
  for (const Choice& c : choices_) {
    completion += c.completion_tokens;
    if (c.index % g_.n == 0) cached += c.cached_tokens;
  }
  return ojson{{"prompt_tokens", prompt_tokens_},
               {"completion_tokens", completion},
               {"total_tokens", prompt_tokens_ + completion},
               {"prompt_tokens_details", {{"cached_tokens", cached}}}};
}

std::string CompletionWriter::begin() {
  if (!g_.stream) {
    if (g_.echo)
      for (Choice& c : choices_) c.text = echoes_[static_cast<size_t>(c.prompt)];
    return "";
  }
  std::string first;
  for (const Choice& c : choices_) {
    if (chat_)
      first += chunk(ojson::array({{{"index", c.index}, {"delta", {{"role", "assistant"}, {"content", ""}}},
                                    {"logprobs", nullptr}, {"finish_reason", nullptr}}}));
    else if (g_.echo)
      first += chunk(ojson::array({{{"index", c.index}, {"text", echoes_[static_cast<size_t>(c.prompt)]},
                                    {"logprobs", nullptr}, {"finish_reason", nullptr}}}));
  }
  return first;
}

// Note [One chunk per step]: a choice's tokens of one hand-off (a step,
// more with drafts or while the HTTP thread was busy) go out as one chunk,
// their log-probs as the arrays OpenAI's streams carry; a chunk is cut only
// where a tool-call delta or the end follows.
void CompletionWriter::flush(Choice& c) {
  if (c.pending.empty() && c.pending_lp.is_null()) return;
  ojson delta = chat_ ? ojson{{"index", c.index}, {"delta", {{"content", c.pending}}}, {"logprobs", c.pending_lp},
                              {"finish_reason", nullptr}}
                      : ojson{{"index", c.index}, {"text", c.pending}, {"logprobs", c.pending_lp},
                              {"finish_reason", nullptr}};
  out_ += chunk(ojson::array({std::move(delta)}));
  c.pending.clear();
  c.pending_lp = nullptr;
}

void CompletionWriter::add_logprobs(Choice& c, const llm::RequestEvent& ev) {
  const std::string piece = tok_.piece(ev.token);
  ojson top = chat_ ? ojson::array() : ojson::object();
  for (const llm::TokenLogprob& t : ev.top) {
    const std::string p = tok_.piece(t.token);
    if (chat_) top.push_back({{"token", p}, {"logprob", t.logprob}, {"bytes", byte_list(p)}});
    else top[p] = t.logprob;
  }
  if (chat_) {
    ojson lp = {{"token", piece}, {"logprob", ev.logprob}, {"bytes", byte_list(piece)}, {"top_logprobs", top}};
    if (!g_.stream) {
      c.logprobs.push_back(std::move(lp));
    } else {
      if (c.pending_lp.is_null()) c.pending_lp = {{"content", ojson::array()}};
      c.pending_lp["content"].push_back(std::move(lp));
    }
    return;
  }
  c.offsets.push_back(static_cast<int64_t>(c.text.size()));
  c.tokens.push_back(piece);
  c.token_logprobs.push_back(ev.logprob);
  c.top.push_back(top);
  if (g_.stream) {
    const bool with_top = g_.sampling.top_logprobs > 0;
    if (c.pending_lp.is_null())
      c.pending_lp = {{"tokens", ojson::array()}, {"token_logprobs", ojson::array()},
                      {"top_logprobs", with_top ? ojson::array() : ojson(nullptr)}, {"text_offset", ojson::array()}};
    c.pending_lp["tokens"].push_back(piece);
    c.pending_lp["token_logprobs"].push_back(ev.logprob);
    if (with_top) c.pending_lp["top_logprobs"].push_back(top);
    c.pending_lp["text_offset"].push_back(c.offsets.back());
  }
}

void CompletionWriter::add(Choice& c, llm::RequestEvent& ev) {
  if (ev.has_token && g_.logprobs) add_logprobs(c, ev);
  // The reply's text, and the calls in it when the request has tools.
  llm::ReplyDelta reply;
  if (c.tool_parser) {
    reply = c.tool_parser->push(ev.text);
    if (ev.finished) {
      llm::ReplyDelta rest = c.tool_parser->finish();
      reply.content += rest.content;
      for (auto& d : rest.calls) reply.calls.push_back(std::move(d));
    }
  } else {
    reply.content = std::move(ev.text);
  }
  if (!g_.stream) {
    c.text += reply.content;
    join_tool_call_deltas(c.tool_calls, reply.calls);
  } else {
    c.pending += reply.content;
    if (!reply.calls.empty()) {
      flush(c);
      out_ += chunk(ojson::array({{{"index", c.index}, {"delta", {{"tool_calls", tool_call_deltas(reply.calls)}}},
                                   {"logprobs", nullptr}, {"finish_reason", nullptr}}}));
    }
  }
  if (!ev.finished) return;
  c.finished = true;
  c.finish_reason = ev.finish_reason;
  if (c.tool_parser && c.tool_parser->calls() > 0 && c.finish_reason == "stop") c.finish_reason = "tool_calls";
  c.completion_tokens = ev.completion_tokens;
  c.cached_tokens = ev.cached_tokens;
  --open_;
  if (g_.stream) {
    flush(c);
    ojson end = chat_ ? ojson{{"index", c.index}, {"delta", ojson::object()}, {"logprobs", nullptr},
                              {"finish_reason", c.finish_reason}}
                      : ojson{{"index", c.index}, {"text", ""}, {"logprobs", nullptr}, {"finish_reason", c.finish_reason}};
    out_ += chunk(ojson::array({end}));
  }
}

std::string CompletionWriter::take() {
  for (Choice& c : choices_) flush(c);
  return std::exchange(out_, std::string());
}

std::string CompletionWriter::end_stream() const {
  std::string tail;
  if (g_.include_usage) {
    ojson j = {{"id", id_}, {"object", chat_ ? "chat.completion.chunk" : "text_completion"}, {"created", created_},
               {"model", served_}, {"choices", ojson::array()}, {"usage", usage()}};
    tail += "data: " + dump(j) + "\n\n";
  }
  return tail + "data: [DONE]\n\n";
}

ojson CompletionWriter::body() const {
  ojson out_choices = ojson::array();
  for (const Choice& c : choices_) {
    ojson lp = nullptr;
    if (g_.logprobs && chat_) lp = {{"content", c.logprobs}};
    if (g_.logprobs && !chat_)
      lp = {{"tokens", c.tokens}, {"token_logprobs", c.token_logprobs},
            {"top_logprobs", g_.sampling.top_logprobs > 0 ? ojson(c.top) : ojson(nullptr)},
            {"text_offset", c.offsets}};
    if (chat_) {
      ojson message = {{"role", "assistant"}, {"content", c.text}};
      if (!c.tool_calls.empty()) {
        if (c.text.empty()) message["content"] = nullptr;
        message["tool_calls"] = c.tool_calls;
      }
      out_choices.push_back({{"index", c.index}, {"message", std::move(message)}, {"logprobs", lp},
                             {"finish_reason", c.finish_reason}});
    } else {
      out_choices.push_back({{"index", c.index}, {"text", c.text}, {"logprobs", lp}, {"finish_reason", c.finish_reason}});
    }
  }
  return ojson{{"id", id_},           {"object", chat_ ? "chat.completion" : "text_completion"},
               {"created", created_}, {"model", served_},
               {"choices", out_choices}, {"usage", usage()}};
}

}  // namespace tessera::serve
