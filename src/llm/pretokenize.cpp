#include "llm/pretokenize.h"

#include <unicode/uchar.h>

#include "tessera/core/error.h"

namespace tessera::llm {
namespace {

// What the expressions ask of a code point. `in` is false past either end of
// the piece being scanned (llama.cpp's empty flags), so no class matches there.
struct Flags {
  bool in = false, letter = false, number = false, space = false;
};

Flags flags_of(uint32_t c) {
  Flags f;
  f.in = true;
  if (c > 0x10FFFF) return f;
  switch (u_charType(static_cast<UChar32>(c))) {
    case U_UPPERCASE_LETTER:
    case U_LOWERCASE_LETTER:
    case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER: f.letter = true; break;
    case U_DECIMAL_DIGIT_NUMBER:
    case U_LETTER_NUMBER:
    case U_OTHER_NUMBER: f.number = true; break;
    default: break;
  }
  f.space = u_isUWhiteSpace(static_cast<UChar32>(c));  // Unicode's White_Space, as llama.cpp's table
  return f;
}

constexpr uint32_t kNone = 0xFFFFFFFF;

// A scan over cpts[begin, end) that appends the lengths of its words.
struct Scan {
  const std::vector<uint32_t>& cpts;
  size_t begin, end;
  std::vector<size_t>& words;
  size_t prev_end = begin;

