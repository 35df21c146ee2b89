// Tool calls (llm/tool_calls.h): each template family found from its
// source; replies in each format parsed into content and calls the same way
// whole or streamed in any pieces; texts drawn from forced-call grammars
// are calls of the tools asked for, their arguments valid by the schemas.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <random>

#include "json_draw.h"
#include "tessera/io/file.h"
#include "tessera/llm/chat_template.h"
#include "tessera/llm/tool_calls.h"
#include "test_util.h"

namespace tessera {
namespace {

using json = nlohmann::ordered_json;
using llm::ToolFormat;

// Templates in each family's format (small ones written for these tests).
const char* kHermes =
    "{%- if tools %}<|im_start|>system\n<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}</tools><|im_end|>\n"
    "{% endif %}{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.tool_calls %}{% for c in m.tool_calls %}"
    "<tool_call>\n{{ c.function | tojson }}\n</tool_call>{% endfor %}{% else %}{{ m.content }}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
const char* kMistral =
    "{% for m in messages %}{% if m.role == 'user' %}{% if tools and loop.last %}[AVAILABLE_TOOLS]{{ tools | tojson }}"
    "[/AVAILABLE_TOOLS]{% endif %}[INST]{{ m.content }}[/INST]{% elif m.tool_calls %}[TOOL_CALLS]"
    "{{ m.tool_calls | tojson }}</s>{% else %}{{ m.content }}</s>{% endif %}{% endfor %}";
const char* kMistralArgs =
    "{% for m in messages %}{% if m.tool_calls %}{% for c in m.tool_calls %}[TOOL_CALLS]{{ c.function.name }}[ARGS]"
    "{{ c.function.arguments | tojson }}{% endfor %}{% else %}[INST]{{ m.content }}[/INST]{% endif %}{% endfor %}"
    "{% if tools %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}";
const char* kLlama3 =
    "{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n{% if m.tool_calls %}"
    "{{ '{\"name\": \"' + m.tool_calls[0].function.name + '\", \"parameters\": ' }}"
    "{{ m.tool_calls[0].function.arguments | tojson }}}{% else %}{{ m.content }}{% endif %}<|eot_id|>{% endfor %}"
    "{% if tools %}{% for t in tools %}{{ t | tojson }}{% endfor %}{% endif %}";

TEST(ToolCalls, TheFormatComesFromTheTemplate) {
  EXPECT_EQ(llm::tool_format(llm::ChatTemplate(kHermes)), ToolFormat::Hermes);
  EXPECT_EQ(llm::tool_format(llm::ChatTemplate(kMistral)), ToolFormat::Mistral);
  EXPECT_EQ(llm::tool_format(llm::ChatTemplate(kMistralArgs)), ToolFormat::MistralArgs);
  EXPECT_EQ(llm::tool_format(llm::ChatTemplate(kLlama3)), ToolFormat::Llama3);
  // A template that never uses `tools` cannot show them; one that writes
  // calls as tags, or in no known format, is refused by name.
  auto refusal = [](const char* source) {
    return testing::error_of([&] { llm::tool_format(llm::ChatTemplate(source)); });
  };
  EXPECT_NE(refusal(llm::kPlainChatTemplate).find("never uses `tools`"), std::string::npos);
  EXPECT_NE(refusal("{{ tools }}<tool_call><function=f>").find("XML-like"), std::string::npos);
  EXPECT_NE(refusal("{{ tools | tojson }}{{ messages }}").find("a format Tessera does not parse"), std::string::npos);
  // `tools` in the template's text only is not a use.
  EXPECT_NE(refusal("tools: <tool_call>{{ messages }}").find("never uses `tools`"), std::string::npos);
}

// Real models' templates, where scripts/llm_compat.sh has fetched them.
TEST(ToolCalls, RealTemplatesFamilies) {
  TESSERA_REFERENCE(path, "TESSERA_CHAT_CASES");
  const json cases = json::parse(io::read_file(path))["cases"];
  std::map<std::string, std::string> source;
  for (const json& c : cases) source[c["template"].get<std::string>()] = c["source"].get<std::string>();
  EXPECT_EQ(llm::tool_format(llm::ChatTemplate(source.at("llama-3.1"))), ToolFormat::Llama3);
  EXPECT_EQ(llm::tool_format(llm::ChatTemplate(source.at("mistral-nemo"))), ToolFormat::Mistral);
  EXPECT_EQ(llm::tool_format(llm::ChatTemplate(source.at("qwen-2.5"))), ToolFormat::Hermes);
  EXPECT_THROW(llm::tool_format(llm::ChatTemplate(source.at("gemma-2"))), Error);
}

// A reply's content and calls, the deltas joined as a client joins them.
struct Reply {
  std::string content;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
  std::vector<std::string> ids;
  bool operator==(const Reply& o) const { return content == o.content && calls == o.calls; }
};
std::ostream& operator<<(std::ostream& os, const Reply& r) {
  os << "content " << json(r.content).dump();
  for (const auto& [n, a] : r.calls) os << ", call " << n << " " << json(a).dump();
  return os;
}

void join(Reply& r, const llm::ReplyDelta& d) {
  r.content += d.content;
  for (const llm::ToolCallDelta& c : d.calls) {
    if (!c.id.empty()) {
      EXPECT_EQ(c.index, static_cast<int64_t>(r.calls.size())) << "a new call's index is the next one";
      r.calls.emplace_back(c.name, "");
      r.ids.push_back(c.id);
    }
    ASSERT_LT(c.index, static_cast<int64_t>(r.calls.size())) << "arguments for a call not begun";
    r.calls[static_cast<size_t>(c.index)].second += c.arguments;
  }
}

// `text` through a parser in pieces cut at `cuts` (each at a character boundary).
Reply parse(ToolFormat f, const std::string& text, const std::vector<size_t>& cuts, bool forced = false) {
  uint64_t n = 0;
  llm::ToolCallParser p(f, forced, [&] { return llm::new_tool_call_id(f, ++n); });
  Reply r;
  size_t at = 0;
  for (size_t c : cuts) {
    join(r, p.push(text.substr(at, c - at)));
    at = c;
  }
  join(r, p.push(text.substr(at)));
  join(r, p.finish());
  return r;
}

// Whole, a character at a time, and in random pieces: the same reply.
Reply parse_every_way(ToolFormat f, const std::string& text, bool forced = false) {
  const Reply whole = parse(f, text, {}, forced);
  std::vector<size_t> bounds;
  for (size_t i = 1; i < text.size(); ++i)
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) bounds.push_back(i);
  EXPECT_EQ(parse(f, text, bounds, forced), whole) << "a character at a time";
  std::mt19937 rng(3);
  for (int k = 0; k < 20; ++k) {
    std::vector<size_t> cuts;
    for (size_t b : bounds)
      if (rng() % 5 == 0) cuts.push_back(b);
    EXPECT_EQ(parse(f, text, cuts, forced), whole) << "in pieces";
  }
  return whole;
}

Reply reply(std::string content, std::vector<std::pair<std::string, std::string>> calls) {
  return {std::move(content), std::move(calls), {}};
}

TEST(ToolCalls, HermesRepliesSplitIntoContentAndCalls) {
  const std::string two =
      "Let me look \xc3\xa9.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
      "</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";
  EXPECT_EQ(parse_every_way(ToolFormat::Hermes, two),
            reply("Let me look \xc3\xa9.\n", {{"get_weather", "{\"city\": \"Paris\"}"}, {"now", "{}"}}));
  // Text that only looks like a marker, and a "call" that is not JSON, stay content.
  EXPECT_EQ(parse_every_way(ToolFormat::Hermes, "a < b, <tool"), reply("a < b, <tool", {}));
  const std::string broken = "x <tool_call>\n{\"name\": oops}\n</tool_call> y";
  EXPECT_EQ(parse_every_way(ToolFormat::Hermes, broken), reply(broken, {}));
  // Text after the calls is kept as content; blank text is not.
  EXPECT_EQ(parse_every_way(ToolFormat::Hermes, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": [1, {}]}}"
                                                "</tool_call>\n\nDone."),
            reply("Done.", {{"f", "{\"a\": [1, {}]}"}}));
  // Other keys are skipped; the name may come after the arguments.
  EXPECT_EQ(parse_every_way(ToolFormat::Hermes, "<tool_call>{\"arguments\": {\"k\": \"}\\\"{\"}, \"id\": 7, "
                                                "\"name\": \"g\"}</tool_call>"),
            reply("", {{"g", "{\"k\": \"}\\\"{\"}"}}));
}

TEST(ToolCalls, MistralLlamaRepliesSplitIntoCalls) {
  EXPECT_EQ(parse_every_way(ToolFormat::Mistral, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"x\": 1}}, "
                                                 "{\"name\": \"g\", \"arguments\": {\"y\": [1, 2.5e3]}}]"),
            reply("", {{"f", "{\"x\": 1}"}, {"g", "{\"y\": [1, 2.5e3]}"}}));
  EXPECT_EQ(parse_every_way(ToolFormat::Mistral, "No call."), reply("No call.", {}));
  EXPECT_EQ(parse_every_way(ToolFormat::MistralArgs, "[TOOL_CALLS]f[ARGS]{\"x\": true}[TOOL_CALLS]g_2[ARGS]{}"),
            reply("", {{"f", "{\"x\": true}"}, {"g_2", "{}"}}));
  EXPECT_EQ(parse_every_way(ToolFormat::Llama3, "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"s\": "
                                                "\"\xc3\xa9\"}}; {\"name\": \"g\", \"parameters\": {}}"),
            reply("", {{"f", "{\"s\": \"\xc3\xa9\"}"}, {"g", "{}"}}));
  // Llama 3: a call only when the reply starts as one.
  EXPECT_EQ(parse_every_way(ToolFormat::Llama3, "Hello {\"name\": \"f\", \"parameters\": {}}"),
            reply("Hello {\"name\": \"f\", \"parameters\": {}}", {}));
  EXPECT_EQ(parse_every_way(ToolFormat::Llama3, "{\"a\": 1}"), reply("{\"a\": 1}", {}));
  EXPECT_EQ(parse_every_way(ToolFormat::Llama3, "  {\"name\": \"f\"}"), reply("", {{"f", "{}"}}));
  // Forced replies start after control-token markers (Note [Forced tool calls]).
  EXPECT_EQ(parse_every_way(ToolFormat::Mistral, "[{\"name\": \"f\", \"arguments\": {}}]", true),
            reply("", {{"f", "{}"}}));
  EXPECT_EQ(parse_every_way(ToolFormat::MistralArgs, "f[ARGS]{\"a\": 1}", true), reply("", {{"f", "{\"a\": 1}"}}));
}

TEST(ToolCalls, ArgumentsStreamAsTheyArrive) {
  uint64_t n = 0;
  llm::ToolCallParser p(ToolFormat::Hermes, false, [&] { return "id" + std::to_string(++n); });
  Reply r;
  join(r, p.push("Sure.<tool_call>\n{\"name\": \"f\", "));
  EXPECT_EQ(r.content, "Sure.");
  EXPECT_EQ(r.calls.size(), 1u);  // the name is complete: the call begins
  EXPECT_EQ(r.ids, std::vector<std::string>{"id1"});
  join(r, p.push("\"arguments\": {\"text\": \"hel"));
  EXPECT_EQ(r.calls[0].second, "{\"text\": \"hel");
  join(r, p.push("lo\"}}\n</tool"));
  EXPECT_EQ(r.calls[0].second, "{\"text\": \"hello\"}");
  join(r, p.push("_call>"));
  join(r, p.finish());
  EXPECT_EQ(r, reply("Sure.", {{"f", "{\"text\": \"hello\"}"}}));
  // A reply cut short keeps the call it began (its arguments as far as they came).
  EXPECT_EQ(parse(ToolFormat::Hermes, "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": ", {}),
            reply("", {{"f", "{\"x\": "}}));
}

// Note [Scanning a reply once]: a long reply, a few bytes a push, is looked
// at a few times over, not once per push (which made a 60 KB reply's parse
// quadratic), and parses as it does whole.
TEST(ToolCalls, ALongReplyIsScannedAFewTimesNotOncePerPush) {
  std::string code, prose;
  for (int i = 0; i < 1500; ++i) code += "line " + std::to_string(i) + ": {[\\\"x\\\"]}\\n";
  for (int i = 0; i < 1500; ++i) prose += "word" + std::to_string(i) + " ";
  const std::string call = "{\"name\": \"write\", \"arguments\": {\"path\": \"a.txt\", \"text\": \"" + code + "\"}}";
  for (ToolFormat f : {ToolFormat::Hermes, ToolFormat::Mistral}) {
    const std::string text = f == ToolFormat::Hermes
        ? prose + "<tool_call>\n" + call + "\n</tool_call>\n<tool_call>\n" + call + "\n</tool_call>"
        : prose + "[TOOL_CALLS] [" + call + ", " + call + "]";
    uint64_t n = 0;
    llm::ToolCallParser p(f, false, [&] { return "id" + std::to_string(++n); });
    Reply r;
    for (size_t at = 0; at < text.size(); at += 3) join(r, p.push(text.substr(at, 3)));
    join(r, p.finish());
    EXPECT_EQ(r, parse(f, text, {})) << llm::tool_format_name(f);
    ASSERT_EQ(r.calls.size(), 2u);
    EXPECT_EQ(nlohmann::json::parse(r.calls[1].second)["text"], nlohmann::json::parse("\"" + code + "\""));
    EXPECT_LT(p.bytes_scanned(), 4 * static_cast<int64_t>(text.size())) << llm::tool_format_name(f);
  }
}

// Arguments that go bad after their call began: the call keeps what came
// before, and nothing after the bad byte is sent, however the text is cut
// (Note [Scanning a reply once]: a later push does not take up the scan
// from before the bad byte).
TEST(ToolCalls, ArgumentsStopWhereTheyGoBad) {
  const std::string head = "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": ";
  for (const std::vector<std::string>& pieces :
       {std::vector<std::string>{head, "\"b\x01", "zz"}, {head, "[{]", "}]}"}, {head, "[1}", "]}"}}) {
    const std::string text = pieces[0] + pieces[1] + pieces[2];
    llm::ToolCallParser p(ToolFormat::Hermes, false, [] { return std::string("id"); });
    Reply r;
    for (const std::string& piece : pieces) join(r, p.push(piece));
    join(r, p.finish());
    ASSERT_EQ(r.calls.size(), 1u) << text;
    EXPECT_EQ(r.calls[0].second, "{\"a\": ") << text;
    EXPECT_EQ(r.content, text.substr(std::string("<tool_call>").size())) << text;
  }
}

TEST(ToolCalls, IdsSuitTheFormat) {
  const std::string a = llm::new_tool_call_id(ToolFormat::Hermes, 1), b = llm::new_tool_call_id(ToolFormat::Hermes, 2);
  EXPECT_EQ(a.rfind("call_", 0), 0u);
  EXPECT_EQ(a.size(), 29u);
  EXPECT_NE(a, b);
  const std::string m = llm::new_tool_call_id(ToolFormat::Mistral, 1);
  EXPECT_EQ(m.size(), 9u);  // Mistral's templates check for 9 letters and digits
  for (char c : m) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c))) << m;
}

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "The weather now.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
      "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"],
      "additionalProperties": false}}},
  {"type": "function", "function": {"name": "now"}},
  {"type": "function", "function": {"name": "plan", "parameters": {"$defs": {"step": {"type": "object",
    "properties": {"do": {"type": "string", "maxLength": 6}, "then": {"anyOf": [{"$ref": "#/$defs/step"},
    {"type": "null"}]}}, "required": ["do", "then"], "additionalProperties": false}},
    "type": "object", "properties": {"first": {"$ref": "#/$defs/step"}}, "required": ["first"],
    "additionalProperties": false}}}
])");

