// Chat templates (llm/chat_template.h): the Jinja subset's statements,
// expressions, filters and tests with their expected text; whitespace
// control; load errors that name the construct; the sandbox's limits.
// Against @huggingface/jinja on five models' templates in
// ChatTemplate.MatchesHuggingFaceJinja (scripts/llm_compat.sh).
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>

#include "tessera/io/file.h"
#include "tessera/llm/chat_template.h"
#include "tessera/llm/tokenizer.h"
#include "test_util.h"

namespace tessera {
namespace {

using llm::ChatTemplate;
using json = nlohmann::ordered_json;

std::string render(const std::string& src, const json& ctx = json::object()) { return ChatTemplate(src).render(ctx); }

TEST(ChatTemplate, StatementsAndLoops) {
  const json ctx = {{"messages", json::array({{{"role", "user"}, {"content", "a"}}, {{"role", "assistant"}, {"content", "b"}}})}};
  EXPECT_EQ(render("{% for m in messages %}[{{ loop.index0 }}{{ m.role }}:{{ m['content'] }}{% if loop.last %}!{% endif %}]"
                   "{% endfor %}", ctx),
            "[0user:a][1assistant:b!]");
  EXPECT_EQ(render("{% for m in messages if m.role == 'assistant' %}{{ m.content }}{% else %}none{% endfor %}", ctx), "b");
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}"), "a=1;b=2;");
  EXPECT_EQ(render("{% for x in range(5) %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 3 %}{% break %}{% endif %}"
                   "{{ x }}{% endfor %}"),
            "02");
  // set inside a loop stays there; a namespace carries it out.
  EXPECT_EQ(render("{% set n = 0 %}{% set ns = namespace(n=0) %}{% for x in [1, 2, 3] %}{% set n = n + x %}"
                   "{% set ns.n = ns.n + x %}{% endfor %}{{ n }},{{ ns.n }}"),
            "0,6");
  EXPECT_EQ(render("{% if a %}1{% elif b %}2{% else %}3{% endif %}", {{"a", false}, {"b", true}}), "2");
  EXPECT_EQ(render("{% set s %}in{{ 1 + 1 }}{% endset %}[{{ s }}]"), "[in2]");
  EXPECT_EQ(render("{% macro greet(name, p='!') %}hi {{ name }}{{ p }}{% endmacro %}{{ greet('x') }}{{ greet('y', p='?') }}"),
            "hi x!hi y?");
}

TEST(ChatTemplate, ExpressionsPrintAsHuggingFaceJinjaDoes) {
  EXPECT_EQ(render("{{ 7 // 2 }} {{ 7 / 2 }} {{ 7 % 3 }} {{ 2 ** 3 }} {{ -3 + 1.5 }} {{ 4 / 2 }}"), "3 3.5 1 8 -1.5 2.0");
  EXPECT_EQ(render("{{ true }} {{ none }} {{ [1, 'a', none] }} {{ {'k': [true]} }}"), "true  [1, \"a\", null] {\"k\": [true]}");
  EXPECT_EQ(render("{{ 'a' ~ 1 ~ x }}|{{ 'x' + 'y' }}|{{ 'ab' in 'cabd' }}|{{ 2 in [1, 2] }}|{{ 'k' not in {'k': 1} }}"),
            "a1|xy|true|true|false");
  EXPECT_EQ(render("{{ 'yes' if 1 > 2 else 'no' }}{{ 'shown' if false }}"), "no");
  EXPECT_EQ(render("{{ 'hello'[1:3] }} {{ 'hello'[-1] }} {{ [1, 2, 3][::-1] }} {{ [1, 2, 3][:-1] }}"), "el o [3, 2, 1] [1, 2]");
  EXPECT_EQ(render("{{ x is defined }} {{ x is not defined }} {{ 'a' is string }} {{ 3 is odd }} {{ [] is iterable }}"),
            "false true true true true");
  EXPECT_EQ(render("{{ 'a' \"b\" }}{{ '\\n\\t\\u00e9' }}"), "ab\n\t\xc3\xa9");
}

TEST(ChatTemplate, Filters) {
  EXPECT_EQ(render("{{ '  x  ' | trim }}|{{ 'ab' | upper }}|{{ 'hello world' | title }}|{{ [3, 1, 2] | sort | join(',') }}"),
            "x|AB|Hello World|1,2,3");
  EXPECT_EQ(render("{{ {'b': 1, 'a': [1, 'x']} | tojson }}"), "{\"b\": 1, \"a\": [1, \"x\"]}");
  EXPECT_EQ(render("{{ {'a': [1]} | tojson(indent=2) }}"), "{\n  \"a\": [\n    1\n  ]\n}");
  EXPECT_EQ(render("{{ 'caf\xc3\xa9' | tojson(ensure_ascii=true) }}"), "\"caf\\u00e9\"");
  const json ctx = {{"ms", json::array({{{"role", "user"}, {"n", 1}}, {{"role", "tool"}, {"n", 2}}, {{"role", "user"}, {"n", 3}}})}};
  EXPECT_EQ(render("{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='n') | list }}", ctx), "[1, 3]");
  EXPECT_EQ(render("{{ ms | rejectattr('role', 'equalto', 'user') | length }}", ctx), "1");
  EXPECT_EQ(render("{{ x | default('d') }}{{ '' | default('e', true) }}{{ [1, 1, 2] | unique | list }}"), "de[1, 2]");
  EXPECT_EQ(render("{{ 'a\nb' | indent(2) }}|{{ 'a-b-c'.split('-') }}|{{ 'xay'.replace('a', 'b') }}|{{ ' q '.strip() }}"),
            "a\n  b|[\"a\", \"b\", \"c\"]|xby|q");
  EXPECT_EQ(render("{{ '12' | int + 1 }} {{ 2 | string }} {{ 'Ab'.startswith('A') }} {{ {'a': 1}.get('b', 9) }}"),
            "13 2 true 9");
}

TEST(ChatTemplate, WhitespaceControlAndBlocks) {
  // trim_blocks and lstrip_blocks: a block tag's own line leaves nothing.
  EXPECT_EQ(render("a\n  {% if true %}\n  b\n  {% endif %}\nc\n"), "a\n  b\nc");
  EXPECT_EQ(render("x  {{- 'y' -}}  \n z"), "xyz");
  EXPECT_EQ(render("x {#- note -#} y{# gone #}"), "xy");
}

TEST(ChatTemplate, UnknownConstructsAreLoadErrors) {
  auto err = [](const std::string& src) { return testing::error_of([&] { ChatTemplate t(src, "t.jinja"); }); };
  EXPECT_NE(err("{% include 'x' %}").find("t.jinja: line 1: the statement 'include' is not in Tessera's Jinja subset"),
            std::string::npos);
  EXPECT_NE(err("\n{{ x | frobnicate }}").find("line 2: the filter 'frobnicate' is not in Tessera's Jinja subset"),
            std::string::npos);
  EXPECT_NE(err("{{ x is prime }}").find("the test 'prime' is not in"), std::string::npos);
  EXPECT_NE(err("{{ x.zfill(3) }}").find("the method 'zfill()' is not in"), std::string::npos);
  EXPECT_NE(err("{{ cycler(1) }}").find("the function 'cycler()' is not in"), std::string::npos);
  EXPECT_NE(err("{% if x %}open").find("'if' is never closed"), std::string::npos);
  EXPECT_NE(err("{{ 'unterminated }}").find("a string is never closed"), std::string::npos);
  EXPECT_NE(err("{% for x in y %}{% endif %}").find("unexpected 'endif'"), std::string::npos);
}

TEST(ChatTemplate, SandboxLimits) {
  llm::ChatTemplateLimits lim;
  lim.max_steps = 1000;
  EXPECT_NE(testing::error_of([&] { ChatTemplate("{% for x in range(100000) %}{% endfor %}", "t", lim).render(json::object()); })
                .find("more than 1000 steps"),
            std::string::npos);
  lim = {};
  lim.max_output = 100;
  EXPECT_NE(testing::error_of([&] { ChatTemplate("{% for x in range(200) %}xx{% endfor %}", "t", lim).render(json::object()); })
                .find("passed 100 bytes"),
            std::string::npos);
  // A macro that calls itself runs out of depth, not of stack.
  EXPECT_NE(testing::error_of([] { render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"); })
                .find("nests deeper than"),
            std::string::npos);
  std::string deep(5000, '(');
  EXPECT_NE(testing::error_of([&] { ChatTemplate t("{{ " + deep + " }}"); }).find("nests deeper than"), std::string::npos);
  EXPECT_NE(testing::error_of([] { render("{{ raise_exception('roles must alternate') }}"); })
                .find("the template raised: roles must alternate"),
            std::string::npos);
  EXPECT_EQ(render("{{ x.y is defined }}"), "false");
  // Numbers too long for their types: no exception escapes.
  EXPECT_EQ(render("{{ [1, 2].99999999999999999999999 is defined }}"), "false");
  EXPECT_EQ(render("{{ " + std::string(400, '9') + ".5 > 1 }}"), "true");
  EXPECT_NE(testing::error_of([] { render("{{ 'a' ~ none }}"); }).find("'~' on none"), std::string::npos);
}

// What a render in a child process used: its peak resident memory (KiB) and
// wall time, and whether it ended with an error naming `expect`.
struct ChildRun {
  long max_rss_kib = 0;
  double seconds = 0;
  bool error_as_expected = false;
};
ChildRun render_in_child(const std::string& src, const std::string& expect) {
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    int code = 2;
    try {
      if (!src.empty()) render(src);
      code = 3;  // rendered: no error at all
    } catch (const Error& e) {
      code = std::string(e.what()).find(expect) != std::string::npos ? 0 : 1;
      if (code) std::fprintf(stderr, "unexpected error: %s\n", e.what());
    }
    _exit(code);
  }
  int status = 0;
  rusage ru{};
  wait4(pid, &status, 0, &ru);
  ChildRun r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.max_rss_kib = ru.ru_maxrss;
  r.error_as_expected = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  return r;
}

// A few hundred bytes of template that would build gigabytes or run for
// minutes each stop with an error naming the sandbox's limit, within a
// second and 64 MiB (Note [What a template may build]).
TEST(ChatTemplate, BombsStopWithinASecondAnd64MiB) {
  const std::string budget = "bytes of strings, lists and output";
  const std::vector<std::pair<std::string, std::string>> bombs = {
      {"{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
       budget},
      {"{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", budget},
      {"{% set ns = namespace(l=[1, 'x']) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}{% endfor %}", budget},
      {"{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}"
       "{{ ns.l | tojson }}",
       budget},
      {"{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ ns.l }}",
       budget},
      {"{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}"
       "{{ ns.l | tojson(indent=64) }}",
       budget},
      {"{% set s = 'aaaaaaaaaaaaaaaa' %}{{ s.replace('a', s).replace('a', s).replace('a', s).replace('a', s)"
       ".replace('a', s).replace('a', s) }}",
       budget},
      {"{% set s = 'aaaaaaaaaaaaaaaa' %}{{ s | replace('', s) | replace('', s) | replace('', s) | replace('', s)"
       " | replace('', s) }}",
       budget},
      {"{% set ns = namespace(s='a\nb') %}{% for i in range(40) %}{% set ns.s = (ns.s ~ '\n' ~ ns.s) | "
       "indent(1024, true) %}{% endfor %}",
       budget},
      {"{% set ns = namespace(s='ab') %}{% for i in range(17) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}"
       "{{ ns.s | list | length }}",
       budget},
      {"{% set ns = namespace(l=['abcdefgh']) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}{% endfor %}"
       "{{ ns.l | join(ns.l | join) }}",
       budget},
      {"{% set ns = namespace(l=[]) %}{% for i in range(900000) %}{{ ns.l.append('abcdefghabcdefgh') }}{% endfor %}",
       budget},
      {"{% for x in range(9223372036854775807) %}{% endfor %}", budget},
      {"{% for i in range(8000) %}{% for c in '" + std::string(140, 'c') + "' %}{% endfor %}{% endfor %}",
       "(a limit of the sandbox)"},  // its steps, or its time on a loaded machine
      {"{% set ns = namespace(s='ab') %}{% for i in range(17) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}"
       "{% for a in '0123456789' %}{% for b in '0123456789' %}{% for c in '0123456789' %}{% for d in '0123456789' %}"
       "{% for e in '0123456789' %}{% if ns.s.count('bab0') %}{% endif %}"
       "{% endfor %}{% endfor %}{% endfor %}{% endfor %}{% endfor %}",
       "longer than"},
      {"{{ 2 ** 1000 }}", "integer overflow in **"},
      {"{{ 3 ** 40 }}", "integer overflow in **"},
      {"{{ 9223372036854775807 + 1 }}", "integer overflow in +"},
      {"{{ (-9223372036854775807 - 1) // -1 }}", "integer overflow in //"},
      {"{{ -(-9223372036854775807 - 1) }}", "integer overflow in unary -"},
      {"{{ (-9223372036854775807 - 1) | abs }}", "integer overflow in abs"},
      {"{{ (10.0 ** 300) | int }}", "does not fit in a 64-bit integer"},
      {"{{ [9223372036854775807, 1] | sum }}", "integer overflow in sum"},
  };
  const ChildRun idle = render_in_child("", "");
  for (const auto& [src, expect] : bombs) {
    SCOPED_TRACE(src);
    const ChildRun r = render_in_child(src, expect);
    EXPECT_TRUE(r.error_as_expected);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)  // their shadow memory and slowdown
    EXPECT_LT(r.seconds, 1.0);
    EXPECT_LT(r.max_rss_kib - idle.max_rss_kib, 64 * 1024);
#endif
  }
  // Integers that fit stay exact.
  EXPECT_EQ(render("{{ 2 ** 62 }} {{ (-2) ** 63 }} {{ -7 // 2 }} {{ 7 // -2 }} {{ 0 ** 0 }} {{ 1 ** 1000000 }}"),
            "4611686018427387904 -9223372036854775808 -4 -4 1 1");
  EXPECT_EQ(render("{{ (-9223372036854775807 - 1) % -1 }} {{ 2 ** -1 }}"), "0 0.5");
}

// The budget grows with what the template is given: a long conversation
// renders whole, a transform of it a few times over too.
TEST(ChatTemplate, BudgetScalesWithTheContext) {
  const std::string big(3 << 20, 'x');
  const json ctx = {{"messages", json::array({{{"role", "user"}, {"content", big}}})}};
  llm::ChatTemplateLimits lim;
  lim.max_seconds = 30;  // 3 MB passes through code points a few times: slow under the sanitizers
  const std::string out = ChatTemplate("{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}"
                                       "{{ (m.content ~ '!') | length }}{% endfor %}",
                                       "t", lim)
                              .render(ctx);
  EXPECT_EQ(out.size(), big.size() + 6 + 7);
  lim.built_per_context_byte = 1;  // the output alone is as large as the context
  EXPECT_NE(testing::error_of([&] {
              ChatTemplate("{% for m in messages %}{{ m.content }}{{ m.content }}{% endfor %}", "t", lim).render(ctx);
            }).find("bytes of strings, lists and output"),
            std::string::npos);
}

// Message texts are marked while rendering, so the tokenizer can keep
// special tokens out of them.
TEST(ChatTemplate, RenderChatMarksMessageTexts) {
  llm::Tokenizer tok = llm::Tokenizer::characters({});
  ChatTemplate t("{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}");
  const json msgs = json::array({{{"role", "user"}, {"content", "hi <x>"}}, {{"role", "assistant"}, {"content", "yo"}}});
  const llm::RenderedChat r = llm::render_chat(t, msgs, false, tok);
  EXPECT_EQ(r.text, "[user]hi <x>[assistant]yo");
  ASSERT_EQ(r.content_spans.size(), 2u);
  EXPECT_EQ(r.text.substr(r.content_spans[0].first, r.content_spans[0].second - r.content_spans[0].first), "hi <x>");
  EXPECT_EQ(r.text.substr(r.content_spans[1].first, r.content_spans[1].second - r.content_spans[1].first), "yo");
  ChatTemplate cut("{% for m in messages %}{{ m.content[:2] }}{% endfor %}");
  EXPECT_NE(testing::error_of([&] { llm::render_chat(cut, msgs, false, tok); }).find("cuts a message's text"),
            std::string::npos);
}

// @huggingface/jinja's output on a suite of conversations
// (scripts/llm_compat_chat.mjs, run by scripts/llm_compat.sh): every render
// byte-identical or raising in both. With TESSERA_CHAT_REPORT_ONLY set, a
// per-template summary only (the compat script's survey of every template in
// llama.cpp's tree).
TEST(ChatTemplate, MatchesHuggingFaceJinja) {
  TESSERA_REFERENCE(path, "TESSERA_CHAT_CASES");
  const bool report_only = std::getenv("TESSERA_CHAT_REPORT_ONLY") != nullptr;
  const std::vector<char> raw = io::read_file(path);
  const json j = json::parse(raw.begin(), raw.end());
  struct Tally {
    size_t same = 0, both_raised = 0, n = 0;
    std::string load_error, first_difference;
  };
  std::map<std::string, Tally> by_template;
  for (const json& c : j.at("cases")) {
    const std::string tname = c.at("template").get<std::string>();
    const std::string name = tname + ": " + c.at("title").get<std::string>();
    Tally& tally = by_template[tname];
    ++tally.n;
    std::string got, error;
    try {
      got = ChatTemplate(c.at("source").get<std::string>(), tname).render(c.at("context"));
    } catch (const Error& e) {
      error = e.what();
      if (error.find("not in Tessera's Jinja subset") != std::string::npos) tally.load_error = error;
    }
    const bool ok = c.at("output").is_null() ? !error.empty() : error.empty() && got == c.at("output").get<std::string>();
    if (ok) (c.at("output").is_null() ? tally.both_raised : tally.same)++;
    else if (tally.first_difference.empty()) tally.first_difference = name + (error.empty() ? "" : ": " + error);
    if (!report_only && !ok) {
      if (c.at("output").is_null())
        ADD_FAILURE() << name << ": @huggingface/jinja raised '" << c.at("error").get<std::string>()
                      << "', Tessera rendered:\n" << got;
      else
        ADD_FAILURE() << name << (error.empty() ? "" : ": " + error) << "\n  Tessera:   " << ::testing::PrintToString(got)
                      << "\n  reference: " << ::testing::PrintToString(c.at("output").get<std::string>());
    }
  }
  size_t all = 0, good = 0, full = 0;
  for (const auto& [name, t] : by_template) {
    all += t.n;
    good += t.same + t.both_raised;
    full += t.same + t.both_raised == t.n;
    std::printf("%-48s %3zu of %3zu same (%zu raised in both)%s%s\n", name.c_str(), t.same + t.both_raised, t.n,
                t.both_raised, t.load_error.empty() ? "" : "; not loaded: ",
                t.load_error.empty() ? (t.first_difference.empty() ? "" : ("; first difference: " + t.first_difference).c_str())
                                     : t.load_error.c_str());
  }
  std::printf("%zu of %zu renders match, %zu of %zu templates entirely\n", good, all, full, by_template.size());
}

}  // namespace
}  // namespace tessera