  uint32_t cpt(size_t pos) const { return pos >= begin && pos < end ? cpts[pos] : kNone; }
  Flags flags(size_t pos) const { return pos >= begin && pos < end ? flags_of(cpts[pos]) : Flags{}; }
  static bool other(const Flags& f) { return f.in && !(f.space || f.letter || f.number); }  // [^\s\p{L}\p{N}]
  // Ends the current word at `pos`; returns its length.
  size_t cut(size_t pos) {
    const size_t len = pos - prev_end;
    if (len > 0) words.push_back(len);
    prev_end = pos;
    return len;
  }
  // 's|'t|'re|'ve|'m|'ll|'d (case-insensitive when `fold`): the length matched, or 0.
  size_t contraction(size_t pos, bool fold) const {
    if (cpt(pos) != '\'' || pos + 1 >= end) return 0;
    auto low = [&](uint32_t c) { return fold && c <= 0x10FFFF ? static_cast<uint32_t>(u_tolower(static_cast<UChar32>(c))) : c; };
    const uint32_t a = low(cpt(pos + 1));
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (pos + 2 >= end) return 0;
    const uint32_t b = low(cpt(pos + 2));
    return (a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l') ? 3 : 0;
  }
  // \s+(?!\S)|\s+ from pos: every space but the last when more follow and
  // the piece goes on; all of them otherwise. False when pos is no space.
  bool spaces(size_t& pos) {
    size_t n = 0;
    while (flags(pos + n).space) ++n;
    if (n > 1 && cpt(pos + n) != kNone) {
      pos += n - 1;
      cut(pos);
      return true;
    }
    if (n == 0) return false;
    pos += n;
    cut(pos);
    return true;
  }
};

void split_gpt2(Scan& s) {
  for (size_t pos = s.begin; pos < s.end;) {
    if (const size_t n = s.contraction(pos, false)) {
      pos += s.cut(pos + n);
      continue;
    }
    const uint32_t c = s.cpt(pos);
    Flags f = c == ' ' ? s.flags(pos + 1) : s.flags(pos);  // the optional leading space
    if (f.letter || f.number || Scan::other(f)) {
      const bool letter = f.letter, number = f.number;
      pos += c == ' ';
      while (letter ? f.letter : number ? f.number : Scan::other(f)) f = s.flags(++pos);
      s.cut(pos);
      continue;
    }
    if (s.spaces(pos)) continue;
    s.cut(++pos);  // no expression matched
  }
}

// Llama 3 and Qwen 2: digits in runs of at most `max_digits`.
void split_llama3(Scan& s, size_t max_digits) {
  for (size_t pos = s.begin; pos < s.end;) {
    if (const size_t n = s.contraction(pos, true)) {
      pos += s.cut(pos + n);
      continue;
    }
    const uint32_t c = s.cpt(pos);
    const Flags f = s.flags(pos);
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (!(c == '\r' || c == '\n' || f.number) && (f.letter || s.flags(pos + 1).letter)) {
      ++pos;
      while (s.flags(pos).letter) ++pos;
      s.cut(pos);
      continue;
    }
    // \p{N}{1,max_digits}
    if (f.number) {
      size_t run = pos;
      while (s.flags(pos).number) {
        if (++pos - run >= max_digits) {
          s.cut(pos);
          run = pos;
        }
      }
      s.cut(pos);
      continue;
    }
    // ` ?[^\s\p{L}\p{N}]+[\r\n]*`; as in llama.cpp, a space that ends the
    // piece takes this branch too and is a word of its own.
    Flags f2 = c == ' ' ? s.flags(pos + 1) : f;
    if (!(f2.space || f2.letter || f2.number)) {
      pos += c == ' ';
      while (Scan::other(f2)) f2 = s.flags(++pos);
      while (s.cpt(pos) == '\r' || s.cpt(pos) == '\n') ++pos;
      s.cut(pos);
      continue;
    }
    // \s*[\r\n]+: through the last line break of a run of spaces
    size_t n = 0, last_break = 0;
    while (s.flags(pos + n).space) {
      const uint32_t d = s.cpt(pos + n);
      if (d == '\r' || d == '\n') last_break = pos + n + 1;
      ++n;
    }
    if (last_break > 0) {
      pos = last_break;
      s.cut(pos);
      continue;
    }
    if (s.spaces(pos)) continue;
    s.cut(++pos);
  }
}

}  // namespace

PreTokenizer pre_tokenizer_from_name(std::string_view name, const std::string& what) {
  static const std::pair<const char*, PreTokenizer> names[] = {
      {"gpt-2", PreTokenizer::Gpt2},          {"gpt2", PreTokenizer::Gpt2},
      {"phi-2", PreTokenizer::Gpt2},        {"mpt", PreTokenizer::Gpt2},            {"olmo", PreTokenizer::Gpt2},
      {"jais", PreTokenizer::Gpt2},         {"roberta-bpe", PreTokenizer::Gpt2},    {"llama3", PreTokenizer::Llama3},
      {"llama-v3", PreTokenizer::Llama3},   {"llama-bpe", PreTokenizer::Llama3},    {"falcon3", PreTokenizer::Llama3},
      {"pixtral", PreTokenizer::Llama3},    {"dbrx", PreTokenizer::Llama3},         {"smaug-bpe", PreTokenizer::Llama3},
      {"qwen2", PreTokenizer::Qwen2},
      {"deepseek-r1-qwen", PreTokenizer::Qwen2}, {"stablelm2", PreTokenizer::Qwen2}, {"starcoder", PreTokenizer::DigitsThenGpt2},
      {"refact", PreTokenizer::DigitsThenGpt2}, {"command-r", PreTokenizer::DigitsThenGpt2},
      {"smollm", PreTokenizer::DigitsThenGpt2}, {"codeshell", PreTokenizer::DigitsThenGpt2},
  };
  std::string known;
  for (const auto& [n, p] : names) {
    if (name == n) return p;
    known += known.empty() ? "" : ", ";
    known += n;
  }
  TS_ERROR(what, ": tokenizer.ggml.pre '", std::string(name), "' is a pre-tokenizer Tessera does not have (it has: ",
          known, ")");
}

const char* pre_tokenizer_name(PreTokenizer p) {
  switch (p) {
    case PreTokenizer::Gpt2: return "gpt-2";
    case PreTokenizer::Llama3: return "llama-bpe";
    case PreTokenizer::Qwen2: return "qwen2";
    case PreTokenizer::DigitsThenGpt2: return "starcoder";
  }
  return "gpt-2";
}

std::vector<uint32_t> utf8_code_points(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  auto cont = [&](size_t i) { return i < s.size() && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80; };
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    auto b = [&](size_t k) { return static_cast<uint32_t>(static_cast<unsigned char>(s[i + k]) & 0x3F); };
    if (c < 0x80) {
      out.push_back(c);
      i += 1;
    } else if ((c & 0xE0) == 0xC0 && cont(i + 1)) {
      out.push_back((c & 0x1Fu) << 6 | b(1));
      i += 2;
    } else if ((c & 0xF0) == 0xE0 && cont(i + 1) && cont(i + 2)) {
      out.push_back((c & 0x0Fu) << 12 | b(1) << 6 | b(2));
      i += 3;
    } else if ((c & 0xF8) == 0xF0 && cont(i + 1) && cont(i + 2) && cont(i + 3)) {
      out.push_back((c & 0x07u) << 18 | b(1) << 12 | b(2) << 6 | b(3));
      i += 4;
    } else {
      out.push_back(0xFFFD);
      i += 1;
    }
  }
  return out;
}

void append_utf8(uint32_t c, std::string& out) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | c >> 6);
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | c >> 12);
    out += static_cast<char>(0x80 | (c >> 6 & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18 & 0x07));
    out += static_cast<char>(0x80 | (c >> 12 & 0x3F));
    out += static_cast<char>(0x80 | (c >> 6 & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

std::vector<std::string> pre_tokenize(std::string_view text, PreTokenizer p) {
  const std::vector<uint32_t> cpts = utf8_code_points(text);
  // Pieces to scan: the whole text, or for DigitsThenGpt2 the runs between
  // digits and each digit alone.
  std::vector<size_t> pieces;
  if (p == PreTokenizer::DigitsThenGpt2) {
    size_t run = 0;
    for (uint32_t c : cpts) {
      if (flags_of(c).number) {
        if (run) pieces.push_back(run);
        pieces.push_back(1);
        run = 0;
      } else {
        ++run;
      }
    }
    if (run) pieces.push_back(run);
  } else if (!cpts.empty()) {
    pieces.push_back(cpts.size());
  }
  std::vector<size_t> words;
  size_t begin = 0;
  for (size_t len : pieces) {
    Scan s{cpts, begin, begin + len, words};
    if (p == PreTokenizer::Llama3) split_llama3(s, 3);
    else if (p == PreTokenizer::Qwen2) split_llama3(s, 1);
    else split_gpt2(s);
    begin += len;
  }
  std::vector<std::string> out;
  out.reserve(words.size());
  begin = 0;
  for (size_t len : words) {
    std::string w;
    for (size_t i = begin; i < begin + len; ++i) append_utf8(cpts[i], w);
    out.push_back(std::move(w));
    begin += len;
  }
  return out;
}

}  // namespace tessera::llm
