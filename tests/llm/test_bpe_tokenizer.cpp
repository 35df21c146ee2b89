// Byte-level BPE (llm/tokenizer.h, llm/pretokenize.h): the pre-tokenizers'
// words, worked out by hand from their regular expressions; merges by rank
// then position; Llama 3's whole-word rule; byte round trips; llama.cpp's
// space clean-up on decode; GGUF round trips. llama.cpp's own vectors and
// 10,000 random strings against node-llama-cpp run in scripts/llm_compat.sh.
#include <gtest/gtest.h>

#include "llm/pretokenize.h"
#include "tessera/llm/gguf.h"
#include "tessera/llm/tokenizer.h"
#include "test_util.h"

namespace tessera {
namespace {

using llm::PreTokenizer;
using llm::Tokenizer;
using llm::TokenType;
using Ids = std::vector<int32_t>;
using Words = std::vector<std::string>;

TEST(PreTokenizer, Gpt2Words) {
  EXPECT_EQ(llm::pre_tokenize("Hello world's  123 !!\n\n  x", PreTokenizer::Gpt2),
            (Words{"Hello", " world", "'s", " ", " 123", " !!", "\n\n ", " x"}));
  // Contractions are lower-case only; a trailing run of spaces stays whole.
  EXPECT_EQ(llm::pre_tokenize("I'M ok  ", PreTokenizer::Gpt2), (Words{"I", "'", "M", " ok", "  "}));
  // Letters, digits and spaces of every script (Arabic-Indic digits are Nd).
  EXPECT_EQ(llm::pre_tokenize("caf\xc3\xa9 \xc3\xbc" "ber \xe6\x97\xa5\xe6\x9c\xac \xd9\xa3\xd9\xa4", PreTokenizer::Gpt2),
            (Words{"caf\xc3\xa9", " \xc3\xbc" "ber", " \xe6\x97\xa5\xe6\x9c\xac", " \xd9\xa3\xd9\xa4"}));
  // U+3000 (ideographic space) is white space; U+00A0 too.
  EXPECT_EQ(llm::pre_tokenize("a\xe3\x80\x80" "b", PreTokenizer::Gpt2), (Words{"a", "\xe3\x80\x80", "b"}));
}

TEST(PreTokenizer, Llama3AndQwen2Words) {
  EXPECT_EQ(llm::pre_tokenize("Hello WORLD'S 12345\r\n\n  x", PreTokenizer::Llama3),
            (Words{"Hello", " WORLD", "'S", " ", "123", "45", "\r\n\n", " ", " x"}));
  // Any one non-letter, non-digit, non-newline character joins the letters after it.
  EXPECT_EQ(llm::pre_tokenize("(abc) $x\ty", PreTokenizer::Llama3), (Words{"(abc", ")", " $", "x", "\ty"}));
  EXPECT_EQ(llm::pre_tokenize("...\n\nend", PreTokenizer::Llama3), (Words{"...\n\n", "end"}));
  EXPECT_EQ(llm::pre_tokenize("x 12345", PreTokenizer::Qwen2), (Words{"x", " ", "1", "2", "3", "4", "5"}));
  EXPECT_EQ(llm::pre_tokenize("a12 b", PreTokenizer::DigitsThenGpt2), (Words{"a", "1", "2", " b"}));
}

TEST(PreTokenizer, InvalidUtf8BecomesReplacementCharacters) {
  EXPECT_EQ(llm::utf8_code_points("a\xff\xc3"), (std::vector<uint32_t>{'a', 0xFFFD, 0xFFFD}));
  EXPECT_EQ(llm::pre_tokenize("a\xff", PreTokenizer::Gpt2), (Words{"a", "\xef\xbf\xbd"}));
  EXPECT_NE(testing::error_of([] { llm::pre_tokenizer_from_name("falcon", "m.gguf"); })
                .find("m.gguf: tokenizer.ggml.pre 'falcon' is a pre-tokenizer Tessera does not have (it has: gpt-2"),
            std::string::npos);
}

// GPT-2's byte-to-Unicode table, written out independently of the tokenizer's.
std::string byte_char(unsigned char b) {
  int n = 0;
  for (int x = 0; x < 256; ++x) {
    const bool printable = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174;
    if (x == b) {
      const uint32_t c = printable ? x : 256 + n;
      std::string s;
      if (c < 0x80) s += static_cast<char>(c);
      else s += static_cast<char>(0xC0 | c >> 6), s += static_cast<char>(0x80 | (c & 0x3F));
      return s;
    }
    n += !printable;
  }
  return "";
}

// The 256 byte tokens (id = byte), then merged tokens, then <|endoftext|>.
struct Vocab {
  std::vector<std::string> tokens;
  std::vector<TokenType> types;
  std::vector<std::string> merges;
  int32_t id(const std::string& t) const {
    for (size_t i = 0; i < tokens.size(); ++i)
      if (tokens[i] == t) return static_cast<int32_t>(i);
    return -1;
  }
};

Vocab small_bpe(std::vector<std::string> merges, std::vector<std::string> extra = {}) {
  Vocab v;
  for (int b = 0; b < 256; ++b) v.tokens.push_back(byte_char(static_cast<unsigned char>(b)));
  for (const std::string& m : merges) {
    const size_t sp = m.find(' ');
    v.tokens.push_back(m.substr(0, sp) + m.substr(sp + 1));
  }
  for (std::string& e : extra) v.tokens.push_back(std::move(e));
  v.types.assign(v.tokens.size(), TokenType::Normal);
  v.tokens.push_back("<|endoftext|>");
  v.types.push_back(TokenType::Control);
  v.merges = std::move(merges);
  return v;
}

const std::string G = "\xc4\xa0";  // byte_char(' '), GPT-2's 'Ġ'

TEST(BpeTokenizer, MergesByRankThenPosition) {
  // "l o" (rank 0) outranks "l l" (1): "hello" is h e l lo, then he (2), then hel (3).
  Vocab v = small_bpe({"l o", "l l", "h e", "he l", G + " w", G + "w o", G + "wo r", G + "wor l", G + "worl d"});
  Tokenizer t = Tokenizer::bpe(v.tokens, v.types, v.merges, "gpt-2", v.id("<|endoftext|>"), v.id("<|endoftext|>"));
  EXPECT_EQ(t.encode("hello world"), (Ids{v.id("hel"), v.id("lo"), v.id(G + "world")}));
  // Equal ranks cannot happen; the same pair twice merges leftmost first: "lll" -> ll l.
  EXPECT_EQ(t.encode("lll"), (Ids{v.id("ll"), 'l'}));
  // Bytes of any value: each is its own token when nothing merges.
  // A byte that is not UTF-8 reads as U+FFFD, as in llama.cpp.
  EXPECT_EQ(t.encode("\xff\x01"), (Ids{0xEF, 0xBF, 0xBD, 0x01}));
  EXPECT_EQ(t.decode(t.encode("a\tb\n\xc3\xa9\xe2\x82\xac")), "a\tb\n\xc3\xa9\xe2\x82\xac");
}

TEST(BpeTokenizer, Llama3TakesWholeWordsThatAreTokens) {
  // " world" is a token though no merge list reaches it: llama-bpe takes it whole, gpt-2 does not.
  Vocab v = small_bpe({G + " w"}, {G + "world"});
  const int32_t eot = v.id("<|endoftext|>");
  Tokenizer whole = Tokenizer::bpe(v.tokens, v.types, v.merges, "llama-bpe", eot, eot);
  Tokenizer merged = Tokenizer::bpe(v.tokens, v.types, v.merges, "gpt-2", eot, eot);
  EXPECT_EQ(whole.encode("a world"), (Ids{'a', v.id(G + "world")}));
  EXPECT_EQ(merged.encode("a world"), (Ids{'a', v.id(G + "w"), 'o', 'r', 'l', 'd'}));
}

TEST(BpeTokenizer, SpecialTokensAndSpaceCleanUp) {
  Vocab v = small_bpe({});
  const int32_t eot = v.id("<|endoftext|>");
  Tokenizer t = Tokenizer::bpe(v.tokens, v.types, v.merges, "gpt-2", eot, eot);
  EXPECT_EQ(t.encode("a<|endoftext|>", true, true), (Ids{'a', eot}));
  EXPECT_EQ(t.encode("<|endoftext|>", true, false).size(), 13u);  // user text: its characters
  EXPECT_EQ(t.decode({'a', eot}, false, true), "a<|endoftext|>");
  // llama.cpp's clean-up: no space before . , ! ? 's 'm 're 've, none around a lone '.
  EXPECT_EQ(t.decode(t.encode("Hi , it 's me ' ok . 't")), "Hi, it's me'ok. 't");
  Tokenizer qwen = Tokenizer::bpe(v.tokens, v.types, v.merges, "qwen2", eot, eot);
  EXPECT_EQ(qwen.decode(qwen.encode("Hi , it 's")), "Hi , it 's");
}

TEST(BpeTokenizer, GgufRoundTripAndMissingKeys) {
  Vocab v = small_bpe({"l o", "l l"});
  const int32_t eot = v.id("<|endoftext|>");
  Tokenizer t = Tokenizer::bpe(v.tokens, v.types, v.merges, "llama-bpe", eot, eot, true);
  llm::GgufWriter w;
  t.to_gguf(w);
  std::string bytes = w.bytes();
  Tokenizer back = Tokenizer::from_gguf(llm::GgufFile::parse(bytes.data(), bytes.size(), "vocab.gguf"));
  EXPECT_EQ(back.model(), Tokenizer::Model::Bpe);
  EXPECT_EQ(back.encode("hello 42"), t.encode("hello 42"));
  EXPECT_EQ(back.encode("hello").front(), eot);  // add_bos kept
  w.set("tokenizer.ggml.pre", llm::GgufValue::string("falcon"));
  bytes = w.bytes();
  EXPECT_NE(testing::error_of([&] { Tokenizer::from_gguf(llm::GgufFile::parse(bytes.data(), bytes.size(), "v.gguf")); })
                .find("v.gguf: tokenizer.ggml.pre 'falcon' is a pre-tokenizer Tessera does not have"),
            std::string::npos);
}


}  // namespace
}  // namespace tessera
