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

}  // namespace

std::vector<Token> lex(const std::string& source, const std::string& what) {
  const std::string src = preprocess(source);
  std::vector<Token> out;
  int line = 1;
  size_t pos = 0;
  auto fail = [&](const std::string& msg) { TS_ERROR(what, ": line ", line, ": ", msg); };
  auto advance = [&](size_t to) {
    for (; pos < to && pos < src.size(); ++pos) line += src[pos] == '\n';
  };
  auto strip_last_text = [&] {
    if (!out.empty() && out.back().type == Tok::Text) {
      out.back().text = trim(out.back().text, false, true);
      if (out.back().text.empty()) out.pop_back();
    }
  };
  auto skip_space = [&] {
    while (pos < src.size()) {
      const size_t n = std::min<size_t>(src.size() - pos, 3);
      const std::vector<uint32_t> c = utf8_code_points(std::string_view(src).substr(pos, n));
      if (c.empty() || !js_space(c[0])) break;
      std::string one;
      append_utf8(c[0], one);
      advance(pos + one.size());
    }
  };
  static const char* const puncts[] = {"<=", ">=", "==", "!=", "**", "//", "(", ")", "{", "}", "[", "]", ",", ".",
                                       ":", "|", "<", ">", "+", "-", "~", "*", "/", "%", "="};
  while (pos < src.size()) {
    const Tok last = out.empty() ? Tok::CloseStmt : out.back().type;
    if (out.empty() || last == Tok::CloseStmt || last == Tok::CloseExpr || last == Tok::Comment) {
      size_t end = pos;
      for (;; ++end) {
        end = src.find('{', end);
        if (end == std::string::npos) {
          end = src.size();
          break;
        }
        if (end + 1 < src.size() && (src[end + 1] == '%' || src[end + 1] == '{' || src[end + 1] == '#')) break;
      }
      if (end > pos) {
        out.push_back({Tok::Text, src.substr(pos, end - pos), line});
        advance(end);
        continue;
      }
    }
    if (src.compare(pos, 2, "{#") == 0) {
      advance(pos + 2);
      const bool strip_before = pos < src.size() && src[pos] == '-';
      if (strip_before) advance(pos + 1);
      const size_t end = src.find("#}", pos);
      if (end == std::string::npos) fail("a comment {# is never closed with #}");
      std::string comment = src.substr(pos, end - pos);
      const bool strip_after = !comment.empty() && comment.back() == '-';
      if (strip_before) strip_last_text();
      out.push_back({Tok::Comment, comment, line});
      advance(end + 2);
      if (strip_after) skip_space();
      continue;
    }
    if (src.compare(pos, 2, "{%") == 0 || src.compare(pos, 2, "{{") == 0) {
      const bool stmt = src[pos + 1] == '%';
      if (pos + 2 < src.size() && src[pos + 2] == '-') {
        strip_last_text();
        out.push_back({stmt ? Tok::OpenStmt : Tok::OpenExpr, "", line});
        advance(pos + 3);
        continue;
      }
    }
    skip_space();
    if (pos >= src.size()) break;
    if (src[pos] == '-' && pos + 2 < src.size() && src[pos + 2] == '}' && (src[pos + 1] == '%' || src[pos + 1] == '}')) {
      out.push_back({src[pos + 1] == '%' ? Tok::CloseStmt : Tok::CloseExpr, "", line});
      advance(pos + 3);
      skip_space();
      continue;
    }
    if (src.compare(pos, 2, "{%") == 0) {
      out.push_back({Tok::OpenStmt, "", line});
      advance(pos + 2);
      continue;
    }
    if (src.compare(pos, 2, "%}") == 0) {
      out.push_back({Tok::CloseStmt, "", line});
      advance(pos + 2);
      continue;
    }
    if (src.compare(pos, 2, "{{") == 0) {
      out.push_back({Tok::OpenExpr, "", line});
      advance(pos + 2);
      continue;
    }
    if (src.compare(pos, 2, "}}") == 0) {
      // Inside an expression a dict literal may close with "}}": count braces.
      int depth = 0;
      for (size_t k = out.size(); k-- > 0 && out[k].type != Tok::OpenExpr;)
        if (out[k].type == Tok::Punct) depth += out[k].text == "{" ? 1 : out[k].text == "}" ? -1 : 0;
      if (depth <= 0) {
        out.push_back({Tok::CloseExpr, "", line});
        advance(pos + 2);
        continue;
      }
    }
    const char c = src[pos];
    if (c == '\'' || c == '"') {
      std::string s;
      size_t k = pos + 1;
      for (;; ++k) {
        if (k >= src.size()) fail("a string is never closed");
        if (src[k] == c) break;
        if (src[k] != '\\') {
          s += src[k];
          continue;
        }
        if (++k >= src.size()) fail("a string is never closed");
        const char e = src[k];
        if (e == 'x' || e == 'u') {
          const size_t n = e == 'x' ? 2 : 4;
          const std::string hex = src.substr(k + 1, n);
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
      out.push_back({Tok::String, s, line});
      advance(k + 1);
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t k = pos;
      while (k < src.size() && std::isdigit(static_cast<unsigned char>(src[k]))) ++k;
      if (k + 1 < src.size() && src[k] == '.' && std::isdigit(static_cast<unsigned char>(src[k + 1]))) {
        ++k;
        while (k < src.size() && std::isdigit(static_cast<unsigned char>(src[k]))) ++k;
      }
      out.push_back({Tok::Number, src.substr(pos, k - pos), line});
      advance(k);
      continue;
    }
    if (word_char(c)) {
      size_t k = pos;
      while (k < src.size() && word_char(src[k])) ++k;
      out.push_back({Tok::Name, src.substr(pos, k - pos), line});
      advance(k);
      continue;
    }
    bool matched = false;
    for (const char* p : puncts) {
      const size_t n = std::strlen(p);
      if (src.compare(pos, n, p) == 0) {
        out.push_back({Tok::Punct, p, line});
        advance(pos + n);
        matched = true;
        break;
      }
    }
    if (!matched) fail(std::string("unexpected character '") + c + "'");
  }
  return out;
}

}  // namespace tessera::llm::jinja
