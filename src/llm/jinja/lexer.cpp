#include "llm/jinja/lexer.h"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "llm/jinja/value.h"
#include "llm/pretokenize.h"
#include "tessera/core/error.h"

namespace tessera::llm::jinja {

namespace {

// trim_blocks and lstrip_blocks, and the final newline dropped, as
// @huggingface/jinja's preprocess does them.
std::string preprocess(std::string src) {
  if (!src.empty() && src.back() == '\n') src.pop_back();
  std::string a;
  a.reserve(src.size());
  for (size_t k = 0; k < src.size();) {
    const bool line_start = k == 0 || src[k - 1] == '\n' || src[k - 1] == '\r';
    if (line_start) {
      size_t e = k;
      while (e < src.size() && (src[e] == ' ' || src[e] == '\t')) ++e;
      if (e > k && e + 1 < src.size() && src[e] == '{' && (src[e + 1] == '#' || src[e + 1] == '%' || src[e + 1] == '-')) {
        k = e;
        continue;
      }
    }
    a += src[k++];
  }
  std::string b;
  b.reserve(a.size());
  for (size_t k = 0; k < a.size(); ++k) {
    b += a[k];
    if (a[k] == '}' && k > 0 && (a[k - 1] == '#' || a[k - 1] == '%' || a[k - 1] == '-') && k + 1 < a.size() &&
        a[k + 1] == '\n')
      ++k;  // the newline after a block tag
  }
  // {% generation %} and {% endgeneration %} (transformers' marks for the
  // assistant's tokens) are dropped, with their whitespace control.
  std::string c;
  c.reserve(b.size());
  for (size_t k = 0; k < b.size();) {
    if (b.compare(k, 2, "{%") == 0) {
      size_t e = k + 2;
      const bool lstrip = e < b.size() && b[e] == '-';
      e += lstrip;
      while (e < b.size() && std::isspace(static_cast<unsigned char>(b[e]))) ++e;
      if (b.compare(e, 3, "end") == 0) e += 3;
      if (b.compare(e, 10, "generation") == 0) {
        e += 10;
        while (e < b.size() && std::isspace(static_cast<unsigned char>(b[e]))) ++e;
        const bool rstrip = e < b.size() && b[e] == '-';
        e += rstrip;
        if (b.compare(e, 2, "%}") == 0) {
          e += 2;
          if (lstrip)
            while (!c.empty() && std::isspace(static_cast<unsigned char>(c.back()))) c.pop_back();
          if (rstrip)
            while (e < b.size() && std::isspace(static_cast<unsigned char>(b[e]))) ++e;
          k = e;
          continue;
        }
      }
    }
    c += b[k++];
  }
  return c;
}

bool word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// The lexer's state: the preprocessed source, where it is, and the tokens so
// far (the whitespace controls strip text already emitted).
class Lexer {
 public:
  Lexer(const std::string& source, const std::string& what) : src_(preprocess(source)), what_(what) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      if (text() || comment() || open_stripping()) continue;
      skip_space();
      if (pos_ >= src_.size()) break;
      if (!(delimiter() || string_literal() || number() || name() || punct()))
        fail(std::string("unexpected character '") + src_[pos_] + "'");
    }
    return std::move(out_);
  }

