// Grammars (llm/grammar.h): GBNF text compiled to rules over bytes; the
// matcher reads exactly the language, byte by byte (a character split across
// tokens included); token masks allow exactly the tokens it can read and end
// tokens where the text may end; bad grammars are errors that name the
// place and the problem.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "llm_fixture.h"
#include "tessera/llm/grammar.h"
#include "test_util.h"

namespace tessera {
namespace {

using llm::Grammar;
using llm::GrammarMatcher;

// Whether the whole text is in the grammar's language.
bool matches(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  GrammarMatcher m(g);
  return m.accept(text) && m.can_end();
}

TEST(Grammar, ReadsExactlyItsLanguage) {
  auto g = Grammar::parse(R"(root ::= "yes" | "no" # a comment
)");
  EXPECT_TRUE(matches(g, "yes"));
  EXPECT_TRUE(matches(g, "no"));
  EXPECT_FALSE(matches(g, "ye"));
  EXPECT_FALSE(matches(g, "yess"));
  GrammarMatcher m(g);
  EXPECT_FALSE(m.can_end());
  EXPECT_TRUE(m.accept("y"));
  EXPECT_FALSE(m.accept("n"));  // refused, and the state is unchanged
  EXPECT_TRUE(m.accept("es"));
  EXPECT_TRUE(m.can_end());
  EXPECT_TRUE(m.must_end());

  // Rules, groups, classes, repetitions.
  g = Grammar::parse(R"(
root   ::= item ("," ws item)*
item   ::= [a-z_] [a-z0-9_]{0,3} | number
number ::= "-"? [1-9] [0-9]*
ws     ::= [ \t\n]?
)");
  for (const char* ok : {"a", "abcd", "a_1, -42,x", "ab,\tcd,\nz9", "7"}) EXPECT_TRUE(matches(g, ok)) << ok;
  for (const char* bad : {"", "abcde", "a,,b", "-0", "A", "a, ,b", "ab,0a"}) EXPECT_FALSE(matches(g, bad)) << bad;

  g = Grammar::parse(R"(root ::= "a"{2,3} "b"{2} "c"{1,})");
  EXPECT_TRUE(matches(g, "aabbc"));
  EXPECT_TRUE(matches(g, "aaabbccc"));
  EXPECT_FALSE(matches(g, "abbc"));
  EXPECT_FALSE(matches(g, "aaaabbc"));
  EXPECT_FALSE(matches(g, "aabc"));
  EXPECT_FALSE(matches(g, "aabb"));
}

// Note [Byte-level grammars]: classes of code points read UTF-8 bytes, one at a time.
TEST(Grammar, ClassesReadUtf8ByteByByte) {
  auto g = Grammar::parse(R"(root ::= [a-zé]+ "!" | "\"" [^"\\]* "\"" | "\u00e9t\xe9" | .)");
  EXPECT_TRUE(matches(g, "café!"));
  EXPECT_FALSE(matches(g, "Café!"));
  EXPECT_TRUE(matches(g, "\"日本語 and \xf0\x9f\x98\x80\""));
  EXPECT_FALSE(matches(g, "\"a\"b\""));
  EXPECT_TRUE(matches(g, "été"));
  EXPECT_TRUE(matches(g, "\xf0\x9f\x98\x80"));   // `.`: any one character
  EXPECT_FALSE(matches(g, "\xed\xa0\x80"));      // a surrogate is not a character
  EXPECT_FALSE(matches(g, "\xc3\x28"));          // nor a broken sequence
  GrammarMatcher m(g);
  EXPECT_TRUE(m.accept("\""));
  EXPECT_TRUE(m.accept("\xe6"));  // the first byte of 日
  EXPECT_FALSE(m.can_end());
  EXPECT_FALSE(m.accept("\""));   // a quote cannot come inside the character
  EXPECT_TRUE(m.accept("\x97\xa5\""));
  EXPECT_TRUE(m.can_end());

  // Every code point against a class, by its UTF-8 bytes: the class's ranges and nothing else.
  g = Grammar::parse(R"(root ::= [\x00-\x7f\u0400-\u04ff\u3040-\u30ff\U0001F600-\U0001F64F])");
  for (uint32_t c = 0; c <= 0x10FFFF; c += (c < 0x20000 ? 1 : 97)) {
    if (c >= 0xD800 && c <= 0xDFFF) continue;
    std::string s;
    if (c < 0x80) s = {static_cast<char>(c)};
    else if (c < 0x800) s = {static_cast<char>(0xC0 | (c >> 6)), static_cast<char>(0x80 | (c & 0x3F))};
    else if (c < 0x10000)
      s = {static_cast<char>(0xE0 | (c >> 12)), static_cast<char>(0x80 | ((c >> 6) & 0x3F)), static_cast<char>(0x80 | (c & 0x3F))};
    else
      s = {static_cast<char>(0xF0 | (c >> 18)), static_cast<char>(0x80 | ((c >> 12) & 0x3F)),
           static_cast<char>(0x80 | ((c >> 6) & 0x3F)), static_cast<char>(0x80 | (c & 0x3F))};
    const bool in = c < 0x80 || (c >= 0x400 && c <= 0x4FF) || (c >= 0x3040 && c <= 0x30FF) || (c >= 0x1F600 && c <= 0x1F64F);
    ASSERT_EQ(matches(g, s), in) << "U+" << std::hex << c;
  }
}

// Note [Token masks]: a token is allowed exactly when the matcher can read
// its bytes; end tokens where the text may end; control tokens never.
TEST(Grammar, MasksAllowTheTokensTheMatcherCanRead) {
  testing::Fixture f = testing::fixture();
  const llm::TokenTrie trie(f.tok);
  auto g = Grammar::parse(R"(root ::= "ab" [a-c]* ("é" | " ab")?)");
  GrammarMatcher m(g);
  std::mt19937 rng(3);
  for (int step = 0; step < 12; ++step) {
    const std::shared_ptr<const llm::TokenMask> mask = m.allowed(trie);
    std::vector<int32_t> allowed;
    for (int32_t t = 0; t < f.tok.size(); ++t) {
      GrammarMatcher probe = m;
      const std::string piece = f.tok.piece(t);
      const bool want = f.tok.is_end_of_generation(t) ? m.can_end() : !piece.empty() && probe.accept(piece);
      ASSERT_EQ(llm::mask_allows(*mask, t), want) << "step " << step << ", token " << t << " '" << f.tok.text(t) << "'";
      if (want && !f.tok.is_end_of_generation(t)) allowed.push_back(t);
    }
    if (allowed.empty()) break;
    ASSERT_TRUE(m.accept(f.tok.piece(allowed[rng() % allowed.size()])));
  }
  // The same state later finds its mask in the grammar's cache: the same object.
  GrammarMatcher a(g), b(g);
  EXPECT_EQ(a.allowed(trie), b.allowed(trie));
}

TEST(Grammar, BadGrammarsSayWhatIsWrong) {
  auto err = [](const std::string& text) { return testing::error_of([&] { Grammar::parse(text); }); };
  EXPECT_NE(err("root ::= \"a\"\nroot ::= \"b\"").find("rule 'root' is defined twice"), std::string::npos);
  EXPECT_NE(err("root ::= item").find("rule 'item' is used but not defined"), std::string::npos);
  EXPECT_NE(err("start ::= \"a\"").find("no rule 'root'"), std::string::npos);
  EXPECT_NE(err("root ::= root \"a\" | \"a\"").find("rule 'root' is left-recursive"), std::string::npos);
  EXPECT_NE(err("root ::= (\"a\"?)*").find("left-recursive"), std::string::npos);
  EXPECT_NE(err("root ::= \"a\"\n  x = \"b\"").find("line 2, column 5: expected '::='"), std::string::npos);
  EXPECT_NE(err("root ::= [a-").find("expected ']' to end the character class"), std::string::npos);
  EXPECT_NE(err("root ::= [z-a]").find("a range whose end is not below its start"), std::string::npos);
  EXPECT_NE(err("root ::= \"a\"{3,2}").find("{m,n} with m <= n"), std::string::npos);
  EXPECT_NE(err("root ::= \"\\q\"").find("one of the escapes"), std::string::npos);
  EXPECT_NE(err("root ::= \"\\uD800\"").find("a Unicode scalar value"), std::string::npos);
  EXPECT_NE(testing::error_of([] { Grammar::parse("root ::= \"a\"{1000}", "root", 500); }).find("more than 500 elements"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera
