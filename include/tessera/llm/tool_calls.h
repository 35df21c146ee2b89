#pragma once
// Tool calling (OpenAI's `tools`): the format a model's chat template
// writes calls in, a grammar that forces a call, and a parser that finds the
// calls in a reply while it streams.
//
// Note [Tool call formats]
// A model writes calls the way its template shows them; three families
// cover most templates:
//   Llama 3.x     {"name": "f", "parameters": {...}}, maybe after <|python_tag|>,
//                 several joined by ";" (a reply is a call only if it starts as one)
//   Mistral       [TOOL_CALLS][{"name": "f", "arguments": {...}}, ...]
//   Mistral v11   [TOOL_CALLS]f[ARGS]{...} for each call
//   Hermes, Qwen  <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
//                 for each call, after any text
// The family is read from the template's source (the markers it writes).
// A template that never uses `tools`, or writes calls in another format
// (XML-like <function=...>, GLM's <arg_key>), is refused by name: a request
// with tools must not quietly get prose that the client cannot tell from a
// call.
//
// Note [Forced tool calls]
// With tool_choice "required" or a named function the reply is a call from
// its first byte: a grammar in the family's own format (so the model writes
// what it was trained to), the function's name as a literal and its
// arguments by the JSON schema of its parameters, with at most one space
// between JSON tokens (a model given room for newlines and indents may fill
// its context with them: one trained on indented text did). Markers that are control
// tokens ([TOOL_CALLS]) have no bytes a grammar could ask for, so a forced
// Mistral reply starts after the marker; the parser takes either.
//
// Note [Streaming tool calls]
// Text before a call streams as content (a tail that could start a marker
// held back, as stop strings are). Inside a call, a delta with the index,
// id and name goes out once the name is complete, then the arguments' JSON
// text as it arrives, up to the end of the arguments' value: the deltas
// joined are the call. The reply without streaming is the same deltas
// joined, so both ways give the same answer. A region that turns out not to
// be a call (bad JSON, an unknown key order) before any call went out is
// given back as content; what follows complete calls and is not blank is
// content too, so nothing the model wrote is dropped.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace tessera::llm {

class ChatTemplate;

enum class ToolFormat { Llama3, Mistral, MistralArgs, Hermes };
const char* tool_format_name(ToolFormat f);

// The template's call format (Note [Tool call formats]); an Error saying why
// when it takes no tools or writes calls in a format not parsed here.
ToolFormat tool_format(const ChatTemplate& t);

// GBNF for a reply that is one call (or, with `parallel`, one or more) of
// the functions in `tools` (OpenAI's [{"type": "function", "function":
// {"name", "parameters"}}]), or of the one named `only` when it is not empty
// (Note [Forced tool calls]). An unsupported schema keyword is an Error
// naming tools[i].function.parameters and the keyword.
std::string forced_tool_call_gbnf(ToolFormat f, const nlohmann::ordered_json& tools, const std::string& only,
                                  bool parallel);

// What a piece of reply adds: content text, and call deltas (OpenAI's
// index-keyed tool_calls: the first for an index has its id and name, each
// one more of its arguments).
struct ToolCallDelta {
  int64_t index = 0;
  std::string id, name;  // in the call's first delta only
  std::string arguments;
};
struct ReplyDelta {
  std::string content;
  std::vector<ToolCallDelta> calls;
  bool empty() const { return content.empty() && calls.empty(); }
};

// Finds calls in a reply as its text arrives (Note [Streaming tool calls]).
class ToolCallParser {
 public:
  // forced: the reply is calls from its first byte (a forced call's grammar).
  // make_id: a new call's id.
  ToolCallParser(ToolFormat f, bool forced, std::function<std::string()> make_id);
  // More of the reply's text (whole UTF-8 characters): what is now final.
  ReplyDelta push(std::string_view text);
  // The reply ended: the rest.
  ReplyDelta finish();
  int64_t calls() const { return static_cast<int64_t>(sent_.size()); }  // calls begun
  // Bytes read so far by the marker search and the scans of JSON objects and
  // arrays, all pushes together (Note [Scanning a reply once]: a few times the
  // reply's length, however it is cut; calls' names and keys are not counted).
  int64_t bytes_scanned() const { return static_cast<int64_t>(values_.scanned); }

  // Note [Scanning a reply once]: what earlier scans learnt of the JSON
  // objects and arrays in the reply, so that a push scans only its own text.
  struct ValueScans {
    std::unordered_map<size_t, size_t> done;       // a complete, valid value's start -> its end
    size_t start = std::string::npos, upto = 0;    // the value cut short: where it starts, how far read
    std::string open;                              // its brackets open there
    bool in_string = false, escape = false;        // inside a string there, after a backslash
    bool bad = false;                              // it went bad (its state is past the bad byte)
    size_t scanned = 0;
  };

 private:
  struct Call;
  ReplyDelta scan(bool final);
  void give_back_as_content(size_t from);

  ToolFormat format_;
  bool forced_;
  std::function<std::string()> make_id_;
  std::string text_;
  size_t sent_content_ = 0;        // text_[0, sent_content_) went out as content
  size_t region_ = std::string::npos;  // where calls begin (npos: not yet)
  size_t search_from_ = 0;         // where to look for a marker next
  bool content_only_ = false;      // Llama 3: the reply did not start as a call
  struct Sent {
    std::string name;
    size_t arguments = 0;  // bytes of its arguments sent
  };
  std::vector<Sent> sent_;
  ValueScans values_;
};

// A call id: "call_" and 24 hex digits, or 9 letters and digits for Mistral
// (its templates refuse other ids when the call comes back in the history).
std::string new_tool_call_id(ToolFormat f, uint64_t random);

}  // namespace tessera::llm
