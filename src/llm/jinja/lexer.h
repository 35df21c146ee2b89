#pragma once
// A chat template's tokens: literal text, comments, the {% %} and {{ }}
// delimiters, and the names, strings, numbers and punctuation between them,
// after @huggingface/jinja's preprocessing (trim_blocks, lstrip_blocks, the
// final newline dropped, {% generation %} marks removed).
#include <cstdint>
#include <string>
#include <vector>

namespace tessera::llm::jinja {

enum class Tok : uint8_t { Text, Comment, OpenStmt, CloseStmt, OpenExpr, CloseExpr, Name, String, Number, Punct };

struct Token {
  Tok type;
  std::string text;
  int line;
};

// `what` names the template in errors, with the line.
std::vector<Token> lex(const std::string& source, const std::string& what);

}  // namespace tessera::llm::jinja