 private:
  [[noreturn]] void fail(const std::string& msg) const { TS_ERROR(what_, ": line ", line_, ": ", msg); }
  void advance(size_t to) {
    for (; pos_ < to && pos_ < src_.size(); ++pos_) line_ += src_[pos_] == '\n';
  }
  void emit(Tok t, std::string text, size_t to) {
    out_.push_back({t, std::move(text), line_});
    advance(to);
  }
  void strip_last_text() {
    if (!out_.empty() && out_.back().type == Tok::Text) {
      out_.back().text = trim(out_.back().text, false, true);
      if (out_.back().text.empty()) out_.pop_back();
    }
  }
  void skip_space() {
    while (pos_ < src_.size()) {
      const size_t n = std::min<size_t>(src_.size() - pos_, 3);
      const std::vector<uint32_t> c = utf8_code_points(std::string_view(src_).substr(pos_, n));
      if (c.empty() || !js_space(c[0])) break;
      std::string one;
      append_utf8(c[0], one);
      advance(pos_ + one.size());
    }
  }
  // Text up to the next tag, outside tags.
  bool text() {
    const Tok last = out_.empty() ? Tok::CloseStmt : out_.back().type;
    if (!(out_.empty() || last == Tok::CloseStmt || last == Tok::CloseExpr || last == Tok::Comment)) return false;
    size_t end = pos_;
    for (;; ++end) {
      end = src_.find('{', end);
      if (end == std::string::npos) {
        end = src_.size();
        break;
      }
      if (end + 1 < src_.size() && (src_[end + 1] == '%' || src_[end + 1] == '{' || src_[end + 1] == '#')) break;
    }
    if (end <= pos_) return false;
    emit(Tok::Text, src_.substr(pos_, end - pos_), end);
    return true;
  }
  // {# ... #}, with {#- and -#} stripping the whitespace beside it.
  bool comment() {
    if (src_.compare(pos_, 2, "{#") != 0) return false;
    advance(pos_ + 2);
    const bool strip_before = pos_ < src_.size() && src_[pos_] == '-';
    if (strip_before) advance(pos_ + 1);
    const size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) fail("a comment {# is never closed with #}");
    std::string comment = src_.substr(pos_, end - pos_);
    const bool strip_after = !comment.empty() && comment.back() == '-';
    if (strip_before) strip_last_text();
    emit(Tok::Comment, std::move(comment), end + 2);
    if (strip_after) skip_space();
    return true;
  }
  // {%- and {{-: the tag, and the text before it right-stripped.
  bool open_stripping() {
    if (src_.compare(pos_, 2, "{%") != 0 && src_.compare(pos_, 2, "{{") != 0) return false;
    if (!(pos_ + 2 < src_.size() && src_[pos_ + 2] == '-')) return false;
    strip_last_text();
    emit(src_[pos_ + 1] == '%' ? Tok::OpenStmt : Tok::OpenExpr, "", pos_ + 3);
    return true;
  }
  // -%} -}} (the whitespace after them skipped), {% %} {{ }}.
  bool delimiter() {
    if (src_[pos_] == '-' && pos_ + 2 < src_.size() && src_[pos_ + 2] == '}' &&
        (src_[pos_ + 1] == '%' || src_[pos_ + 1] == '}')) {
      emit(src_[pos_ + 1] == '%' ? Tok::CloseStmt : Tok::CloseExpr, "", pos_ + 3);
      skip_space();
      return true;
    }
    if (src_.compare(pos_, 2, "{%") == 0) return emit(Tok::OpenStmt, "", pos_ + 2), true;
    if (src_.compare(pos_, 2, "%}") == 0) return emit(Tok::CloseStmt, "", pos_ + 2), true;
    if (src_.compare(pos_, 2, "{{") == 0) return emit(Tok::OpenExpr, "", pos_ + 2), true;
    if (src_.compare(pos_, 2, "}}") == 0) {
      // Inside an expression a dict literal may close with "}}": count braces.
      int depth = 0;
      for (size_t k = out_.size(); k-- > 0 && out_[k].type != Tok::OpenExpr;)
        if (out_[k].type == Tok::Punct) depth += out_[k].text == "{" ? 1 : out_[k].text == "}" ? -1 : 0;
      if (depth <= 0) return emit(Tok::CloseExpr, "", pos_ + 2), true;
    }
    return false;
  }
  // '...' or "...", with Python's escapes (\x and \u included).
  bool string_literal() {
    const char q = src_[pos_];
    if (q != '\'' && q != '"') return false;
    std::string s;
    size_t k = pos_ + 1;
    for (;; ++k) {
      if (k >= src_.size()) fail("a string is never closed");
      if (src_[k] == q) break;
      if (src_[k] != '\\') {
        s += src_[k];
        continue;
      }
      if (++k >= src_.size()) fail("a string is never closed");
      const char e = src_[k];
      if (e == 'x' || e == 'u') {
        const size_t n = e == 'x' ? 2 : 4;
        const std::string hex = src_.substr(k + 1, n);
        if (hex.size() != n || hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
          fail("invalid escape \\" + std::string(1, e) + hex);
        append_utf8(static_cast<uint32_t>(std::stoul(hex, nullptr, 16)), s);
        k += n;
        continue;
      }
      static const std::string from = "ntrbfv'\"\\", to = "\n\t\r\b\f\v'\"\\";
      const size_t w = from.find(e);
      if (w == std::string::npos) fail(std::string("unknown escape \\") + e + " in a string");
      s += to[w];
    }
    emit(Tok::String, std::move(s), k + 1);
    return true;
  }
  bool number() {
    auto digit = [&](size_t k) { return k < src_.size() && std::isdigit(static_cast<unsigned char>(src_[k])); };
    if (!digit(pos_)) return false;
    size_t k = pos_;
    while (digit(k)) ++k;
    if (k + 1 < src_.size() && src_[k] == '.' && digit(k + 1)) {
      ++k;
      while (digit(k)) ++k;
    }
    emit(Tok::Number, src_.substr(pos_, k - pos_), k);
    return true;
  }
  bool name() {
    if (!word_char(src_[pos_])) return false;
    size_t k = pos_;
    while (k < src_.size() && word_char(src_[k])) ++k;
    emit(Tok::Name, src_.substr(pos_, k - pos_), k);
    return true;
  }
  bool punct() {
    static const char* const puncts[] = {"<=", ">=", "==", "!=", "**", "//", "(", ")", "{", "}", "[", "]", ",",
                                         ".",  ":",  "|",  "<",  ">",  "+",  "-", "~", "*", "/", "%", "="};
    for (const char* p : puncts) {
      const size_t n = std::strlen(p);
      if (src_.compare(pos_, n, p) == 0) return emit(Tok::Punct, p, pos_ + n), true;
    }
    return false;
  }

  const std::string src_;
  const std::string& what_;
  std::vector<Token> out_;
  int line_ = 1;
  size_t pos_ = 0;
};

}  // namespace

std::vector<Token> lex(const std::string& source, const std::string& what) { return Lexer(source, what).run(); }

}  // namespace tessera::llm::jinja