json parameters(const std::string& name) {
  for (const json& t : kTools)
    if (t["function"]["name"] == name) return t["function"].value("parameters", json{{"type", "object"}});
  return nullptr;
}

TEST(ToolCalls, ForcedGrammarsGiveCallsOfTheToolsAsked) {
  std::mt19937 rng(11);
  for (ToolFormat f : {ToolFormat::Hermes, ToolFormat::Mistral, ToolFormat::MistralArgs, ToolFormat::Llama3})
    for (const std::string only : {"", "get_weather", "now"})
      for (bool parallel : {false, true}) {
        SCOPED_TRACE(std::string(llm::tool_format_name(f)) + " only '" + only + "'" + (parallel ? " parallel" : ""));
        const auto g = llm::Grammar::parse(llm::forced_tool_call_gbnf(f, kTools, only, parallel));
        int drawn = 0;
        for (int i = 0; i < 25; ++i) {
          const std::string text = testing::draw(g, rng);
          if (text.empty()) continue;  // grew too long
          ++drawn;
          const Reply r = parse(f, text, {}, true);
          EXPECT_EQ(r.content, "") << text;
          ASSERT_GE(r.calls.size(), 1u) << text;
          if (!parallel) EXPECT_EQ(r.calls.size(), 1u) << text;
          for (const auto& [name, args] : r.calls) {
            if (!only.empty()) EXPECT_EQ(name, only);
            const json schema = parameters(name);
            ASSERT_FALSE(schema.is_null()) << "an unknown function " << name;
            json v;
            ASSERT_NO_THROW(v = json::parse(args)) << args;
            EXPECT_TRUE(testing::valid(v, schema, schema)) << args;
          }
        }
        EXPECT_GT(drawn, 15);
      }
  // A schema keyword the grammar cannot enforce is named with where it is.
  json bad = kTools;
  bad[0]["function"]["parameters"]["properties"]["city"]["pattern"] = "^[A-Z]";
  const std::string e = testing::error_of([&] { llm::forced_tool_call_gbnf(ToolFormat::Hermes, bad, "", true); });
  EXPECT_NE(e.find("the keyword 'pattern' is not supported"), std::string::npos) << e;
  EXPECT_NE(e.find("at tools[0].function.parameters/properties/city"), std::string::npos) << e;
}

}  // namespace
}  // namespace tessera
