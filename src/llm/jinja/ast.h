#pragma once
// A parsed chat template: statements holding expressions.
#include <memory>
#include <string>
#include <vector>

#include "llm/jinja/value.h"

namespace tessera::llm::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class E : uint8_t {
  Literal, Name, List, Dict, Tuple, Unary, Binary, Ternary, Select, Attr, Index, Slice, Call, Filter, Test, Kwarg
};

struct Expr {
  E kind;
  int line = 0;
  Value literal;           // Literal
  std::string name;        // Name, Attr, Unary/Binary operator, Filter, Test, Kwarg key
  bool negate = false;     // Test
  std::vector<ExprPtr> a;  // operands, elements, arguments (Call: [callee, args...]; Filter: [operand, args...])
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

enum class S : uint8_t { Text, Output, If, For, Set, SetBlock, Macro, Break, Continue };

struct Stmt {
  S kind;
  int line = 0;
  std::string text;             // Text; Macro name
  ExprPtr target, value;        // Set/For: target; If/For/Output/Set: the expression
  ExprPtr cond;                 // For: the `if` filter
  std::vector<ExprPtr> params;  // Macro: names or name=default
  Body body, alt;
};

}  // namespace tessera::llm::jinja
