#pragma once
// Tokens to statements: Jinja's grammar with Python's operator precedence,
// as @huggingface/jinja parses it. A filter, test, method or statement
// outside Tessera's subset is an error here, at load, naming it and its line.
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "llm/jinja/ast.h"
#include "llm/jinja/lexer.h"

namespace tessera::llm::jinja {

struct Program {
  Body body;
  std::set<std::string, std::less<>> names;  // every name the code uses: variables, attributes, filters
};

// `max_depth` bounds the nesting of blocks and expressions.
Program parse(std::vector<Token> tokens, const std::string& what, int max_depth);

}  // namespace tessera::llm::jinja
