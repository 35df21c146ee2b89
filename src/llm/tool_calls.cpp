// Tool calls: formats, forced-call grammars and the streaming parser
// (include/tessera/llm/tool_calls.h).
#include "tessera/llm/tool_calls.h"

#include <algorithm>
#include <cctype>

#include "tessera/core/error.h"
#include "tessera/llm/chat_template.h"
#include "tessera/llm/json_schema.h"

namespace tessera::llm {
namespace {

using ojson = nlohmann::ordered_json;
constexpr size_t npos = std::string::npos;

constexpr std::string_view kHermesOpen = "<tool_call>", kHermesClose = "</tool_call>";
constexpr std::string_view kMistralMarker = "[TOOL_CALLS]", kMistralArgs = "[ARGS]";
constexpr std::string_view kPythonTag = "<|python_tag|>";

std::string_view marker(ToolFormat f) {
  switch (f) {
    case ToolFormat::Hermes: return kHermesOpen;
    case ToolFormat::Mistral:
    case ToolFormat::MistralArgs: return kMistralMarker;
    case ToolFormat::Llama3: return kPythonTag;
  }
  return {};
}

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
size_t skip_ws(const std::string& t, size_t i) {
  while (i < t.size() && is_ws(t[i])) ++i;
  return i;
}
bool blank(std::string_view s) {
  for (char c : s)
    if (!is_ws(c)) return false;
  return true;
}

// How `word` stands at t[i]: there whole, cut short by the end of t, or not there.
enum class Match { Yes, Partial, No };
Match match(const std::string& t, size_t i, std::string_view word) {
  const size_t n = std::min(word.size(), t.size() - std::min(i, t.size()));
  if (t.compare(i, n, word.substr(0, n)) != 0) return Match::No;
  return n == word.size() ? Match::Yes : Match::Partial;
}

// Scanning JSON that may still be arriving: a value is complete (its end
// found and the text valid JSON), cut short by the end of the text, or bad.
enum class Scan { Done, More, Bad };

// One byte c inside a JSON string (`escape`: the byte before was a lone
// backslash): the string goes on (More), ends here (Done), or cannot (Bad).
Scan string_byte(char c, bool& escape) {
  if (escape) return escape = false, Scan::More;
  if (c == '\\') return escape = true, Scan::More;
  if (c == '"') return Scan::Done;
  return static_cast<unsigned char>(c) < 0x20 ? Scan::Bad : Scan::More;
}

Scan scan_string(const std::string& t, size_t i, size_t& end) {
  bool escape = false;
  for (size_t k = i + 1; k < t.size(); ++k) {
    const Scan s = string_byte(t[k], escape);
    if (s == Scan::Done) end = k + 1;
    if (s != Scan::More) return s;
  }
  return Scan::More;
}

using ValueScans = ToolCallParser::ValueScans;

// Note [Scanning a reply once]
// The parser sees a reply a token at a time, and a call's arguments can run
// to many kilobytes (a file's text in a string). Scanning the calls again
// from their start at every push made a reply's parse quadratic in its
// length. The text only grows, so what a scan learnt stays true: a complete
// object or array keeps its end (ValueScans::done), and the one cut short by
// the end of the text is taken up where the last scan stopped, its open
// brackets and string state kept. Earlier calls' names and keys are short
// and read again; their arguments are not.

// The object or array at t[i], by its brackets and strings; `memo` carries
// what earlier scans of the same text found.
Scan scan_brackets(const std::string& t, size_t i, size_t& end, ValueScans& memo) {
  if (const auto it = memo.done.find(i); it != memo.done.end()) {
    end = it->second;
    return Scan::Done;
  }
  if (memo.start != i) memo.start = i, memo.upto = i, memo.open.clear(), memo.in_string = memo.escape = memo.bad = false;
  if (memo.bad) return Scan::Bad;  // its state is past the bad byte: not to be taken up again
  size_t k = memo.upto;
  for (; k < t.size(); ++k) {
    const char c = t[k];
    if (memo.in_string) {
      const Scan s = string_byte(c, memo.escape);
      if (s == Scan::Bad) return memo.bad = true, Scan::Bad;
      memo.in_string = s == Scan::More;
    } else if (c == '"') {
      memo.in_string = true;
    } else if (c == '{' || c == '[') {
      memo.open += c;
    } else if (c == '}' || c == ']') {
      if (memo.open.empty() || memo.open.back() != (c == '}' ? '{' : '[')) return memo.bad = true, Scan::Bad;
      memo.open.pop_back();
      if (memo.open.empty()) break;
    }
  }
  memo.scanned += (k < t.size() ? k + 1 : k) - memo.upto;
  if (k == t.size()) {
    memo.upto = k;
    return Scan::More;
  }
  end = k + 1;
  memo.scanned += end - i;  // the check below reads it once more
  if (!ojson::accept(t.begin() + static_cast<std::ptrdiff_t>(i), t.begin() + static_cast<std::ptrdiff_t>(end)))
    return memo.bad = true, Scan::Bad;
  memo.start = npos;
  memo.done.emplace(i, end);
  return Scan::Done;
}

Scan scan_value(const std::string& t, size_t i, size_t& end, ValueScans& memo) {
  if (i >= t.size()) return Scan::More;
  Scan s = Scan::More;
  if (t[i] == '"') {
    s = scan_string(t, i, end);
  } else if (t[i] == '{' || t[i] == '[') {
    return scan_brackets(t, i, end, memo);
  } else {  // a number or a literal: it may go on while the text does
    size_t k = i;
    while (k < t.size() && (std::isalnum(static_cast<unsigned char>(t[k])) || t[k] == '-' || t[k] == '+' || t[k] == '.'))
      ++k;
    if (k == i) return Scan::Bad;
    if (k == t.size()) return Scan::More;
    end = k;
    s = Scan::Done;
  }
  if (s == Scan::Done && !ojson::accept(t.begin() + static_cast<std::ptrdiff_t>(i), t.begin() + static_cast<std::ptrdiff_t>(end)))
    return Scan::Bad;
  return s;
}

// One call as far as the text has it.
struct Found {
  std::string name;
  bool named = false;
  size_t args = npos, args_end = npos;  // the arguments' JSON value [args, args_end); args_end npos: not complete
  bool complete = false;                 // the call's whole text is here
  size_t end = npos;                     // where it ends, when complete
};

// The JSON string t[b, e) (complete by scan_string), decoded; false when it is not valid.
bool decode_string(const std::string& t, size_t b, size_t e, std::string& out) {
  const auto first = t.begin() + static_cast<std::ptrdiff_t>(b), last = t.begin() + static_cast<std::ptrdiff_t>(e);
  if (!ojson::accept(first, last)) return false;
  out = ojson::parse(first, last).get<std::string>();
  return true;
}

// The call object at t[i] == '{': {"name": ..., "arguments" | "parameters": ..., others}.
Scan scan_call_object(const std::string& t, size_t i, Found& f, ValueScans& memo) {
  size_t k = i + 1;
  for (bool first = true;; first = false) {
    k = skip_ws(t, k);
    if (k >= t.size()) return Scan::More;
    if (t[k] == '}' && first) return Scan::Bad;  // {}: no name
    if (t[k] != '"') return Scan::Bad;
    size_t key_end = 0;
    Scan s = scan_string(t, k, key_end);
    if (s != Scan::Done) return s;
    std::string key;
    if (!decode_string(t, k, key_end, key)) return Scan::Bad;
    k = skip_ws(t, key_end);
    if (k >= t.size()) return Scan::More;
    if (t[k] != ':') return Scan::Bad;
    k = skip_ws(t, k + 1);
    if (k >= t.size()) return Scan::More;
    size_t value_end = 0;
    s = scan_value(t, k, value_end, memo);
    if (key == "name") {
      if (t[k] != '"') return Scan::Bad;
      if (s == Scan::Done) {
        if (!decode_string(t, k, value_end, f.name) || f.name.empty()) return Scan::Bad;
        f.named = true;
      }
    } else if (key == "arguments" || key == "parameters") {
      if (t[k] != '{') return Scan::Bad;  // arguments are an object
      f.args = k;
      if (s == Scan::Done) f.args_end = value_end;
    }
    if (s != Scan::Done) return s;
    k = skip_ws(t, value_end);
    if (k >= t.size()) return Scan::More;
    if (t[k] == ',') {
      ++k;
      continue;
    }
    if (t[k] != '}' || !f.named) return Scan::Bad;
    f.complete = true;
    f.end = k + 1;
    return Scan::Done;
  }
}

// The calls from t[at] on. `state`: More (the text may go on as calls),
// Bad (from `stop` it cannot), Done (the calls ended at `stop`; what
// follows is not a call).
struct Region {
  std::vector<Found> calls;
  Scan state = Scan::More;
  size_t stop = npos;
};

Region scan_region(ToolFormat f, const std::string& t, size_t at, bool forced, ValueScans& memo) {
  Region r;
  auto bad = [&](size_t k) {
    r.state = Scan::Bad;
    r.stop = k;
    return r;
  };
  auto ended = [&](size_t k) {
    r.state = Scan::Done;
    r.stop = k;
    return r;
  };
  // A call object at t[k]; on return k is after it.
  auto object = [&](size_t& k) {
    r.calls.emplace_back();
    const Scan s = scan_call_object(t, k, r.calls.back(), memo);
    if (s == Scan::Done) k = r.calls.back().end;
    return s;
  };
  size_t k = at;
  switch (f) {
    case ToolFormat::Hermes:
      for (;;) {
        k = skip_ws(t, k);
        if (k >= t.size()) return r;
        const Match open = match(t, k, kHermesOpen);
        if (open == Match::Partial) return r;
        if (open == Match::No) return r.calls.empty() ? bad(k) : ended(k);
        k = skip_ws(t, k + kHermesOpen.size());
        if (k >= t.size()) return r;
        if (t[k] != '{') return bad(k);
        if (const Scan s = object(k); s != Scan::Done) return s == Scan::More ? r : bad(k);
        k = skip_ws(t, k);
        const Match close = match(t, k, kHermesClose);
        if (close != Match::Yes) return close == Match::Partial ? r : bad(k);
        k += kHermesClose.size();
      }
    case ToolFormat::Mistral: {
      const Match m = match(t, k, kMistralMarker);
      if (m == Match::Partial) return r;
      if (m == Match::Yes) k += kMistralMarker.size();
      else if (!forced) return bad(k);
      k = skip_ws(t, k);
      if (k >= t.size()) return r;
      if (t[k] != '[') return bad(k);
      for (++k;;) {
        k = skip_ws(t, k);
        if (k >= t.size()) return r;
        if (t[k] != '{') return bad(k);
        if (const Scan s = object(k); s != Scan::Done) return s == Scan::More ? r : bad(k);
        k = skip_ws(t, k);
        if (k >= t.size()) return r;
        if (t[k] == ']') return ended(k + 1);
        if (t[k] != ',') return bad(k);
        ++k;
      }
    }
    case ToolFormat::MistralArgs:
      for (bool first = true;; first = false) {
        if (k >= t.size()) return r;
        const Match m = match(t, k, kMistralMarker);
        if (m == Match::Partial) return r;
        if (m == Match::Yes) k += kMistralMarker.size();
        else if (!(first && forced)) return first ? bad(k) : ended(k);
        // name[ARGS]{...}
        size_t n = k;
        while (n < t.size() && (std::isalnum(static_cast<unsigned char>(t[n])) || t[n] == '_' || t[n] == '-' ||
                                t[n] == '.'))
          ++n;
        if (n >= t.size()) return r;
        const Match a = match(t, n, kMistralArgs);
        if (a == Match::Partial) return r;
        if (a == Match::No || n == k) return bad(n);
        r.calls.emplace_back();
        Found& c = r.calls.back();
        c.name = t.substr(k, n - k);
        c.named = true;
        k = skip_ws(t, n + kMistralArgs.size());
        if (k >= t.size()) return r;
        if (t[k] != '{') return bad(k);
        c.args = k;
        size_t e = 0;
        const Scan s = scan_value(t, k, e, memo);
        if (s != Scan::Done) return s == Scan::More ? r : bad(k);
        c.args_end = e;
        c.complete = true;
        c.end = k = e;
      }
    case ToolFormat::Llama3: {
      k = skip_ws(t, k);
      const Match tag = match(t, k, kPythonTag);
      if (tag == Match::Partial) return r;
      if (tag == Match::Yes) k += kPythonTag.size();
      for (;;) {
        k = skip_ws(t, k);
        if (k >= t.size()) return r;
        if (t[k] != '{') return r.calls.empty() ? bad(k) : ended(k);
        if (const Scan s = object(k); s != Scan::Done) return s == Scan::More ? r : bad(k);
        const size_t after = k;
        k = skip_ws(t, k);
        if (k >= t.size()) return r;
        if (t[k] != ';') return ended(after);
        ++k;
      }
    }
  }
  return r;
}

}  // namespace

const char* tool_format_name(ToolFormat f) {
  switch (f) {
    case ToolFormat::Llama3: return "Llama 3";
    case ToolFormat::Mistral: return "Mistral";
    case ToolFormat::MistralArgs: return "Mistral v11";
    case ToolFormat::Hermes: return "Hermes";
  }
  return "?";
}

ToolFormat tool_format(const ChatTemplate& t) {
  TS_CHECK(t.uses("tools"), "the model's chat template does not show tools to the model (it never uses `tools`); "
           "serve a model whose template takes them, or send the request without tools");
  const std::string& s = t.source();
  auto has = [&](std::string_view x) { return s.find(x) != npos; };
  TS_CHECK(!has("<function=") && !has("<arg_key>"), "the model's chat template writes tool calls as XML-like tags, "
           "which Tessera does not parse (it parses the Llama 3, Mistral and Hermes/Qwen JSON formats)");
  if (has(kHermesOpen)) return ToolFormat::Hermes;
  if (has(kMistralMarker)) return has(kMistralArgs) ? ToolFormat::MistralArgs : ToolFormat::Mistral;
  if (has("<|start_header_id|>") && (has(kPythonTag) || has("\"parameters\""))) return ToolFormat::Llama3;
  TS_ERROR("the model's chat template takes tools, but writes calls in a format Tessera does not parse (it parses "
           "the Llama 3 JSON, Mistral [TOOL_CALLS] and Hermes/Qwen <tool_call> formats)");
}

std::string forced_tool_call_gbnf(ToolFormat f, const nlohmann::ordered_json& tools, const std::string& only,
                                  bool parallel) {
  JsonSchemaGrammar g(/*compact=*/true);  // arguments as models write them, never spun out in whitespace
  std::string alts;
  for (size_t i = 0; i < tools.size(); ++i) {
    const ojson& fn = tools[i].at("function");
    const std::string name = fn.at("name").get<std::string>();
    if (!only.empty() && name != only) continue;
    static const ojson kNoParameters = {{"type", "object"}, {"properties", ojson::object()}};
    const std::string args = g.add(fn.contains("parameters") ? fn["parameters"] : kNoParameters, "args-" + name,
                                   "tools[" + std::to_string(i) + "].function.parameters");
    const std::string quoted = ojson(name).dump();
    std::string call;
    switch (f) {
      case ToolFormat::Hermes:
        call = gbnf_literal("<tool_call>\n{\"name\": " + quoted + ", \"arguments\": ") + " " + args + " " +
               gbnf_literal("}\n</tool_call>");
        break;
      case ToolFormat::Llama3:
        call = gbnf_literal("{\"name\": " + quoted + ", \"parameters\": ") + " " + args + " \"}\"";
        break;
      case ToolFormat::Mistral:
        call = gbnf_literal("{\"name\": " + quoted + ", \"arguments\": ") + " " + args + " \"}\"";
        break;
      case ToolFormat::MistralArgs:
        call = gbnf_literal(name + "[ARGS]") + " " + args;
        break;
    }
    alts += (alts.empty() ? "" : " | ") + call;
  }
  TS_CHECK(!alts.empty(), "tool_choice names the function '", only, "', which is not in tools");
  const std::string one = "( " + alts + " )";
  auto more = [&](const std::string& sep) { return parallel ? " ( " + gbnf_literal(sep) + " " + one + " )*" : ""; };
  switch (f) {
    case ToolFormat::Hermes: return g.gbnf(one + more("\n"));
    case ToolFormat::Llama3: return g.gbnf(one + more("; "));
    case ToolFormat::Mistral: return g.gbnf("\"[\" " + one + more(", ") + " \"]\"");
    case ToolFormat::MistralArgs: return g.gbnf(one + more(std::string(kMistralMarker)));
  }
  return {};
}

ToolCallParser::ToolCallParser(ToolFormat f, bool forced, std::function<std::string()> make_id)
    : format_(f), forced_(forced), make_id_(std::move(make_id)) {
  if (forced_) region_ = 0;
}

ReplyDelta ToolCallParser::push(std::string_view text) {
  text_ += text;
  return scan(false);
}

ReplyDelta ToolCallParser::finish() { return scan(true); }

// The region from `from` on was not calls after all: it is content, and
// markers are looked for after its start.
void ToolCallParser::give_back_as_content(size_t from) {
  region_ = npos;
  search_from_ = from + 1;
  if (format_ == ToolFormat::Llama3 || forced_) content_only_ = true;
}

ReplyDelta ToolCallParser::scan(bool final) {
  ReplyDelta out;
  if (region_ == npos && !content_only_) {
    // Content, up to a marker (or, for Llama 3, until the reply shows it is not a call).
    if (format_ == ToolFormat::Llama3) {
      const size_t k = skip_ws(text_, 0);
      if (k < text_.size() && (text_[k] == '{' || match(text_, k, kPythonTag) != Match::No)) {
        region_ = 0;
      } else if (k < text_.size() || final) {
        content_only_ = true;
      }
    } else {
      const std::string_view m = marker(format_);
      const size_t at = text_.find(m, search_from_);
      values_.scanned += text_.size() - std::min(search_from_, text_.size());
      // Searched up to where the marker could still begin (Note [Scanning a reply once]).
      if (at == npos && text_.size() >= m.size()) search_from_ = std::max(search_from_, text_.size() - (m.size() - 1));
      if (at != npos) {
        out.content = text_.substr(sent_content_, at - sent_content_);
        sent_content_ = at;
        region_ = at;
      } else {
        // Hold back a tail that could begin the marker.
        size_t hold = 0;
        for (size_t n = std::min(m.size() - 1, text_.size()); n > 0 && !final; --n)
          if (text_.compare(text_.size() - n, n, m.substr(0, n)) == 0) {
            hold = n;
            break;
          }
        const size_t ready = std::max(sent_content_, text_.size() - hold);
        out.content = text_.substr(sent_content_, ready - sent_content_);
        sent_content_ = ready;
      }
    }
  }
  if (content_only_) {
    out.content += text_.substr(sent_content_);
    sent_content_ = text_.size();
    return out;
  }
  if (region_ == npos) return out;

  const Region r = scan_region(format_, text_, region_, forced_, values_);
  for (size_t i = 0; i < r.calls.size(); ++i) {
    const Found& c = r.calls[i];
    if (!c.named) break;
    if (i >= sent_.size()) {
      ToolCallDelta d;
      d.index = static_cast<int64_t>(i);
      d.id = make_id_();
      d.name = c.name;
      out.calls.push_back(std::move(d));
      sent_.push_back({c.name, 0});
    }
    Sent& s = sent_[i];
    std::string more;
    if (c.args != npos) {
      // Arguments as far as they are here (and, in a region gone bad, not past where it did).
      size_t end = c.args_end != npos ? c.args_end : text_.size();
      if (r.state == Scan::Bad) end = std::min(end, r.stop);
      const size_t from = c.args + s.arguments;
      if (end > from) more = text_.substr(from, end - from);
    } else if (c.complete && s.arguments == 0) {
      more = "{}";  // a call without arguments
    }
    if (more.empty()) continue;
    s.arguments += more.size();
    if (!out.calls.empty() && out.calls.back().index == static_cast<int64_t>(i)) out.calls.back().arguments += more;
    else out.calls.push_back({static_cast<int64_t>(i), "", "", std::move(more)});
  }
  const bool nothing_sent = sent_.empty();
  if (r.state == Scan::Bad && nothing_sent) {
    give_back_as_content(region_);
    ReplyDelta rest = scan(final);
    out.content += rest.content;
    out.calls = std::move(rest.calls);
    return out;
  }
  if (final) {
    if (nothing_sent) {  // calls begun but not one named: the text was content
      out.content += text_.substr(sent_content_);
    } else {
      // What follows the calls (or where they went bad), unless blank.
      const size_t tail = r.state == Scan::More ? text_.size() : r.stop;
      if (tail < text_.size() && !blank(std::string_view(text_).substr(tail))) out.content += text_.substr(tail);
    }
    sent_content_ = text_.size();
  }
  return out;
}

std::string new_tool_call_id(ToolFormat f, uint64_t random) {
  auto next = [&random] {  // splitmix64
    uint64_t z = (random += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  if (f == ToolFormat::Mistral || f == ToolFormat::MistralArgs) {
    static const char* abc = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    std::string id;
    uint64_t bits = next();
    for (int i = 0; i < 9; ++i, bits /= 62) id += abc[bits % 62];
    return id;
  }
  static const char* hex = "0123456789abcdef";
  std::string id = "call_";
  for (int w = 0; w < 2; ++w) {
    const uint64_t bits = next();
    for (int i = 0; i < (w ? 8 : 16); ++i) id += hex[(bits >> (4 * i)) & 15];
  }
  return id;
}

}  // namespace tessera::llm
